"""A simulation of how the deployed stack enforces budgets: the rate-limit service, Envoy's rate-limit filter and
Agent Router's usage report, driven by concurrent calls. tests/test_enforcement.py and
scripts/simulate_enforcement.py use it; it exists to check core/worst_case.py against the real semantics, so
it reads only the policy and the routes the program emits, never the bound.

What it follows, file by file:

* Which rules apply to a request and which counter each one charges: the program's own model of Envoy
  Gateway v1.9.0's translation, `core.ratelimit_model.PolicyModel`, over the policy the program emits, for the
  request's `x-actor-id` and the `x-ai-eg-model` Agent Router sets from its body. A pool's rule has no Distinct
  match, so every member's calls charge its one counter.
* envoyproxy/ratelimit (f2fb157): per-descriptor `hits_addend`, 0 allowed (`src/utils/utilities.go`
  `GetHitsAddends`); every descriptor of a request is incremented first and compared after
  (`src/redis/fixed_cache_impl.go` `DoLimit`, with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and the local
  cache off, as Envoy Gateway deploys it); a descriptor is over its limit when the count after the increment
  exceeds the limit, and a rule in shadow mode never refuses (`src/limiter/base_limiter.go`
  `GetResponseDescriptorStatus`); the counter is the one of the fixed window holding the moment the service
  handles the request (`src/limiter/cache_key.go`). A request is refused when any descriptor is over.
* Envoy's rate-limit filter: the request's descriptors go out once, before the request reaches the router
  (`ratelimit.cc` `initiateCall`); the `apply_on_stream_done` descriptors go out when the stream is destroyed,
  finished or cancelled (`onDestroy`), with the cost read from Agent Router's dynamic metadata; a missing value
  drops that descriptor (`ratelimit_config.cc`), so nothing is charged for it. A refused request sends no
  stream-done descriptor with a value (no model was called, no metadata exists).
* The clock of one call: the rate-limit service handles the check `check_latency` after the request reaches
  the filter, and Envoy has its answer at most `rateLimit.timeout` after that arrival; the route's timeout
  runs from then and bounds the stream (`duration`); the service handles the stream-done descriptors
  `charge_latency` (at most `rateLimit.timeout`) after the stream ends.
* Agent Router writes its costs into the metadata at the end of the response (envoyproxy/ai-gateway v1.1.0
  `internal/extproc/processor_impl.go`) and, from v1.2 on, also on every streamed chunk that carries usage
  (theagentrouter/agent-router `processor_impl.go` @05440134; the v1.2.0 notes: usage is recorded when a client
  disconnects after the final frame). Anthropic streams carry the input usage in their first event
  (`message_start`), OpenAI streams only in their last chunk. A non-2xx upstream answer writes no costs. Each
  value is the route's `llmRequestCosts` entry evaluated as Agent Router does (`evalCost` reads one usage field
  per type: total, input, output, cached input tokens), a `CEL` entry the route's own expression run with
  Google's CEL, `model` the name the call is billed by (tests/support/agent_router_cel.py).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from core.budget_rules import (
    ACTOR_HEADER,
    COST_METADATA_KEY,
    MODEL_HEADER,
    BudgetRules,
    CompiledRule,
    LimitSpec,
)
from core.identity import actor_header_value
from core.manifests import BUDGET_POLICY_NAME, route_manifest
from core.money import USD_METADATA_KEY, Usage
from core.ratelimit_model import UNIT_SECONDS, PolicyModel
from core.settings import StackSettings, duration_seconds
from core.validation import validate_stack
from core.worst_case import WorstCase, stack_worst_cases
from tests.support import agent_router_cel

Outcome = Literal["complete", "cancelled", "error"]
AgentRouterVersion = Literal["v1.1", "v1.2"]


# --- the rate-limit service and Envoy's filter -------------------------------------------------------------


@dataclass(frozen=True)
class _Descriptor:
    """One rule's descriptor for one actor: its counter, limit and window, and what a request and a finished
    stream charge it."""

    counter: int
    rule: int
    requests: int
    divider: int
    request_hits: int
    response_key: str | None
    shadow: bool


class RuleTable:
    """The descriptors Envoy builds for each actor's requests under one policy (built once, shared by runs)."""

    def __init__(self, namespace: str, rules: Sequence[Mapping[str, Any]]) -> None:
        self.model = PolicyModel(namespace, BUDGET_POLICY_NAME, rules)
        self.rules = rules
        self._ids: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self.counter_rule: dict[int, int] = {}
        self._descriptors: dict[tuple[str, str | None], tuple[_Descriptor, ...]] = {}

    def descriptors(self, actor: str, model: str | None = None) -> tuple[_Descriptor, ...]:
        """The descriptors of the actor's requests naming `model` (Envoy Gateway's default cost: 1 on the
        request, nothing on the response)."""
        known = self._descriptors.get((actor, model))
        if known is not None:
            return known
        headers = {ACTOR_HEADER: actor_header_value(actor), **({MODEL_HEADER: model} if model else {})}
        result = []
        for applied in self.model.applied(headers):
            rule = self.rules[applied.index]
            cost = rule.get("cost") or {}
            request = cost.get("request") or {"from": "Number", "number": 1}
            response = cost.get("response")
            counter = self._ids.setdefault(applied.identity(), len(self._ids))
            self.counter_rule[counter] = applied.index
            result.append(
                _Descriptor(
                    counter=counter,
                    rule=applied.index,
                    requests=applied.requests,
                    divider=UNIT_SECONDS[applied.unit],
                    request_hits=int(request.get("number") or 0),
                    response_key=None if response is None else str(response["metadata"]["key"]),
                    shadow=rule.get("shadowMode") is True,
                )
            )
        self._descriptors[(actor, model)] = tuple(result)
        return self._descriptors[(actor, model)]


class Gateway:
    """Envoy with the budget policy in front of the rate-limit service (its counters in `counters`)."""

    def __init__(self, namespace: str, rules: Sequence[Mapping[str, Any]]) -> None:
        self._start(RuleTable(namespace, rules))

    @classmethod
    def over(cls, table: RuleTable) -> Gateway:
        """A gateway with empty counters over an already built rule table."""
        gateway = cls.__new__(cls)
        gateway._start(table)
        return gateway

    def _start(self, table: RuleTable) -> None:
        self.table = table
        self.counters: dict[tuple[int, int], int] = {}

    def admit(self, actor: str, now: float, model: str | None = None) -> bool:
        """The check before a call: increment every descriptor by its request hits, then refuse when any is
        over its limit (not in shadow mode)."""
        over = False
        second = int(now)
        for d in self.table.descriptors(actor, model):
            key = (d.counter, second // d.divider * d.divider)
            value = self.counters.get(key, 0) + d.request_hits
            self.counters[key] = value
            if value > d.requests and not d.shadow:
                over = True
        return not over

    def charge(self, actor: str, now: float, metadata: Mapping[str, int] | None, model: str | None = None) -> None:
        """The stream-done descriptors (recomputed from the same request headers, Envoy `ratelimit.cc`
        `onDestroy`): each charges the metadata value its cost reads, or is dropped."""
        if not metadata:
            return
        second = int(now)
        for d in self.table.descriptors(actor, model):
            if d.response_key is None or d.response_key not in metadata:
                continue
            key = (d.counter, second // d.divider * d.divider)
            self.counters[key] = self.counters.get(key, 0) + metadata[d.response_key]

    def charged_by_rule(self) -> dict[int, int]:
        """The fullest counter (one actor, one window) of every rule that charged anything."""
        most: dict[int, int] = {}
        for (counter, _), value in self.counters.items():
            rule = self.table.counter_rule[counter]
            most[rule] = max(most.get(rule, 0), value)
        return most


# --- Agent Router: what a call reports -----------------------------------------------------------------------


# What `evalCost` reads for each non-CEL cost type (ai-gateway v1.1.0 internal/extproc/processor_impl.go).
_TOKEN_COSTS = {
    "TotalToken": lambda usage: usage.input_tokens + usage.output_tokens,
    "InputToken": lambda usage: usage.input_tokens,
    "OutputToken": lambda usage: usage.output_tokens,
    "CachedInputToken": lambda usage: usage.cached_input_tokens,
    "CacheCreationInputToken": lambda usage: usage.cache_creation_input_tokens,
    "ReasoningToken": lambda usage: usage.reasoning_tokens,
}


class RouteCosts:
    """A route's `llmRequestCosts` as Agent Router evaluates them for one call: a token type reads its usage
    field, a `CEL` entry runs the route's expression with `model` the name the call is billed by."""

    def __init__(
        self, entries: Sequence[Mapping[str, Any]], models: Sequence[str], model_name_override: str | None = None
    ) -> None:
        self.first_model = models[0]
        self.override = model_name_override
        self.keys = frozenset(str(entry["metadataKey"]) for entry in entries)
        unknown = {str(entry["type"]) for entry in entries} - {*_TOKEN_COSTS, "CEL"}
        if unknown:
            raise ValueError(f"the simulation does not evaluate the cost types {sorted(unknown)}")
        self._tokens = {str(e["metadataKey"]): _TOKEN_COSTS[str(e["type"])] for e in entries if e["type"] != "CEL"}
        self._cel = {
            str(entry["metadataKey"]): agent_router_cel.compile_cost(str(entry["cel"]))
            for entry in entries
            if entry["type"] == "CEL"
        }
        self._values: dict[tuple[str, Usage, str], int] = {}

    def value(self, key: str, usage: Usage, model: str) -> int:
        tokens = self._tokens.get(key)
        if tokens is not None:
            return tokens(usage)
        billed = agent_router_cel.model_as_agent_router_sets_it(model, self.override)
        known = self._values.get((key, usage, billed))
        if known is None:
            call = agent_router_cel.Call(billed, usage)
            known = self._values[key, usage, billed] = agent_router_cel.run(self._cel[key], call)
        return known


class ReportedCosts(Mapping[str, int]):
    """The metadata Agent Router has written for one call: each key evaluated when the rate-limit filter
    reads it (lazily: most descriptors read one key)."""

    def __init__(self, costs: RouteCosts, usage: Usage, model: str) -> None:
        self._costs = costs
        self.usage = usage
        self.model = model

    def __getitem__(self, key: str) -> int:
        if key not in self._costs.keys:
            raise KeyError(key)
        return self._costs.value(key, self.usage, self.model)

    def __contains__(self, key: object) -> bool:
        return key in self._costs.keys

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._costs.keys))

    def __len__(self) -> int:
        return len(self._costs.keys)


@dataclass(slots=True)
class Call:
    """One model call of one actor: when it reaches the rate-limit filter, how long its stream runs, what it
    would use, and how it ends."""

    actor: str
    start: float
    duration: float
    usage: Usage
    schema: str = "OpenAI"
    outcome: Outcome = "complete"
    check_latency: float = 0.0
    """From the request reaching the filter to the rate-limit service handling its check."""
    model: str | None = None
    """The model name the agent sent (`x-ai-eg-model`); None: a call no per-model limit counts."""
    answer_latency: float = 0.0
    """From the check handled to Envoy starting the call (its answer's way back): the route timeout starts then."""
    charge_latency: float = 0.0
    """From the stream's end to the rate-limit service handling the stream-done descriptors."""


def reported_usage(call: Call, version: AgentRouterVersion) -> Usage | None:
    """The usage Agent Router has counted when the call's stream is destroyed, or None (no costs written)."""
    if call.outcome == "error":
        return None
    if call.outcome == "cancelled":
        if version == "v1.1" or call.schema != "Anthropic":
            return None
        return Usage(input_tokens=call.usage.input_tokens)  # message_start: input usage only
    return call.usage


@dataclass
class RunResult:
    """What one simulated run charged: the fullest counter of every rule, and how the calls went."""

    charged: dict[int, int]
    admitted: int
    refused: int


def run_calls(
    gateway: Gateway, calls: Iterable[Call], costs: RouteCosts | None, version: AgentRouterVersion = "v1.2"
) -> RunResult:
    """Every call through the gateway in time order: checked when the rate-limit service handles its check,
    charged when it handles the stream-done descriptors (a charge sorts before a check at the same instant).
    Without `costs` a call reports its total tokens only; with them, a call naming no model is priced as the
    route's first."""
    timeline: list[tuple[float, int, int, Call]] = []
    for order, call in enumerate(calls):
        checked = call.start + call.check_latency
        timeline.append((checked, 1, order, call))
        timeline.append((checked + call.answer_latency + call.duration + call.charge_latency, 0, order, call))
    timeline.sort()  # by time, a charge (0) before a check (1) at the same instant, then in order
    costs_model = "" if costs is None else costs.first_model
    running: set[int] = set()
    admitted = refused = 0
    for at, kind, order, call in timeline:
        if kind == 1:
            if gateway.admit(call.actor, at, call.model):
                admitted += 1
                running.add(order)
            else:
                refused += 1
        elif order in running:
            usage = reported_usage(call, version)
            if usage is None:
                continue
            if costs is None:
                metadata: Mapping[str, int] = {COST_METADATA_KEY: usage.input_tokens + usage.output_tokens}
            else:
                metadata = ReportedCosts(costs, usage, call.model or costs_model)
            gateway.charge(call.actor, at, metadata, call.model)
    return RunResult(gateway.charged_by_rule(), admitted, refused)


# --- scenarios and randomized workloads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A validated stack with one route, the worst case the program computes for it, and what bounds one call
    (read from the configuration, as a provider enforces it)."""

    name: str
    settings: StackSettings
    rules: BudgetRules
    worst: tuple[WorstCase, ...]
    costs: RouteCosts
    window: int
    ceiling: int
    timeout: float
    rate_limit_timeout: float
    models: tuple[str, ...]

    @classmethod
    def of(cls, name: str, config: Mapping[str, Any]) -> Scenario:
        stack = validate_stack(dict(config), lambda key: (True, True))
        settings = stack.settings
        [route] = settings.routes  # the scenarios below have one route
        assert route.context_window is not None and route.max_output_tokens is not None
        return cls(
            name=name,
            settings=settings,
            rules=stack.rules,
            worst=tuple(stack_worst_cases(settings, stack.rules)),
            costs=RouteCosts(
                route_manifest(settings, route).spec["llmRequestCosts"], route.models, route.model_name_override
            ),
            window=route.context_window,
            ceiling=route.max_output_tokens,
            timeout=route.timeout_seconds,
            rate_limit_timeout=duration_seconds(settings.rate_limit.timeout),
            models=tuple(route.models),
        )

    @functools.cached_property
    def table(self) -> RuleTable:
        return RuleTable(self.settings.gateway.namespace, self.rules.specs())

    def gateway(self) -> Gateway:
        return Gateway.over(self.table)

    @property
    def lifetime(self) -> float:
        """The longest a call can take from its check to its charge, both handled by the rate-limit service."""
        return self.timeout + 2 * self.rate_limit_timeout

    def members(self, budget_index: int) -> list[str]:
        """The actors of one budget (the default's: every actor in no class)."""
        return [a for a in self.settings.actors if self.rules.class_of_actor.get(a, 0) == budget_index]

    def limit(self, budget_index: int, unit: str) -> tuple[int, str]:
        """(requests, per) of the budget's first limit of `unit` over every model."""
        rule = next(
            r for r in self.rules.rules_of_budget(budget_index) if r.limit and r.unit == unit and not r.limit.models
        )
        assert rule.limit is not None
        return rule.limit.requests, rule.limit.per

    def chargers(self, rule: CompiledRule) -> list[str]:
        """Who charges a limit's counter: one actor of a budget (each has its own), or every listed pool member."""
        if rule.pool_index is not None:
            return sorted(self.rules.pools[rule.pool_index].actors)
        assert rule.budget_index is not None
        return self.members(rule.budget_index)[:1]

    def calls_limit(self, actor: str, limit: LimitSpec) -> LimitSpec:
        """The actor's own calls limit that counts every call `limit` counts."""
        return next(
            r.limit
            for r in self.rules.rules_for_actor(actor)
            if r.limit is not None and r.unit == "calls" and r.limit.covers(limit)
        )

    @functools.cached_property
    def _output_for_mills(self) -> dict[tuple[int, str], int]:
        return {}

    def output_costing_at_most(self, mills: int, model: str) -> int:
        """The most output tokens (up to the ceiling) whose price, as the route's expression computes it, is at
        most `mills` (a binary search: the price grows with the tokens)."""
        known = self._output_for_mills.get((mills, model))
        if known is None:
            low, high = 0, self.ceiling
            while low < high:
                middle = (low + high + 1) // 2
                if self.costs.value(USD_METADATA_KEY, Usage(output_tokens=middle), model) <= mills:
                    low = middle
                else:
                    high = middle - 1
            known = self._output_for_mills[mills, model] = low
        return known


# The scenario of tests/test_enforcement.py and the table in docs/budgets.md: one OpenAI-schema route of two models
# with a 4,000-token window, a 1,000-token ceiling and a 50 s timeout, and limits whose bounds each take another
# term of core/worst_case.py: calls per Minute (two windows at once), a per-model limit, a usd limit, calls per
# Second (a lifetime of 50.2 s touches 52 of them), a limit per Minute that more calls than it holds can reach
# (the calls charged in one window), and a pool of two default-budget agents bounded by their own calls limits.
BOUNDED_STACK: dict[str, Any] = {
    "actors": [f"agents/agent-{i}" for i in range(4)]
    + ["agents/pair-0", "agents/pair-1", "agents/paced-0", "agents/minute-0"],
    "budgets": {
        "default": {
            "limits": [
                {"tokens": 20_000, "per": "Hour"},
                {"calls": 5, "per": "Minute"},
                {"tokens": 8_000, "per": "Hour", "models": ["gpt-y"]},
            ]
        },
        "classes": [
            {
                "name": "pair",
                "limits": [
                    {"tokens": 50_000, "per": "Hour"},
                    {"usd": 0.5, "per": "Hour"},
                    {"calls": 10, "per": "Minute"},
                ],
                "actors": ["agents/pair-0", "agents/pair-1"],
            },
            {
                "name": "paced",
                "limits": [{"tokens": 30_000, "per": "Hour"}, {"calls": 1, "per": "Second"}],
                "actors": ["agents/paced-0"],
            },
            {
                "name": "minute",
                "limits": [{"tokens": 1_000_000, "per": "Minute"}, {"calls": 3, "per": "Minute"}],
                "actors": ["agents/minute-0"],
            },
        ],
        "pools": [
            {
                "name": "team",
                "members": ["agents/agent-0", "agents/agent-1"],
                "limits": [{"tokens": 30_000, "per": "Hour"}],
            }
        ],
    },
    "budgetPolicy": {"limitSlots": 3, "classSlots": 3},
    "providers": [{"name": "openai", "kind": "openai"}],
    "routes": [
        {
            "name": "gpt",
            "models": ["gpt-x", "gpt-y"],
            "provider": "openai",
            "maxOutputTokens": 1_000,
            "contextWindow": 4_000,
            "requestTimeout": "50s",
        }
    ],
    "prices": {
        "gpt-x": {"input": 2, "cachedInput": 0.5, "output": 40},
        "gpt-y": {"input": 2, "cachedInput": 0.5, "output": 40},
    },
    # The duplicate-key guard, without which a body that repeats `n` escapes the OpenAI route's ceiling.
    "gateway": {"refuseDuplicateKeys": True},
    "substrate": {"egress": {"enabled": False}},
}


def bounded_scenario() -> Scenario:
    return Scenario.of("bounded", BOUNDED_STACK)


def _random_agent(scenario: Scenario, rng: random.Random, actor: str, start: float, length: float) -> list[Call]:
    """Calls at random moments, of random size, length and model; some cancelled, some failing upstream, some in
    bursts."""
    calls: list[Call] = []
    rate = rng.uniform(0.01, 0.1)  # calls a second while active
    cancel, error = rng.uniform(0, 0.3), rng.uniform(0, 0.1)
    schema = rng.choice(("OpenAI", "Anthropic"))
    latency, window, ceiling, longest = scenario.rate_limit_timeout, scenario.window, scenario.ceiling, scenario.timeout
    models = scenario.models
    uniform = rng.random
    at = start + rng.uniform(0, length / 2)
    end = start + length
    while at < end:
        burst = 1 + int(12 * uniform()) if uniform() < 0.2 else 1
        for _ in range(burst):
            roll = uniform()
            outcome: Outcome = "cancelled" if roll < cancel else "error" if roll < cancel + error else "complete"
            duration = 0.5 + (longest - 0.5) * uniform()
            check = latency * uniform()
            total = max(1, int(window * (0.05 + 0.95 * uniform())))  # 5% to all of the window
            output = int(min(ceiling, total) * uniform())  # up to the ceiling
            calls.append(
                Call(
                    actor,
                    at + 0.5 * uniform(),
                    duration if outcome == "complete" else duration * uniform(),
                    Usage(input_tokens=total - output, output_tokens=output),
                    schema,
                    outcome,
                    check,
                    models[int(len(models) * uniform())],
                    (latency - check) * uniform(),
                    latency * uniform(),
                )
            )
        at += rng.expovariate(rate)
    return calls


def _longest(scenario: Scenario, actor: str, check_at: float, usage: Usage, model: str) -> Call:
    """A call checked at `check_at` that completes as late as the route allows: the answer comes back after
    the whole rate-limit timeout, the stream ends a millisecond inside the route's, and its charge is handled
    after the whole rate-limit timeout again."""
    latency = scenario.rate_limit_timeout
    return Call(actor, check_at, scenario.timeout - 0.001, usage, "OpenAI", "complete", 0.0, model, latency, latency)


def _dearest_usages(scenario: Scenario, limit: LimitSpec) -> tuple[Usage, ...]:
    """The calls that can be charged the most to `limit`: the whole window as input (cached, for a cached-input
    limit), or the ceiling as output and the rest as input (which is dearer depends on the prices and the kind
    of tokens counted; the adversary tries each)."""
    if limit.count == "cachedInput":
        return (Usage(input_tokens=scenario.window, cached_input_tokens=scenario.window),)
    return (
        Usage(input_tokens=scenario.window),
        Usage(input_tokens=scenario.window - scenario.ceiling, output_tokens=scenario.ceiling),
    )


def _filling_usage(scenario: Scenario, limit: LimitSpec, left: int, model: str) -> tuple[Usage, int]:
    """A call charging `limit` at most `left` (as much as one call can), and what it charges."""
    if limit.unit == "usd":
        usage = Usage(output_tokens=scenario.output_costing_at_most(left, model))
        return usage, scenario.costs.value(USD_METADATA_KEY, usage, model)
    if limit.count == "output":
        tokens = min(left, scenario.ceiling)
        return Usage(output_tokens=tokens), tokens
    tokens = min(left, scenario.window)
    cached = tokens if limit.count == "cachedInput" else 0
    return Usage(input_tokens=tokens, cached_input_tokens=cached), tokens


def _fill(
    scenario: Scenario, actors: Sequence[str], limit: LimitSpec, model: str, start: float, spacing: float
) -> tuple[list[Call], float]:
    """Sequential calls, the actors in turn, that bring one limit's counter to exactly its amount, each charged
    before the next is checked (so every one is admitted), paced within the calls limits. Returns them and the
    last check."""
    fill: list[Call] = []
    filled, at = 0, start
    while filled < limit.requests:
        usage, cost = _filling_usage(scenario, limit, limit.requests - filled, model)
        fill.append(Call(actors[len(fill) % len(actors)], at, 2.0, usage, "OpenAI", "complete", 0.0, model))
        filled += cost
        at += spacing
    return fill, at - spacing


def _adversary(scenario: Scenario, rng: random.Random, rule: CompiledRule, window_start: int) -> list[Call]:
    """The schedule that overshoots one limit the most, for every actor that charges it (a pool's members all at
    once), built from the configuration alone:

    * where the limit's window holds it: fill the limit to exactly its amount, then start each actor's N calls
      in each of the consecutive calls windows one lifetime can touch (ceil(lifetime / W) + 1: the first batch
      at the very end of a window, the others at the very start of the next ones), all admitted before the
      first is charged and all charged inside the limit's window;
    * else: each actor's N calls in every calls window that meets the interval from one lifetime before the
      limit's window to its end, each charged inside that window."""
    limit = rule.limit
    assert limit is not None
    actors = scenario.chargers(rule)
    model = limit.models[0] if limit.models else rng.choice(scenario.models)
    paces = [scenario.calls_limit(actor, limit) for actor in actors]
    calls_amount, calls_window = int(paces[0].amount), UNIT_SECONDS[paces[0].per]
    assert all((int(p.amount), UNIT_SECONDS[p.per]) == (calls_amount, calls_window) for p in paces)
    usage = rng.choice(_dearest_usages(scenario, limit))
    window_end = window_start + UNIT_SECONDS[limit.per]
    windows = math.ceil(Fraction(scenario.lifetime).limit_denominator(1000) / calls_window) + 1
    slack = scenario.lifetime - (windows - 2) * calls_window  # the first check to the last must stay under it
    spacing = max(3.0, calls_window / calls_amount / len(actors) + 0.5)
    fill, last_fill = _fill(scenario, actors, limit, model, window_start + rng.uniform(1, 30), spacing)
    first_window = (math.floor(last_fill / calls_window) + 2) * calls_window  # no fill call counts there
    if first_window + windows * calls_window + scenario.lifetime + 1 <= window_end:
        early, late = rng.uniform(0.001, slack / 3), rng.uniform(0.001, slack / 3)
        checks = [first_window + calls_window - early] + [
            first_window + index * calls_window + late for index in range(1, windows)
        ]
        return fill + [
            _longest(scenario, actor, at, usage, model)
            for at in checks
            for actor in actors
            for _ in range(calls_amount)
        ]
    earliest = window_start - scenario.lifetime + 0.01  # a call checked then is charged inside the window
    latest = window_end - 2 * scenario.rate_limit_timeout - 1.0  # and one checked then still is
    calls: list[Call] = []
    index = math.floor(earliest / calls_window)
    while index * calls_window < latest:
        low, high = max(index * calls_window, earliest), min((index + 1) * calls_window, latest)
        if low < high:
            at = low + (min(high, low + 0.5) - low) * rng.random()
            for actor in actors:
                if at < window_start:
                    calls += [_longest(scenario, actor, at, usage, model) for _ in range(calls_amount)]
                else:
                    duration = min(scenario.timeout - 0.001, window_end - at - 2 * scenario.rate_limit_timeout - 0.01)
                    calls += [
                        Call(actor, at, duration, usage, "OpenAI", "complete", 0.0, model) for _ in range(calls_amount)
                    ]
        index += 1
    return calls


@dataclass(frozen=True)
class Observation:
    """One limit: the program's bound, and the fullest counter any run reached (with an adversary, and with
    random workloads only)."""

    budget: str
    rule: int
    unit: str
    per: str
    amount: int
    bound: int
    per_call: int
    worst_seen: int
    worst_random: int
    models: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.worst_seen / self.bound


@functools.cache
def simulate(seed: int, runs: int) -> tuple[Observation, ...]:
    """`runs` randomized runs of the bounded scenario (Agent Router v1.1 and v1.2 semantics alternating), half of
    them with the actors of one limit following the schedule that overshoots it the most: the fullest counter of
    every tokens and usd limit, pools' and per-model ones included, next to its bound. Deterministic for a
    seed."""
    scenario = bounded_scenario()
    rng = random.Random(seed)
    targets = [scenario.rules.rules[case.rule] for case in scenario.worst if case.rule is not None]
    most: dict[int, int] = {}
    most_random: dict[int, int] = {}
    hour = 3600
    base = 1_796_061_600  # 2026-11-30T18:00:00Z, on an hour boundary
    for run in range(runs):
        window_start = base + hour * rng.randint(0, 1000)
        calls: list[Call] = []
        adversaries: set[str] = set()
        if rng.random() < 0.5:
            target = rng.choice(targets)
            assert target.limit is not None
            per = UNIT_SECONDS[target.limit.per]
            calls += _adversary(scenario, rng, target, window_start + per * rng.randrange(max(1, hour // per)))
            adversaries.update(scenario.chargers(target))
        for actor in scenario.settings.actors:
            if actor not in adversaries and rng.random() < 0.6:
                length = rng.uniform(60, 900)
                calls += _random_agent(scenario, rng, actor, window_start + rng.uniform(-120, hour - 60), length)
        result = run_calls(scenario.gateway(), calls, scenario.costs, "v1.2" if run % 2 else "v1.1")
        for rule, value in result.charged.items():
            most[rule] = max(most.get(rule, 0), value)
            if not adversaries:
                most_random[rule] = max(most_random.get(rule, 0), value)
    observations = []
    for case in scenario.worst:
        assert case.limit is not None and case.rule is not None and case.worst is not None
        assert case.per_call is not None
        observations.append(
            Observation(
                case.budget,
                case.rule,
                case.limit.unit,
                case.limit.per,
                case.limit.requests,
                case.worst,
                case.per_call,
                most.get(case.rule, 0),
                most_random.get(case.rule, 0),
                case.limit.models,
            )
        )
    return tuple(observations)


SEED = 18
RUNS = 2_000


def table(observations: Sequence[Observation], runs: int = RUNS, seed: int = SEED) -> str:
    """The Markdown table of docs/budgets.md: each limit's bound next to the fullest counter of any run."""

    def amount(value: int, unit: str) -> str:
        return f"${value / 1000:,.3f}" if unit == "usd" else f"{value:,} tokens"

    lines = [
        "| budget | limit | bound (`worstCase`) | most charged in any run | share of the bound "
        "| random workloads only |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for o in observations:
        models = f" on {', '.join(o.models)}" if o.models else ""
        lines.append(
            f"| {o.budget} | {amount(o.amount, o.unit)} per {o.per}{models} | {amount(o.bound, o.unit)} | "
            f"{amount(o.worst_seen, o.unit)} | {o.ratio:.1%} | {amount(o.worst_random, o.unit)} |"
        )
    lines.append("")
    lines.append(f"{runs:,} runs, seed {seed} (`make simulate`).")
    return "\n".join(lines)


__all__ = [
    "BOUNDED_STACK",
    "RUNS",
    "SEED",
    "Call",
    "Gateway",
    "Observation",
    "RouteCosts",
    "RuleTable",
    "RunResult",
    "Scenario",
    "bounded_scenario",
    "reported_usage",
    "run_calls",
    "simulate",
    "table",
]

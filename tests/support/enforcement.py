"""A simulation of how the deployed stack enforces budgets: the rate-limit service, Envoy's rate-limit filter and
Agent Router's usage report, driven by concurrent calls. tests/test_enforcement.py and
scripts/simulate_enforcement.py use it; it exists to check core/worst_case.py against the real semantics.

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
* Agent Router writes its costs into the metadata at the end of the response (envoyproxy/ai-gateway v1.1.0
  `internal/extproc/processor_impl.go`) and, from v1.2 on, also on every streamed chunk that carries usage
  (theagentrouter/agent-router `processor_impl.go` @05440134; the v1.2.0 notes: usage is recorded when a client
  disconnects after the final frame). Anthropic streams carry the input usage in their first event
  (`message_start`), OpenAI streams only in their last chunk. A non-2xx upstream answer writes no costs. Each
  `llmRequestCosts` entry is written under its own key: total, input, output and cached input tokens
  (`evalCost` reads one usage field per type) and the CEL price.
* A call ends at most one route timeout after the router starts it; the rate-limit service answers each of
  the two descriptor calls within `rateLimit.timeout`.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.budget_rules import (
    ACTOR_HEADER,
    COST_METADATA_KEY,
    MODEL_HEADER,
    TOKEN_METADATA_KEYS,
    BudgetRules,
    CompiledRule,
    LimitSpec,
)
from core.identity import actor_header_value
from core.manifests import BUDGET_POLICY_NAME
from core.money import USD_METADATA_KEY, ModelPrice, Usage, call_cost_mills
from core.ratelimit_model import UNIT_SECONDS, PolicyModel
from core.settings import StackSettings, duration_seconds
from core.validation import validate_stack
from core.worst_case import WorstCase, stack_worst_cases

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


class Gateway:
    """Envoy with the budget policy in front of the rate-limit service (its counters in `counters`)."""

    def __init__(self, namespace: str, rules: Sequence[Mapping[str, Any]]) -> None:
        self.model = PolicyModel(namespace, BUDGET_POLICY_NAME, rules)
        self.rules = rules
        self.counters: dict[tuple[int, int], int] = {}
        self._ids: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self.counter_rule: dict[int, int] = {}
        self._descriptors: dict[tuple[str, str | None], tuple[_Descriptor, ...]] = {}

    def descriptors(self, actor: str, model: str | None = None) -> tuple[_Descriptor, ...]:
        """The descriptors Envoy builds for the actor's requests naming `model` (Envoy Gateway's default cost: 1
        on the request, nothing on the response)."""
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

    def admit(self, actor: str, now: float, model: str | None = None) -> bool:
        """The check before a call: increment every descriptor by its request hits, then refuse when any is
        over its limit (not in shadow mode)."""
        over = False
        second = int(now)
        for d in self.descriptors(actor, model):
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
        for d in self.descriptors(actor, model):
            if d.response_key is None or d.response_key not in metadata:
                continue
            key = (d.counter, second // d.divider * d.divider)
            self.counters[key] = self.counters.get(key, 0) + metadata[d.response_key]

    def charged_by_rule(self) -> dict[int, int]:
        """The fullest counter (one actor, one window) of every rule that charged anything."""
        most: dict[int, int] = {}
        for (counter, _), value in self.counters.items():
            rule = self.counter_rule[counter]
            most[rule] = max(most.get(rule, 0), value)
        return most


# --- Agent Router: what a call reports -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One model call of one actor: when it reaches the gateway, how long until its stream is destroyed, what
    it would use, and how it ends."""

    actor: str
    start: float
    duration: float
    usage: Usage
    schema: str = "OpenAI"
    outcome: Outcome = "complete"
    check_latency: float = 0.0
    """How long the rate-limit service takes to handle the check; the charge is handled `duration` later."""
    model: str | None = None
    """The model name the agent sent (`x-ai-eg-model`); None: any call a per-model limit does not count."""


def reported_costs(call: Call, price: ModelPrice | None, version: AgentRouterVersion) -> dict[str, int] | None:
    """The metadata Agent Router has written when the call's stream is destroyed, or None."""
    if call.outcome == "error":
        return None
    if call.outcome == "cancelled":
        if version == "v1.1" or call.schema != "Anthropic":
            return None
        usage = Usage(input_tokens=call.usage.input_tokens)  # message_start: input usage only
    else:
        usage = call.usage
    costs = {
        COST_METADATA_KEY: usage.input_tokens + usage.output_tokens,
        TOKEN_METADATA_KEYS["input"]: usage.input_tokens,
        TOKEN_METADATA_KEYS["output"]: usage.output_tokens,
        TOKEN_METADATA_KEYS["cachedInput"]: usage.cached_input_tokens,
    }
    if price is not None:
        costs[USD_METADATA_KEY] = call_cost_mills(price, usage)
    return costs


@dataclass
class RunResult:
    """What one simulated run charged: the fullest counter of every rule, and how the calls went."""

    charged: dict[int, int]
    admitted: int
    refused: int


def run_calls(
    gateway: Gateway, calls: Iterable[Call], price: ModelPrice | None, version: AgentRouterVersion = "v1.2"
) -> RunResult:
    """Every call through the gateway in time order: checked when the rate-limit service handles its check,
    charged `duration` later when its stream is destroyed (a charge sorts before a check at the same instant)."""
    timeline: list[tuple[float, int, int, Call]] = []
    for order, call in enumerate(calls):
        checked = call.start + call.check_latency
        timeline.append((checked, 1, order, call))
        timeline.append((checked + call.duration, 0, order, call))
    timeline.sort(key=lambda event: (event[0], event[1], event[2]))
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
            gateway.charge(call.actor, at, reported_costs(call, price, version), call.model)
    return RunResult(gateway.charged_by_rule(), admitted, refused)


# --- scenarios and randomized workloads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A validated stack, the worst case the program computes for it, and what bounds one call."""

    name: str
    settings: StackSettings
    rules: BudgetRules
    worst: tuple[WorstCase, ...]
    price: ModelPrice | None
    window: int
    ceiling: int
    timeout: float
    check_latency: float
    models: tuple[str, ...]

    @classmethod
    def of(cls, name: str, config: Mapping[str, Any]) -> Scenario:
        stack = validate_stack(dict(config), lambda key: (True, True))
        settings = stack.settings
        [route] = settings.routes  # the scenarios below have one route
        assert route.context_window is not None and route.max_output_tokens is not None
        prices = {model: settings.prices[model].to_price() for model in route.models if model in settings.prices}
        assert len(set(prices.values())) <= 1, "one price for the route's models: every call is priced alike"
        return cls(
            name=name,
            settings=settings,
            rules=stack.rules,
            worst=tuple(stack_worst_cases(settings, stack.rules)),
            price=prices.get(route.models[0]),
            window=route.context_window,
            ceiling=route.max_output_tokens,
            timeout=route.timeout_seconds,
            check_latency=duration_seconds(settings.rate_limit.timeout),
            models=tuple(route.models),
        )

    def gateway(self) -> Gateway:
        return Gateway(self.settings.gateway.namespace, self.rules.specs())

    def members(self, budget_index: int) -> list[str]:
        """The actors of one budget (the default's: every actor in no class)."""
        return [a for a in self.settings.actors if self.rules.class_of_actor.get(a, 0) == budget_index]

    def limit(self, budget_index: int, unit: str) -> tuple[int, str]:
        """(requests, per) of the budget's first limit of `unit` over every model."""
        rule = next(r for r in self.rules.rules_of_budget(budget_index) if r.unit == unit and not r.limit.models)
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
        return next(r.limit for r in self.rules.rules_for_actor(actor) if r.unit == "calls" and r.limit.covers(limit))


# The scenario of tests/test_enforcement.py and the table in docs/budgets.md: one OpenAI-schema route of two models
# with a 4,000-token window, a 1,000-token ceiling and a 50 s timeout; a default budget with a per-model limit, a
# class with a usd limit, and a pool of two default-budget agents bounded by their own calls limits.
BOUNDED_STACK: dict[str, Any] = {
    "actors": [f"agents/agent-{i}" for i in range(4)] + ["agents/pair-0", "agents/pair-1"],
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
            }
        ],
        "pools": [
            {
                "name": "team",
                "members": ["agents/agent-0", "agents/agent-1"],
                "limits": [{"tokens": 30_000, "per": "Hour"}],
            }
        ],
    },
    "budgetPolicy": {"limitSlots": 3, "poolSlots": 1},
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
    "substrate": {"egress": {"enabled": False}},
}


def bounded_scenario() -> Scenario:
    return Scenario.of("bounded", BOUNDED_STACK)


def _usage_of_cost(scenario: Scenario, rng: random.Random, low: float) -> Usage:
    """A call using between `low` and all of the window, its output up to the ceiling."""
    total = rng.randint(max(1, int(scenario.window * low)), scenario.window)
    output = rng.randint(0, min(scenario.ceiling, total))
    return Usage(input_tokens=total - output, output_tokens=output)


def _priciest_usage(scenario: Scenario, rng: random.Random, low: float) -> Usage:
    """A call near the dearest one can be: all the output the ceiling allows, the rest of the window as input."""
    output = scenario.ceiling
    return Usage(
        input_tokens=rng.randint(int((scenario.window - output) * low), scenario.window - output), output_tokens=output
    )


def _random_agent(scenario: Scenario, rng: random.Random, actor: str, start: float, length: float) -> list[Call]:
    """Calls at random moments, of random size, length and model; some cancelled, some failing upstream, some in
    bursts."""
    calls: list[Call] = []
    rate = rng.uniform(0.01, 0.1)  # calls a second while active
    cancel, error = rng.uniform(0, 0.3), rng.uniform(0, 0.1)
    schema = rng.choice(("OpenAI", "Anthropic"))
    at = start + rng.uniform(0, length / 2)
    end = start + length
    while at < end:
        burst = rng.randint(1, 12) if rng.random() < 0.2 else 1
        for _ in range(burst):
            roll = rng.random()
            outcome: Outcome = "cancelled" if roll < cancel else "error" if roll < cancel + error else "complete"
            duration = rng.uniform(0.5, scenario.timeout)
            calls.append(
                Call(
                    actor,
                    at + rng.uniform(0, 0.5),
                    duration if outcome == "complete" else duration * rng.random(),
                    _usage_of_cost(scenario, rng, 0.05),
                    schema,
                    outcome,
                    rng.uniform(0, scenario.check_latency),
                    rng.choice(scenario.models),
                )
            )
        at += rng.expovariate(rate)
    return calls


def _adversary(scenario: Scenario, rng: random.Random, rule: CompiledRule, window_start: int) -> list[Call]:
    """The schedule that reaches the bound: fill one limit to exactly its amount with finished calls, then, just
    before and just after a boundary of the calls window, start as many of the dearest calls as the calls limits
    admit (every member of a pool at once), all ending inside the same window of the limit."""
    limit = rule.limit
    assert limit is not None
    amount, per, unit = limit.requests, limit.per, limit.unit
    actors = scenario.chargers(rule)
    model = limit.models[0] if limit.models else rng.choice(scenario.models)
    paces = [scenario.calls_limit(actor, limit) for actor in actors]
    calls_amount, calls_window = int(paces[0].amount), UNIT_SECONDS[paces[0].per]
    assert all((int(p.amount), UNIT_SECONDS[p.per]) == (calls_amount, calls_window) for p in paces)
    window_end = window_start + UNIT_SECONDS[per]
    latency = scenario.check_latency
    spacing = max(3 + 2 * latency, calls_window / calls_amount + 0.5)  # within the calls limit
    at = window_start + rng.uniform(1, 30)
    fill: list[Call] = []
    filled = 0
    price = scenario.price
    while filled < amount:
        # Sequential, each ending before the next starts: every one is admitted (the counter stays <= amount).
        left = amount - filled
        if unit == "usd":
            assert price is not None
            per_mill = math.ceil(1_000 / float(price.output))  # output tokens that cost one mill
            mills = min(left, scenario.ceiling // per_mill)
            usage = Usage(output_tokens=mills * per_mill)
            cost = call_cost_mills(price, usage)
        else:
            size = min(left, scenario.window)
            usage = Usage(input_tokens=size)  # input only: the cheapest way to fill a tokens limit
            cost = size
        fill.append(Call(actors[len(fill) % len(actors)], at, 2.0, usage, "OpenAI", "complete", 0.0, model))
        filled += cost
        at += spacing
    # A boundary of the calls window one whole calls window after the fill (so none of its calls count there),
    # early enough for every call of the burst to end inside the limit's window.
    first = math.ceil((at + 1) / calls_window) * calls_window + calls_window
    last = (window_end - int(scenario.timeout) - 2 - calls_window) // calls_window * calls_window
    assert first <= last, "the scenario's limit window is too short for the adversary"
    boundary = rng.randrange(first, last + 1, calls_window)
    burst: list[Call] = []
    for actor in actors:
        for side in (-1, 1):
            for _ in range(calls_amount):
                start = boundary + side * rng.uniform(0.01, 0.5) - (latency if side < 0 else 0)
                usage = _priciest_usage(scenario, rng, 0.95)
                burst.append(Call(actor, start, scenario.timeout - 1, usage, "OpenAI", "complete", latency, model))
    return fill + burst


@dataclass(frozen=True)
class Observation:
    """One limit: the program's bound, and the fullest counter any run reached."""

    budget: str
    rule: int
    unit: str
    per: str
    amount: int
    bound: int
    worst_seen: int
    models: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.worst_seen / self.bound


@functools.cache
def simulate(seed: int, runs: int) -> tuple[Observation, ...]:
    """`runs` randomized runs of the bounded scenario (Agent Router v1.1 and v1.2 semantics alternating): the
    fullest counter of every tokens and usd limit, pools' and per-model ones included, next to its bound.
    Deterministic for a seed."""
    scenario = bounded_scenario()
    rng = random.Random(seed)
    most: dict[int, int] = {}
    targets = [scenario.rules.rules[case.rule] for case in scenario.worst if case.rule is not None]
    hour = 3600
    base = 1_796_061_600  # 2026-11-30T18:00:00Z, on an hour boundary
    for run in range(runs):
        window_start = base + hour * rng.randint(0, 1000)
        calls: list[Call] = []
        adversaries: set[str] = set()
        if rng.random() < 0.5:
            target = rng.choice(targets)
            calls += _adversary(scenario, rng, target, window_start)
            adversaries.update(scenario.chargers(target))
        for actor in scenario.settings.actors:
            if actor not in adversaries and rng.random() < 0.6:
                length = rng.uniform(60, 900)
                calls += _random_agent(scenario, rng, actor, window_start + rng.uniform(-120, hour - 60), length)
        result = run_calls(scenario.gateway(), calls, scenario.price, "v1.2" if run % 2 else "v1.1")
        for rule, value in result.charged.items():
            most[rule] = max(most.get(rule, 0), value)
    observations = []
    for case in scenario.worst:
        assert case.limit is not None and case.rule is not None and case.worst is not None
        observations.append(
            Observation(
                case.budget,
                case.rule,
                case.limit.unit,
                case.limit.per,
                case.limit.requests,
                case.worst,
                most.get(case.rule, 0),
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
        "| budget | limit | bound (`worstCase`) | most charged in any run | share of the bound |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for o in observations:
        models = f" on {', '.join(o.models)}" if o.models else ""
        lines.append(
            f"| {o.budget} | {amount(o.amount, o.unit)} per {o.per}{models} | {amount(o.bound, o.unit)} | "
            f"{amount(o.worst_seen, o.unit)} | {o.ratio:.1%} |"
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
    "RunResult",
    "Scenario",
    "bounded_scenario",
    "reported_costs",
    "run_calls",
    "simulate",
    "table",
]

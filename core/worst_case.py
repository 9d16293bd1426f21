"""The most an actor can have been charged by the end of a window, for every tokens and usd limit.

Pure arithmetic over the compiled rules and what bounds one call (core/ceilings.py). How enforcement works
upstream, each part checked in source:

* A call is checked before it runs: every limit's counter is compared at cost 0, and the call is refused
  only when a counter is already *above* its limit (envoyproxy/ratelimit `src/limiter/base_limiter.go`:
  OVER_LIMIT when the count after adding the hits exceeds the limit). A calls limit adds 1 on that same
  check, increment then compare (`src/redis/fixed_cache_impl.go` `DoLimit`: every descriptor's counter is
  incremented, then each is compared), so at most N calls are admitted per window of a limit of N calls.
* A call is charged when its response or stream ends (Envoy `ratelimit.cc` `onDestroy`, the
  `apply_on_stream_done` rate limits), into the window that holds that moment (`src/limiter/cache_key.go`).
* A call ends at most one route request timeout after it was admitted: Agent Router's router filter sets
  the model header from the whole request body before the rate-limit filter builds its descriptors from the
  route that header selects, and the timeout covers the whole response, streams included. Add the
  rate-limit service's answer time on both ends (`rateLimit.timeout`): that is `lifetime` below.

Hence, for a limit of L per window W and a most expensive call C:

* at the last admission of a window its counter was at most L; everything charged after it comes from calls
  already running then, admitted within one lifetime: at most K = N x (ceil(lifetime / W_calls) + 1) for
  each calls limit (N per W_calls), so the window ends at most at **L + K x C**;
* every call charged in the window was admitted within the window or one lifetime before it: at most M
  of them (the calls limit's windows that interval touches, times N), so also at most **M x C**.

The bound is the smaller of the two. Without a calls limit, or without a bound on one call, nothing upstream
bounds it: the entry says which key to set. A route whose ceiling a body with a repeated key escapes (without
`gateway.refuseDuplicateKeys`, core/ceilings.py) is counted at what bounds such a body, and each entry it
serves says so (`ceilingBypass`). tests/test_enforcement.py drives a simulation of the rate-limit
service with randomized concurrent workloads and checks that no run exceeds these numbers and that some run
comes within one call of each.

Which calls limits and which routes count for a limit:

* A per-model limit is charged only by calls naming its models: C is the dearest call of the routes serving
  them, and a calls limit bounds it only when it counts every such call (no `models`, or a superset).
* A tokens limit's C is the most of its kind one call can report (`CallBound.tokens_of`).
* A pool's counter is charged by every member: K and M come from the pool's own calls limits, or, for a pool
  of listed members only, from the sum of each member's own (its budget's calls limits). A pool of whole
  atespaces has members no configuration lists, so only its own calls limits bound it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from core.budget_rules import BudgetRules, CompiledRule, LimitSpec
from core.ceilings import CallBound, RouteFacts, call_bound
from core.money import mills_to_usd
from core.ratelimit_model import UNIT_SECONDS
from core.settings import StackSettings, duration_seconds

EXAMPLE_CALLS_LIMIT = "{calls: 60, per: Minute}"


def call_lifetime(bounds: Sequence[CallBound], rate_limit_timeout_seconds: float) -> Fraction:
    """The longest a call can run from the check that admits it to the charge that ends it, in seconds."""
    longest = max((Fraction(bound.timeout_seconds) for bound in bounds), default=Fraction(0))
    return longest + 2 * Fraction(rate_limit_timeout_seconds).limit_denominator(1000)


def concurrent_calls(calls: int, per: str, lifetime: Fraction) -> int:
    """The most calls a limit of `calls` per `per` lets run at once: those admitted within one lifetime, which
    touches at most ceil(lifetime / window) + 1 windows of the limit."""
    return calls * (math.ceil(lifetime / UNIT_SECONDS[per]) + 1)


@functools.lru_cache(maxsize=256)
def _windows_touched(window: int, calls_window: int, lifetime: Fraction) -> int:
    """The most windows of `calls_window` seconds that meet an interval running from one lifetime before the
    start of a `window`-second window to its end (both epoch-aligned, as the rate-limit service's are)."""
    period = math.lcm(window, calls_window) // window
    most = 0
    for index in range(period):
        start = Fraction(index * window) - lifetime
        end = Fraction((index + 1) * window)
        first = math.floor(start / calls_window)
        last = math.ceil(end / calls_window) - 1
        most = max(most, last - first + 1)
    return most


def calls_per_window(calls: int, per: str, limit_per: str, lifetime: Fraction) -> int:
    """The most calls a limit of `calls` per `per` lets be charged within one `limit_per` window: every one was
    admitted in that window or one lifetime before it."""
    return calls * _windows_touched(UNIT_SECONDS[limit_per], UNIT_SECONDS[per], lifetime)


@dataclass(frozen=True)
class WorstCase:
    """One tokens or usd limit of a budget, and the most one actor can have been charged in one of its windows.

    Counter units throughout (tokens, or mills for usd); `unbounded` says what to set when there is no bound.
    """

    budget: str
    rule: int | None
    limit_index: int | None
    limit: LimitSpec | None
    per_call: int | None
    concurrent: int | None
    calls: int | None
    worst: int | None
    unbounded: tuple[str, ...] = ()
    ceiling_bypass: tuple[str, ...] = ()
    """For each route serving the limit whose ceiling a body with a repeated key escapes: why, and what bounds
    a call there instead (core/ceilings.py `ceiling_bypass`)."""

    def _amount(self, value: int | None) -> int | float | None:
        if value is None or self.limit is None:
            return value
        return float(mills_to_usd(value)) if self.limit.unit == "usd" else value

    def to_output(self) -> dict[str, Any]:
        """The stack output entry: amounts in the limit's own unit (tokens, or dollars)."""
        entry: dict[str, Any] = {"budget": self.budget, "rule": self.rule, "limit": self.limit_index}
        if self.limit is not None:
            entry.update(self.limit.describe())
        entry.update(
            {
                "perCall": self._amount(self.per_call),
                "concurrentCalls": self.concurrent,
                "callsPerWindow": self.calls,
                "worst": self._amount(self.worst),
                "unbounded": "; ".join(self.unbounded) or None,
                "ceilingBypass": "; ".join(self.ceiling_bypass) or None,
            }
        )
        return entry

    @property
    def worst_amount(self) -> int | Decimal | None:
        """The bound in the limit's own unit: tokens, or dollars."""
        if self.worst is None or self.limit is None:
            return self.worst
        return mills_to_usd(self.worst) if self.limit.unit == "usd" else self.worst


def _budget_key(budget_index: int) -> str:
    return "budgets.default" if budget_index == 0 else f"budgets.classes[{budget_index - 1}]"


def _calls_advice(rules: BudgetRules, key: str, limit_count: int) -> str:
    advice = f"add a calls limit to {key}.limits, e.g. {EXAMPLE_CALLS_LIMIT}"
    if limit_count + 1 > rules.limit_slots:
        advice += f" (with budgetPolicy.limitSlots {limit_count + 1})"
    return advice


@dataclass(frozen=True)
class _Pace:
    """How many calls a set of calls limits lets run at once, and be charged within one window of a limit."""

    concurrent: int | None
    calls: int | None

    def plus(self, other: _Pace) -> _Pace:
        """Two callers' paces together (None, unbounded, stays unbounded)."""
        return _Pace(_sum(self.concurrent, other.concurrent), _sum(self.calls, other.calls))

    def at_most(self, other: _Pace) -> _Pace:
        """The tighter of two paces that both hold."""
        return _Pace(_smaller(self.concurrent, other.concurrent), _smaller(self.calls, other.calls))


def _sum(first: int | None, second: int | None) -> int | None:
    return None if first is None or second is None else first + second


def _smaller(first: int | None, second: int | None) -> int | None:
    return second if first is None else first if second is None else min(first, second)


def _pace(calls_limits: Sequence[LimitSpec], limit: LimitSpec, lifetime: Fraction) -> _Pace:
    """The pace the calls limits that count every call `limit` counts allow."""
    counting = [c for c in calls_limits if c.covers(limit)]
    return _Pace(
        min((concurrent_calls(int(c.amount), c.per, lifetime) for c in counting), default=None),
        min((calls_per_window(int(c.amount), c.per, limit.per, lifetime) for c in counting), default=None),
    )


def _calls_limits(own: Sequence[CompiledRule]) -> list[LimitSpec]:
    return [rule.limit for rule in own if rule.limit is not None and rule.limit.unit == "calls"]


def _per_call(limit: LimitSpec, bounds: Sequence[CallBound]) -> tuple[int | None, list[str], bool]:
    """The dearest call `limit` can be charged (in its counter's unit), the route keys that would bound it, and
    whether a price is missing."""
    serving = [bound for bound in bounds if bound.serves(limit.models)]
    missing = list(dict.fromkeys(key for bound in serving for key in bound.missing))
    costs = [bound.tokens_of(limit.count) if limit.unit == "tokens" else bound.mills for bound in serving]
    if missing or None in costs or not costs:
        return None, missing, not missing and None in costs
    return max(c for c in costs if c is not None), [], False


def _worst_case(
    name: str,
    rule: CompiledRule,
    bounds: Sequence[CallBound],
    pace: _Pace,
    advice: str,
) -> WorstCase:
    limit = rule.limit
    assert limit is not None
    per_call, missing, unpriced = _per_call(limit, bounds)
    unbounded: list[str] = []
    if missing:
        unbounded.append(f"set {', '.join(missing)}")
    elif unpriced:
        unbounded.append("price every model of every route in prices")
    if pace.concurrent is None or pace.calls is None:
        unbounded.append(advice)
    worst = None
    if not unbounded and per_call is not None and pace.concurrent is not None and pace.calls is not None:
        worst = min(limit.requests + pace.concurrent * per_call, pace.calls * per_call)
    bypass = tuple(bound.bypass for bound in bounds if bound.bypass is not None and bound.serves(limit.models))
    return WorstCase(
        name,
        rule.index,
        rule.limit_index,
        limit,
        per_call,
        pace.concurrent,
        pace.calls,
        worst,
        tuple(unbounded),
        bypass,
    )


def _serving_lifetime(limit: LimitSpec, bounds: Sequence[CallBound], rate_limit_timeout_seconds: float) -> Fraction:
    return call_lifetime([b for b in bounds if b.serves(limit.models)] or bounds, rate_limit_timeout_seconds)


def budget_worst_cases(
    rules: BudgetRules, bounds: Sequence[CallBound], rate_limit_timeout_seconds: float, budget_index: int
) -> list[WorstCase]:
    """The worst case of every tokens and usd limit of one budget (0 for the default, k for class k-1)."""
    own: tuple[CompiledRule, ...] = rules.rules_of_budget(budget_index)
    name = own[0].purpose  # every budget has at least one limit
    key = _budget_key(budget_index)
    spend = [rule for rule in own if rule.limit is not None and rule.limit.counts_spend]
    if not spend:
        return [
            WorstCase(name, None, None, None, None, None, None, None, (f"{key} has no tokens or usd limit: add one",))
        ]
    calls_limits = _calls_limits(own)
    advice = _calls_advice(rules, key, len(own))
    results = []
    for rule in spend:
        assert rule.limit is not None
        lifetime = _serving_lifetime(rule.limit, bounds, rate_limit_timeout_seconds)
        results.append(_worst_case(name, rule, bounds, _pace(calls_limits, rule.limit, lifetime), advice))
    return results


def pool_worst_cases(
    rules: BudgetRules, bounds: Sequence[CallBound], rate_limit_timeout_seconds: float, pool_index: int
) -> list[WorstCase]:
    """The worst case of every tokens and usd limit of one pool: its own calls limits bound it, and so, for a
    pool of listed members only, does the sum of what each member's own budget lets it run."""
    own = rules.rules_of_pool(pool_index)
    if not own:
        return []
    pool = rules.pools[pool_index]
    key = pool.key or f"budgets.pools[{pool_index}]"
    advice = _calls_advice(rules, key, len(own))
    if not pool.atespaces and pool.actors:
        advice += " (or to the budget of every member)"
    calls_limits = _calls_limits(own)
    results = []
    for rule in own:
        limit = rule.limit
        if limit is None or not limit.counts_spend:
            continue
        lifetime = _serving_lifetime(limit, bounds, rate_limit_timeout_seconds)
        pace = _pace(calls_limits, limit, lifetime)
        if not pool.atespaces and pool.actors:
            members = _Pace(0, 0)
            for actor in sorted(set(pool.actors)):
                members = members.plus(_pace(_calls_limits(rules.rules_for_actor(actor)), limit, lifetime))
            pace = pace.at_most(members)
        results.append(_worst_case(rule.purpose, rule, bounds, pace, advice))
    return results


def worst_cases(rules: BudgetRules, bounds: Sequence[CallBound], rate_limit_timeout_seconds: float) -> list[WorstCase]:
    """Every budget's worst cases, the default's first, then each class's in configuration order, then each
    pool's."""
    budgets = sorted({rule.budget_index for rule in rules.limit_rules if rule.budget_index is not None})
    pools = sorted({rule.pool_index for rule in rules.limit_rules if rule.pool_index is not None})
    return [
        *(case for index in budgets for case in budget_worst_cases(rules, bounds, rate_limit_timeout_seconds, index)),
        *(case for index in pools for case in pool_worst_cases(rules, bounds, rate_limit_timeout_seconds, index)),
    ]


def route_facts(settings: StackSettings) -> list[RouteFacts]:
    """What bounds one call through each configured route."""
    kinds = {provider.name: provider.kind for provider in settings.providers}
    return [
        RouteFacts(
            key=f"routes[{index}]",
            name=route.name,
            provider_kind=kinds[route.provider],
            models=route.billed_models,
            max_output_tokens=route.max_output_tokens,
            context_window=route.context_window,
            timeout_seconds=route.timeout_seconds,
            served=tuple(route.models),
            duplicate_keys_refused=settings.gateway.refuse_duplicate_keys,
        )
        for index, route in enumerate(settings.routes)
    ]


def stack_worst_cases(settings: StackSettings, rules: BudgetRules) -> list[WorstCase]:
    """The worst case of every limit of a validated stack (the stack output `worstCase`)."""
    prices = {model: entry.to_price() for model, entry in settings.prices.items()}
    bounds = [call_bound(route, prices, settings.mock_model.total_tokens) for route in route_facts(settings)]
    return worst_cases(rules, bounds, duration_seconds(settings.rate_limit.timeout))

"""The worst case of every limit (core/worst_case.py) and what bounds one call (core/ceilings.py).

The arithmetic is checked here against hand-counted windows; tests/test_enforcement.py checks the bounds
against a simulation of enforcement.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from core.budget_rules import BudgetSpec, LimitSpec, compile_rules
from core.ceilings import CallBound, RouteFacts, call_bound, ceiling_body_mutation, dearest_prices
from core.money import MAX_MILLS_PER_CALL, ModelPrice, Usage, call_cost_mills
from core.worst_case import (
    budget_worst_cases,
    call_lifetime,
    calls_per_window,
    concurrent_calls,
    worst_cases,
)

HOUR, DAY = 3600, 86_400


def route(**changes) -> RouteFacts:
    base = {
        "key": "routes[0]",
        "name": "gpt",
        "provider_kind": "openai",
        "models": ("gpt-a", "gpt-b"),
        "max_output_tokens": 1_000,
        "context_window": 8_000,
        "timeout_seconds": 60.0,
        "duplicate_keys_refused": True,
    }
    return RouteFacts(**{**base, **changes})


PRICES = {"gpt-a": ModelPrice.of(input=2, output=8), "gpt-b": ModelPrice.of(input=3, output=6, cache_write=4)}


def test_the_ceiling_goes_in_the_field_each_schema_reads():
    assert ceiling_body_mutation("openai", 4096) == {
        "set": [{"path": "max_completion_tokens", "value": "4096"}, {"path": "n", "value": "1"}],
        "remove": ["max_tokens"],
    }
    assert ceiling_body_mutation("mock", 10) == ceiling_body_mutation("openai", 10), "the mock speaks OpenAI"
    assert ceiling_body_mutation("anthropic", 4096) == {"set": [{"path": "max_tokens", "value": "4096"}]}


def test_one_call_is_bounded_by_the_window_and_priced_at_the_routes_dearest_prices():
    """8,000 tokens, at most 1,000 of them output: every input token at $4 (gpt-b's cache write), the output at
    $8 (gpt-a): 7,000 x 4 + 1,000 x 8 = 36,000 microdollars = 36 mills."""
    bound = call_bound(route(), PRICES, 200)
    assert (bound.tokens, bound.mills, bound.missing) == (8_000, 36, ())
    dearest = dearest_prices(("gpt-a", "gpt-b"), PRICES)
    assert dearest is not None
    assert (dearest.input, dearest.cache_write, dearest.output) == (Decimal(3), Decimal(4), Decimal(8))
    flat = ModelPrice.of(input=4, output=8)
    assert bound.mills == call_cost_mills(flat, Usage(input_tokens=7_000, output_tokens=1_000))


def test_input_dearer_than_output_prices_the_whole_window_as_input():
    prices = {"m": ModelPrice.of(input=10, output=1)}
    bound = call_bound(route(models=("m",)), prices, 200)
    assert bound.mills == call_cost_mills(prices["m"], Usage(input_tokens=8_000))


def test_a_call_cannot_be_charged_more_than_envoy_accepts():
    prices = {"m": ModelPrice.of(input=1000, output=1000)}
    bound = call_bound(route(models=("m",), context_window=4_000_000_000, max_output_tokens=1), prices, 200)
    assert bound.mills == MAX_MILLS_PER_CALL


def test_what_is_missing_is_named_by_its_key():
    assert call_bound(route(context_window=None), PRICES, 200).missing == ("routes[0].contextWindow",)
    assert call_bound(route(max_output_tokens=None), PRICES, 200).missing == ("routes[0].maxOutputTokens",)
    anthropic = call_bound(route(provider_kind="anthropic", max_output_tokens=None), PRICES, 200)
    assert (anthropic.missing, anthropic.tokens) == ((), 8_000), "Anthropic has no `n`: its window bounds a call"
    mock = call_bound(route(provider_kind="mock", context_window=None, max_output_tokens=None), {}, 200)
    assert (mock.tokens, mock.mills, mock.missing) == (200, None, ())


def test_without_the_guard_a_repeated_key_escapes_the_ceiling():
    """ai-gateway v1.1.0 writes the ceiling with sjson into the first copy of a key (internal/bodymutator/
    body_mutator.go; sjson 13f6455 `appendRawPaths`, gjson v1.19.0 `parseObject` stops at the first match) and its
    pass-through translators forward the rest (internal/translator/openai_openai.go, anthropic_anthropic.go). So an
    OpenAI route has no bound (a repeated `n` asks for any number of choices), and an Anthropic route's output is
    bounded by its window only: 8,000 output tokens at $8 = 64 mills, not 36. The mock reports a fixed usage.
    Broken once to see it fail: with `ceiling_bypass` returning None, the OpenAI bound was 8,000 tokens."""
    openai = call_bound(route(duplicate_keys_refused=False), PRICES, 200)
    assert (openai.tokens, openai.mills, openai.missing) == (None, None, ("gateway.refuseDuplicateKeys",))
    assert openai.bypass == (
        "routes[0] (gpt): a body that repeats n or max_completion_tokens keeps its own last copy (the ceiling is "
        "written into the first): no bound (set gateway.refuseDuplicateKeys)"
    )
    unset = call_bound(route(duplicate_keys_refused=False, max_output_tokens=None), PRICES, 200)
    assert (unset.missing, unset.bypass) == (("routes[0].maxOutputTokens", "gateway.refuseDuplicateKeys"), None)
    anthropic = call_bound(route(provider_kind="anthropic", duplicate_keys_refused=False), PRICES, 200)
    flat = ModelPrice.of(input=4, output=8)
    assert (anthropic.tokens, anthropic.tokens_of("output"), anthropic.missing) == (8_000, 8_000, ())
    assert anthropic.mills == call_cost_mills(flat, Usage(input_tokens=0, output_tokens=8_000)) == 64
    assert anthropic.bypass == (
        "routes[0] (gpt): a body that repeats max_tokens keeps its own last copy (the ceiling is written into the "
        "first): output up to routes[0].contextWindow (set gateway.refuseDuplicateKeys)"
    )
    guarded = call_bound(route(provider_kind="anthropic"), PRICES, 200)
    assert (guarded.tokens_of("output"), guarded.mills, guarded.bypass) == (1_000, 36, None)
    mock = call_bound(route(provider_kind="mock", duplicate_keys_refused=False), {}, 200)
    assert (mock.tokens, mock.missing, mock.bypass) == (200, (), None)


def test_each_key_to_set_is_named_once_and_each_bypassed_route_is_named():
    rules = compile_rules(
        spec("default", LimitSpec("tokens", 500, "Day"), LimitSpec("calls", 5, "Minute")),
        [],
        exclusion_slots=1,
        limit_slots=2,
    )
    bounds = [
        call_bound(route(duplicate_keys_refused=False), PRICES, 200),
        call_bound(route(key="routes[1]", name="mini", duplicate_keys_refused=False), PRICES, 200),
    ]
    [case] = worst_cases(rules, bounds, 0.1)
    output = case.to_output()
    assert (output["worst"], output["unbounded"]) == (None, "set gateway.refuseDuplicateKeys")
    assert output["ceilingBypass"].count("keeps its own last copy") == 2
    assert output["ceilingBypass"].startswith("routes[0] (gpt): ") and "; routes[1] (mini): " in output["ceilingBypass"]


@pytest.mark.parametrize(
    ("calls", "per", "lifetime", "running"),
    [
        (10, "Minute", 60.2, 30),  # 60.2 s touches three minutes
        (10, "Minute", 59.2, 20),
        (10, "Hour", 300.2, 20),
        (3, "Second", 2.5, 12),  # 2.5 s touches four seconds
        (1, "Day", 60, 2),
    ],
)
def test_calls_running_at_once(calls, per, lifetime, running):
    assert concurrent_calls(calls, per, Fraction(lifetime).limit_denominator(1000)) == running


@pytest.mark.parametrize(
    ("calls", "per", "limit_per", "lifetime", "charged"),
    [
        (5, "Minute", "Hour", 60, 5 * (60 + 1)),  # the hour's 60 minutes and the one before it
        (5, "Minute", "Hour", 60.2, 5 * (60 + 2)),
        (20, "Hour", "Day", 300, 20 * (24 + 1)),
        (7, "Week", "Month", 60, 7 * 6),  # 30 days plus a minute meet at most 6 epoch-aligned weeks
        (7, "Month", "Week", 60, 7 * 2),  # a week (and a minute before it) meets at most 2 months
        (1, "Year", "Month", 60, 2),
    ],
)
def test_calls_charged_in_one_window(calls, per, limit_per, lifetime, charged):
    assert calls_per_window(calls, per, limit_per, Fraction(lifetime).limit_denominator(1000)) == charged


def test_the_week_in_month_count_is_reached_by_some_month():
    """Months are 30 days and weeks 7, both from the epoch: some month (with the minute before it) meets 6
    weeks, and none meets 7."""
    week, month = 7 * DAY, 30 * DAY
    touched = []
    for index in range(7):
        start, end = index * month - 60, (index + 1) * month
        touched.append((end - 1) // week - start // week + 1)
    assert max(touched) == 6


def test_the_lifetime_is_the_longest_timeout_plus_both_rate_limit_answers():
    bounds = [CallBound("a", 1, 1, 60.0), CallBound("b", 1, 1, 300.0)]
    assert call_lifetime(bounds, 0.1) == Fraction(3002, 10)


def spec(name: str, *limits: LimitSpec, actors: tuple[str, ...] = ()) -> BudgetSpec:
    return BudgetSpec(name, limits, actors)


def test_the_bound_is_the_smaller_of_the_two_counts():
    """Default: 10,000 tokens a Day, 5 calls an Hour, 8,000 tokens a call, a 60.2 s lifetime. At once: 10 calls,
    so 10,000 + 80,000; in a day: 5 x 25 = 125 calls, 1,000,000 tokens. The class: 1,000,000 tokens a Day but
    2 calls a Day: 2 x 2 (a day and the minute before it) = 4 calls of 8,000, below 1,000,000 + 4 x 8,000."""
    rules = compile_rules(
        spec("default", LimitSpec("tokens", 10_000, "Day"), LimitSpec("calls", 5, "Hour")),
        [spec("slow", LimitSpec("tokens", 1_000_000, "Day"), LimitSpec("calls", 2, "Day"), actors=("a/b",))],
        exclusion_slots=1,
        limit_slots=2,
    )
    bounds = [call_bound(route(), PRICES, 200)]
    default, slow = worst_cases(rules, bounds, 0.1)
    assert (default.per_call, default.concurrent, default.calls, default.worst) == (8_000, 10, 125, 90_000)
    assert (slow.concurrent, slow.calls, slow.worst) == (4, 4, 32_000)
    assert default.to_output() == {
        "budget": "default",
        "rule": 0,
        "limit": 0,
        "unit": "tokens",
        "amount": 10_000,
        "per": "Day",
        "perCall": 8_000,
        "concurrentCalls": 10,
        "callsPerWindow": 125,
        "worst": 90_000,
        "unbounded": None,
        "ceilingBypass": None,
    }


def test_a_usd_limit_is_bounded_in_mills_and_shown_in_dollars():
    rules = compile_rules(
        spec("default", LimitSpec("usd", Decimal(5), "Day"), LimitSpec("calls", 10, "Minute")),
        [],
        exclusion_slots=1,
        limit_slots=2,
    )
    [case] = worst_cases(rules, [call_bound(route(), PRICES, 200)], 0.1)
    assert (case.per_call, case.concurrent, case.worst) == (36, 30, 5_000 + 30 * 36)
    assert case.worst_amount == Decimal("6.080")
    assert case.to_output()["worst"] == 6.08 and case.to_output()["perCall"] == 0.036


def test_unbounded_names_what_to_set():
    rules = compile_rules(spec("default", LimitSpec("tokens", 500, "Day")), [], exclusion_slots=1, limit_slots=1)
    [case] = worst_cases(rules, [call_bound(route(context_window=None), PRICES, 200)], 0.1)
    assert case.worst is None
    assert case.to_output()["unbounded"] == (
        "set routes[0].contextWindow; add a calls limit to budgets.default.limits, e.g. {calls: 60, per: Minute} "
        "(with budgetPolicy.limitSlots 2)"
    )


def test_a_budget_with_only_a_calls_limit_has_nothing_to_bound():
    rules = compile_rules(
        spec("default", LimitSpec("tokens", 500, "Day")),
        [spec("paced", LimitSpec("calls", 5, "Minute"), actors=("a/b",))],
        exclusion_slots=1,
        limit_slots=1,
    )
    [case] = budget_worst_cases(rules, [call_bound(route(), PRICES, 200)], 0.1, 1)
    assert case.to_output()["unbounded"] == "budgets.classes[0] has no tokens or usd limit: add one"
    assert case.rule is None and case.worst is None


def test_a_route_with_an_override_is_priced_at_the_override_s_price():
    """Agent Router prices a call by the name it sends upstream (core/money.py `billed_models`): the worst case
    of a usd limit uses that price, not the names agents send."""
    from core.validation import validate_stack
    from core.worst_case import route_facts, stack_worst_cases

    stack = validate_stack(
        {
            "actors": ["agents/a"],
            "budgets": {"default": {"limits": [{"usd": 1, "per": "Day"}, {"calls": 2, "per": "Hour"}]}},
            "budgetPolicy": {"limitSlots": 2},
            "providers": [{"name": "openai", "kind": "openai"}],
            "routes": [
                {
                    "name": "alias",
                    "models": ["cheap-alias"],
                    "provider": "openai",
                    "modelNameOverride": "dear-model",
                    "maxOutputTokens": 100,
                    "contextWindow": 1_000,
                }
            ],
            "prices": {"cheap-alias": {"input": 0.1, "output": 0.1}, "dear-model": {"input": 10, "output": 100}},
            "gateway": {"refuseDuplicateKeys": True},
            "substrate": {"egress": {"enabled": False}},
        },
        lambda key: (True, True),
    )
    [facts] = route_facts(stack.settings)
    assert facts.models == ("dear-model",)
    [case] = stack_worst_cases(stack.settings, stack.rules)
    assert case.per_call == call_cost_mills(ModelPrice.of(input=10, output=100), Usage(900, 0, 0, 100))

"""Enforcement as upstream implements it (tests/support/enforcement.py), against the program's worst case.

The simulation runs the policy and the route the program emits through envoyproxy/ratelimit's semantics (check
at cost 0, increment then compare, refuse only above the limit, one counter per fixed window), Envoy's check
and stream-done descriptors with the rate-limit service's answer times, and Agent Router's usage reports (at
the end of a stream, and from v1.2 on every chunk with usage), each cost evaluated from the route's own
`llmRequestCosts` (its CEL expression run with Google's CEL). It reproduces the example write-up's
floor(N/C) + 1 calls, shows each kind of unfinished call, and, over 2,000 seeded runs of randomized concurrent
workloads (half with the actors of one limit following the schedule that overshoots it the most), never exceeds
core/worst_case.py's bound and comes within one call of each, so the bound is neither too low nor loose: for a
budget's limits, a per-model limit (the calls carry the model name Agent Router sets in `x-ai-eg-model`), a
pool of two members charging one counter together, calls per Second, and a limit bounded by the calls one
window can be charged.
"""

from __future__ import annotations

import pytest

from core.budget_rules import COST_METADATA_KEY
from core.money import USD_METADATA_KEY, ModelPrice, Usage, call_cost_mills
from tests.support.enforcement import (
    BOUNDED_STACK,
    RUNS,
    SEED,
    Call,
    Gateway,
    ReportedCosts,
    Scenario,
    bounded_scenario,
    reported_usage,
    run_calls,
    simulate,
)
from tests.support.program import stack_config

NOW = 1_796_061_600  # 2026-11-30T18:00:00Z


def mock_call(actor: str, start: float, duration: float = 1.0) -> Call:
    """A dev-stack call: the mock reports 200 tokens (50 in, 150 out) for every call."""
    return Call(actor, start, duration, Usage(input_tokens=50, output_tokens=150))


def dev_gateway() -> tuple[Scenario, Gateway]:
    config = stack_config("dev")
    config["routes"] = [{**route, "contextWindow": 8000, "maxOutputTokens": 1000} for route in config["routes"]]
    config["routes"] = config["routes"][:1]
    scenario = Scenario.of("dev", config)
    return scenario, scenario.gateway()


def test_one_call_at_a_time_gets_floor_n_over_c_plus_one_calls():
    """The write-up: 500 tokens a day at 200 a call admits three calls, and the fourth gets 429."""
    scenario, gateway = dev_gateway()
    calls = [mock_call("agents/actor-a", NOW + 10 * i) for i in range(5)]
    result = run_calls(gateway, calls, scenario.costs)
    assert (result.admitted, result.refused) == (3, 2)
    assert result.charged == {0: 600}


def test_calls_at_the_same_time_are_all_admitted_before_any_is_charged():
    """Ten calls at once against 500 tokens: all ten run, and the day ends at 2,000 (the overshoot)."""
    scenario, gateway = dev_gateway()
    calls = [mock_call("agents/actor-a", NOW + i / 100, 30.0) for i in range(10)]
    result = run_calls(gateway, calls, scenario.costs)
    assert (result.admitted, result.refused, result.charged) == (10, 0, {0: 2000})


def test_a_calls_limit_adds_one_then_compares_and_counts_refused_calls():
    """ratelimit increments every descriptor before it compares: the sixth call of a minute is refused, counted,
    and charges nothing; the tokens counter is only checked (cost 0) on the way in."""
    scenario = bounded_scenario()
    gateway = scenario.gateway()
    actor = "agents/agent-2"  # in no pool
    admitted = [gateway.admit(actor, NOW + i) for i in range(7)]
    assert admitted == [True] * 5 + [False, False]
    calls_rule = next(r for r in scenario.rules.rules_of_budget(0) if r.unit == "calls").index
    tokens_rule = next(r for r in scenario.rules.rules_of_budget(0) if r.unit == "tokens").index
    assert gateway.charged_by_rule() == {calls_rule: 7, tokens_rule: 0}, "a call naming no model: not gpt-y's limit"
    assert gateway.admit(actor, NOW + 60), "a new minute is a new window"


def test_a_check_is_refused_only_above_the_limit():
    """At exactly the limit one more call is admitted; one token over, none is."""
    scenario = bounded_scenario()
    gateway = scenario.gateway()
    actor = "agents/agent-1"
    assert gateway.admit(actor, NOW)
    gateway.charge(actor, NOW + 1, {COST_METADATA_KEY: 20_000})
    assert gateway.admit(actor, NOW + 2)
    gateway.charge(actor, NOW + 3, {COST_METADATA_KEY: 1})
    assert not gateway.admit(actor, NOW + 4)


@pytest.mark.parametrize(
    ("schema", "outcome", "version", "charged"),
    [
        ("OpenAI", "complete", "v1.2", 4_000),
        ("OpenAI", "cancelled", "v1.2", None),  # usage only in the last chunk
        ("Anthropic", "cancelled", "v1.2", 3_000),  # message_start carried the input usage
        ("Anthropic", "cancelled", "v1.1", None),  # v1.1 writes costs at the end only
        ("Anthropic", "error", "v1.2", None),  # a non-2xx answer writes no costs
    ],
)
def test_unfinished_calls_are_charged_what_agent_router_reported(schema, outcome, version, charged):
    """Each metadata value is the route's own cost entry: total tokens, and its CEL expression, which prices
    gpt-x at $2 per million input and $40 per million output tokens (BOUNDED_STACK), in mills rounded up."""
    scenario = bounded_scenario()
    call = Call("agents/agent-0", NOW, 5.0, Usage(input_tokens=3_000, output_tokens=1_000), schema, outcome)
    usage = reported_usage(call, version)
    assert (None if usage is None else usage.input_tokens + usage.output_tokens) == charged
    if usage is not None:
        costs = ReportedCosts(scenario.costs, usage, "gpt-x")
        assert costs[COST_METADATA_KEY] == charged
        expected = call_cost_mills(ModelPrice.of(input=2, output=40), usage)
        assert costs[USD_METADATA_KEY] == expected == (46 if outcome == "complete" else 6)


def test_a_charge_lands_in_the_window_that_holds_the_end_of_the_call():
    """A call checked in one hour and ending in the next charges the next hour's counter."""
    scenario = bounded_scenario()
    gateway = scenario.gateway()
    end_of_hour = NOW + 3600 - 5
    call = Call("agents/agent-2", end_of_hour, 20.0, Usage(input_tokens=3_000, output_tokens=1_000))
    run_calls(gateway, [call], scenario.costs)
    [(_, window)] = [key for key, value in gateway.counters.items() if value == 4_000]
    assert window == NOW + 3600


def test_the_scenario_s_bounds_are_the_stack_output():
    """The bounds the simulation checks are what `worstCase` shows for BOUNDED_STACK. A call is at most 4,000
    tokens, or $0.046 (3,000 input and 1,000 output tokens); the lifetime is 50 s plus twice 0.1 s.
    default: 5 calls a Minute, two minutes at once: 20,000 + 10 x 4,000, and 8,000 + 10 x 4,000 on gpt-y.
    pair: 10 a Minute: 50,000 + 20 x 4,000, and $0.50 + 20 x $0.046. paced: 1 a Second, 52 seconds at once:
    30,000 + 52 x 4,000. minute: 3 a Minute charged into a Minute, that minute's and the one before: 6 x 4,000,
    far below 1,000,000. The pool: its two members run 2 x 10 at once: 30,000 + 20 x 4,000."""
    scenario = bounded_scenario()
    assert [case.budget for case in scenario.worst] == [
        "default",
        "default",
        "class:pair",
        "class:pair",
        "class:paced",
        "class:minute",
        "pool:team",
    ]
    assert [case.to_output()["worst"] for case in scenario.worst] == [
        60_000,
        48_000,
        130_000,
        1.42,
        238_000,
        24_000,
        110_000,
    ]
    assert [case.concurrent for case in scenario.worst] == [10, 10, 20, 20, 52, 6, 20]
    assert scenario.worst[5].calls == 6
    assert BOUNDED_STACK["routes"][0]["contextWindow"] == scenario.window


@pytest.fixture(scope="module")
def observations():
    return simulate(SEED, RUNS)


def test_no_randomized_run_exceeds_the_bound(observations):
    assert RUNS >= 2_000
    assert len(observations) == 7
    assert [o.models for o in observations if o.models] == [("gpt-y",)]
    for observation in observations:
        assert observation.worst_seen <= observation.bound, observation


def test_the_bound_is_tight_some_run_comes_within_one_call_of_it(observations):
    """Within one call of the dearest kind of every bound: a bound one call too high fails here."""
    for observation in observations:
        assert observation.bound - observation.worst_seen < observation.per_call, observation
        assert observation.ratio >= 0.9, observation


def test_random_workloads_alone_stay_within_the_bound_too(observations):
    for observation in observations:
        assert 0 < observation.worst_random <= observation.worst_seen, observation

"""Enforcement as upstream implements it (tests/support/enforcement.py), against the program's worst case.

The simulation runs the policy the program emits through envoyproxy/ratelimit's semantics (check at cost 0,
increment then compare, refuse only above the limit, one counter per fixed window), Envoy's check and
stream-done descriptors, and Agent Router's usage reports (at the end of a stream, and from v1.2 on every
chunk with usage). It reproduces the example write-up's floor(N/C) + 1 calls, shows each kind of unfinished
call, and, over 2,000 seeded runs of randomized concurrent workloads, never exceeds core/worst_case.py's
bound while reaching at least 90% of it: for a budget's limits, a per-model limit (the calls carry the model
name Agent Router sets in `x-ai-eg-model`) and a pool of two members charging one counter together.
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
    Scenario,
    bounded_scenario,
    reported_costs,
    run_calls,
    simulate,
)
from tests.support.program import stack_config

NOW = 1_796_061_600  # 2026-11-30T18:00:00Z
PRICE = ModelPrice.of(input=2, output=40)


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
    _, gateway = dev_gateway()
    calls = [mock_call("agents/actor-a", NOW + 10 * i) for i in range(5)]
    result = run_calls(gateway, calls, None)
    assert (result.admitted, result.refused) == (3, 2)
    assert result.charged == {0: 600}


def test_calls_at_the_same_time_are_all_admitted_before_any_is_charged():
    """Ten calls at once against 500 tokens: all ten run, and the day ends at 2,000 (the overshoot)."""
    _, gateway = dev_gateway()
    result = run_calls(gateway, [mock_call("agents/actor-a", NOW + i / 100, 30.0) for i in range(10)], None)
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
    call = Call("agents/agent-0", NOW, 5.0, Usage(input_tokens=3_000, output_tokens=1_000), schema, outcome)
    costs = reported_costs(call, PRICE, version)
    assert (None if costs is None else costs[COST_METADATA_KEY]) == charged
    if costs is not None:
        usage = Usage(input_tokens=3_000, output_tokens=1_000 if outcome == "complete" else 0)
        assert costs[USD_METADATA_KEY] == call_cost_mills(PRICE, usage)


def test_a_charge_lands_in_the_window_that_holds_the_end_of_the_call():
    """A call checked in one hour and ending in the next charges the next hour's counter."""
    scenario = bounded_scenario()
    gateway = scenario.gateway()
    end_of_hour = NOW + 3600 - 5
    call = Call("agents/agent-2", end_of_hour, 20.0, Usage(input_tokens=3_000, output_tokens=1_000))
    run_calls(gateway, [call], scenario.price)
    [(_, window)] = [key for key, value in gateway.counters.items() if value == 4_000]
    assert window == NOW + 3600


def test_the_scenario_s_bounds_are_the_stack_output():
    """The bounds the simulation checks are what `worstCase` shows for BOUNDED_STACK."""
    scenario = bounded_scenario()
    assert [case.budget for case in scenario.worst] == ["default", "default", "class:pair", "class:pair", "pool:team"]
    assert [case.to_output()["worst"] for case in scenario.worst] == [60_000, 48_000, 130_000, 1.42, 110_000]
    # 2N: a 50.2 s lifetime, calls per Minute; the pool's two members run 2 x 10 at once.
    assert [case.concurrent for case in scenario.worst] == [10, 10, 20, 20, 20]
    assert BOUNDED_STACK["routes"][0]["contextWindow"] == scenario.window


@pytest.fixture(scope="module")
def observations():
    return simulate(SEED, RUNS)


def test_no_randomized_run_exceeds_the_bound(observations):
    assert RUNS >= 2_000
    assert len(observations) == 5
    assert {o.budget for o in observations} == {"default", "class:pair", "pool:team"}
    assert [o.models for o in observations if o.models] == [("gpt-y",)]
    for observation in observations:
        assert observation.worst_seen <= observation.bound, observation


def test_the_bound_is_tight_some_run_reaches_ninety_percent(observations):
    for observation in observations:
        assert observation.ratio >= 0.9, observation


def test_the_boundary_term_is_needed_one_calls_window_would_not_bound_it(observations):
    """amount + N x C (counting one window of the calls limit) is exceeded: N calls just before a boundary of the
    calls window and N just after all run at once, so the bound counts two windows."""
    scenario = bounded_scenario()
    for observation, case in zip(observations, scenario.worst, strict=True):
        assert case.concurrent is not None and case.per_call is not None
        naive = observation.amount + case.concurrent // 2 * case.per_call
        assert observation.worst_seen > naive, observation

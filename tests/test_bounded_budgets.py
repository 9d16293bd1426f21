"""A budget an agent cannot outrun, through the real program: per-route output ceilings, request timeouts,
calls limits and the stack output `worstCase`.

A stack whose routes set `maxOutputTokens`, `contextWindow` and `requestTimeout`, and whose budgets carry a
calls limit, must produce: the bodyMutation on each route's backendRef in the field its backend's schema reads,
the rule's timeout, a per-actor request-count rule (cost 1 on the request, Distinct `x-actor-id`) in the
budget's next limit slot, and a bounded `worstCase` in the stack outputs. tests/test_schemas.py validates the
objects of this configuration (its `bounded` variant) against the pinned CRDs, with their CEL rules.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.ratelimit_model import PolicyModel
from tests.support.program import ProgramRun, run_program, stack_config

KEYS = {"openaiApiKey": "sk-bounded-openai-0123456789", "anthropicApiKey": "sk-ant-bounded-abcdef"}


def bounded_config() -> dict[str, Any]:
    config = copy.deepcopy(stack_config("dev"))
    config["providers"] = [{"name": "openai", "kind": "openai"}, {"name": "anthropic", "kind": "anthropic"}]
    config["routes"] = [
        {
            "name": "gpt",
            "models": ["gpt-4.1"],
            "provider": "openai",
            "maxOutputTokens": 4096,
            "contextWindow": 128_000,
            "requestTimeout": "5m",
        },
        {
            "name": "claude",
            "models": ["claude-sonnet-4-5"],
            "provider": "anthropic",
            "maxOutputTokens": 8192,
            "contextWindow": 200_000,
        },
    ]
    config["budgets"] = {
        "default": {"limits": [{"tokens": 500_000, "per": "Day"}, {"calls": 30, "per": "Hour"}]},
        "classes": [
            {
                "name": "paid",
                "limits": [{"usd": 5, "per": "Day"}, {"calls": 10, "per": "Minute"}],
                "actors": ["agents/actor-b"],
            }
        ],
    }
    config["budgetPolicy"] = {"limitSlots": 2}
    config["prices"] = {
        "gpt-4.1": {"input": 2, "cachedInput": 0.5, "output": 8},
        "claude-sonnet-4-5": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15},
    }
    return config


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program(bounded_config(), secrets=KEYS)


def route_spec(run: ProgramRun, name: str) -> dict[str, Any]:
    return next(r for r in run.of_kind("AIGatewayRoute") if r.inputs["metadata"]["name"] == name).inputs["spec"]


def test_each_route_writes_its_ceiling_in_the_field_its_schema_reads(run):
    [gpt_ref] = route_spec(run, "gpt")["rules"][0]["backendRefs"]
    assert gpt_ref["bodyMutation"] == {
        "set": [{"path": "max_completion_tokens", "value": "4096"}, {"path": "n", "value": "1"}],
        "remove": ["max_tokens"],
    }
    [claude_ref] = route_spec(run, "claude")["rules"][0]["backendRefs"]
    assert claude_ref["bodyMutation"] == {"set": [{"path": "max_tokens", "value": "8192"}]}


def test_a_route_timeout_is_written_only_when_set(run):
    assert route_spec(run, "gpt")["rules"][0]["timeouts"] == {"request": "5m"}
    assert "timeouts" not in route_spec(run, "claude")["rules"][0], "Agent Router's own 60s applies"


def test_a_calls_limit_is_a_per_actor_request_count_rule_in_its_budget_s_slot(run):
    btp = run.one("BackendTrafficPolicy")
    rules = btp.inputs["spec"]["rateLimit"]["global"]["rules"]
    default_calls, paid_calls = rules[1], rules[3]
    for rule, requests, unit in ((default_calls, 30, "Hour"), (paid_calls, 10, "Minute")):
        assert rule["limit"] == {"requests": requests, "unit": unit}
        assert rule["cost"] == {"request": {"from": "Number", "number": 1}}
        assert rule["shared"] is True
        assert rule["clientSelectors"][0]["headers"][0] == {"name": "x-actor-id", "type": "Distinct"}
    model = PolicyModel("agent-budgets", "agent-budgets", rules)
    assert [r.index for r in model.for_actor("actor/agents/actor-a")] == [0, 1]
    assert [r.index for r in model.for_actor("actor/agents/actor-b")] == [2, 3]


def test_the_worst_case_of_every_limit_is_a_stack_output(run):
    """Default: 30 calls an Hour with a 300.2 s lifetime: 60 at once, of at most 200,000 tokens. The class:
    10 calls a Minute, a lifetime of six minutes: 70 at once, each at most $0.8052 (200,000 tokens, 8,192 of
    them output at $15, the rest input at $3.75, Claude's cache-write price)."""
    default, paid = run.outputs["worstCase"]
    assert default == {
        "budget": "default",
        "rule": 0,
        "limit": 0,
        "unit": "tokens",
        "amount": 500_000,
        "per": "Day",
        "perCall": 200_000,
        "concurrentCalls": 60,
        "callsPerWindow": 30 * 25,  # the day's 24 hours and the one its first call may start in
        "worst": 500_000 + 60 * 200_000,
        "unbounded": None,
    }
    per_call = -(-(8_192 * 15_000_000 + (200_000 - 8_192) * 3_750_000) // 10**9)
    assert per_call == 843
    assert (paid["perCall"], paid["concurrentCalls"], paid["worst"]) == (0.843, 70, (5_000 + 70 * per_call) / 1000)

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
    # Without the duplicate-key guard a body that repeats `n` escapes the OpenAI route's ceiling (core/ceilings.py).
    config["gateway"] = {**config.get("gateway", {}), "refuseDuplicateKeys": True}
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
        "ceilingBypass": None,
    }
    per_call = -(-(8_192 * 15_000_000 + (200_000 - 8_192) * 3_750_000) // 10**9)
    assert per_call == 843
    assert (paid["perCall"], paid["concurrentCalls"], paid["worst"]) == (0.843, 70, (5_000 + 70 * per_call) / 1000)


def test_the_guard_turns_lua_on_in_envoy_gateway_and_puts_one_policy_on_the_gateway(run):
    """Envoy Gateway v1.9.0 fails every route a Lua policy targets while `extensionApis.enableLua` is off
    (internal/gatewayapi/envoyextensionpolicy.go), so the values and the policy come together."""
    [release] = [r for r in run.of_kind("Release") if r.inputs["name"] == "eg"]
    assert release.inputs["values"]["config"]["envoyGateway"]["extensionApis"]["enableLua"] is True
    [guard] = run.of_kind("EnvoyExtensionPolicy")
    assert guard.inputs["metadata"]["name"] == "agent-budgets-body-guard"
    assert [entry["type"] for entry in guard.inputs["spec"]["lua"]] == ["Inline"]


def test_without_the_guard_the_worst_case_says_which_ceiling_a_repeated_key_escapes():
    """The ceiling is a bodyMutation that ai-gateway v1.1.0 writes with sjson into the first copy of a key
    (internal/bodymutator/body_mutator.go, internal/extproc/util.go `applyBodyMutation`), and the pass-through
    translators forward the client's other copies (internal/translator/openai_openai.go, anthropic_anthropic.go):
    `{"max_completion_tokens": 1, "max_completion_tokens": 100000, "n": 1, "n": 8}` keeps 100,000 and 8. So
    without `gateway.refuseDuplicateKeys` the default budget (served by the OpenAI route too) is unbounded, and
    the class's usd limit on Claude is priced at 200,000 output tokens at $15 ($3.00 a call, 30 at once: Claude's
    route keeps the 60 s timeout), not 8,192. Neither the policy nor Lua is there. Before the fix the default was
    bounded at 12,500,000 tokens and the class at $30.29 (30 calls of $0.843)."""
    config = bounded_config()
    del config["gateway"]["refuseDuplicateKeys"]
    config["budgets"]["classes"][0]["limits"][0] = {"usd": 5, "per": "Day", "models": ["claude-sonnet-4-5"]}
    unguarded = run_program(config, secrets=KEYS)
    default, paid = unguarded.outputs["worstCase"]
    assert (default["worst"], default["unbounded"]) == (None, "set gateway.refuseDuplicateKeys")
    assert default["ceilingBypass"] == (
        "routes[0] (gpt): a body that repeats n or max_completion_tokens keeps its own last copy (the ceiling is "
        "written into the first): no bound (set gateway.refuseDuplicateKeys); "
        "routes[1] (claude): a body that repeats max_tokens keeps its own last copy (the ceiling is written into the "
        "first): output up to routes[1].contextWindow (set gateway.refuseDuplicateKeys)"
    )
    assert (paid["perCall"], paid["concurrentCalls"], paid["worst"]) == (3.0, 30, 5 + 30 * 3.0)
    assert paid["ceilingBypass"] == default["ceilingBypass"].split("; ")[1]
    assert unguarded.of_kind("EnvoyExtensionPolicy") == []
    [release] = [r for r in unguarded.of_kind("Release") if r.inputs["name"] == "eg"]
    assert "enableLua" not in release.inputs["values"]["config"]["envoyGateway"]["extensionApis"]

"""Pools, per-model limits and token kinds as a stack writes them: the typical asks of the issue through the real
program, and every configuration that cannot be enforced refused in the one report.

The asks (docs/budgets.md, "Pools, per-model limits and token kinds"):

* "the research agents together may spend $200 a day, each at most $20": a $20 default and a pool of the whole
  `research` atespace at $200;
* "every agent may use the mini model freely but the large model for at most $2 a day": a per-model usd limit
  on `gpt-4.1`, the name agents send (the `x-ai-eg-model` header Agent Router sets before the rate-limit filter,
  envoyproxy/ai-gateway v1.1.0 `internal/extproc/processor_impl.go:282-290`);
* "cap output tokens per hour, whatever the prompt size": a tokens limit with `count: output`, charged from an
  `llmRequestCosts` entry of type OutputToken (`internal/filterapi/filterconfig.go`).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.problems import ConfigError
from core.ratelimit_model import PolicyModel
from core.validation import validate_stack
from tests.support.program import run_program

OPENAI_KEY = "sk-test-openai-0123456789"
SECRETS = {"openaiApiKey": OPENAI_KEY}

TEAM_CONFIG: dict[str, Any] = {
    "actors": ["research/r1", "research/r2", "research/r3", "agents/coder-1", "agents/support-1"],
    "providers": [{"name": "openai", "kind": "openai"}],
    "routes": [
        {
            "name": "gpt",
            "models": ["gpt-4.1", "gpt-4.1-mini"],
            "provider": "openai",
            "maxOutputTokens": 4_000,
            "contextWindow": 100_000,
        },
        {
            "name": "cheap",
            "models": ["cheap"],
            "provider": "openai",
            "modelNameOverride": "gpt-4.1-nano",
            "maxOutputTokens": 4_000,
            "contextWindow": 100_000,
        },
    ],
    "prices": {
        "gpt-4.1": {"input": 2.00, "cachedInput": 0.50, "output": 8.00},
        "gpt-4.1-mini": {"input": 0.40, "cachedInput": 0.10, "output": 1.60},
        "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    },
    "budgets": {
        "default": {
            "limits": [
                {"usd": 20, "per": "Day"},
                {"usd": 2, "per": "Day", "models": ["gpt-4.1"]},
                {"tokens": 100_000, "per": "Hour", "count": "output"},
                {"calls": 60, "per": "Minute"},
            ]
        },
        "pools": [{"name": "research", "atespaces": ["research"], "limits": [{"usd": 200, "per": "Day"}]}],
    },
    "budgetPolicy": {"limitSlots": 4},
    # The duplicate-key guard, without which a body that repeats `n` escapes the ceilings (core/ceilings.py).
    "gateway": {"refuseDuplicateKeys": True},
    "substrate": {"egress": {"enabled": False}},
}


def team_config(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(TEAM_CONFIG)
    config.update(changes)
    return config


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate_stack(config, lambda key: (True, True))
    return {problem.key: problem.message for problem in caught.value.problems}


@pytest.fixture(scope="module")
def run():
    return run_program(team_config(), secrets=SECRETS)


def test_the_typical_asks_compile_to_the_rules_they_mean(run):
    btp = run.one("BackendTrafficPolicy").inputs
    assert btp["metadata"]["annotations"] == {
        "agent-budgets.dev/limit-slots": "4",
        "agent-budgets.dev/class-slots": "0",
    }
    rules = btp["spec"]["rateLimit"]["global"]["rules"]
    assert [rule["limit"] for rule in rules] == [
        {"requests": 20_000, "unit": "Day"},
        {"requests": 2_000, "unit": "Day"},
        {"requests": 100_000, "unit": "Hour"},
        {"requests": 60, "unit": "Minute"},
        {"requests": 200_000, "unit": "Day"},
    ], "the default's four limits, then the pool (its unused second slot is trailing: left out)"
    model = PolicyModel("agent-budgets", "agent-budgets", rules)

    def charged(actor: str, model_name: str) -> list[int]:
        return [r.index for r in model.applied({"x-actor-id": f"actor/{actor}", "x-ai-eg-model": model_name})]

    assert charged("research/r1", "gpt-4.1-mini") == [0, 2, 3, 4]
    assert charged("research/r1", "gpt-4.1") == [0, 1, 2, 3, 4]
    assert charged("agents/coder-1", "gpt-4.1") == [0, 1, 2, 3], "not in the research pool"
    assert charged("research/created-later", "cheap") == [0, 2, 3, 4], "a new research actor is in the pool"
    keys = {model.applied({"x-actor-id": f"actor/research/{a}"})[-1].counter_key(0) for a in ("r1", "r2", "new")}
    assert len(keys) == 1, "the research agents share the pool's one counter"


def test_every_route_reports_what_the_rules_charge(run):
    for route in run.of_kind("AIGatewayRoute"):
        costs = route.inputs["spec"]["llmRequestCosts"]
        assert [(c["metadataKey"], c["type"]) for c in costs] == [
            ("llm_total_token", "TotalToken"),
            ("llm_output_token", "OutputToken"),
            ("agent_budgets_usd_mills", "CEL"),
        ]


def test_the_outputs_describe_the_pool_and_its_worst_case(run):
    summary = run.outputs["budgetRules"]
    assert summary[1] == {
        "rule": 1,
        "budget": "default",
        "limit": 1,
        "unit": "usd",
        "amount": 2.0,
        "per": "Day",
        "models": ["gpt-4.1"],
        "requests": 2_000,
        "members": 0,
    }
    assert summary[2]["count"] == "output"
    assert summary[4] == {
        "rule": 4,
        "budget": "pool:research",
        "limit": 0,
        "unit": "usd",
        "amount": 200.0,
        "per": "Day",
        "requests": 200_000,
        "members": 0,
        "atespaces": ["research"],
    }
    cases = {(case["budget"], case["limit"]): case for case in run.outputs["worstCase"]}
    pool = cases[("pool:research", 0)]
    assert pool["worst"] is None, "an atespace pool's members are not all listed: only its own calls limit bounds it"
    assert pool["unbounded"] == "add a calls limit to budgets.pools[0].limits, e.g. {calls: 60, per: Minute}"
    assert cases[("default", 2)]["perCall"] == 4_000, "an output-tokens limit: at most the ceiling a call"


def test_a_per_model_limit_is_bounded_by_the_routes_serving_its_models():
    """The dearest gpt call: 96,000 input tokens at $2 and 4,000 output at $8 per 1M, $0.224; the dearest call of
    `cheap` (billed as gpt-4.1-nano): 96,000 at $0.10 and 4,000 at $0.40, $0.0112, rounded up to $0.012."""
    budgets = copy.deepcopy(TEAM_CONFIG["budgets"])
    budgets["default"]["limits"][1]["models"] = ["cheap"]
    stack = validate_stack(team_config(budgets=budgets), lambda key: (True, True))
    from core.worst_case import stack_worst_cases

    every, cheap = stack_worst_cases(stack.settings, stack.rules)[:2]
    assert (every.per_call, cheap.per_call) == (224, 12)
    assert cheap.worst == min(2_000 + cheap.concurrent * 12, cheap.calls * 12)


def test_a_pool_of_listed_members_is_bounded_by_their_own_calls_limits():
    pools = [{"name": "pair", "members": ["agents/coder-1", "agents/support-1"], "limits": [{"usd": 50, "per": "Day"}]}]
    stack = validate_stack(team_config(budgets={**TEAM_CONFIG["budgets"], "pools": pools}), lambda key: (True, True))
    from core.worst_case import stack_worst_cases

    cases = {(case.budget, case.limit_index): case for case in stack_worst_cases(stack.settings, stack.rules)}
    own, pool = cases[("default", 0)], cases[("pool:pair", 0)]
    assert pool.concurrent == 2 * own.concurrent, "two members, each as many calls at once as its own budget allows"
    assert pool.worst == min(50_000 + pool.concurrent * pool.per_call, pool.calls * pool.per_call)


def test_pool_and_model_limit_problems_are_all_in_one_report():
    config = team_config()
    config["budgets"] = {
        "default": {"limits": [{"usd": 5, "per": "Day", "models": ["gpt-4.1-nano"]}, {"tokens": 9, "per": "Day"}]},
        "classes": [{"name": "c", "usd": 1, "per": "Day", "count": "output", "actors": ["agents/coder-1"]}],
        "pools": [
            {"name": "research", "members": ["research/r9"], "limits": [{"tokens": 9, "per": "Day", "models": ["o9"]}]},
            {"name": "research", "atespaces": ["Research"], "limits": [{"tokens": 9, "per": "Day", "models": []}]},
            {"name": "dup", "atespaces": ["lab", "lab"], "limits": [{"calls": 9, "per": "Day", "models": ["a", "a"]}]},
        ],
    }
    config["budgetPolicy"] = {"limitSlots": 2, "classSlots": 1}
    problems = problems_of(config)
    assert problems["budgets.default.limits[0].models[0]"] == (
        "'gpt-4.1-nano': routes[1] sends calls upstream as 'gpt-4.1-nano' (modelNameOverride), but the rate limit sees "
        "the name the agent sent: count the names of routes[1].models instead"
    )
    assert problems["budgets.pools[0].limits[0].models[0]"].startswith("'o9': no route serves it")
    assert problems["budgets.pools[0].members[0]"] == (
        "'research/r9' (pool 'research') is not in agent-budgets:actors: add it there first"
    )
    assert "count 'output' on a usd limit" in problems["budgets.classes[0]"]
    assert "'research' is used twice (also pools[0]): pool names must be unique" in problems["budgets.pools[1].name"]
    assert "not a DNS label" in problems["budgets.pools[1].atespaces"]
    assert "is empty: list the model names" in problems["budgets.pools[1].limits[0].models"]
    assert "lists 'lab' twice" in problems["budgets.pools[2].atespaces"]
    assert "lists 'a' twice" in problems["budgets.pools[2].limits[0].models"]


def test_too_few_class_slots_is_reported_with_the_rest():
    config = team_config(actors=["research/r1", "agents/x", "agents/x"])
    config["budgets"] = {
        **config["budgets"],
        "classes": [{"name": "c", "tokens": 9, "per": "Day", "actors": ["agents/x"]}],
    }
    problems = problems_of(config)
    assert problems["budgetPolicy.classSlots"].startswith("is 0, but budgets.classes has 1 classes")
    assert "actors[2]" in problems


def test_an_atespace_nobody_is_in_and_a_redundant_member_are_warned_about():
    pools = [
        {
            "name": "lab",
            "atespaces": ["lab", "research"],
            "members": ["research/r1"],
            "limits": [{"usd": 9, "per": "Day"}],
        }
    ]
    stack = validate_stack(team_config(budgets={**TEAM_CONFIG["budgets"], "pools": pools}), lambda key: (True, True))
    warnings = {warning.key: warning.message for warning in stack.warnings}
    assert warnings["budgets.pools[0].atespaces[0]"].startswith("no actor of agent-budgets:actors is in atespace 'lab'")
    assert warnings["budgets.pools[0].members[0]"].startswith(
        "'research/r1' is in the pool already through atespace 'research'"
    )

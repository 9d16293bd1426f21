"""Budgets in money, several windows per budget and suspended actors, through the real program.

The configuration below is the issue's contract: `prices`, a short-form default, a class with a `limits`
list, `suspended`. The program must turn it into: a CEL cost on every route (evaluated here on usage
samples), one rate-limit rule per limit, a SecurityPolicy that denies the suspended actor's `sub`
(Envoy Gateway v1.9.0 api/v1alpha1/authorization_types.go, first match, defaultAction Allow), and a
responseOverride that gives that 403 a body saying so. Every bad input of the issue is refused before
anything is registered, with its key, the bad value and the fix.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pulumi
import pytest

from core import manifests
from core.budget_rules import COST_METADATA_KEY
from core.money import USD_METADATA_KEY, Usage
from core.problems import ConfigError
from core.suspension import (
    SUSPENDED_BODY,
    budget_spent_response_override,
    one_actor_id_rule,
    suspension_response_overrides,
)
from core.validation import validate_stack
from tests.support.agent_router_cel import Call, CostExpressionRefusedError, model_as_agent_router_sets_it
from tests.support.agent_router_cel import evaluate as evaluate_call
from tests.support.program import RecordingMocks, run_program, stack_config

OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-abcdefghij"
SECRETS = {"openaiApiKey": OPENAI_KEY, "anthropicApiKey": ANTHROPIC_KEY}

ISSUE_CONFIG: dict[str, Any] = {
    "actors": ["agents/actor-a", "agents/actor-b", "agents/actor-c"],
    "providers": [{"name": "openai", "kind": "openai"}, {"name": "anthropic", "kind": "anthropic"}],
    "routes": [
        {"name": "gpt", "models": ["gpt-4o"], "provider": "openai"},
        {"name": "claude", "models": ["claude-sonnet"], "provider": "anthropic"},
    ],
    "prices": {
        "gpt-4o": {"input": 2.50, "cachedInput": 1.25, "output": 10.00},
        "claude-sonnet": {"input": 3.00, "cachedInput": 0.30, "cacheWrite": 3.75, "output": 15.00},
    },
    "budgets": {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [
            {
                "name": "research",
                "limits": [
                    {"tokens": 200000, "per": "Hour"},
                    {"usd": 5, "per": "Day"},
                    {"usd": 50, "per": "Month"},
                ],
                "actors": ["agents/actor-b"],
            }
        ],
    },
    "budgetPolicy": {"limitSlots": 3},
    "suspended": ["agents/actor-c"],
}


def issue_config(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(ISSUE_CONFIG)
    config.update(changes)
    return config


@pytest.fixture(scope="module")
def run():
    return run_program(issue_config(), secrets=SECRETS)


def spec(run, kind: str, name: str | None = None) -> dict[str, Any]:
    return run.one(kind, name).inputs["spec"]


def evaluate(expression: str, model: str, **counts: int) -> int:
    """Mills Agent Router stores for a call whose `model` is `model` (tests/support/agent_router_cel.py)."""
    return evaluate_call(expression, Call(model=model, usage=Usage(**counts)))


def test_every_route_reports_tokens_and_the_price_in_mills(run):
    gpt = spec(run, "AIGatewayRoute", "gpt")["llmRequestCosts"]
    claude = spec(run, "AIGatewayRoute", "claude")["llmRequestCosts"]
    expected = [(COST_METADATA_KEY, "TotalToken"), (USD_METADATA_KEY, "CEL")]
    assert [(c["metadataKey"], c["type"]) for c in gpt] == expected
    assert [(c["metadataKey"], c["type"]) for c in claude] == expected
    # gpt-4o: 1,000 input + 500 output = $0.0025 + $0.005 = $0.0075 -> 8 mills (rounded up)
    assert evaluate(gpt[1]["cel"], "gpt-4o", input_tokens=1_000, output_tokens=500) == 8
    # claude-sonnet, cached: 200 fresh * 3 + 10,000 read * 0.30 + 1,000 written * 3.75 + 400 out * 15
    # = $0.0006 + $0.003 + $0.00375 + $0.006 = $0.01335 -> 14 mills
    usage = {"input_tokens": 11_200, "cached_input_tokens": 10_000, "cache_creation_input_tokens": 1_000}
    assert evaluate(claude[1]["cel"], "claude-sonnet", output_tokens=400, **usage) == 14


OVERRIDE_ROUTES = [
    {"name": "gpt", "models": ["gpt-4.1", "gpt-4.1-mini"], "provider": "openai", "modelNameOverride": "gpt-4.1-nano"},
    {"name": "claude", "models": ["claude-sonnet"], "provider": "anthropic"},
]
OVERRIDE_PRICES = {
    "claude-sonnet": ISSUE_CONFIG["prices"]["claude-sonnet"],
    "gpt-4.1-nano": {"input": 0.10, "cachedInput": 0.025, "output": 0.40},
}


def test_a_route_with_an_override_charges_the_override_models_price_for_each_model_it_serves():
    """`models: [a, b]` with `modelNameOverride: o`: Agent Router evaluates the CEL with `model` = o
    (processor_impl.go:706-709), so the program prices the route at o's price."""
    run = run_program(issue_config(routes=OVERRIDE_ROUTES, prices=OVERRIDE_PRICES), secrets=SECRETS)
    [_, usd] = spec(run, "AIGatewayRoute", "gpt")["llmRequestCosts"]
    override = OVERRIDE_ROUTES[0]["modelNameOverride"]
    # 1,000,000 input of which 400,000 cached, 100,000 output at gpt-4.1-nano's prices:
    # 600,000 * $0.10 + 400,000 * $0.025 + 100,000 * $0.40 = $0.06 + $0.01 + $0.04 = $0.11
    usage = {"input_tokens": 1_000_000, "cached_input_tokens": 400_000, "output_tokens": 100_000}
    for sent in OVERRIDE_ROUTES[0]["models"]:
        assert evaluate(usd["cel"], model_as_agent_router_sets_it(sent, override), **usage) == 110
    assert "gpt-4.1-mini" not in usd["cel"]


def test_prices_for_the_names_an_override_route_serves_change_nothing_it_charges():
    """The issue's case: gpt-4.1-mini and gpt-4.1 have prices of their own (5x apart), yet every call on the
    override route is charged gpt-4.1-nano's price, because that is the `model` Agent Router hands the CEL."""
    served = {"gpt-4.1": {"input": 2, "output": 8}, "gpt-4.1-mini": {"input": 0.4, "output": 1.6}}
    run = run_program(issue_config(routes=OVERRIDE_ROUTES, prices={**OVERRIDE_PRICES, **served}), secrets=SECRETS)
    [_, usd] = spec(run, "AIGatewayRoute", "gpt")["llmRequestCosts"]
    override = OVERRIDE_ROUTES[0]["modelNameOverride"]
    usage = {"input_tokens": 1_000_000, "cached_input_tokens": 400_000, "output_tokens": 100_000}
    # gpt-4.1-nano: $0.11 (above); gpt-4.1-mini would be $0.56, gpt-4.1 $2.80.
    for sent in OVERRIDE_ROUTES[0]["models"]:
        assert evaluate(usd["cel"], model_as_agent_router_sets_it(sent, override), **usage) == 110
    assert "gpt-4.1-mini" not in usd["cel"] and '"gpt-4.1"' not in usd["cel"]


def test_every_program_run_compiles_its_cost_expressions_as_agent_routers_controller_does(monkeypatch):
    """tests/support/program.py checks each generated CEL with Agent Router's declarations after every run, so a
    cost expression the controller would refuse (freezing the gateway) fails whichever test generated it."""

    def undeclared(billed: Any, prices: Any) -> dict[str, Any]:
        return {"metadataKey": USD_METADATA_KEY, "type": "CEL", "cel": "cache_creation_2h_input_tokens * 2u"}

    monkeypatch.setattr(manifests, "route_cost_entry", undeclared)
    with pytest.raises(CostExpressionRefusedError, match="undeclared reference"):
        run_program(issue_config(routes=OVERRIDE_ROUTES, prices=OVERRIDE_PRICES), secrets=SECRETS)


def test_a_route_with_an_override_and_no_price_for_it_is_refused_naming_the_key():
    prices = {
        "claude-sonnet": ISSUE_CONFIG["prices"]["claude-sonnet"],
        "gpt-4.1": {"input": 2, "output": 8},
        "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
    }
    config = issue_config(routes=OVERRIDE_ROUTES, prices=prices)
    [problem] = report(config).problems
    assert problem.key == "prices"
    for fragment in (
        "has no price for model 'gpt-4.1-nano'",
        "routes[0].modelNameOverride sends every call of that route upstream as 'gpt-4.1-nano'",
        "prices a call by the model name it sends upstream",
        "Add `gpt-4.1-nano: {input: <USD per 1M tokens>, output: <USD per 1M tokens>}` under agent-budgets:prices",
    ):
        assert fragment in problem.message, problem.message
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=re.escape("agent-budgets:prices: has no price for model 'gpt-4.1-nano'")):
        run_program(config, secrets=SECRETS, mocks=mocks)
    assert mocks.resources == []
    # The two unused prices are said in every preview, with the override that replaces them.
    validated = validate_stack(
        issue_config(routes=OVERRIDE_ROUTES, prices={**OVERRIDE_PRICES, **prices}), lambda key: (True, True)
    )
    assert {w.key: "the price of 'gpt-4.1-nano' applies" in w.message for w in validated.warnings} == {
        "prices.gpt-4.1": True,
        "prices.gpt-4.1-mini": True,
    }


def test_each_limit_is_a_rule_charging_its_own_metadata(run):
    rules = spec(run, "BackendTrafficPolicy")["rateLimit"]["global"]["rules"]
    assert [(r["limit"], r["cost"]["response"]["metadata"]["key"]) for r in rules] == [
        ({"requests": 500, "unit": "Day"}, COST_METADATA_KEY),
        ({"requests": 4_294_967_295, "unit": "Year"}, COST_METADATA_KEY),  # reserved slots of the default
        ({"requests": 4_294_967_295, "unit": "Year"}, COST_METADATA_KEY),
        ({"requests": 200_000, "unit": "Hour"}, COST_METADATA_KEY),
        ({"requests": 5_000, "unit": "Day"}, USD_METADATA_KEY),  # $5 in mills
        ({"requests": 50_000, "unit": "Month"}, USD_METADATA_KEY),
    ]


def test_outputs_describe_every_limit_and_the_suspended_actors(run):
    assert run.outputs["budgetRules"] == [
        {"rule": 0, "budget": "default", "limit": 0, "unit": "tokens", "amount": 500, "per": "Day",
         "requests": 500, "members": 0},
        {"rule": 3, "budget": "class:research", "limit": 0, "unit": "tokens", "amount": 200_000, "per": "Hour",
         "requests": 200_000, "members": 1},
        {"rule": 4, "budget": "class:research", "limit": 1, "unit": "usd", "amount": 5.0, "per": "Day",
         "requests": 5_000, "members": 1},
        {"rule": 5, "budget": "class:research", "limit": 2, "unit": "usd", "amount": 50.0, "per": "Month",
         "requests": 50_000, "members": 1},
    ]  # fmt: skip
    assert run.outputs["suspended"] == ["agents/actor-c"]


def test_the_suspended_actor_is_denied_by_its_jwt_subject(run):
    authorization = spec(run, "SecurityPolicy")["authorization"]
    assert authorization == {
        "defaultAction": "Allow",
        "rules": [
            one_actor_id_rule(),
            {
                "name": "suspended-actors-0",
                "action": "Deny",
                "principal": {
                    "jwt": {
                        "provider": "agent-substrate",
                        "claims": [{"name": "sub", "valueType": "String", "values": ["actor/agents/actor-c"]}],
                    }
                },
            },
        ],
    }
    provider_names = [p["name"] for p in spec(run, "SecurityPolicy")["jwt"]["providers"]]
    assert provider_names == ["agent-substrate"]


def test_the_suspension_403_says_so_and_a_wrong_audience_keeps_its_own_message(run):
    overrides = spec(run, "BackendTrafficPolicy")["responseOverride"]
    token, suspended, spent = overrides
    assert spent == budget_spent_response_override()
    assert token["match"]["responseHeaders"][0]["name"] == "www-authenticate"
    assert token["source"] == suspended["source"] == "Local"
    assert suspended["match"] == {"statusCodes": [{"type": "Value", "value": 403}]}
    body = json.loads(suspended["response"]["body"]["inline"])
    assert body["error"]["code"] == "actor_suspended"
    assert "suspended" in body["error"]["message"]
    assert "%" not in SUSPENDED_BODY, "Envoy would read a % as a command operator"


def test_without_money_or_suspension_the_routes_report_tokens_and_the_kill_switch_allows_everyone():
    """Nobody suspended: the authorization allows everyone and the 403 overrides stay, so the listener keeps
    its RBAC and custom_response filters and the first suspension changes route configuration only."""
    run = run_program(stack_config("dev"))
    for route in run.of_kind("AIGatewayRoute"):
        assert route.inputs["spec"]["llmRequestCosts"] == [{"metadataKey": COST_METADATA_KEY, "type": "TotalToken"}]
    assert spec(run, "SecurityPolicy")["authorization"] == {"defaultAction": "Allow", "rules": [one_actor_id_rule()]}
    assert spec(run, "BackendTrafficPolicy")["responseOverride"] == [
        *suspension_response_overrides(),
        budget_spent_response_override(),
    ]
    assert run.outputs["suspended"] == []


def test_lifting_a_suspension_changes_only_the_authorization_rules(run):
    lifted = run_program(issue_config(suspended=[]), secrets=SECRETS)
    assert spec(lifted, "SecurityPolicy")["authorization"] == {"defaultAction": "Allow", "rules": [one_actor_id_rule()]}
    before, after = spec(run, "SecurityPolicy"), spec(lifted, "SecurityPolicy")
    assert {key: value for key, value in after.items() if key != "authorization"} == {
        key: value for key, value in before.items() if key != "authorization"
    }
    assert spec(lifted, "BackendTrafficPolicy") == spec(run, "BackendTrafficPolicy"), "counter keys are positional"


# --- bad input: refused before anything is registered, with key, value and fix --------------------------


def report(config: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        validate_stack(config, lambda key: (True, True))
    return caught.value


def research(**limit_changes: Any) -> dict[str, Any]:
    budgets = copy.deepcopy(ISSUE_CONFIG["budgets"])
    budgets["classes"][0].update(limit_changes)
    return budgets


def with_limit(index: int, limit: dict[str, Any]) -> dict[str, Any]:
    budgets = copy.deepcopy(ISSUE_CONFIG["budgets"])
    budgets["classes"][0]["limits"][index] = limit
    return budgets


def with_price(model: str, **fields: Any) -> dict[str, Any]:
    prices = copy.deepcopy(ISSUE_CONFIG["prices"])
    prices[model] = {**prices[model], **fields}
    return prices


BAD_INPUTS: list[tuple[str, dict[str, Any], str, list[str]]] = [
    (
        "usd 0",
        issue_config(budgets=with_limit(1, {"usd": 0, "per": "Day"})),
        "budgets.classes[0].limits[1].usd",
        ["usd 0 is outside 0.01 to 1,000,000", "at least a cent"],
    ),
    (
        "a negative price",
        issue_config(prices=with_price("gpt-4o", input=-2.5)),
        "prices.gpt-4o.input",
        ["input -2.5 is negative", "0 or more"],
    ),
    (
        "a price written as text",
        issue_config(prices=with_price("claude-sonnet", output="$15")),
        "prices.claude-sonnet.output",
        ["got '$15'", "as a number without quotes or $"],
    ),
    (
        "a limit with both tokens and usd",
        issue_config(budgets=with_limit(0, {"tokens": 200000, "usd": 5, "per": "Hour"})),
        "budgets.classes[0].limits[0]",
        ["has both tokens (200000) and usd (5)", "Split it into two limits"],
    ),
    (
        "a limit with neither",
        issue_config(budgets=with_limit(2, {"per": "Month"})),
        "budgets.classes[0].limits[2]",
        ["has none of tokens, usd or calls", "{usd: 5, per: Day}"],
    ),
    (
        "limits: []",
        issue_config(budgets=research(limits=[])),
        "budgets.classes[0].limits",
        ["is empty", "limits: [{tokens: 500, per: Day}]"],
    ),
    (
        "more limits than the maximum",
        issue_config(budgets=research(limits=[{"tokens": 9 + i, "per": "Day"} for i in range(9)])),
        "budgets.classes[0].limits",
        ["has 9 limits", "at most 8"],
    ),
    (
        "more limits than the reserved slots",
        issue_config(budgetPolicy={"limitSlots": 2}),
        "budgets.classes[0].limits",
        ["has 3 limits but agent-budgets:budgetPolicy.limitSlots is 2", "set budgetPolicy.limitSlots to 3 or more"],
    ),
    (
        "a suspended actor that is not in actors",
        issue_config(suspended=["agents/actor-z"]),
        "suspended[0]",
        ["'agents/actor-z' is not in agent-budgets:actors", "Add it to actors"],
    ),
    (
        "a price too small for the unit",
        issue_config(prices=with_price("gpt-4o", cachedInput=0.0000001)),
        "prices.gpt-4o.cachedInput",
        ["1e-07 is below the smallest price the money unit carries, $0.000001 per 1,000,000 tokens"],
    ),
    (
        "a usd limit while a route model has no price",
        issue_config(prices={"gpt-4o": ISSUE_CONFIG["prices"]["gpt-4o"]}),
        "prices",
        ["has no price for model 'claude-sonnet' (routes[1].models[0])", "budgets.classes[0].limits[1].usd"],
    ),
    (
        "a model name with a lone surrogate",
        issue_config(
            routes=[{**ISSUE_CONFIG["routes"][0], "models": ["gpt-4o", "gpt\ud800"]}, ISSUE_CONFIG["routes"][1]]
        ),
        "routes[0].models",
        ["model name 'gpt\\ud800' holds U+D800 at position 3, a lone surrogate", "CEL parser refuses"],
    ),
    (
        "a modelNameOverride with a lone surrogate",
        issue_config(routes=[{**ISSUE_CONFIG["routes"][0], "modelNameOverride": "\udfffo"}, ISSUE_CONFIG["routes"][1]]),
        "routes[0].modelNameOverride",
        ["modelNameOverride '\\udfffo' holds U+DFFF at position 0", "whole gateway's configuration"],
    ),
    (
        "both the short form and limits",
        issue_config(budgets=research(tokens=9, per="Day")),
        "budgets.classes[0]",
        ["has both limits and tokens, per", "use either the short form"],
    ),
    (
        "a usd amount finer than a mill",
        issue_config(budgets=with_limit(1, {"usd": 5.0005, "per": "Day"})),
        "budgets.classes[0].limits[1].usd",
        ["usd 5.0005 has more than 3 decimal places", "e.g. to 5.001"],
    ),
]


@pytest.mark.parametrize(("name", "config", "key", "fragments"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_refused_with_key_value_and_fix(name, config, key, fragments):
    error = report(config)
    assert [p.key for p in error.problems] == [key], error
    for fragment in fragments:
        assert fragment in error.problems[0].message, error.problems[0].message


@pytest.mark.parametrize(("name", "config", "key", "fragments"), BAD_INPUTS[:3], ids=[b[0] for b in BAD_INPUTS[:3]])
def test_bad_input_stops_the_program_before_any_resource(name, config, key, fragments):
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as caught:
        run_program(config, secrets=SECRETS, mocks=mocks)
    assert f"agent-budgets:{key}:" in str(caught.value)
    assert mocks.resources == []


def test_several_bad_inputs_arrive_in_one_report():
    config = issue_config(
        budgets=with_limit(1, {"usd": 0, "per": "Day"}),
        prices=with_price("gpt-4o", input=-1),
        suspended=["agents/actor-z"],
    )
    assert sorted(p.key for p in report(config).problems) == [
        "budgets.classes[0].limits[1].usd",
        "prices.gpt-4o.input",
        "suspended[0]",
    ]


def test_a_price_for_a_model_no_route_serves_is_a_warning_not_an_error():
    prices = {**ISSUE_CONFIG["prices"], "gpt-4o-mni": {"input": 0.15, "output": 0.6}}
    validated = validate_stack(issue_config(prices=prices), lambda key: (True, True))
    assert [(w.key, "no route serves model 'gpt-4o-mni'" in w.message) for w in validated.warnings] == [
        ("prices.gpt-4o-mni", True)
    ]
    run = run_program(issue_config(prices=prices), secrets=SECRETS)
    assert any("agent-budgets:prices.gpt-4o-mni" in warning for warning in run.warnings)


def test_prices_without_usd_limits_need_not_cover_every_model():
    config = issue_config(
        budgets={"default": {"tokens": 500, "per": "Day"}}, prices={"gpt-4o": {"input": 2.5, "output": 10}}
    )
    validated = validate_stack(config, lambda key: (True, True))
    assert not validated.settings.budgets.uses_usd
    run = run_program(config, secrets=SECRETS)
    assert [c["type"] for c in spec(run, "AIGatewayRoute", "gpt")["llmRequestCosts"]] == ["TotalToken"]


def test_a_misspelt_or_misshapen_price_is_named_with_the_fix():
    prices = {**ISSUE_CONFIG["prices"], "gpt-4o": {"inptu": 2.5, "input": 2.5, "output": 10}}
    [problem] = report(issue_config(prices=prices)).problems
    assert (problem.key, "did you mean `input`?" in problem.message) == ("prices.gpt-4o.inptu", True)
    [problem] = report(issue_config(prices={**ISSUE_CONFIG["prices"], "gpt-4o": 2.5})).problems
    assert problem.key == "prices.gpt-4o"
    assert problem.message == "got 2.5: this key holds a map of settings (`key: value` lines indented below it)"


def test_suspensions_count_toward_the_gateway_s_message_limit():
    """Every suspended subject is copied into each Envoy route's RBAC config (core/xds_size.py)."""
    actors = [f"agents/actor-{i:04d}" for i in range(2000)]
    config = issue_config(
        actors=actors,
        budgets={"default": {"tokens": 500, "per": "Day"}},
        routes=[  # 100 model routes, in two routes of 50 (a route takes at most 64 model names)
            {"name": "gpt", "models": [f"gpt-{i}" for i in range(50)], "provider": "openai"},
            {"name": "gpt-more", "models": [f"gpt-{i}" for i in range(50, 100)], "provider": "openai"},
        ],
        prices={},
        suspended=actors,
    )
    [problem] = report(config).problems
    assert problem.key == "platform.extensionMessageLimit"
    assert "of suspension rules" in problem.message and "fewer suspended actors" in problem.message
    validate_stack({**config, "suspended": actors[:10]}, lambda key: (True, True))

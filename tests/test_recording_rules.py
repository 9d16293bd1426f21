"""Dollars in Prometheus: the recording rules price Agent Router's token counters as the cost expression does.

Every rule is parsed with the real PromQL parser (promql-parser) and evaluated with tests/support/promql_eval.py
against counters written the way Agent Router's external processor records them (envoyproxy/ai-gateway v1.1.0
`internal/metrics/metrics_impl.go` `RecordTokenUsage`: one `gen_ai_client_token_usage` series per token type, the
same usage the cost expression gets; `gen_ai_request_model` after the route's override). The dollars they give
for a number of calls are compared with what the route's CEL cost expression, evaluated with Google's CEL as
Agent Router evaluates it, charges for the same calls.
"""

from __future__ import annotations

import copy
from decimal import Decimal

import jsonschema
import promql_parser
import pytest

from core import recording_rules
from core.money import ModelPrice, Usage, billed_models, route_cost_entry
from core.validation import validate_stack
from tests.support.agent_router_cel import Call, evaluate, model_as_agent_router_sets_it
from tests.support.crds import load_catalog
from tests.support.program import run_program, stack_config
from tests.support.prometheus_rule_schema import PROMETHEUS_RULE_SCHEMA
from tests.support.promql_eval import Store, UnsupportedError, evaluate_rules, labels

SECRETS = {"openaiApiKey": "sk-test", "anthropicApiKey": "sk-ant-test", "redisPassword": "pw"}
# `models: [a, b]` with `modelNameOverride: o`, and an Anthropic-style model with every price set.
ROUTES = [
    {"name": "gpt", "models": ["gpt-a", "gpt-b"], "provider": "openai", "modelNameOverride": "gpt-o"},
    {"name": "claude", "models": ["claude-sonnet"], "provider": "anthropic"},
]
PRICES = {
    "gpt-o": {"input": 2.00, "cachedInput": 0.50, "output": 8.00},
    "claude-sonnet": {"input": 3.00, "cachedInput": 0.30, "cacheWrite": 3.75, "output": 15.00},
}
# One call of each: every token kind at once, each figure exact in mills so the CEL's rounding up is a no-op.
# claude-sonnet: 2,000 fresh * $3 + 100,000 read * $0.30 + 20,000 written * $3.75 + 3,000 out * $15
#   = $0.006 + $0.03 + $0.075 + $0.045 = $0.156 = 156 mills
CLAUDE_CALL = Usage(
    input_tokens=122_000,
    cached_input_tokens=100_000,
    cache_creation_input_tokens=20_000,
    output_tokens=3_000,
    reasoning_tokens=1_000,
)
# gpt-o: 20,000 fresh * $2 + 100,000 cached * $0.50 + 5,000 out * $8 = $0.04 + $0.05 + $0.04 = $0.13 = 130 mills
GPT_CALL = Usage(input_tokens=120_000, cached_input_tokens=100_000, output_tokens=5_000, reasoning_tokens=4_000)
ACTOR_LABEL = "actor_id"
# The name Prometheus gives Agent Router's `gen_ai.client.token.usage` histogram's sum (ai-gateway v1.1.0
# `cmd/extproc/mainlib/admin_test.go`), written here rather than taken from the rules under test.
AGENT_ROUTER_TOKEN_COUNTER = "gen_ai_client_token_usage_sum"
T = 10_000.0  # the evaluation time, seconds
SCRAPE = 30.0


def config(**monitoring: object) -> dict:
    stack = copy.deepcopy(stack_config("prod"))
    stack["routes"] = ROUTES
    stack["prices"] = PRICES
    # The per-model limit of prod's default budget names a model these routes call claude-sonnet.
    [sonnet] = [limit for limit in stack["budgets"]["default"]["limits"] if limit.get("models")]
    sonnet["models"] = ["claude-sonnet"]
    stack["monitoring"] = {"prometheusRules": True, **monitoring}
    return stack


@pytest.fixture(scope="module")
def prometheus_rule() -> dict:
    return run_program(config(), secrets=SECRETS).one("PrometheusRule").as_object()


@pytest.fixture(scope="module")
def group(prometheus_rule) -> dict:
    [usd] = [g for g in prometheus_rule["spec"]["groups"] if g["name"] == "agent-budgets-usd"]
    return usd


def record_calls(store: Store, actor: str, sent: str, billed: str, usage: Usage, calls: int) -> None:
    """`calls` calls spread evenly over the 5 minutes before T, scraped every 30 s from one Envoy pod."""
    counts = {
        "input": usage.input_tokens,
        "cached_input": usage.cached_input_tokens,
        "cache_creation_input": usage.cache_creation_input_tokens,
        "output": usage.output_tokens,
        "reasoning": usage.reasoning_tokens,
    }
    start = T - 300
    for token_type, per_call in counts.items():
        if not per_call:
            continue  # Agent Router records a type only when the provider reported it
        series = {
            ACTOR_LABEL: f"actor/{actor}",
            "gen_ai_original_model": sent,
            "gen_ai_request_model": billed,
            "gen_ai_token_type": token_type,
            "gen_ai_operation_name": "chat",
            "gen_ai_provider_name": "openai",
            "pod": "envoy-agent-router-0",
        }
        for step in range(1, 11):  # T-270 ... T
            when = start + SCRAPE * step
            store.add(AGENT_ROUTER_TOKEN_COUNTER, series, when, per_call * calls * (when - start) / 300)


def cel_mills(route: dict, sent: str, usage: Usage) -> int:
    """What the route's generated cost expression charges for one call naming `sent` (Agent Router's `model`)."""
    billed = billed_models(route["models"], route.get("modelNameOverride"))
    prices = {
        m: ModelPrice.of(
            **{k: v for k, v in PRICES[m].items() if k in ("input", "output")},
            cached_input=PRICES[m].get("cachedInput"),
            cache_write=PRICES[m].get("cacheWrite"),
        )
        for m in billed
    }
    expression = route_cost_entry(billed, prices)["cel"]
    return evaluate(
        expression, Call(model=model_as_agent_router_sets_it(sent, route.get("modelNameOverride")), usage=usage)
    )


def test_every_rule_parses_as_promql_and_the_rule_is_what_the_operator_accepts(prometheus_rule, group):
    for rule in group["rules"]:
        promql_parser.parse(rule["expr"])
    validator = jsonschema.Draft202012Validator(PROMETHEUS_RULE_SCHEMA)
    assert [error.message for error in validator.iter_errors(prometheus_rule)] == []
    assert load_catalog().validate(prometheus_rule).errors == []  # prometheus-operator v0.93.0's CRD
    assert [g["name"] for g in prometheus_rule["spec"]["groups"]][-1] == "agent-budgets-usd"


def test_the_prices_are_the_billed_models_weights(group):
    """The override's prices, never those of the names the route serves; cache weights are the differences."""
    weights = {
        (r["labels"]["gen_ai_request_model"], r["labels"]["gen_ai_token_type"]): r["expr"]
        for r in group["rules"]
        if r["record"] == recording_rules.PRICE_RECORD
    }
    assert weights == {
        ("gpt-o", "input"): "vector(0.000002)",
        ("gpt-o", "cached_input"): "vector(-0.0000015)",  # 0.50 - 2.00 per 1M
        ("gpt-o", "cache_creation_input"): "vector(0)",  # cacheWrite defaults to input
        ("gpt-o", "output"): "vector(0.000008)",
        ("claude-sonnet", "input"): "vector(0.000003)",
        ("claude-sonnet", "cached_input"): "vector(-0.0000027)",
        ("claude-sonnet", "cache_creation_input"): "vector(0.00000075)",
        ("claude-sonnet", "output"): "vector(0.000015)",
    }


def test_the_recorded_dollars_equal_what_the_cost_expression_charges_for_the_same_calls(group):
    store = Store()
    record_calls(store, "agents/actor-b", sent="gpt-a", billed="gpt-o", usage=GPT_CALL, calls=7)
    record_calls(store, "agents/actor-b", sent="gpt-b", billed="gpt-o", usage=GPT_CALL, calls=3)
    record_calls(store, "agents/coder-1", sent="claude-sonnet", billed="claude-sonnet", usage=CLAUDE_CALL, calls=4)
    evaluate_rules(group["rules"], store, T)
    usd_per_second = store.named(recording_rules.USD_RECORD)

    gpt_route, claude_route = ROUTES
    assert cel_mills(gpt_route, "gpt-a", GPT_CALL) == cel_mills(gpt_route, "gpt-b", GPT_CALL) == 130
    assert cel_mills(claude_route, "claude-sonnet", CLAUDE_CALL) == 156

    def dollars(actor: str, sent: str, billed: str) -> float:
        key = labels(**{ACTOR_LABEL: f"actor/{actor}", "gen_ai_original_model": sent, "gen_ai_request_model": billed})
        return usd_per_second[key] * 300  # the rate over the 5 minutes the calls were made in

    assert dollars("agents/actor-b", "gpt-a", "gpt-o") == pytest.approx(7 * 130 / 1000, rel=1e-9)
    assert dollars("agents/actor-b", "gpt-b", "gpt-o") == pytest.approx(3 * 130 / 1000, rel=1e-9)
    assert dollars("agents/coder-1", "claude-sonnet", "claude-sonnet") == pytest.approx(4 * 156 / 1000, rel=1e-9)
    assert len(usd_per_second) == 3
    # The tokens rule keeps every type, reasoning included, per actor and model.
    tokens = store.named(recording_rules.TOKENS_RECORD)
    reasoning = labels(
        **{
            ACTOR_LABEL: "actor/agents/coder-1",
            "gen_ai_original_model": "claude-sonnet",
            "gen_ai_request_model": "claude-sonnet",
            "gen_ai_token_type": "reasoning",
        }
    )
    assert tokens[reasoning] * 300 == pytest.approx(4 * 1_000)


def test_a_model_without_a_price_is_left_out_of_the_dollars_not_priced_at_zero(group):
    store = Store()
    record_calls(store, "agents/actor-a", sent="mystery", billed="mystery", usage=GPT_CALL, calls=1)
    evaluate_rules(group["rules"], store, T)
    assert store.named(recording_rules.USD_RECORD) == {}
    assert store.named(recording_rules.TOKENS_RECORD) != {}


def test_the_evaluator_refuses_what_it_does_not_implement():
    """A rule that grows an unsupported construct fails here instead of being evaluated wrongly."""
    with pytest.raises(UnsupportedError, match="function irate"):
        evaluate_rules([{"record": "x", "expr": "irate(y[5m])"}], Store(), T)
    with pytest.raises(UnsupportedError, match="aggregation"):
        evaluate_rules([{"record": "x", "expr": "max by (a) (y)"}], Store(), T)


def test_without_actor_metrics_the_dollars_are_per_model_and_without_prices_only_tokens_are_recorded():
    run = run_program(config(actorMetrics=False), secrets=SECRETS)
    [usd] = [g for g in run.one("PrometheusRule").inputs["spec"]["groups"] if g["name"] == "agent-budgets-usd"]
    [usd_rule] = [r for r in usd["rules"] if r["record"] == recording_rules.USD_RECORD]
    assert usd_rule["expr"].startswith("sum by (gen_ai_original_model, gen_ai_request_model) (")
    token_only = config()
    token_only["prices"] = {}
    token_only["budgets"] = {"default": {"tokens": 500, "per": "Day"}}
    validated = validate_stack(token_only, lambda key: (True, True))
    assert [r["record"] for r in recording_rules.recording_group(validated.settings)["rules"]] == [
        recording_rules.TOKENS_RECORD
    ]


def test_weights_sum_to_the_price_of_each_kind():
    price = ModelPrice.of(input=3, cached_input=0.3, cache_write=3.75, output=15)
    weights = recording_rules.token_weights(price)
    million = Decimal(1_000_000)
    assert weights["input"] * million == 3
    assert (weights["input"] + weights["cached_input"]) * million == Decimal("0.3")
    assert (weights["input"] + weights["cache_creation_input"]) * million == Decimal("3.75")
    assert weights["output"] * million == 15

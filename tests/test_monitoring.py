"""Budget alerts and per-actor metrics: the PrometheusRule (monitoring.prometheusRules), its PromQL, its schema.

The PrometheusRule is validated against the shape prometheus-operator v0.93.0 accepts
(tests/support/prometheus_rule_schema.py, which also refuses the unknown fields the API server would prune)
and against that release's own CRD among the pinned CRDs
(`example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml`). Every expression is parsed
with a PromQL parser (promql-parser, a port of Prometheus' own grammar).
"""

from __future__ import annotations

import copy

import jsonschema
import promql_parser
import pytest

from core import monitoring
from core.budget_rules import compile_budget_rules
from core.ratelimit_model import rules_for_actor
from core.settings import ConfigError, prometheus_label
from core.validation import validate_stack
from tests.support.crds import load_catalog
from tests.support.program import run_program, stack_config
from tests.support.prometheus_rule_schema import PROMETHEUS_RULE_SCHEMA, group_names_unique


def monitored_config(**monitoring_settings) -> dict:
    config = copy.deepcopy(stack_config("dev"))
    config["actors"] = ["agents/actor-a", "agents/actor-b", "lab/bot-1"]
    config["budgets"] = {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [
            {"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]},
            {"name": "bots", "tokens": 20000, "per": "Week", "actors": ["lab/bot-1"]},
        ],
    }
    config["monitoring"] = {"prometheusRules": True, **monitoring_settings}
    return config


@pytest.fixture(scope="module")
def monitored_run():
    return run_program(monitored_config(ruleLabels={"release": "kube-prometheus-stack"}))


def prometheus_rule(run) -> dict:
    return run.one("PrometheusRule", "agent-budgets").as_object()


def test_no_prometheus_rule_unless_asked_for():
    run = run_program(stack_config("dev"))
    assert run.of_kind("PrometheusRule") == []
    assert [r for r in run.resources if r.type == "agent-budgets:monitoring:Monitoring"] == []


def test_two_alerts_per_budget_with_labels_a_prometheus_selects(monitored_run):
    rule = prometheus_rule(monitored_run)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "agent-budgets"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    group = rule["spec"]["groups"][0]  # the budget alerts (core.monitors adds the metrics group)
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert names == ["agent-budgets", "agent-budgets-metrics", "agent-budgets-usd"]  # USD: test_recording_rules.py
    assert [(r["alert"], r["labels"]["budget"], r["labels"]["rule"]) for r in group["rules"]] == [
        ("AgentBudgetNearLimit", "default", "0"),
        ("AgentBudgetExhausted", "default", "0"),
        ("AgentBudgetNearLimit", "large", "1"),
        ("AgentBudgetExhausted", "large", "1"),
        ("AgentBudgetNearLimit", "bots", "2"),
        ("AgentBudgetExhausted", "bots", "2"),
    ]
    near_bots = group["rules"][4]
    assert near_bots["annotations"]["summary"] == "An actor of budget bots passed 80% of its 20,000 tokens per Week"
    component = [r for r in monitored_run.resources if r.type == "agent-budgets:monitoring:Monitoring"]
    assert len(component) == 1


def test_every_expression_parses_as_promql_and_selects_its_rules_counters(monitored_run):
    """The selectors name what the rate-limit service's stats carry for each rule: domain = the policy,
    key1 = the rule's first descriptor entry as `<key>_<value>` (ratelimit `src/config/config_impl.go`
    `loadDescriptors`), which the rate-limit model gives as the applied rule's first entry."""
    group = prometheus_rule(monitored_run)["spec"]["groups"][0]
    settings = validate_stack(monitored_config(), lambda key: (False, False)).settings
    rules = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots)
    for actor, index in (("agents/actor-a", 0), ("agents/actor-b", 1), ("lab/bot-1", 2)):
        [applied] = rules_for_actor("agent-budgets", "agent-budgets", rules.specs(), f"actor/{actor}")
        assert applied.index == index
        first_key, first_value = applied.entries[0]
        for alert in group["rules"][2 * index : 2 * index + 2]:
            parsed = promql_parser.parse(alert["expr"])
            assert type(parsed).__name__ == "BinaryExpr"  # `a > 0 or b`
            assert f'key1="{first_key}_{first_value}"' in alert["expr"]
            assert f'domain="{applied.domain}"' in alert["expr"]
    assert "ratelimit_service_rate_limit_near_limit{" in group["rules"][0]["expr"]
    assert "ratelimit_service_rate_limit_over_limit{" in group["rules"][1]["expr"]


def test_the_near_limit_share_is_the_same_in_the_alert_and_the_rate_limit_service():
    run = run_program(monitored_config(nearLimitPercent=90))
    group = prometheus_rule(run)["spec"]["groups"][0]
    assert (
        group["rules"][0]["annotations"]["summary"] == "An actor of budget default passed 90% of its 500 tokens per Day"
    )
    assert (
        "Run `make spend STACK=test ARGS='--over 90'` for the actors" in group["rules"][0]["annotations"]["description"]
    )
    assert "`make spend STACK=test ARGS='--over 100'`" in group["rules"][1]["annotations"]["description"]
    eg = next(r for r in run.resources if r.type.endswith("Release") and r.inputs.get("name") == "eg")
    env = eg.inputs["values"]["config"]["envoyGateway"]["provider"]["kubernetes"]["rateLimitDeployment"]["container"]
    assert {"name": "NEAR_LIMIT_RATIO", "value": "0.9"} in env["env"]


def test_metric_attribute_names_become_prometheus_labels():
    assert prometheus_label("actor.id") == "actor_id"
    assert prometheus_label("gen_ai.agent.id") == "gen_ai_agent_id"


@pytest.mark.parametrize(
    ("settings", "key", "words"),
    [
        ({"actorAttribute": "Actor-ID"}, "monitoring.actorAttribute", "not an attribute name"),
        ({"nearLimitPercent": 100}, "monitoring.nearLimitPercent", "less than 100"),
        ({"nearLimitPercent": 0}, "monitoring.nearLimitPercent", "greater than 0"),
        ({"nearLimitPercent": "85%"}, "monitoring.nearLimitPercent", "e.g. nearLimitPercent: 85"),
        ({"nearLimitPercent": True}, "monitoring.nearLimitPercent", "give a percentage"),
        ({"ruleLabels": {"release": "kube prometheus"}}, "monitoring.ruleLabels", "not a Kubernetes label value"),
        ({"ruleLabels": {"bad key!": "x"}}, "monitoring.ruleLabels", "not a Kubernetes label name"),
        ({"prometheusRule": True}, "monitoring.prometheusRule", ""),
    ],
)
def test_bad_monitoring_settings_are_reported_with_their_key(settings, key, words):
    config = stack_config("dev")
    config["monitoring"] = settings
    with pytest.raises(ConfigError) as error:
        validate_stack(config, lambda name: (False, False))
    assert f"agent-budgets:{key}" in error.value.keys
    assert words in str(error.value)


def test_the_prometheus_rule_has_the_shape_prometheus_operator_accepts(monitored_run):
    """The schema of tests/support/prometheus_rule_schema.py (from upstream's types), then the pinned CRD itself."""
    rule = prometheus_rule(monitored_run)
    validator = jsonschema.Draft202012Validator(PROMETHEUS_RULE_SCHEMA)
    assert [error.message for error in validator.iter_errors(rule)] == []
    assert group_names_unique(rule)
    for field, bad in (("for", "ten minutes"), ("annotation", {"summary": "typo"}), ("expr", None)):
        broken = copy.deepcopy(rule)
        broken["spec"]["groups"][0]["rules"][0][field] = bad
        if bad is None:
            del broken["spec"]["groups"][0]["rules"][0][field]
        assert list(validator.iter_errors(broken)), f"a rule with a bad {field!r} passed"
    # prometheus-operator v0.93.0's own CRD (pinned) agrees.
    catalog = load_catalog()
    catalog.assert_valid(rule)
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    assert catalog.validate(broken).errors


def test_every_limit_of_a_budget_gets_its_alerts_and_reserved_slots_none():
    config = monitored_config()
    config["budgets"]["classes"].append(
        {
            "name": "research",
            "limits": [{"tokens": 400000, "per": "Hour"}, {"usd": 5, "per": "Day"}],
            "actors": ["lab/bot-1"],
        }
    )
    config["budgets"]["classes"][1]["actors"] = []  # bots: retired, so lab/bot-1 is in research only
    config["budgetPolicy"] = {"limitSlots": 2}
    config["prices"] = {model: {"input": 1, "output": 2} for model in ("mock-small", "mock-large")}
    validated = validate_stack(config, lambda key: (False, False))
    assert any(rule.reserved for rule in validated.rules.rules)
    manifest = monitoring.prometheus_rule_manifest(validated.settings, validated.rules, "prod")
    group = manifest.spec["groups"][0]
    near = [r for r in group["rules"] if r["alert"] == "AgentBudgetNearLimit"]
    assert [(r["labels"]["budget"], r["labels"]["limit"]) for r in near] == [
        ("default", "0"),
        ("large", "0"),
        ("bots", "0"),
        ("research", "0"),
        ("research", "1"),
    ]
    assert len(group["rules"]) == 2 * len(validated.rules.limit_rules)
    assert near[4]["annotations"]["summary"] == "An actor of budget research passed 80% of its $5.00 per Day"
    assert near[3]["annotations"]["summary"] == "An actor of budget research passed 80% of its 400,000 tokens per Hour"
    usd_rule = next(r for r in validated.rules.limit_rules if r.budget == "research" and r.limit_index == 1)
    assert f"rule/{usd_rule.index}_" in near[4]["expr"]


def test_a_calls_limit_gets_alerts_that_speak_of_calls():
    config = monitored_config()
    config["budgets"]["default"] = {"limits": [{"tokens": 500, "per": "Day"}, {"calls": 60, "per": "Minute"}]}
    config["budgetPolicy"] = {"limitSlots": 2}
    validated = validate_stack(config, lambda key: (False, False))
    group = monitoring.prometheus_rule_manifest(validated.settings, validated.rules, "prod").spec["groups"][0]
    calls_alerts = [r for r in group["rules"] if r["labels"]["budget"] == "default" and r["labels"]["limit"] == "1"]
    near, over = calls_alerts
    assert near["annotations"]["summary"] == "An actor of budget default passed 80% of its 60 calls per Minute"
    assert over["annotations"]["description"].startswith(
        f"In the last {monitoring.LOOKBACK} a call took an actor of budget default (rule 1) over its 60 calls "
        "per Minute"
    )


def test_a_pool_s_alerts_speak_of_the_pool_and_a_limit_s_models_and_kind():
    """A pool's counter is shared: its alerts name the pool and every member's 429, and `make spend` shows its
    counter; a per-model or token-kind limit is named with its models and kind."""
    config = monitored_config()
    config["budgets"] = {
        "default": {"limits": [{"tokens": 500, "per": "Day"}, {"tokens": 90, "per": "Hour", "count": "output"}]},
        "pools": [
            {
                "name": "team",
                "atespaces": ["agents"],
                "limits": [{"tokens": 900, "per": "Day", "models": ["mock-large"]}],
            }
        ],
    }
    config["budgetPolicy"] = {"limitSlots": 2}
    validated = validate_stack(config, lambda key: (False, False))
    group = monitoring.prometheus_rule_manifest(validated.settings, validated.rules, "prod").spec["groups"][0]
    by_rule = {(r["alert"], r["labels"]["rule"]): r for r in group["rules"]}
    output = by_rule["AgentBudgetNearLimit", "1"]
    assert output["annotations"]["summary"] == "An actor of budget default passed 80% of its 90 output tokens per Hour"
    near, over = by_rule["AgentBudgetNearLimit", "2"], by_rule["AgentBudgetExhausted", "2"]
    assert near["labels"]["budget"] == "pool:team"
    assert near["annotations"]["summary"] == "Pool team passed 80% of its 900 tokens per Day on mock-large"
    assert over["annotations"]["summary"] == (
        "Pool team went over its 900 tokens per Day on mock-large: every member's calls get 429"
    )
    assert "for the pool's counter and when its window resets" in over["annotations"]["description"]
    assert "rule/2_" in near["expr"]

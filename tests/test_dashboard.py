"""The Grafana dashboard: emitted as a ConfigMap Grafana's sidecar loads, every query parses as PromQL (promql-parser)
and reads only metrics and labels the stack scrapes or records.

What each scraped source serves (the program's own recording rules are read from the PrometheusRule it emits); what
reaches Prometheus is that, through the metricRelabelings of the PodMonitor that scrapes it (tests/support/relabel.py):

* Agent Router's external processor (envoyproxy/ai-gateway v1.1.0 `internal/metrics/genai.go`,
  `metrics_impl.go` `buildBaseAttributes`; theagentrouter/agent-router 2ea05dd3 adds `gen_ai.backend`): the
  histograms `gen_ai_client_token_usage` and `gen_ai_server_request_duration_seconds`, labelled with the operation,
  provider, original/request/response model, token type (token usage), `error_type` (failures), the configured
  actor attribute, and from v1.2 the backend.
* envoyproxy/ratelimit's stats through Envoy Gateway v1.9.0's statsd mapping
  (`internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml`): `ratelimit_service_rate_limit_*` with
  `domain`, `key1`, `key2`.
* Envoy's own stats (`source/common/config/well_known_names.cc` tag extractors): `envoy_cluster_ratelimit_over_limit`
  with `envoy_cluster_name`, `envoy_http_rbac_denied` with `envoy_http_conn_manager_prefix`, among thousands of
  others (a sample of which stands for them here).
* What a Prometheus Operator scrape adds to every series: `job`, `instance`, `namespace`, `pod`, `container`,
  `endpoint`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import promql_parser
import pulumi
import pytest

from core import dashboard, monitors
from core.monitoring import rule_key1
from core.problems import ConfigError
from core.validation import validate_stack
from tests.support.program import RecordingMocks, run_program, stack_config
from tests.support.relabel import ENVOY_LABELS, ENVOY_PORTS, pod_targets, relabel

SECRETS = {"openaiApiKey": "sk-test", "anthropicApiKey": "sk-ant-test", "redisPassword": "pw"}
SCRAPE_LABELS = {"job", "instance", "namespace", "pod", "container", "endpoint"}
GENAI_LABELS = {
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_original_model",
    "gen_ai_request_model",
    "gen_ai_response_model",
    "gen_ai_backend",
}
RATELIMIT_LABELS = {"domain", "key1", "key2"}


def served_metrics(actor_label: str | None) -> dict[str, dict[str, set[str]]]:
    """PodMonitor → metric → its labels, for every series the pods it scrapes serve."""
    genai = GENAI_LABELS | ({actor_label} if actor_label else set())
    served: dict[str, dict[str, set[str]]] = {"agent-router": {}, "envoy-ratelimit": {}, "envoy-proxy": {}}
    for suffix in ("_sum", "_count", "_bucket"):
        served["agent-router"][f"gen_ai_client_token_usage{suffix}"] = genai | {"gen_ai_token_type"}
        served["agent-router"][f"gen_ai_server_request_duration_seconds{suffix}"] = genai | {"error_type"}
    for suffix in ("near_limit", "over_limit", "total_hits", "within_limit"):
        served["envoy-ratelimit"][f"ratelimit_service_rate_limit_{suffix}"] = set(RATELIMIT_LABELS)
    for name in ("envoy_cluster_ratelimit_over_limit", "envoy_cluster_ratelimit_ok", "envoy_cluster_upstream_rq_total"):
        served["envoy-proxy"][name] = {"envoy_cluster_name"}
    for name in ("envoy_http_rbac_denied", "envoy_http_rbac_allowed", "envoy_http_downstream_rq_total"):
        served["envoy-proxy"][name] = {"envoy_http_conn_manager_prefix"}
    served["envoy-proxy"]["envoy_server_memory_allocated"] = set()
    return served


def scraped_metrics(run, actor_label: str | None) -> dict[str, set[str]]:
    """Metric → its labels, for every series the stack's PodMonitors bring into Prometheus."""
    scraped: dict[str, set[str]] = {}
    for monitor in run.of_kind("PodMonitor"):
        name = monitor.inputs["metadata"]["name"]
        [endpoint] = monitor.inputs["spec"]["podMetricsEndpoints"]
        rules = [
            {"source_labels": rule["sourceLabels"], "regex": rule["regex"], "action": rule["action"]}
            for rule in endpoint.get("metricRelabelings", [])
        ]
        for metric, labels in served_metrics(actor_label)[name].items():
            if relabel({"__name__": metric}, rules) is not None:
                scraped[metric] = labels | SCRAPE_LABELS
    return scraped


def _children(node: Any) -> Iterator[Any]:
    for attribute in ("expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, str | int | float):
            yield child
    yield from getattr(node, "args", None) or []


def selectors_and_labels(node: Any) -> tuple[list[Any], set[str]]:
    """Every vector selector of a parsed query, and every label name it groups or matches on."""
    selectors: list[Any] = []
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, promql_parser.VectorSelector):
            selectors.append(current)
            names |= {m.name for m in current.matchers.matchers}
        modifier = getattr(current, "modifier", None)
        if isinstance(current, promql_parser.AggregateExpr) and modifier is not None:
            names |= set(modifier.labels)
        if isinstance(current, promql_parser.BinaryExpr) and modifier is not None and modifier.matching is not None:
            names |= set(modifier.matching.labels) | set(modifier.group_labels)
        stack.extend(_children(current))
    return selectors, names


def recorded_metrics(prometheus_rule: dict[str, Any]) -> dict[str, set[str]]:
    """What the program's recording rules produce: the record name → the labels it groups by plus its own labels."""
    produced: dict[str, set[str]] = {}
    for group in prometheus_rule["spec"]["groups"]:
        for rule in group["rules"]:
            if "record" not in rule:
                continue
            parsed = promql_parser.parse(rule["expr"])
            grouped = set(parsed.modifier.labels) if isinstance(parsed, promql_parser.AggregateExpr) else set()
            produced.setdefault(rule["record"], set()).update(grouped | set(rule.get("labels", {})))
    return produced


def as_promql(expr: str) -> str:
    """A panel query with Grafana's variables replaced by what Grafana sends Prometheus."""
    return expr.replace("$__range", "1d").replace("$__rate_interval", "1m")


def config(**monitoring: Any) -> dict[str, Any]:
    stack = copy.deepcopy(stack_config("prod"))
    stack["routes"][0]["modelNameOverride"] = "gpt-4.1-2025-04-14"
    stack["prices"]["gpt-4.1-2025-04-14"] = {"input": 2.0, "cachedInput": 0.5, "output": 8.0}
    stack["monitoring"] = {"prometheusRules": True, "dashboard": True, **monitoring}
    return stack


def emitted(run) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    config_map = run.one("ConfigMap", dashboard.CONFIG_MAP_NAME).inputs
    model = json.loads(config_map["data"][dashboard.DASHBOARD_FILE])
    return config_map, model, run.one("PrometheusRule").as_object()


@pytest.fixture(scope="module")
def prod_run():
    return run_program(config(), secrets=SECRETS)


def test_the_dashboard_is_a_config_map_the_grafana_sidecar_loads(prod_run):
    config_map, model, _ = emitted(prod_run)
    assert config_map["metadata"]["namespace"] == "agent-budgets"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert list(config_map["data"]) == ["agent-budgets.json"]
    assert (model["uid"], model["title"]) == ("agent-budgets", "Agent budgets")
    assert [(v["type"], v["name"], v["query"]) for v in model["templating"]["list"]] == [
        ("datasource", "datasource", "prometheus")
    ]
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids)) == len(dashboard.panel_specs(*settings_and_rules(config()))) == 10
    assert all(panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for panel in model["panels"])
    assert all(panel["description"] for panel in model["panels"])


def settings_and_rules(stack: dict[str, Any]):
    validated = validate_stack(stack, lambda key: (True, True))
    return validated.settings, validated.rules


def test_every_query_parses_and_reads_only_metrics_and_labels_the_stack_produces(prod_run):
    _, model, prometheus_rule = emitted(prod_run)
    produced = scraped_metrics(prod_run, "actor_id") | recorded_metrics(prometheus_rule)
    seen_metrics: set[str] = set()
    for panel in model["panels"]:
        for target in panel["targets"]:
            parsed = promql_parser.parse(as_promql(target["expr"]))
            selectors, names = selectors_and_labels(parsed)
            metrics = {selector.name for selector in selectors}
            assert metrics <= set(produced), f"{panel['title']}: {metrics - set(produced)} is not produced"
            available = set().union(*(produced[m] for m in metrics))
            legend = set(re.findall(r"\{\{(\w+)\}\}", target.get("legendFormat", "")))
            assert names | legend <= available, (
                f"{panel['title']}: {(names | legend) - available} is no label of {metrics}"
            )
            seen_metrics |= metrics
    # Every source the issue asks for is on the dashboard.
    assert {
        "agent_budgets:gen_ai_usd:rate5m",
        "agent_budgets:gen_ai_tokens:rate5m",
        "agent_budgets:gen_ai_token_price:usd",
        "gen_ai_client_token_usage_sum",
        "ratelimit_service_rate_limit_near_limit",
        "ratelimit_service_rate_limit_over_limit",
        "envoy_cluster_ratelimit_over_limit",
        "envoy_http_rbac_denied",
    } == seen_metrics
    assert not any(name.endswith("_bucket") for name in seen_metrics), "the buckets may be dropped (docs/spend.md)"
    # The Envoy monitor keeps exactly the Envoy series the dashboard reads, from one list.
    assert {name for name in seen_metrics if name.startswith("envoy_")} == set(monitors.PROXY_METRICS)
    assert {name for name in produced if name.startswith("envoy_")} == set(monitors.PROXY_METRICS)


def refused_calls_matchers(model: dict[str, Any]) -> list[dict[str, str]]:
    """The label matchers of every series the refused-calls panel reads."""
    [panel] = [panel for panel in model["panels"] if panel["title"] == "Refused calls (per second)"]
    found = []
    for target in panel["targets"]:
        selectors, _ = selectors_and_labels(promql_parser.parse(as_promql(target["expr"])))
        found += [{m.name: m.value for m in s.matchers.matchers if m.name != "__name__"} for s in selectors]
    return found


def test_the_refused_calls_count_only_our_gateways_envoy_pods(prod_run):
    """Every Envoy serves these two names (another Gateway's pods, a mesh's sidecars): the queries select the `job`
    our Envoy pods get from the PodMonitor `envoy-proxy`, read off the scrape job the operator generates for it
    (core.monitors.scrape_config) run on such a pod by Prometheus' relabelling."""
    validated = validate_stack(config(), lambda key: (True, True))
    [proxy] = [m for m in monitors.pod_monitor_manifests(validated.settings) if m.name == monitors.PROXY_MONITOR_NAME]
    job = monitors.scrape_config(proxy)
    [scraped] = [
        labels
        for target in pod_targets("envoy-gateway-system", "envoy-agent-router-x1", ENVOY_LABELS, ENVOY_PORTS)
        if (labels := relabel(target, job["relabel_configs"])) is not None
    ]
    assert scraped["job"] == "agent-budgets/envoy-proxy"
    _, model, _ = emitted(prod_run)
    assert refused_calls_matchers(model) == [{"job": scraped["job"]}, {"job": scraped["job"]}]


def test_without_proxy_metrics_the_refused_calls_are_not_scraped_but_the_panel_stays():
    """`monitoring.proxyMetrics: false` is for a Prometheus that scrapes Envoy already: the panel reads that."""
    run = run_program(config(proxyMetrics=False), secrets=SECRETS)
    scraped = scraped_metrics(run, "actor_id")
    assert not any(name.startswith("envoy_") for name in scraped)
    assert "ratelimit_service_rate_limit_over_limit" in scraped
    _, model, _ = emitted(run)
    assert refused_calls_matchers(model) == [{}, {}], "the user's own scrape: labels the stack cannot know"


def test_the_check_would_catch_a_metric_or_label_the_stack_does_not_produce(prod_run):
    _, _, prometheus_rule = emitted(prod_run)
    produced = scraped_metrics(prod_run, "actor_id") | recorded_metrics(prometheus_rule)
    for bad in (
        "sum by (actor) (agent_budgets:gen_ai_usd:rate5m)",
        "sum(gen_ai_token_usage_total)",
        "sum(rate(envoy_cluster_upstream_rq_total[1m]))",  # served by Envoy, dropped by the monitor
    ):
        selectors, names = selectors_and_labels(promql_parser.parse(bad))
        metrics = {s.name for s in selectors}
        assert not (metrics <= set(produced) and names <= set().union(*(produced.get(m, set()) for m in metrics)))


def test_the_limit_tables_name_every_budget_limit(prod_run):
    settings, rules = settings_and_rules(config())
    _, model, _ = emitted(prod_run)
    tables = [panel for panel in model["panels"] if panel["type"] == "table"]
    assert len(tables) == 2
    for table in tables:
        [mapping] = table["fieldConfig"]["defaults"]["mappings"]
        keys = {rule_key1(settings.gateway.namespace, rule.index): rule for rule in rules.limit_rules}
        assert set(mapping["options"]) == set(keys)
        research_day = next(r for r in rules.limit_rules if r.budget == "research" and r.limit.per == "Day")
        assert mapping["options"][rule_key1("agent-budgets", research_day.index)]["text"] == (
            f"budget research: $5.00 per Day (rule {research_day.index})"
        )


def test_panels_follow_the_data_the_stack_has():
    """No actor panels without actor metrics, no dollar panels without a price."""
    titles = lambda stack: [spec.title for spec in dashboard.panel_specs(*settings_and_rules(stack))]  # noqa: E731
    everything = titles(config())
    without_actors = titles(config(actorMetrics=False))
    assert [t for t in everything if t not in without_actors] == [
        "Spend per actor (USD per hour)",
        "Tokens per actor (per hour)",
        "Top spenders in the time range (USD)",
        "Top token users in the time range",
    ]
    tokens_only = config()
    tokens_only["prices"] = {}
    tokens_only["budgets"] = {"default": {"tokens": 500, "per": "Day"}}
    assert [t for t in everything if t not in titles(tokens_only)] == [
        "Spend per actor (USD per hour)",
        "Top spenders in the time range (USD)",
        "Spend per billed model in the time range (USD)",
    ]


def test_labels_and_namespace_are_configurable_and_nothing_is_emitted_unless_asked_for():
    run = run_program(
        config(dashboardLabels={"grafana_dashboard": "agent-budgets"}, dashboardNamespace="monitoring"),
        secrets=SECRETS,
    )
    config_map, _, _ = emitted(run)
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "agent-budgets"
    off = run_program(config(dashboard=False), secrets=SECRETS)
    assert dashboard.CONFIG_MAP_NAME not in {r.inputs["metadata"]["name"] for r in off.of_kind("ConfigMap")}
    assert [r for r in off.resources if r.type == "agent-budgets:monitoring:Dashboard"] == []


def test_a_dashboard_without_the_prometheus_rule_is_a_warning_and_a_bad_namespace_is_refused():
    validated = validate_stack(config(prometheusRules=False), lambda key: (True, True))
    [warning] = [w for w in validated.warnings if w.key == "monitoring.dashboard"]
    assert "monitoring.prometheusRules is false" in warning.message
    assert "python -m tools.prometheus_files --stack <stack> rules" in warning.message
    run = run_program(config(prometheusRules=False), secrets=SECRETS)
    assert any("agent-budgets:monitoring.dashboard" in line for line in run.warnings)
    assert run.of_kind("PrometheusRule") == [] and emitted_config_map(run) is not None
    assert not [
        w for w in validate_stack(config(), lambda key: (True, True)).warnings if w.key.startswith("monitoring")
    ]

    stack = config(dashboardNamespace="Not_A_Label")
    with pytest.raises(ConfigError) as caught:
        validate_stack(stack, lambda key: (True, True))
    [problem] = caught.value.problems
    assert problem.key == "monitoring.dashboardNamespace"
    assert "'Not_A_Label' is not a DNS label" in problem.message
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=re.escape("agent-budgets:monitoring.dashboardNamespace:")):
        run_program(stack, secrets=SECRETS, mocks=mocks)
    assert mocks.resources == []


def emitted_config_map(run) -> dict[str, Any] | None:
    found = [r.inputs for r in run.of_kind("ConfigMap") if r.inputs["metadata"]["name"] == dashboard.CONFIG_MAP_NAME]
    return found[0] if found else None

"""The PodMonitors that feed the budget alerts, and the alert on their series going missing (issue 22).

Checked under Pulumi mocks on the whole program: with `monitoring.prometheusRules` the program emits a
PodMonitor for `envoy-ratelimit`'s `metrics` port, one for Agent Router's `aigw-admin` port and one for Envoy's own
stats (`monitoring.proxyMetrics`, kept down to the refused-call counters), labelled with
`monitoring.ruleLabels`, each valid against prometheus-operator v0.93.0's own CRD (the pinned copy the schema
tests load); the selectors name the labels and ports the pods really carry (the rendered rate-limit pod of
core/ratelimit_deployment.py, the Gateway's own name and namespace); the absence alert parses as PromQL.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import promql_parser
import pytest

from core import monitors
from core import platform_values as pv
from core.manifests import gateway_manifests
from core.monitoring import ALERT_GROUP, NEAR_LIMIT_METRIC
from core.problems import ConfigError
from core.ratelimit_deployment import prometheus_enabled, render_ratelimit_pod
from core.validation import parse_settings, validate_stack
from tests.support.crds import load_catalog
from tests.support.program import ProgramRun, run_program, stack_config

RULE_LABELS = {"release": "kube-prometheus-stack", "team": "platform"}


def monitored(**monitoring: Any) -> dict[str, Any]:
    config = copy.deepcopy(stack_config("dev"))
    config["monitoring"] = {"prometheusRules": True, "ruleLabels": RULE_LABELS, **monitoring}
    return config


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program(monitored())


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def pod_monitors(run: ProgramRun) -> dict[str, dict[str, Any]]:
    return {r.inputs["metadata"]["name"]: r.as_object() for r in run.of_kind("PodMonitor")}


def test_three_pod_monitors_beside_the_rule_with_the_labels_a_prometheus_selects(run):
    found = pod_monitors(run)
    assert sorted(found) == ["agent-router", "envoy-proxy", "envoy-ratelimit"]
    rule = run.one("PrometheusRule", "agent-budgets").as_object()
    for monitor in found.values():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        # Beside the rule: under enforcedNamespaceLabel both get this namespace (namespacelabeler/labeler.go).
        assert monitor["metadata"]["namespace"] == rule["metadata"]["namespace"] == "agent-budgets"
        assert RULE_LABELS.items() <= monitor["metadata"]["labels"].items()
    assert found["envoy-ratelimit"]["spec"] == {
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "envoy-ratelimit",
                "app.kubernetes.io/component": "ratelimit",
                "app.kubernetes.io/managed-by": "envoy-gateway",
            }
        },
        "namespaceSelector": {"matchNames": ["envoy-gateway-system"]},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
    }
    assert found["agent-router"]["spec"]["podMetricsEndpoints"] == [{"port": "aigw-admin", "path": "/metrics"}]
    assert found["agent-router"]["spec"]["namespaceSelector"] == {"matchNames": ["envoy-gateway-system"]}


def test_the_monitors_wait_for_their_namespace_inside_the_monitoring_component(run):
    registered = {r.object_name: r for r in run.monitor.of_type(":PodMonitor")}
    component = run.monitor.one("agent-budgets:monitoring:Monitoring")
    namespace = run.monitor.one(":Namespace", "agent-budgets")
    for monitor in registered.values():
        assert monitor.parent == component.urn
        assert namespace.urn in monitor.dependencies
    outputs = run.monitor.outputs[component.urn]
    assert outputs["podMonitors"] == [
        "agent-budgets/envoy-ratelimit",
        "agent-budgets/agent-router",
        "agent-budgets/envoy-proxy",
    ]


def test_every_monitor_meets_the_prometheus_operator_crd(run, catalog):
    for monitor in pod_monitors(run).values():
        assert catalog.validate(monitor).errors == []
        broken = copy.deepcopy(monitor)
        broken["spec"]["podMetricEndpoints"] = broken["spec"].pop("podMetricsEndpoints")
        assert catalog.validate(broken).errors, "a misspelt field passed the CRD check"
    rule = run.one("PrometheusRule", "agent-budgets").as_object()
    assert catalog.validate(rule).errors == []


def test_the_rate_limit_monitor_scrapes_a_port_the_rendered_pod_declares():
    """Envoy Gateway names the port `metrics` only while its Prometheus sink is on (resource.go)."""
    settings = parse_settings(monitored())
    pod = render_ratelimit_pod(pv.envoy_gateway_config(settings))
    [endpoint] = monitors.ratelimit_pod_monitor(settings).spec["podMetricsEndpoints"]
    assert endpoint["port"] in [port["name"] for port in pod.container_ports]
    assert pod.env_value("USE_PROMETHEUS") == {"name": "USE_PROMETHEUS", "value": "true"}
    assert pod.env_value("PROMETHEUS_ADDR")["value"] == ":19001"


def test_the_agent_router_monitor_selects_our_gateways_envoy_pods():
    settings = parse_settings({**monitored(), "gateway": {"namespace": "llm-gateway"}})
    [gateway] = [m for m in gateway_manifests(settings) if m.kind == "Gateway"]
    labels = monitors.agent_router_pod_monitor(settings).spec["selector"]["matchLabels"]
    assert labels["gateway.envoyproxy.io/owning-gateway-name"] == gateway.name
    assert labels["gateway.envoyproxy.io/owning-gateway-namespace"] == gateway.namespace == "llm-gateway"
    assert monitors.agent_router_pod_monitor(settings).namespace == "llm-gateway"


def test_the_absence_alert_reads_a_series_that_needs_no_traffic(run):
    groups = run.one("PrometheusRule", "agent-budgets").as_object()["spec"]["groups"]
    assert [group["name"] for group in groups] == [ALERT_GROUP, "agent-budgets-metrics", "agent-budgets-usd"]
    [alert] = groups[1]["rules"]
    assert alert["alert"] == "AgentBudgetRateLimitMetricsAbsent"
    assert alert["for"] == "10m" and alert["labels"] == {"severity": "warning"}
    parsed = promql_parser.parse(alert["expr"])
    assert type(parsed).__name__ == "Call" and parsed.func.name == "absent"
    assert alert["expr"] == "absent(ratelimit_service_config_load_success)"
    assert "`envoy-ratelimit`" in alert["annotations"]["description"]
    # The per-rule counters the budget alerts read appear only after traffic near a limit: not a liveness signal.
    assert NEAR_LIMIT_METRIC not in alert["expr"]


def test_pod_monitors_can_be_left_to_your_own_scrape_config():
    run = run_program(monitored(podMonitors=False))
    assert run.of_kind("PodMonitor") == []
    groups = run.one("PrometheusRule", "agent-budgets").as_object()["spec"]["groups"]
    assert groups[1]["rules"][0]["alert"] == "AgentBudgetRateLimitMetricsAbsent"


def test_no_monitor_without_the_alerts():
    run = run_program(stack_config("dev"))
    assert run.of_kind("PodMonitor") == [] and run.of_kind("PrometheusRule") == []
    assert monitors.pod_monitor_manifests(parse_settings({**stack_config("dev"), "monitoring": {}})) == []


def test_the_histogram_buckets_can_be_dropped_at_scrape_time(catalog):
    """`monitoring.histogramBuckets: false`: the agent-router monitor drops every `gen_ai_*_bucket` series (the
    rate-limit monitor is untouched), valid for the operator's CRD and the same in the plain scrape job."""
    run = run_program(monitored(histogramBuckets=False))
    found = pod_monitors(run)
    [endpoint] = found["agent-router"]["spec"]["podMetricsEndpoints"]
    assert endpoint["metricRelabelings"] == [
        {"sourceLabels": ["__name__"], "regex": "gen_ai_.*_bucket", "action": "drop"}
    ]
    assert "metricRelabelings" not in found["envoy-ratelimit"]["spec"]["podMetricsEndpoints"][0]
    assert catalog.validate(found["agent-router"]).errors == []
    dropped = re.compile(monitors.HISTOGRAM_BUCKETS)
    assert dropped.fullmatch("gen_ai_client_token_usage_bucket")
    assert not dropped.fullmatch("gen_ai_client_token_usage_sum")
    settings = parse_settings(monitored(histogramBuckets=False))
    job = monitors.scrape_config(monitors.agent_router_pod_monitor(settings))
    assert job["metric_relabel_configs"] == [
        {"source_labels": ["__name__"], "regex": "gen_ai_.*_bucket", "action": "drop"}
    ]
    kept = pod_monitors(run_program(monitored()))
    assert "metricRelabelings" not in kept["agent-router"]["spec"]["podMetricsEndpoints"][0]


def test_the_proxy_monitor_keeps_only_the_refused_calls_of_our_gateways_envoy_pods(run, catalog):
    """Envoy Gateway v1.9.0 `proxy/resource.go`: container `envoy`, port `metrics` (19001, `EnvoyStatsPort`), whose
    listener serves `GET /stats/prometheus` (`bootstrap.yaml.tpl`); the same pods as Agent Router's monitor."""
    found = pod_monitors(run)
    proxy = found["envoy-proxy"]
    assert proxy["spec"]["selector"] == found["agent-router"]["spec"]["selector"]
    assert proxy["spec"]["namespaceSelector"] == {"matchNames": ["envoy-gateway-system"]}
    assert proxy["spec"]["podMetricsEndpoints"] == [
        {
            "port": "metrics",
            "path": "/stats/prometheus",
            "metricRelabelings": [
                {
                    "sourceLabels": ["__name__"],
                    "regex": "envoy_cluster_ratelimit_over_limit|envoy_http_rbac_denied",
                    "action": "keep",
                }
            ],
        }
    ]
    assert catalog.validate(proxy).errors == []


def test_the_proxy_monitor_can_be_left_out_and_needs_a_stats_port(monkeypatch):
    """`monitoring.proxyMetrics: false` leaves Envoy's stats to your own scrape; an EnvoyProxy with Prometheus
    disabled has no `metrics` port (`enablePrometheus`), so there is nothing to scrape."""
    names = sorted(pod_monitors(run_program(monitored(proxyMetrics=False))))
    assert names == ["agent-router", "envoy-ratelimit"]
    settings = parse_settings(monitored())
    [envoy_proxy] = [m for m in gateway_manifests(settings) if m.kind == "EnvoyProxy"]
    assert prometheus_enabled(envoy_proxy.spec) and monitors.proxy_serves_prometheus(settings)
    assert not prometheus_enabled({**envoy_proxy.spec, "telemetry": {"metrics": {"prometheus": {"disable": True}}}})

    def without_prometheus(settings):
        found = gateway_manifests(settings)
        for manifest in found:
            if manifest.kind == "EnvoyProxy":
                manifest.spec["telemetry"] = {"metrics": {"prometheus": {"disable": True}}}
        return found

    monkeypatch.setattr(monitors, "gateway_manifests", without_prometheus)
    assert [m.name for m in monitors.pod_monitor_manifests(settings)] == ["envoy-ratelimit", "agent-router"]


def test_a_bad_proxy_metrics_value_is_refused_with_its_key_beside_other_mistakes():
    raw = {key: value for key, value in monitored(proxyMetrics="sometimes", nearLimitPercent=120).items()}
    with pytest.raises(ConfigError) as raised:
        validate_stack(raw, lambda key: (True, True))
    report = str(raised.value)
    assert report.startswith("invalid stack configuration:")
    assert "agent-budgets:monitoring.proxyMetrics" in report and "'sometimes'" in report
    assert "agent-budgets:monitoring.nearLimitPercent" in report

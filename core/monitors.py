"""What brings the budget alerts' and the dashboard's series into Prometheus: three PodMonitors, and the alert that
fires when the rate-limit service's series are missing (so a silent budget alert is never mistaken for a quiet day).

Neither upstream chart creates a monitor for these metrics: Envoy Gateway puts only `prometheus.io/*`
annotations on the `envoy-ratelimit` pods and on the Envoy pods (`/stats/prometheus` on 19001: envoyproxy/gateway
v1.9.0 `internal/infrastructure/kubernetes/proxy/resource_provider.go` `getPodAnnotations`), which the Prometheus
Operator ignores but an annotation-driven scrape job does not (then the PodMonitors would count twice:
docs/spend.md), and Agent Router's external processor declares its admin port and nothing else. Facts, at the
versions the program deploys:

* `envoy-ratelimit` (envoyproxy/gateway v1.9.0 `internal/infrastructure/kubernetes/ratelimit/resource.go`,
  `rateLimitLabels`, `expectedRateLimitContainers`): pods in Envoy Gateway's namespace labelled
  `app.kubernetes.io/name: envoy-ratelimit`, `app.kubernetes.io/component: ratelimit`,
  `app.kubernetes.io/managed-by: envoy-gateway`, serving Prometheus on container port `metrics` (19001) at
  `/metrics` unless `rateLimit.telemetry.metrics.prometheus.disable` (which the program never sets).
* Agent Router's external processor (theagentrouter/agent-router `internal/controller/extproc_builder.go`
  @c0421dd5, the same in envoyproxy/ai-gateway v1.1.0): a container the webhook injects into every Envoy pod
  of a Gateway with AI routes, port `aigw-admin` (1064), `/metrics`. In sidecar mode it is an init container
  with `restartPolicy: Always`; Prometheus' pod discovery lists init containers' ports too
  (prometheus/prometheus `discovery/kubernetes/pod.go`, since 2019). The Envoy pods carry Envoy Gateway's
  `app.kubernetes.io/{name: envoy, component: proxy, managed-by: envoy-gateway}` and the owning Gateway's
  name and namespace (`internal/infrastructure/kubernetes/proxy/resource.go` `EnvoyAppLabel`,
  `internal/gatewayapi/helpers.go` `GatewayOwnerLabels`).

* Envoy's own stats, in the same Envoy pods (envoyproxy/gateway v1.9.0 `internal/infrastructure/kubernetes/proxy/
  resource.go` `expectedProxyContainers`, `internal/xds/bootstrap/bootstrap.go` `EnvoyStatsPort`,
  `bootstrap.yaml.tpl`): container `envoy`, port `metrics` (19001), a listener that serves only `GET
  /stats/prometheus`; the port and the listener exist unless the EnvoyProxy sets
  `telemetry.metrics.prometheus.disable` (`enablePrometheus`). Envoy prints thousands of series per proxy
  (every cluster, listener and filter), so that monitor keeps only `PROXY_METRICS`, the ones the dashboard reads.

The monitors live in the gateway namespace, beside the PrometheusRule, and reach Envoy Gateway's namespace
through `namespaceSelector`. So one namespace has to be admitted by the Prometheus (rules and pod monitors),
and with the operator's `enforcedNamespaceLabel` the scraped series and the rule's selectors get the same
`namespace` value (prometheus-operator v0.93.0 `pkg/namespacelabeler/labeler.go`; docs/spend.md).
"""

from __future__ import annotations

from typing import Any

from core.manifests import GATEWAY_NAME, Manifest, gateway_manifests
from core.ratelimit_deployment import (
    METRICS_PORT_NAME,
    RATELIMIT_CONTAINER_NAME,
    RATELIMIT_POD_LABELS,
    STATS_FLUSH_INTERVAL,
    prometheus_enabled,
)
from core.settings import ENVOY_GATEWAY_NAMESPACE, StackSettings, prometheus_label

POD_MONITOR_API = "monitoring.coreos.com/v1"
RATELIMIT_MONITOR_NAME = "envoy-ratelimit"
AGENT_ROUTER_MONITOR_NAME = "agent-router"
PROXY_MONITOR_NAME = "envoy-proxy"
METRICS_PATH = "/metrics"
AGENT_ROUTER_METRICS_PORT_NAME = "aigw-admin"
PROXY_METRICS_PORT_NAME = "metrics"
"""The `envoy` container's stats port (19001); Prometheus' pod discovery names it, so no number is needed."""
PROXY_STATS_PATH = "/stats/prometheus"
# Envoy's stats as its Prometheus output names them: the default tag extractors (envoyproxy/envoy
# `source/common/config/well_known_names.cc`) take `cluster.<name>.` and `http.<prefix>.` out of the name into
# the labels `envoy_cluster_name` and `envoy_http_conn_manager_prefix` (upstream's tag extractor tests:
# `cluster.ratelimit.upstream_rq_timeout` → `cluster.upstream_rq_timeout`, `http.hcm_prefix.rbac.prefix.allowed` →
# `http.rbac.allowed`; Envoy Gateway sets no RBAC `stat_prefix`), then `envoy_` and `_` for `.`.
RATELIMIT_429_METRIC = "envoy_cluster_ratelimit_over_limit"
"""Every call Envoy's rate-limit filter refuses with 429 (`cluster.<route cluster>.ratelimit.over_limit`)."""
RBAC_403_METRIC = "envoy_http_rbac_denied"
"""Every call the authorization (RBAC) filter refuses with 403, suspended actors' (`http.<prefix>.rbac.denied`)."""
PROXY_METRICS = (RATELIMIT_429_METRIC, RBAC_403_METRIC)
"""The only Envoy series the `envoy-proxy` monitor keeps: the ones core.dashboard queries (tests/test_dashboard.py
checks that it queries exactly these)."""
ENVOY_POD_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
OWNING_GATEWAY_NAME_LABEL = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE_LABEL = "gateway.envoyproxy.io/owning-gateway-namespace"

SCRAPE_ALERT_GROUP = "agent-budgets-metrics"
METRICS_ABSENT_ALERT = "AgentBudgetRateLimitMetricsAbsent"
# A counter every envoy-ratelimit pod exports once it has loaded its configuration from Envoy Gateway, and
# keeps (envoyproxy/ratelimit src/service/ratelimit.go `SetConfig`; named by Envoy Gateway's statsd mapping,
# ratelimit/statsd_conf.yaml). Unlike the per-rule counters it needs no traffic, so its absence means the
# service's series are not reaching Prometheus at all.
CONFIG_LOADED_METRIC = "ratelimit_service_config_load_success"
HISTOGRAM_BUCKETS = "gen_ai_.*_bucket"
"""The bucket series of Agent Router's GenAI histograms (`monitoring.histogramBuckets: false` drops them)."""
METRICS_ABSENT_FOR = "10m"


def _pod_monitor(
    settings: StackSettings,
    name: str,
    pod_labels: dict[str, str],
    port: str,
    metric_relabelings: list[dict[str, Any]] | None = None,
    path: str = METRICS_PATH,
) -> Manifest:
    endpoint: dict[str, Any] = {"port": port, "path": path}
    if metric_relabelings:
        endpoint["metricRelabelings"] = metric_relabelings
    return Manifest(
        POD_MONITOR_API,
        "PodMonitor",
        name,
        settings.gateway.namespace,
        {
            "selector": {"matchLabels": dict(pod_labels)},
            "namespaceSelector": {"matchNames": [ENVOY_GATEWAY_NAMESPACE]},
            "podMetricsEndpoints": [endpoint],
        },
        labels=dict(settings.monitoring.rule_labels),
    )


def ratelimit_pod_monitor(settings: StackSettings) -> Manifest:
    """Scrape every `envoy-ratelimit` pod: the series of both budget alerts."""
    return _pod_monitor(settings, RATELIMIT_MONITOR_NAME, RATELIMIT_POD_LABELS, METRICS_PORT_NAME)


def gateway_envoy_pod_labels(settings: StackSettings) -> dict[str, str]:
    """The labels of our Gateway's Envoy pods, and of no other Gateway's."""
    return {
        **ENVOY_POD_LABELS,
        OWNING_GATEWAY_NAME_LABEL: GATEWAY_NAME,
        OWNING_GATEWAY_NAMESPACE_LABEL: settings.gateway.namespace,
    }


def agent_router_pod_monitor(settings: StackSettings) -> Manifest:
    """Scrape Agent Router's external processor in our Gateway's Envoy pods: the per-actor GenAI metrics."""
    labels = gateway_envoy_pod_labels(settings)
    # Without the buckets a histogram keeps `_sum` and `_count`, all that the spend queries, the recording rules
    # and the dashboard read (docs/spend.md, "What per-actor metrics cost").
    drop_buckets = [{"sourceLabels": ["__name__"], "regex": HISTOGRAM_BUCKETS, "action": "drop"}]
    return _pod_monitor(
        settings,
        AGENT_ROUTER_MONITOR_NAME,
        labels,
        AGENT_ROUTER_METRICS_PORT_NAME,
        None if settings.monitoring.histogram_buckets else drop_buckets,
    )


def proxy_serves_prometheus(settings: StackSettings) -> bool:
    """Whether our Gateway's Envoy pods declare the stats port: our EnvoyProxy leaves Prometheus on."""
    [envoy_proxy] = [manifest for manifest in gateway_manifests(settings) if manifest.kind == "EnvoyProxy"]
    return prometheus_enabled(envoy_proxy.spec)


def proxy_pod_monitor(settings: StackSettings) -> Manifest:
    """Scrape Envoy's own stats in our Gateway's Envoy pods, keeping only `PROXY_METRICS` (the refused calls)."""
    keep = [{"sourceLabels": ["__name__"], "regex": "|".join(PROXY_METRICS), "action": "keep"}]
    return _pod_monitor(
        settings,
        PROXY_MONITOR_NAME,
        gateway_envoy_pod_labels(settings),
        PROXY_METRICS_PORT_NAME,
        keep,
        path=PROXY_STATS_PATH,
    )


def all_pod_monitors(settings: StackSettings) -> list[Manifest]:
    """Every PodMonitor, whether or not `prometheusRules` and `podMonitors` are on (for a Prometheus the operator
    does not manage): the Envoy stats one only with `monitoring.proxyMetrics` and a port to scrape."""
    found = [ratelimit_pod_monitor(settings), agent_router_pod_monitor(settings)]
    if settings.monitoring.proxy_metrics and proxy_serves_prometheus(settings):
        found.append(proxy_pod_monitor(settings))
    return found


def pod_monitor_manifests(settings: StackSettings) -> list[Manifest]:
    """The PodMonitors to create: none unless `monitoring.prometheusRules` and `monitoring.podMonitors`."""
    if not (settings.monitoring.prometheus_rules and settings.monitoring.pod_monitors):
        return []
    return all_pod_monitors(settings)


def scrape_config(monitor: Manifest) -> dict[str, Any]:
    """The Prometheus scrape job the operator generates for one of our PodMonitors (prometheus-operator
    v0.93.0 `pkg/prometheus/promcfg.go` `generatePodMonitorConfig`, without the operator's own bookkeeping
    labels), so that a Prometheus it does not manage gets the same targets and the same `job`, `namespace`,
    `pod`, `container` and `endpoint` labels."""
    spec = monitor.spec
    [endpoint] = spec["podMetricsEndpoints"]
    relabel: list[dict[str, Any]] = [
        # Only running pods (`generateRunningFilter`).
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"}
    ]
    for key, value in sorted(spec["selector"]["matchLabels"].items()):
        relabel.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_pod_label_{prometheus_label(key)}",
                    f"__meta_kubernetes_pod_labelpresent_{prometheus_label(key)}",
                ],
                "regex": f"({value});true",
            }
        )
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": endpoint["port"]},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{monitor.namespace}/{monitor.name}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
    ]
    job: dict[str, Any] = {
        "job_name": f"podMonitor/{monitor.namespace}/{monitor.name}/0",
        "metrics_path": endpoint["path"],
        "kubernetes_sd_configs": [
            {"role": "pod", "namespaces": {"names": list(spec["namespaceSelector"]["matchNames"])}}
        ],
        "relabel_configs": relabel,
    }
    if endpoint.get("metricRelabelings"):
        # `metricRelabelings` become `metric_relabel_configs`, field names in snake case (`generateRelabelConfig`).
        job["metric_relabel_configs"] = [
            {"source_labels": rule["sourceLabels"], "regex": rule["regex"], "action": rule["action"]}
            for rule in endpoint["metricRelabelings"]
        ]
    return job


def scrape_configs(settings: StackSettings) -> list[dict[str, Any]]:
    """The monitors as `scrape_configs` entries of a Prometheus configuration file."""
    return [scrape_config(monitor) for monitor in all_pod_monitors(settings)]


def metrics_absent_alert_group() -> dict[str, Any]:
    """The rule group that fires when no rate-limit service's series reach Prometheus.

    Label-free on purpose: it holds however the pods are scraped (our PodMonitor or your own job), and under
    `enforcedNamespaceLabel` the operator adds the rule's namespace, which our monitors' series carry too."""
    return {
        "name": SCRAPE_ALERT_GROUP,
        "rules": [
            {
                "alert": METRICS_ABSENT_ALERT,
                "expr": f"absent({CONFIG_LOADED_METRIC})",
                "for": METRICS_ABSENT_FOR,
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": "No rate-limit service metrics reach Prometheus: the budget alerts cannot fire",
                    "description": (
                        f"For {METRICS_ABSENT_FOR} Prometheus has had no `{CONFIG_LOADED_METRIC}` series, which "
                        "every envoy-ratelimit pod exports once it has its configuration (stats are flushed "
                        f"every {STATS_FLUSH_INTERVAL}). AgentBudgetNearLimit and AgentBudgetExhausted read the "
                        "same pods, so they stay silent too. Check that your Prometheus scrapes them (the "
                        f"PodMonitor `{RATELIMIT_MONITOR_NAME}` must match its podMonitorSelector and "
                        "podMonitorNamespaceSelector; or your own scrape job) and that "
                        f"`kubectl -n {ENVOY_GATEWAY_NAMESPACE} get pods -l "
                        f"app.kubernetes.io/name={RATELIMIT_CONTAINER_NAME}` shows running pods."
                    ),
                },
            }
        ],
    }

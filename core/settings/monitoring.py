"""`agent-budgets:monitoring`: per-actor gateway metrics, the budget alerts and USD recording rules, the dashboard."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from core.names import is_label_value, label_key_problem
from core.settings.base import ConfigModel, check_dns_label

# An OpenTelemetry attribute name as Agent Router's header mapping takes it: dotted lowercase words.
_OTEL_ATTRIBUTE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")


def prometheus_label(attribute: str) -> str:
    """A name as a Prometheus label name: every character outside [a-zA-Z0-9_] → `_`. How an OpenTelemetry
    attribute becomes a label, and how the Prometheus Operator turns a Kubernetes label key into a meta-label
    suffix (`sanitizeLabelName`, pkg/prometheus/promcfg.go)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


class MonitoringSettings(ConfigModel):
    """Per-actor gateway metrics, and the optional alerts on every budget (Prometheus Operator)."""

    actor_metrics: bool = Field(
        default=True,
        description=(
            "Agent Router labels its GenAI metrics (token usage, request duration, time to first token, time per "
            "output token) with the caller's `x-actor-id` (chart value `controller.metricsRequestHeaderAttributes`). "
            "Costs series per actor, model and operation on each Envoy pod "
            "([what per-actor metrics cost](spend.md#what-per-actor-metrics-cost-and-how-to-keep-them)); off: no "
            "per-actor series."
        ),
    )
    actor_attribute: str = Field(
        default="actor.id",
        description=(
            "The OpenTelemetry attribute that holds the actor id; Prometheus shows it with dots as underscores "
            "(`actor.id` → label `actor_id`)."
        ),
    )
    prometheus_rules: bool = Field(
        default=False,
        description=(
            "Create a PrometheusRule with two alerts per budget (near its limit, over it), one for their metrics "
            "going missing and the recording rules that price token use in USD, and (unless `podMonitors` is off) "
            "the PodMonitors that feed them. Needs the Prometheus Operator CRDs in the cluster."
        ),
    )
    pod_monitors: bool = Field(
        default=True,
        description=(
            "With `prometheusRules`: also create the PodMonitors that scrape the series the alerts read "
            "(`envoy-ratelimit`'s `metrics` port), Agent Router's GenAI metrics (its `aigw-admin` port) and, with "
            "`proxyMetrics`, Envoy's refused calls. Turn off when your Prometheus scrapes those ports already: "
            "scraping twice doubles every sum."
        ),
    )
    proxy_metrics: bool = Field(
        default=True,
        description=(
            "With `prometheusRules` and `podMonitors`: also create the PodMonitor `envoy-proxy`, which scrapes Envoy's "
            "own stats on the Gateway's Envoy pods (port `metrics`, `/stats/prometheus`) and keeps only the refused-"
            "call counters the dashboard reads. Turn off when your Prometheus scrapes that port already."
        ),
    )
    near_limit_percent: float = Field(
        default=80,
        gt=0,
        lt=100,
        description=(
            "The share of a budget at which the near-limit alert fires; also the rate-limit service's "
            "`NEAR_LIMIT_RATIO` (its upstream default is 80%)."
        ),
    )
    rule_labels: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Labels on the PrometheusRule and the PodMonitors, so that your Prometheus' `ruleSelector` and "
            "`podMonitorSelector` pick them up (e.g. `release: kube-prometheus-stack`)."
        ),
    )

    histogram_buckets: bool = Field(
        default=True,
        description=(
            "Keep the `_bucket` series of Agent Router's GenAI histograms when the PodMonitor `agent-router` scrapes "
            "them; `false` drops them at scrape time (nothing of this program reads them), most of the series per "
            "actor ([what per-actor metrics cost](spend.md#what-per-actor-metrics-cost-and-how-to-keep-them))."
        ),
    )
    dashboard: bool = Field(
        default=False,
        description=(
            "Create a ConfigMap holding a Grafana dashboard (spend per actor in tokens and USD, top spenders, the "
            "split per model, budgets near or over a limit, refused calls) for Grafana's dashboard sidecar. Its "
            "token and USD series are recording rules: set `prometheusRules: true`, or load them from "
            "`tools.prometheus_files`."
        ),
    )
    dashboard_labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description=(
            "Labels on the dashboard ConfigMap: the label Grafana's sidecar selects (kube-prometheus-stack: "
            '`grafana.sidecar.dashboards.label` and `labelValue`, `grafana_dashboard: "1"`).'
        ),
    )
    dashboard_namespace: str | None = Field(
        default=None,
        description=(
            "Namespace of the dashboard ConfigMap; default the gateway namespace. The sidecar reads only Grafana's "
            "own namespace unless `grafana.sidecar.dashboards.searchNamespace` says otherwise. Must exist."
        ),
    )

    @property
    def actor_label(self) -> str | None:
        """The Prometheus label holding the actor on Agent Router's metrics, or None when actor metrics are off."""
        return prometheus_label(self.actor_attribute) if self.actor_metrics else None

    @field_validator("near_limit_percent", mode="before")
    @classmethod
    def _percent_is_a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"got {value!r}: give a percentage between 0 and 100, e.g. nearLimitPercent: 80")
        if isinstance(value, str):
            text = value.strip().removesuffix("%").strip()
            raise ValueError(
                f"got {value!r}: write the percentage as a number without quotes or %, e.g. nearLimitPercent: "
                f"{text if text.replace('.', '', 1).isdigit() else 80}"
            )
        return value

    @field_validator("actor_attribute")
    @classmethod
    def _attribute(cls, value: str) -> str:
        if len(value) > 100 or not _OTEL_ATTRIBUTE.match(value):
            raise ValueError(
                f"actorAttribute {value!r} is not an attribute name such as actor.id: lowercase words of letters, "
                "digits and '_', joined by dots"
            )
        return value

    @field_validator("dashboard_namespace")
    @classmethod
    def _dashboard_namespace(cls, value: str | None) -> str | None:
        return None if value is None else check_dns_label(value, "dashboardNamespace")

    @field_validator("rule_labels", "dashboard_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            problem = label_key_problem(key)
            if problem:
                raise ValueError(problem)
            if not isinstance(label, str) or not is_label_value(label):
                raise ValueError(
                    f"label {key}: {label!r} is not a Kubernetes label value (at most 63 letters, digits, '-', '_', "
                    "'.', starting and ending with a letter or digit)"
                )
        return value

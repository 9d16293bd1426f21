"""Metrics and alerts on the budgets, as plain data: the header-to-attribute mapping Agent Router is given,
the rate-limit service's near-limit ratio, and the PrometheusRule with two alerts per budget.

Where the figures come from (upstream files at the versions the program deploys):

* Agent Router (envoyproxy/ai-gateway v1.1.0, same in theagentrouter/agent-router's v1.2-era chart): the chart
  passes `controller.metricsRequestHeaderAttributes` (`header:attribute,...`) to the controller
  (`manifests/charts/ai-gateway-helm/templates/deployment.yaml`), which hands it to the external processor it
  injects into every Envoy pod (`internal/controller/extproc_builder.go`). That processor adds the header's
  value as an attribute of `gen_ai.client.token.usage` and `gen_ai.server.request.duration`
  (`internal/metrics/metrics_impl.go`) and serves them on its admin port 1064 at `/metrics`
  (`cmd/extproc/mainlib/admin.go`); Prometheus names them `gen_ai_client_token_usage` and
  `gen_ai_server_request_duration_seconds`, dots in attribute names becoming underscores
  (`cmd/extproc/mainlib/admin_test.go`).
* The rate-limit service (envoyproxy/ratelimit at f2fb157): for every rule it counts, in the rule's unit
  (tokens, or mills of a dollar for a usd limit), what it
  charged between `NEAR_LIMIT_RATIO` times the limit and the limit (`near_limit`) and what it charged beyond the limit
  (`over_limit`) (`src/limiter/base_limiter.go`, `src/stats/manager_impl.go`). A request that is refused
  costs 0 with our rules (the check before the call), so `over_limit` grows exactly when a response takes an
  actor over its limit: from then on that actor's calls get 429 until its window resets. Envoy Gateway
  v1.9.0 runs the service with Prometheus on port 19001 `/metrics` and its own statsd mapping
  (`internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml`), which names the counters
  `ratelimit_service_rate_limit_near_limit` / `..._over_limit` with labels `domain` (the policy,
  `<namespace>/<name>`) and `key1` (the rule, `<namespace>/<name>/rule/<i>_<namespace>/<name>/rule/<i>`).
  Neither counter names the actor (its value is not in the service's configuration): the alerts are per
  budget, and `make spend` tells who.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from core.budget_rules import ACTOR_HEADER, BudgetRules
from core.manifests import BUDGET_POLICY_NAME, Manifest
from core.monitors import metrics_absent_alert_group
from core.ratelimit_deployment import METRICS_PORT
from core.ratelimit_model import shared_domain, shared_rule_key
from core.recording_rules import promql_string, recording_group
from core.settings import MonitoringSettings, StackSettings
from core.spend import spec_text

PROMETHEUS_RULE_NAME = "agent-budgets"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1"
ALERT_GROUP = "agent-budgets"
# The names and the `domain`/`key1` labels come from Envoy Gateway's statsd mapping
# (internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml), checked at v1.9.0, the version the program is
# validated against. Our rules' descriptors are 3 to 34 levels deep: only the regex mappings ending in
# `(\..*)?\.near_limit` / `over_limit` map them, and those exist from Envoy Gateway v1.3.0 on; v1.2 and older
# had only the two-level globs, which would drop these stats and leave both alerts silent.
NEAR_LIMIT_METRIC = "ratelimit_service_rate_limit_near_limit"
OVER_LIMIT_METRIC = "ratelimit_service_rate_limit_over_limit"
NEAR_LIMIT_ALERT = "AgentBudgetNearLimit"
EXHAUSTED_ALERT = "AgentBudgetExhausted"
# How far back an alert looks for a new charge in the band (the rate-limit service flushes its stats every
# STATS_FLUSH_INTERVAL, 10 s by default: envoyproxy/ratelimit src/settings/settings.go).
LOOKBACK = "10m"
# Where the metrics are served (see the module docstring); core.monitors scrapes them.
AGENT_ROUTER_METRICS_PORT = 1064
RATELIMIT_METRICS_PORT = METRICS_PORT


def metrics_header_attributes(monitoring: MonitoringSettings) -> str | None:
    """The `controller.metricsRequestHeaderAttributes` value, or None when actor metrics are off."""
    if not monitoring.actor_metrics:
        return None
    return f"{ACTOR_HEADER}:{monitoring.actor_attribute}"


def near_limit_ratio(monitoring: MonitoringSettings) -> str:
    """`NEAR_LIMIT_RATIO` for envoy-ratelimit (a float32 in `src/settings/settings.go`): 80 → `0.8`."""
    ratio = Decimal(str(monitoring.near_limit_percent)) / 100
    return format(ratio.normalize(), "f")


def rule_key1(policy_namespace: str, rule_index: int) -> str:
    """The `key1` label of one budget rule's rate-limit counters (Envoy Gateway's statsd mapping)."""
    generic = shared_rule_key(policy_namespace, BUDGET_POLICY_NAME, rule_index)
    return f"{generic}_{generic}"


def rule_selector(policy_namespace: str, rule_index: int) -> str:
    """The label matchers of one budget rule's rate-limit counters."""
    domain = shared_domain(policy_namespace, BUDGET_POLICY_NAME)
    return f"{{domain={promql_string(domain)},key1={promql_string(rule_key1(policy_namespace, rule_index))}}}"


def event_expression(metric: str, selector: str) -> str:
    """True while the counter grew in the last LOOKBACK, per rule, across rate-limit pods.

    A counter the service has never flushed does not exist yet, and its first sample already holds the first
    charge, which `increase` cannot see; the second half catches such a new series (also after a restart).
    """
    series = f"{metric}{selector}"
    return (
        f"sum by (domain, key1) (increase({series}[{LOOKBACK}])) > 0\n"
        f"or\n"
        f"sum by (domain, key1) (({series} > 0) unless ({series} offset {LOOKBACK}))"
    )


def spend_command(stack: str, percent: float) -> str:
    """The command that lists the actors at or above `percent` of their limit."""
    return f"make spend STACK={stack} ARGS='--over {percent:g}'"


def budget_alerts(settings: StackSettings, rules: BudgetRules, stack: str) -> list[dict[str, Any]]:
    """Two alerting rules per limit of every budget and pool: near the limit, and over it (calls refused with
    429). A pool's counter is shared, so its alerts speak of the pool and all of its members."""
    namespace = settings.gateway.namespace
    percent = settings.monitoring.near_limit_percent
    percent_text = f"{percent:g}%"
    alerts: list[dict[str, Any]] = []
    for rule in rules.limit_rules:  # reserved slots match nobody: no alert
        assert rule.limit is not None
        limit = spec_text(rule.limit)
        selector = rule_selector(namespace, rule.index)
        budget = rule.purpose if rule.pooled else rule.budget
        labels = {"severity": "warning", "budget": budget, "rule": str(rule.index), "limit": str(rule.limit_index)}
        near_command, over_command = spend_command(stack, percent), spend_command(stack, 100)
        charge = "a call" if rule.limit.unit == "calls" else "a response"
        whom = (
            "the pool's counter and when its window resets"
            if rule.pooled
            else "the actors and when their windows reset"
        )
        if rule.pooled:
            near_summary = f"Pool {rule.budget} passed {percent_text} of its {limit}"
            near_what = f"the members of pool {rule.budget} (rule {rule.index}) together"
            over_summary = f"Pool {rule.budget} went over its {limit}: every member's calls get 429"
            over_what = (
                f"In the last {LOOKBACK} {charge} took pool {rule.budget} (rule {rule.index}), shared by all of its "
                f"members, over its {limit}; every member's calls are refused with 429 until the window resets."
            )
        else:
            near_summary = f"An actor of budget {budget} passed {percent_text} of its {limit}"
            near_what = f"an actor of budget {budget} (rule {rule.index})"
            over_summary = f"An actor of budget {budget} went over its {limit}: its calls get 429"
            over_what = (
                f"In the last {LOOKBACK} {charge} took an actor of budget {budget} (rule {rule.index}) over its "
                f"{limit}; its calls are refused with 429 until its window resets."
            )
        alerts.append(
            {
                "alert": NEAR_LIMIT_ALERT,
                "expr": event_expression(NEAR_LIMIT_METRIC, selector),
                "labels": dict(labels),
                "annotations": {
                    "summary": near_summary,
                    "description": (
                        f"In the last {LOOKBACK} the rate-limit service charged {near_what} beyond {percent_text} of "
                        f"its {limit}. Run `{near_command}` for {whom}."
                    ),
                },
            }
        )
        alerts.append(
            {
                "alert": EXHAUSTED_ALERT,
                "expr": event_expression(OVER_LIMIT_METRIC, selector),
                "labels": dict(labels),
                "annotations": {
                    "summary": over_summary,
                    "description": f"{over_what} Run `{over_command}` for {whom}.",
                },
            }
        )
    return alerts


def prometheus_rule_manifest(settings: StackSettings, rules: BudgetRules, stack: str) -> Manifest:
    """The PrometheusRule (monitoring.coreos.com/v1) holding every budget's alerts, the alert on their series
    going missing (core.monitors) and the USD recording rules (core.recording_rules), in the gateway namespace."""
    groups = [
        {"name": ALERT_GROUP, "rules": budget_alerts(settings, rules, stack)},
        metrics_absent_alert_group(),
        recording_group(settings),
    ]
    return Manifest(
        PROMETHEUS_RULE_API,
        "PrometheusRule",
        PROMETHEUS_RULE_NAME,
        settings.gateway.namespace,
        {"groups": groups},
        labels=dict(settings.monitoring.rule_labels),
    )

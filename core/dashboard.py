"""The Grafana dashboard of the budgets, built as code with grafana-foundation-sdk, for Grafana's dashboard sidecar.

What it shows and where each figure comes from:

* spend per actor, in tokens and in dollars, over time and over the dashboard's range, from Agent Router's
  per-actor token counters (`monitoring.actorMetrics`) and the recording rules of core.recording_rules, which
  price them with `agent-budgets:prices` as the routes' cost expressions do;
* the split per model: dollars by the model billed (`gen_ai_request_model`, the cost expression's `model`),
  tokens by the model the agent asked for (`gen_ai_original_model`) and by Agent Router backend
  (`gen_ai_backend`, Agent Router v1.2 and later);
* budgets with an actor near or over a limit, from the rate-limit service's `near_limit` / `over_limit` counters
  the alerts read (core.monitoring), one row per budget limit: those counters name the rule, never the actor;
* refused calls: 429 from Envoy's rate-limit filter and 403 from its RBAC filter, which refuses suspended actors,
  from Envoy's own stats (core.monitors `PROXY_METRICS`, which the PodMonitor `envoy-proxy` keeps and nothing
  else; where the names come from is said there).

A panel whose data the stack cannot have is left out: the per-actor panels without actor metrics, the dollar
panels without any price. The dashboard picks its Prometheus with a `datasource` variable, as the dashboards of
kube-prometheus-stack do. The ConfigMap carries `monitoring.dashboardLabels` (default `grafana_dashboard: "1"`,
the label kube-prometheus-stack's Grafana sidecar looks for: `grafana.sidecar.dashboards.label` and
`labelValue`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import bargauge, dashboard, piechart, prometheus, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DataSourceRef, ValueMap, ValueMappingResult
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from core.budget_rules import BudgetRules
from core.manifests import BUDGET_POLICY_NAME
from core.monitoring import NEAR_LIMIT_METRIC, OVER_LIMIT_METRIC, rule_key1
from core.monitors import PROXY_MONITOR_NAME, RATELIMIT_429_METRIC, RBAC_403_METRIC, pod_monitor_manifests
from core.ratelimit_model import shared_domain
from core.recording_rules import (
    BILLED_MODEL_LABEL,
    REQUESTED_MODEL_LABEL,
    TOKEN_METRIC,
    TOKENS_RECORD,
    USD_RECORD,
    billed_prices,
    priced_counters,
    promql_string,
    usd_expression,
)
from core.settings import StackSettings
from core.spend import spec_text

DASHBOARD_UID = "agent-budgets"
DASHBOARD_TITLE = "Agent budgets"
CONFIG_MAP_NAME = "agent-budgets-dashboard"
DASHBOARD_FILE = "agent-budgets.json"
TOP = 20
"""Actors shown in the per-actor panels: the top spenders of each moment, so 10,000 actors stay readable."""
BACKEND_LABEL = "gen_ai_backend"
# Grafana's own variables: the dashboard's time range, and a rate window that fits the scrape interval.
RANGE = "$__range"
RATE_INTERVAL = "$__rate_interval"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
_TOTAL_TYPES = '{gen_ai_token_type=~"input|output"}'
"""Input (cache reads and writes included) plus output (reasoning included): what a tokens budget is charged."""


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel, and how its series are named."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class PanelSpec:
    """A panel: what it answers (the docs say it), how it draws, its unit and its queries."""

    title: str
    answers: str
    kind: str  # timeseries | table | piechart | bargauge
    unit: str
    queries: tuple[Query, ...]
    mappings: tuple[tuple[str, str], ...] = ()
    """Value → text for a table's label column (the rule keys of the rate-limit stats → the budget limit)."""


def _limit_names(settings: StackSettings, rules: BudgetRules) -> tuple[tuple[str, str], ...]:
    """Each limit rule's `key1` (as the rate-limit stats label it) → `budget research: $5.00 per Day` (or
    `pool team: ...`)."""
    names = []
    for rule in rules.limit_rules:
        assert rule.limit is not None
        owner = f"pool {rule.budget}" if rule.pooled else f"budget {rule.budget}"
        names.append(
            (rule_key1(settings.gateway.namespace, rule.index), f"{owner}: {spec_text(rule.limit)} (rule {rule.index})")
        )
    return tuple(names)


def proxy_selector(settings: StackSettings) -> str:
    """Our Gateway's Envoy pods only, where the stack scrapes them: the `job` label prometheus-operator gives every
    target of the PodMonitor `envoy-proxy` (`<namespace>/<name>`, v0.93.0 `pkg/prometheus/promcfg.go`
    `generatePodMonitorConfig`). Envoy Gateway's other Gateways and any Envoy sidecar serve the same names. Without
    that monitor (`monitoring.proxyMetrics` or `podMonitors` off) the series come from the user's own scrape, whose
    labels the stack cannot know: no selector, every Envoy that Prometheus scrapes (docs/dashboard.md)."""
    for monitor in pod_monitor_manifests(settings):
        if monitor.name == PROXY_MONITOR_NAME:
            return "{job=" + promql_string(f"{monitor.namespace}/{monitor.name}") + "}"
    return ""


def panel_specs(settings: StackSettings, rules: BudgetRules) -> list[PanelSpec]:
    """Every panel the stack has data for, in the order they are laid out."""
    actor = settings.monitoring.actor_label
    priced = bool(billed_prices(settings))
    domain = promql_string(shared_domain(settings.gateway.namespace, BUDGET_POLICY_NAME))
    range_usd = f"increase({priced_counters()}[{RANGE}])"
    specs: list[PanelSpec] = []
    if actor and priced:
        specs.append(
            PanelSpec(
                "Spend per actor (USD per hour)",
                f"Who is spending how fast, in dollars: the {TOP} actors spending most at each moment.",
                "timeseries",
                "currencyUSD",
                (Query(f"topk({TOP}, sum by ({actor}) ({USD_RECORD})) * 3600", f"{{{{{actor}}}}}"),),
            )
        )
    if actor:
        specs.append(
            PanelSpec(
                "Tokens per actor (per hour)",
                f"Who is using how many tokens (input, cache included, plus output): the {TOP} largest at each moment.",
                "timeseries",
                "short",
                (
                    Query(
                        f"topk({TOP}, sum by ({actor}) ({TOKENS_RECORD}{_TOTAL_TYPES})) * 3600",
                        f"{{{{{actor}}}}}",
                    ),
                ),
            )
        )
    if actor and priced:
        specs.append(
            PanelSpec(
                "Top spenders in the time range (USD)",
                f"Which {TOP} actors spent the most in the dashboard's time range, priced as the budgets price calls.",
                "bargauge",
                "currencyUSD",
                (Query(f"topk({TOP}, {usd_expression(range_usd, actor)})", f"{{{{{actor}}}}}", True),),
            )
        )
    if actor:
        specs.append(
            PanelSpec(
                "Top token users in the time range",
                f"Which {TOP} actors used the most tokens in the dashboard's time range.",
                "bargauge",
                "short",
                (
                    Query(
                        f"topk({TOP}, sum by ({actor}) (increase({TOKEN_METRIC}{_TOTAL_TYPES}[{RANGE}])))",
                        f"{{{{{actor}}}}}",
                        True,
                    ),
                ),
            )
        )
    if priced:
        specs.append(
            PanelSpec(
                "Spend per billed model in the time range (USD)",
                "Which models the money goes to, by the model the provider bills (a route's modelNameOverride, "
                "else the name the agent sent).",
                "piechart",
                "currencyUSD",
                (Query(usd_expression(range_usd, BILLED_MODEL_LABEL), f"{{{{{BILLED_MODEL_LABEL}}}}}", True),),
            )
        )
    specs.append(
        PanelSpec(
            "Tokens per requested model in the time range",
            "Which models the agents ask for, by the name in their requests (before any override).",
            "piechart",
            "short",
            (
                Query(
                    f"sum by ({REQUESTED_MODEL_LABEL}) (increase({TOKEN_METRIC}{_TOTAL_TYPES}[{RANGE}]))",
                    f"{{{{{REQUESTED_MODEL_LABEL}}}}}",
                    True,
                ),
            ),
        )
    )
    specs.append(
        PanelSpec(
            "Tokens per model and backend (per hour)",
            "How the traffic splits over requested model, billed model and Agent Router backend over time "
            "(the backend label exists from Agent Router v1.2 on).",
            "timeseries",
            "short",
            (
                Query(
                    f"sum by ({REQUESTED_MODEL_LABEL}, {BILLED_MODEL_LABEL}, {BACKEND_LABEL}) "
                    f"(rate({TOKEN_METRIC}{_TOTAL_TYPES}[{RATE_INTERVAL}])) * 3600",
                    f"{{{{{REQUESTED_MODEL_LABEL}}}}} → {{{{{BILLED_MODEL_LABEL}}}}} ({{{{{BACKEND_LABEL}}}}})",
                ),
            ),
        )
    )
    names = _limit_names(settings, rules)
    percent = f"{settings.monitoring.near_limit_percent:g}%"
    for metric, title, answers in (
        (
            NEAR_LIMIT_METRIC,
            f"Budget limits with an actor past {percent}",
            f"Which budget limits had an actor charged past {percent} of the limit in the time range, and how much "
            "(in the limit's unit: tokens, calls, or mills for a usd limit). The rate-limit service does not name the "
            "actor: `make spend` does.",
        ),
        (
            OVER_LIMIT_METRIC,
            "Budget limits with an actor over the limit (429)",
            "Which budget limits had a response (for a calls limit, a call) take an actor over the limit in the time "
            "range (its calls are then refused with 429 until its window resets), and how much was charged beyond "
            "it.",
        ),
    ):
        specs.append(
            PanelSpec(
                title,
                answers,
                "table",
                "short",
                (Query(f"sum by (key1) (increase({metric}{{domain={domain}}}[{RANGE}])) > 0", "", True),),
                mappings=names,
            )
        )
    proxy = proxy_selector(settings)
    specs.append(
        PanelSpec(
            "Refused calls (per second)",
            "How many calls the gateway refuses: 429 when an actor is over a budget limit, 403 when it is "
            f"suspended. From Envoy's own stats (the PodMonitor `{PROXY_MONITOR_NAME}`, `monitoring.proxyMetrics`).",
            "timeseries",
            "reqps",
            (
                Query(f"sum(rate({RATELIMIT_429_METRIC}{proxy}[{RATE_INTERVAL}]))", "429 over a budget"),
                Query(f"sum(rate({RBAC_403_METRIC}{proxy}[{RATE_INTERVAL}]))", "403 suspended"),
            ),
        )
    )
    return specs


def _target(query: Query, ref: str, as_table: bool) -> prometheus.Dataquery:
    """A query; an instant one feeds a table as rows (one column per label), a bar gauge or pie by its legend."""
    target = prometheus.Dataquery().expr(query.expr).ref_id(ref).legend_format(query.legend or "__auto")
    if not query.instant:
        return target.range()
    return target.instant().format(PromQueryFormat.TABLE if as_table else PromQueryFormat.TIME_SERIES)


def _panel(spec: PanelSpec, panel_id: int) -> cogbuilder.Builder[Any]:
    builders = {
        "timeseries": timeseries.Panel,
        "table": table.Panel,
        "piechart": piechart.Panel,
        "bargauge": bargauge.Panel,
    }
    panel = builders[spec.kind]().id(panel_id).title(spec.title).description(spec.answers).datasource(DATASOURCE)
    panel = panel.unit(spec.unit).height(9).span(12)
    for index, query in enumerate(spec.queries):
        panel = panel.with_target(_target(query, chr(ord("A") + index), as_table=spec.kind == "table"))
    if spec.kind == "bargauge":
        panel = panel.orientation(common.VizOrientation.HORIZONTAL).display_mode(common.BarGaugeDisplayMode.GRADIENT)
    if spec.mappings:
        panel = panel.mappings(
            [
                ValueMap(
                    options={
                        value: ValueMappingResult(text=text, index=i) for i, (value, text) in enumerate(spec.mappings)
                    }
                )
            ]
        )
    return panel


def dashboard_model(settings: StackSettings, rules: BudgetRules) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    board = (
        dashboard.Dashboard(DASHBOARD_TITLE)
        .uid(DASHBOARD_UID)
        .tags(["agent-budgets"])
        .description("Spend per actor and model, budgets near or over a limit, and refused calls (agent-budgets).")
        .time("now-24h", "now")
        .refresh("1m")
        .readonly()
        .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for panel_id, spec in enumerate(panel_specs(settings, rules), start=1):
        board = board.with_panel(_panel(spec, panel_id))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def dashboard_namespace(settings: StackSettings) -> str:
    """Where the ConfigMap goes: `monitoring.dashboardNamespace`, else the gateway namespace."""
    return settings.monitoring.dashboard_namespace or settings.gateway.namespace


def dashboard_config_map_data(settings: StackSettings, rules: BudgetRules) -> dict[str, str]:
    """The ConfigMap's data: one JSON file, the form Grafana's dashboard sidecar loads."""
    return {DASHBOARD_FILE: json.dumps(dashboard_model(settings, rules), indent=2, sort_keys=True)}


def panel_table(settings: StackSettings, rules: BudgetRules) -> str:
    """The docs' table of panels: what each one answers (`make docs`)."""
    rows = ["| panel | what it answers |", "| --- | --- |"]
    rows += [f"| {spec.title} | {spec.answers} |" for spec in panel_specs(settings, rules)]
    return "\n".join(rows)

"""The program's alerting and recording rules through the real `promtool` (prometheus/prometheus `cmd/promtool`,
Prometheus 3.16.0): Prometheus' own loader, linter and rule engine instead of our models of them.

The rules are the groups of the PrometheusRule the program registers (under Pulumi mocks) for every stack file of
the repository with `monitoring.prometheusRules` on, for `full` (the prod stack with every optional feature,
scripts/gen_resource_baseline.py) and for `full` with a route whose `modelNameOverride` bills another model; and the
rule files `python -m tools.prometheus_files rules` prints for the stack files.

The input series are shaped as upstream exports them (tests/support/promtool.py has the sources):

* the rate-limit service's per-rule stats, `ratelimit_service_rate_limit_{near_limit,over_limit,within_limit,
  total_hits}{domain, key1, key2}` and `ratelimit_service_config_load_success`, with the values envoyproxy/ratelimit
  counts for a sequence of charges, on the descriptors `core/ratelimit_model.py` says each rule's actor sends;
* Agent Router's `gen_ai_client_token_usage_{sum,count}` with the labels its external processor sets
  (envoyproxy/ai-gateway v1.1.0 `internal/metrics/metrics_impl.go` `buildBaseAttributes`, `RecordTokenUsage`;
  `cmd/extproc/mainlib/admin_test.go` for the Prometheus names and the `otel_scope_name` label), `actor_id` from the
  header mapping, `gen_ai_backend` as Agent Router v1.2 adds it (docs/spend.md);
* both with the target labels the operator's scrape jobs add (core.monitors.scrape_config).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from core.budget_rules import BudgetRules, CompiledRule
from core.cross_checks import ConfigView
from core.identity import actor_header_value
from core.manifests import BUDGET_POLICY_NAME
from core.money import USD_METADATA_KEY, Usage
from core.monitoring import EXHAUSTED_ALERT, NEAR_LIMIT_ALERT, near_limit_ratio
from core.monitors import METRICS_ABSENT_ALERT
from core.ratelimit_model import PolicyModel
from core.recording_rules import PRICE_RECORD, PRICED_TOKEN_TYPES, TOKENS_RECORD, USD_RECORD
from core.settings import StackSettings
from core.validation import expected_secret_keys, validate_stack
from scripts.gen_resource_baseline import full_config
from tests.support.agent_router_cel import Call, evaluate, model_as_agent_router_sets_it
from tests.support.program import ROOT, run_program, stack_config
from tests.support.promql_eval import Store, evaluate_rules
from tests.support.promtool import (
    SCRAPE_SECONDS,
    STALE,
    RateLimitStats,
    Series,
    check_rules,
    dumped_samples,
    named,
    promtool,
    run_unit_tests,
    stat_labels,
    stat_segments,
    write_yaml,
)
from tools import prometheus_files
from tools.spend.stack import stack_names

FULL = "full"
USD_STACK = "full-alias"
"""`full` with one more route, `gpt-latest` billed as `gpt-4.1` (`modelNameOverride`)."""
EVALUATION_INTERVAL = "1m"
MINUTE = 60


def stack_configs() -> dict[str, dict[str, Any]]:
    configs = {}
    for name in stack_names(ROOT):
        config = copy.deepcopy(stack_config(name))
        config["monitoring"] = {**config.get("monitoring", {}), "prometheusRules": True}
        configs[name] = config
    configs[FULL] = full_config()
    alias = full_config()
    [gpt] = [route for route in alias["routes"] if route["name"] == "gpt"]
    alias["routes"].append({**gpt, "name": "gpt-alias", "models": ["gpt-latest"], "modelNameOverride": "gpt-4.1"})
    configs[USD_STACK] = alias
    return configs


@dataclass
class Stack:
    """One stack's rules as the program registers them, and what they were built from."""

    name: str
    config: dict[str, Any]
    settings: StackSettings
    rules: BudgetRules
    groups: list[dict[str, Any]]
    usd_costs: dict[str, str]
    """Route name → the CEL of its AIGatewayRoute's USD cost entry (the expression Agent Router evaluates)."""
    rule_file: Path

    def group(self, name: str) -> dict[str, Any]:
        [found] = [group for group in self.groups if group["name"] == name]
        return found

    def rule_count(self) -> int:
        return sum(len(group["rules"]) for group in self.groups)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> dict[str, Stack]:
    promtool()  # skip (or fail on CI) before the program runs when the tool is not built
    folder = tmp_path_factory.mktemp("rules")
    found = {}
    for name, config in stack_configs().items():
        secrets = {key: f"promtool-test-{key}" for key in expected_secret_keys(ConfigView(config))}
        run = run_program(config, secrets=secrets, stack=name)
        groups = run.one("PrometheusRule").as_object()["spec"]["groups"]
        validated = validate_stack(config, lambda key: (True, True))
        usd_costs = {
            route.inputs["metadata"]["name"]: cost["cel"]
            for route in run.of_kind("AIGatewayRoute")
            for cost in route.inputs["spec"]["llmRequestCosts"]
            if cost.get("metadataKey") == USD_METADATA_KEY
        }
        rule_file = write_yaml(folder / f"{name}.rules.yml", {"groups": groups})
        found[name] = Stack(name, config, validated.settings, validated.rules, groups, usd_costs, rule_file)
    return found


def promtool_output(result) -> str:
    return f"promtool exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


# --- promtool check rules ------------------------------------------------------------------------------------------


def test_every_rule_file_passes_promtool_check_rules(stacks, tmp_path):
    """Prometheus' rule loader (`model/rulefmt` `Parse`: YAML fields, every expression through Prometheus' PromQL
    parser, annotation and label templates parsed as Go templates, label names) and `--lint=all` (duplicate rules),
    at Prometheus 3.16.0, on every registered PrometheusRule's groups and every printed rule file.

    Broken once: `core.monitoring.event_expression` with `offset {LOOKBACK}` written `offset LOOKBACK` (no braces)
    made every file fail (`could not parse expression: ... unexpected identifier "LOOKBACK" in offset`); a
    description ending in an unclosed `{{ .Labels.budget` failed as a template."""
    files: dict[Path, int] = {stack.rule_file: stack.rule_count() for stack in stacks.values()}
    for name in stack_names(ROOT):
        printed = prometheus_files.document("rules", name, ROOT)
        assert printed["groups"] == stacks[name].groups  # the file a Prometheus without the operator loads
        files[write_yaml(tmp_path / f"{name}.printed.yml", printed)] = stacks[name].rule_count()
    result = check_rules(*files)
    assert result.returncode == 0, promtool_output(result)
    for path, count in files.items():
        assert f"Checking {path}\n  SUCCESS: {count} rules found\n" in result.stdout
    assert stacks[FULL].rule_count() == 2 * len(stacks[FULL].rules.limit_rules) + 1 + len(
        stacks[FULL].group("agent-budgets-usd")["rules"]
    )


@pytest.mark.parametrize(
    ("what", "status", "message"),
    [
        ("an expression that does not parse", 1, "parse error"),
        ("an annotation that is not a Go template", 1, "template"),
        ("two groups of one name", 1, "is repeated in the same file"),
        ("a recording rule twice", 3, "duplicate"),
    ],
)
def test_promtool_refuses_a_broken_rule_file(stacks, tmp_path, what, status, message):
    """The check can fail: `full`'s rules broken four ways, each refused by the same loader and linter (Prometheus
    3.16.0 `cmd/promtool/main.go` `checkRules`: exit 1 on a loading error, 3 on a lint finding with `--lint-fatal`;
    `model/rulefmt` refuses two groups of one name in a file). Prometheus 3 accepts any UTF-8 label name, so a name
    like `rule-index`, which Prometheus 2 refused, is not among them (it passed when tried)."""
    groups = copy.deepcopy(stacks[FULL].groups)
    alerts, _, usd = groups
    if what == "an expression that does not parse":
        alerts["rules"][0]["expr"] = alerts["rules"][0]["expr"].replace(")", "", 1)
    elif what == "an annotation that is not a Go template":
        alerts["rules"][0]["annotations"]["description"] += " {{ $value "
    elif what == "two groups of one name":
        usd["name"] = alerts["name"]
    else:
        usd["rules"].append(copy.deepcopy(usd["rules"][-1]))
    result = check_rules(write_yaml(tmp_path / "broken.yml", {"groups": groups}))
    assert result.returncode == status, promtool_output(result)
    assert message in (result.stdout + result.stderr).lower()


# --- the budget alerts on the rate-limit service's series ----------------------------------------------------------

RATELIMIT_TARGET = {
    "namespace": "envoy-gateway-system",
    "container": "envoy-ratelimit",
    "endpoint": "metrics",
    "job": "agent-budgets/envoy-ratelimit",
}
OLD_POD = {"pod": "envoy-ratelimit-7d9f8c6b5-x2k4q", "instance": "10.244.0.17:19001"}
"""A pod that charged every rule past its limit in an earlier window: its stats series exist and stay flat."""
NEW_POD = {"pod": "envoy-ratelimit-7d9f8c6b5-q8m7w", "instance": "10.244.0.18:19001"}
"""A pod that has charged nothing yet: a stat has no series until its first non-zero flush."""
STAT_PREFIX = "ratelimit_service_rate_limit_"
CONFIG_LOADED = "ratelimit_service_config_load_success"
RUN_MINUTES = 25
HISTORY_AT, NEW_WINDOW_AT, CHARGE_AT = 1, 5, 15
"""Minutes: the old pod's earlier window goes over the limit, the window ends, the scenario's charge is scraped."""
BEFORE, DURING, AFTER = "14m", "20m", "25m"
"""Just before the charge, while it is within the alerts' 10-minute look-back, and 10 minutes after it was scraped."""


@dataclass(frozen=True)
class ChargedRule:
    """One limit rule, the counter its actor's calls charge, and the stats labels of that counter."""

    rule: CompiledRule
    limit: int
    """The limit the rate-limit service compares with, in the rule's unit (tokens, calls or mills)."""
    stat_labels: dict[str, str]


def charged_rules(stack: Stack) -> list[ChargedRule]:
    """Every limit rule with the descriptor one of its actors' calls sends (core.ratelimit_model: Envoy Gateway's
    translation), found by asking the model for every actor and every model name a route serves."""
    policy = PolicyModel(stack.settings.gateway.namespace, BUDGET_POLICY_NAME, stack.rules.specs())
    models = [None, *(name for route in stack.settings.routes for name in route.models)]
    found: dict[int, ChargedRule] = {}
    for actor in stack.settings.actors:
        subject = actor_header_value(actor)
        for name in models:
            headers = {"x-actor-id": subject, **({"x-ai-eg-model": name} if name else {})}
            for applied in policy.applied(headers):
                if applied.index not in found:
                    [rule] = [r for r in stack.rules.limit_rules if r.index == applied.index]
                    labels = stat_labels(applied.domain, stat_segments(applied.entries, [subject]))
                    found[applied.index] = ChargedRule(rule, applied.requests, labels)
    assert sorted(found) == [rule.index for rule in stack.rules.limit_rules], "a limit rule charges no actor"
    return [found[index] for index in sorted(found)]


def alert_rule(stack: Stack, alert: str, index: int) -> dict[str, Any]:
    [rule] = [
        r for r in stack.group("agent-budgets")["rules"] if r["alert"] == alert and r["labels"]["rule"] == str(index)
    ]
    return rule


def scrape_times() -> list[int]:
    return list(range(0, RUN_MINUTES * MINUTE + 1, SCRAPE_SECONDS))


def stats_series(charged: ChargedRule, pod: dict[str, str], timeline: list[tuple[int, Any]], ratio: float) -> list:
    """The rule's four stats series as one pod exports them, scrape after scrape, for charges and window ends
    (`timeline`: (second, hits or "window")); a stat is absent until it first moves. How many charges make up a
    count does not matter: the stats add up the same (base_limiter.go splits every charge at the thresholds)."""
    stats = RateLimitStats(charged.limit, ratio)
    names = ("near_limit", "over_limit", "within_limit", "total_hits")
    values: dict[str, list[float | None]] = {name: [] for name in names}
    events = sorted(timeline, key=lambda event: event[0])
    for when in scrape_times():
        while events and events[0][0] <= when:
            _, event = events.pop(0)
            if event == "window":
                stats.new_window()
            else:
                stats.charge(event)
        exported = stats.exported()
        for name in names:
            values[name].append(exported.get(name))
    labels = {**RATELIMIT_TARGET, **pod, **charged.stat_labels}
    return [Series(STAT_PREFIX + name, labels, tuple(points)) for name, points in values.items() if any(points)]


def config_loaded(pod: dict[str, str], until_minute: int | None = None) -> Series:
    """The counter every rate-limit pod exports once it loaded its configuration: 1 from the start, and when the pod
    stops being scraped after `until_minute`, a staleness marker (Prometheus writes one for every series of a target
    that is gone) and no sample after it."""
    points: list[float | str | None] = []
    for when in scrape_times():
        if until_minute is None or when <= until_minute * MINUTE:
            points.append(1)
        else:
            points.append(STALE if points[-1] == 1 else None)
    return Series(CONFIG_LOADED, {**RATELIMIT_TARGET, **pod}, tuple(points))


def fired(stack: Stack, alert: str, charged: ChargedRule) -> dict[str, Any]:
    """The alert promtool must show for one rule: the rule's labels, the counter's domain and key1, the
    annotations unchanged (they hold no template, so Prometheus' expansion leaves them as written)."""
    rule = alert_rule(stack, alert, charged.rule.index)
    labels = {**rule["labels"], "domain": charged.stat_labels["domain"], "key1": charged.stat_labels["key1"]}
    return {"exp_labels": labels, "exp_annotations": rule["annotations"]}


SCENARIOS = [
    # (name, charged pod, the window's count after the charge, NearLimit fires, Exhausted fires)
    ("up to the near-limit share exactly", OLD_POD, lambda limit, near: near, False, False),
    ("one unit past the near-limit share", OLD_POD, lambda limit, near: near + 1, True, False),
    ("one unit past the near-limit share, first stat of the pod", NEW_POD, lambda limit, near: near + 1, True, False),
    ("up to the limit exactly", OLD_POD, lambda limit, near: limit, True, False),
    ("one unit over the limit", OLD_POD, lambda limit, near: limit + 1, True, True),
    ("one unit over the limit, first stat of the pod", NEW_POD, lambda limit, near: limit + 1, True, True),
]


def alert_unit_tests(stack: Stack) -> list[dict[str, Any]]:
    """One promtool test group per scenario, every limit rule of the stack charged at once (each on its own counter),
    and two for the alert on the service's series going missing."""
    ratio = float(near_limit_ratio(stack.settings.monitoring))
    charged = charged_rules(stack)
    groups = []
    for name, pod, count, near_fires, over_fires in SCENARIOS:
        series = [config_loaded(OLD_POD), config_loaded(NEW_POD)]
        for rule in charged:
            near = RateLimitStats(rule.limit, ratio).near_threshold
            assert 0 < near < near + 1 < rule.limit, f"rule {rule.rule.index}: no room between {near} and {rule.limit}"
            history = [(HISTORY_AT * MINUTE, rule.limit + 1), (NEW_WINDOW_AT * MINUTE, "window")]
            charge = [(CHARGE_AT * MINUTE, count(rule.limit, near))]
            if pod is OLD_POD:
                series += stats_series(rule, OLD_POD, history + charge, ratio)
            else:
                series += stats_series(rule, OLD_POD, history, ratio) + stats_series(rule, NEW_POD, charge, ratio)
        tests = [
            {"eval_time": at, "alertname": alert, "exp_alerts": []}
            for at in (BEFORE, AFTER)
            for alert in (NEAR_LIMIT_ALERT, EXHAUSTED_ALERT)
        ]
        for alert, fires in ((NEAR_LIMIT_ALERT, near_fires), (EXHAUSTED_ALERT, over_fires)):
            expected = [fired(stack, alert, rule) for rule in charged] if fires else []
            tests.append({"eval_time": DURING, "alertname": alert, "exp_alerts": expected})
        tests.append({"eval_time": DURING, "alertname": METRICS_ABSENT_ALERT, "exp_alerts": []})
        groups.append(
            {
                "name": name,
                "interval": f"{SCRAPE_SECONDS}s",
                "input_series": [entry.entry() for entry in series],
                "alert_rule_test": tests,
            }
        )
    [absent_rule] = stack.group("agent-budgets-metrics")["rules"]
    absent = {"exp_labels": absent_rule["labels"], "exp_annotations": absent_rule["annotations"]}
    groups.append(
        {
            "name": "no rate-limit pod scraped at all",
            "interval": f"{SCRAPE_SECONDS}s",
            "input_series": [],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": METRICS_ABSENT_ALERT, "exp_alerts": []},
                {"eval_time": "10m", "alertname": METRICS_ABSENT_ALERT, "exp_alerts": [absent]},
            ],
        }
    )
    groups.append(
        {
            "name": "the rate-limit pods stop being scraped after 10m",
            "interval": f"{SCRAPE_SECONDS}s",
            "input_series": [config_loaded(pod, until_minute=10).entry() for pod in (OLD_POD, NEW_POD)],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": METRICS_ABSENT_ALERT, "exp_alerts": []},
                {"eval_time": "20m", "alertname": METRICS_ABSENT_ALERT, "exp_alerts": []},
                {"eval_time": "21m", "alertname": METRICS_ABSENT_ALERT, "exp_alerts": [absent]},
            ],
        }
    )
    return groups


ALERT_STACKS = [*stack_names(ROOT), FULL]


@pytest.mark.parametrize("stack_name", ALERT_STACKS)
def test_each_alert_fires_on_the_rate_limit_services_series_and_not_below_its_threshold(stacks, tmp_path, stack_name):
    """`promtool test rules` (Prometheus 3.16.0's rule engine, `cmd/promtool/unittest.go`) on the stats the rate-limit
    service exports while an actor of each limit rule is charged past, up to, or short of a threshold:

    * envoyproxy/ratelimit f2fb157 `src/limiter/base_limiter.go`: `near_limit` grows only by what a charge adds
      above `floor(limit * NEAR_LIMIT_RATIO)`, `over_limit` only by what it adds above the limit; lyft/gostats
      v0.4.14 flushes a counter only once it moved, so a pod's first such charge creates the series;
    * Envoy Gateway v1.9.0 `ratelimit/statsd_conf.yaml`: the names and `domain`, `key1`, `key2` of those series;
    * the descriptors each rule's calls send: core/ratelimit_model.py (Envoy Gateway's translation).

    AgentBudgetNearLimit fires one unit past the near-limit share and not at it, AgentBudgetExhausted one unit past
    the limit and not at it, each exactly once per rule with that rule's labels, and neither 10 minutes after the
    charge was scraped; the alert on missing metrics fires 10 minutes after the series went missing, not at 9.

    Broken once each: `rule_key1` returning the rule's key without `_<key>` (no alert fired); `event_expression`
    without its `unless ... offset` half (the first-stat-of-the-pod scenarios did not fire); `LOOKBACK = "11m"`
    (the alerts still fired at 25m); a description holding a valid template, `{{ .Labels.budget }}` (Prometheus
    expanded it, so the annotations differed from what the rule says)."""
    stack = stacks[stack_name]
    test_file = write_yaml(
        tmp_path / "alerts.test.yml",
        {
            "rule_files": [str(stack.rule_file)],
            "evaluation_interval": EVALUATION_INTERVAL,
            "tests": alert_unit_tests(stack),
        },
    )
    result = run_unit_tests(test_file)
    assert result.returncode == 0, promtool_output(result)
    assert "SUCCESS" in result.stdout


def test_the_alert_scenarios_can_fail(stacks, tmp_path):
    """The alert tests can fail: promtool compares the firing alerts with the expected ones exactly
    (`cmd/promtool/unittest.go`), so the scenario that stops at the near-limit share, given the expectation that
    AgentBudgetNearLimit fires, fails with the alert and the time named (a broken expectation stands in for a
    broken rule: the breaks of the rules themselves are in the test above)."""
    stack = stacks[stack_names(ROOT)[0]]
    groups = alert_unit_tests(stack)
    below = groups[0]
    [near_test] = [
        t for t in below["alert_rule_test"] if t["alertname"] == NEAR_LIMIT_ALERT and t["eval_time"] == DURING
    ]
    near_test["exp_alerts"] = [fired(stack, NEAR_LIMIT_ALERT, charged_rules(stack)[0])]
    test_file = write_yaml(
        tmp_path / "alerts.test.yml",
        {"rule_files": [str(stack.rule_file)], "evaluation_interval": EVALUATION_INTERVAL, "tests": [below]},
    )
    result = run_unit_tests(test_file)
    assert result.returncode == 1, promtool_output(result)
    assert f"alertname: {NEAR_LIMIT_ALERT}, time: {DURING}" in result.stderr


# --- the USD recording rules: promtool against the CEL cost and against our PromQL evaluator -----------------------

ENVOY_TARGET = {
    "namespace": "envoy-gateway-system",
    "container": "ai-gateway-extproc",
    "endpoint": "aigw-admin",
    "job": "agent-budgets/agent-router",
}
ENVOY_PODS = [
    {"pod": "envoy-agent-budgets-agent-router-5c9d-7h2kq", "instance": "10.244.0.21:1064"},
    {"pod": "envoy-agent-budgets-agent-router-5c9d-t4w9z", "instance": "10.244.0.22:1064"},
]
T_USD = 20 * MINUTE
"""When the regular calls are compared: each of them made one call per scrape in the 5 minutes before."""
USD_RUN_MINUTES = 30
TOKEN_TYPES = ("input", "cached_input", "cache_creation_input", "output", "reasoning")


@dataclass(frozen=True)
class Caller:
    """An actor calling one model name through Agent Router, the usage of each call."""

    actor: str
    sent: str
    usage: Usage = field(default_factory=Usage)
    """Each call's usage, for the regular callers (the irregular ones draw theirs)."""
    exact_mills: bool = False
    """Whether one call's price is a whole number of mills (then the CEL's rounding up changes nothing)."""


# One call each per scrape in (T_USD - 5m, T_USD]: 10 calls. Prices (USD per 1M tokens) from Pulumi.prod.yaml.
REGULAR_CALLERS = [
    # gpt-4.1 ($2 in, $0.50 cached, $8 out): 20,000 fresh + 100,000 cached + 5,000 out = $0.04 + $0.05 + $0.04
    Caller("agents/coder-1", "gpt-4.1", Usage(120_000, 100_000, 0, 5_000, 4_000), True),
    # claude-sonnet-4-5 ($3, $0.30 read, $3.75 write, $15): 2,000 + 100,000 read + 20,000 written + 3,000 out
    Caller("agents/coder-1", "claude-sonnet-4-5", Usage(122_000, 100_000, 20_000, 3_000, 1_000), True),
    # gpt-latest is billed as gpt-4.1: 1,234 in + 567 out = $0.002468 + $0.004536 = 7.004 mills, the CEL charges 8
    Caller("agents/research-1", "gpt-latest", Usage(1_234, 0, 0, 567, 0), False),
    # claude-haiku-4-5 ($1, $0.10, $1.25, $5): 333 fresh + 1,000 read + 77 written + 41 out, not whole mills
    Caller("serviceaccount:agents/research-bot", "claude-haiku-4-5", Usage(1_410, 1_000, 77, 41, 0), False),
    # gpt-4.1-mini ($0.40, $0.10, $1.60): 50,000 in + 25,000 out = $0.02 + $0.04
    Caller("apikey:ci-bot", "gpt-4.1-mini", Usage(50_000, 0, 0, 25_000, 20_000), True),
]


def counts(usage: Usage) -> dict[str, int]:
    """Agent Router's counter increments for one call, by `gen_ai_token_type` (a type only when the provider reported
    it: here input and output always, the others when non-zero)."""
    values = dict(
        zip(
            TOKEN_TYPES,
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.cache_creation_input_tokens,
                usage.output_tokens,
                usage.reasoning_tokens,
            ),
            strict=True,
        )
    )
    return {kind: n for kind, n in values.items() if n or kind in ("input", "output")}


def route_of(stack: Stack, sent: str):
    [route] = [route for route in stack.settings.routes if sent in route.models]
    return route


def token_labels(stack: Stack, caller: Caller, token_type: str, pod: dict[str, str]) -> dict[str, str]:
    route = route_of(stack, caller.sent)
    billed = model_as_agent_router_sets_it(caller.sent, route.model_name_override)
    return {
        **ENVOY_TARGET,
        **pod,
        "actor_id": actor_header_value(caller.actor),
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": route.provider,
        "gen_ai_backend": f"{stack.settings.gateway.namespace}/{route.provider}",
        "gen_ai_original_model": caller.sent,
        "gen_ai_request_model": billed,
        "gen_ai_response_model": f"{billed}-2025-06-01",
        "gen_ai_token_type": token_type,
        "otel_scope_name": "envoyproxy/ai-gateway",
    }


def regular_calls(caller: Caller) -> dict[int, list[Usage]]:
    """One call at each scrape of the 5 minutes before T_USD, the first 4.5 minutes before it."""
    return {when: [caller.usage] for when in range(T_USD - 270, T_USD + 1, SCRAPE_SECONDS)}


def irregular_calls(seed: int) -> dict[int, list[Usage]]:
    """Calls of random sizes at random scrapes over the whole run (seeded)."""
    rng = random.Random(seed)
    calls: dict[int, list[Usage]] = {}
    for when in range(SCRAPE_SECONDS, USD_RUN_MINUTES * MINUTE + 1, SCRAPE_SECONDS):
        if rng.random() < 0.45:
            for _ in range(rng.randint(1, 3)):
                cached = rng.choice([0, rng.randint(0, 5_000)])
                writes = rng.choice([0, 0, rng.randint(0, 2_000)])
                output = rng.randint(1, 4_000)
                calls.setdefault(when, []).append(
                    Usage(rng.randint(1, 9_000) + cached + writes, cached, writes, output, rng.randint(0, output))
                )
    return calls


@dataclass(frozen=True)
class Shape:
    """How one caller's counters reach Prometheus: which Envoy pod, scrapes missed, the extproc restarted (its
    counters start over in the same pod), the pod gone (its series marked stale)."""

    pod: int = 0
    missed: frozenset[int] = frozenset()
    restart_at: int | None = None
    gone_at: int | None = None


IRREGULAR_CALLERS = [
    (Caller("agents/support-1", "gpt-4.1"), irregular_calls(1), Shape(restart_at=12 * MINUTE)),
    (Caller("agents/support-1", "gpt-4.1"), irregular_calls(2), Shape(pod=1, gone_at=18 * MINUTE)),
    (
        Caller("agents/support-2", "claude-sonnet-4-5"),
        irregular_calls(3),
        Shape(missed=frozenset(range(6 * MINUTE, 9 * MINUTE + 1, SCRAPE_SECONDS)) | {21 * MINUTE, 24 * MINUTE}),
    ),
    (Caller("agents/nightly-batch", "gpt-latest"), irregular_calls(4), Shape(restart_at=22 * MINUTE)),
]


def token_series(stack: Stack, caller: Caller, calls: dict[int, list[Usage]], shape: Shape) -> list[Series]:
    """`gen_ai_client_token_usage_sum` and `_count` of one caller, per token type, scrape after scrape: a series
    exists from the first call that recorded its type."""
    series = []
    kinds = sorted({kind for usages in calls.values() for usage in usages for kind in counts(usage)})
    for kind in kinds:
        total = observations = 0
        started = False
        sums: list[float | str | None] = []
        numbers: list[float | str | None] = []
        for when in range(0, USD_RUN_MINUTES * MINUTE + 1, SCRAPE_SECONDS):
            if when == shape.restart_at:
                total = observations = 0
                started = False
            for usage in calls.get(when, []):
                if kind in counts(usage):
                    total += counts(usage)[kind]
                    observations += 1
                    started = True
            if shape.gone_at is not None and when >= shape.gone_at:
                point = STALE if when == shape.gone_at else None
                sums.append(point)
                numbers.append(point)
            elif not started or when in shape.missed:
                sums.append(None)
                numbers.append(None)
            else:
                sums.append(total)
                numbers.append(observations)
        labels = token_labels(stack, caller, kind, ENVOY_PODS[shape.pod])
        series.append(Series("gen_ai_client_token_usage_sum", labels, tuple(sums)))
        series.append(Series("gen_ai_client_token_usage_count", labels, tuple(numbers)))
    return series


@pytest.fixture(scope="module")
def usd_run(stacks, tmp_path_factory) -> tuple[Stack, list[Series], dict]:
    """One `promtool test rules --debug` run of the USD stack's rules over every caller's series, and every sample
    Prometheus held at the end (the recorded series at each evaluation)."""
    stack = stacks[USD_STACK]
    series = []
    for caller in REGULAR_CALLERS:
        series += token_series(stack, caller, regular_calls(caller), Shape())
    for caller, calls, shape in IRREGULAR_CALLERS:
        series += token_series(stack, caller, calls, shape)
    usd_series = {(c.actor, c.sent) for c in REGULAR_CALLERS} | {(c.actor, c.sent) for c, _, _ in IRREGULAR_CALLERS}
    billed = {model for route in stack.settings.routes for model in route.billed_models}
    group = {
        "name": "token counters as Agent Router exports them",
        "interval": f"{SCRAPE_SECONDS}s",
        "input_series": [entry.entry() for entry in series],
        "promql_expr_test": [
            {
                "expr": f"count({USD_RECORD})",
                "eval_time": f"{T_USD // MINUTE}m",
                "exp_samples": [{"labels": "{}", "value": len(usd_series)}],
            },
            {
                "expr": f"count({PRICE_RECORD})",
                "eval_time": f"{USD_RUN_MINUTES}m",
                "exp_samples": [{"labels": "{}", "value": len(PRICED_TOKEN_TYPES) * len(billed)}],
            },
        ],
    }
    folder = tmp_path_factory.mktemp("usd")
    test_file = write_yaml(
        folder / "usd.test.yml",
        {"rule_files": [str(stack.rule_file)], "evaluation_interval": EVALUATION_INTERVAL, "tests": [group]},
    )
    result = run_unit_tests(test_file, debug=True)
    assert result.returncode == 0, promtool_output(result)
    return stack, series, dumped_samples(result.stderr)


def exact_usd(stack: Stack, caller: Caller) -> Decimal:
    """One call's price from the stack file's prices, worked out here: fresh input, cache reads, cache writes and
    output each at its own price (cacheWrite and cachedInput default to the input price)."""
    route = route_of(stack, caller.sent)
    billed = model_as_agent_router_sets_it(caller.sent, route.model_name_override)
    price = {key: Decimal(str(value)) for key, value in stack.config["prices"][billed].items()}
    usage = caller.usage
    fresh = usage.input_tokens - usage.cached_input_tokens - usage.cache_creation_input_tokens
    total = (
        fresh * price["input"]
        + usage.cached_input_tokens * price.get("cachedInput", price["input"])
        + usage.cache_creation_input_tokens * price.get("cacheWrite", price["input"])
        + usage.output_tokens * price["output"]
    )
    return total / Decimal(1_000_000)


def test_the_usd_recording_rule_in_prometheus_gives_what_the_cel_cost_charges_for_the_same_calls(usd_run):
    """Prometheus 3.16.0 evaluates `agent_budgets:gen_ai_usd:rate5m` (its `rate`, vector matching and the recorded
    weights) over Agent Router's counters (envoyproxy/ai-gateway v1.1.0 `RecordTokenUsage`: one series per token
    type, `input` holding the cache reads and writes, `gen_ai_request_model` the billed name after the route's
    `modelNameOverride`). Ten equal calls, one per scrape, make `rate(...[5m]) * 300` exactly ten calls' tokens.
    The route's registered CEL cost, evaluated with Google's CEL as Agent Router does (tests/support/
    agent_router_cel.py, `model` = the override), charges the same ten calls: the same dollars when a call costs
    whole mills, and at most a mill a call more otherwise (its rounding up, core/recording_rules.py).

    Broken once: the `cached_input` weight written as `cachedInput` alone instead of `cachedInput - input`
    (core.recording_rules.token_weights): coder-1's ten gpt-4.1 calls came out at $3.30 instead of $1.30."""
    stack, _, samples = usd_run
    usd = named(samples, USD_RECORD)
    assert len(usd) == len(
        {(c.actor, c.sent) for c in REGULAR_CALLERS} | {(c.actor, c.sent) for c, _, _ in IRREGULAR_CALLERS}
    )
    for caller in REGULAR_CALLERS:
        route = route_of(stack, caller.sent)
        billed = model_as_agent_router_sets_it(caller.sent, route.model_name_override)
        key = frozenset(
            {
                "actor_id": actor_header_value(caller.actor),
                "gen_ai_original_model": caller.sent,
                "gen_ai_request_model": billed,
            }.items()
        )
        [recorded] = [value for when, value in usd[key] if when == T_USD]
        dollars = recorded * 300  # USD per second over the 5 minutes of the ten calls
        exact = float(10 * exact_usd(stack, caller))
        assert dollars == pytest.approx(exact, rel=1e-12), caller
        mills = evaluate(stack.usd_costs[route.name], Call(model=billed, usage=caller.usage))
        cel_dollars = 10 * mills / 1000
        if caller.exact_mills:
            assert cel_dollars == pytest.approx(dollars, rel=1e-12), caller
        else:
            assert 0 < cel_dollars - dollars < 10 * 0.001, caller
    assert stack.usd_costs.keys() == {route.name for route in stack.settings.routes}


def test_our_promql_evaluator_gives_what_promtool_gives_at_every_evaluation(usd_run):
    """tests/support/promql_eval.py (which tests/test_recording_rules.py trusts) against Prometheus 3.16.0 itself: the
    three recording rules evaluated every minute over the same series, regular and irregular (random call sizes,
    missed scrapes, an extproc restart resetting its counters, an Envoy pod going away with its series marked
    stale, one actor on two pods), every recorded series and sample compared.

    Broken once: `extrapolated_rate` with Prometheus v2's order (the zero point before the half-interval cap):
    coder-1's claude-sonnet-4-5 cache writes came out at 133.3 tokens a second at 16m, where Prometheus has 100.
    No disagreement was left to fix: the evaluator gives Prometheus' numbers (to 12 digits; Prometheus sums with
    Kahan compensation, the evaluator plainly)."""
    stack, series, samples = usd_run
    store = Store()
    for entry in series:
        for when, value in entry.samples():
            store.add(entry.name, entry.labels, when, value)
    rules = stack.group("agent-budgets-usd")["rules"]
    for when in range(MINUTE, USD_RUN_MINUTES * MINUTE + 1, MINUTE):
        evaluate_rules(rules, store, float(when))
    compared = 0
    for record in (PRICE_RECORD, TOKENS_RECORD, USD_RECORD):
        ours = {
            frozenset(item for item in key if item[0] != "__name__"): points
            for key, points in store.series.items()
            if dict(key)["__name__"] == record
        }
        theirs = named(samples, record)
        assert ours.keys() == theirs.keys(), record
        for key, points in theirs.items():
            assert [when for when, _ in ours[key]] == [when for when, _ in points], (record, sorted(key))
            for (when, mine), (_, value) in zip(ours[key], points, strict=True):
                assert mine == pytest.approx(value, rel=1e-12, abs=1e-15), (record, sorted(key), when)
                compared += 1
    assert compared > 1_000

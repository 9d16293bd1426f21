"""`python -m tools.prometheus_files`: the alerts and scrape jobs for a Prometheus the operator does not manage.

The rule file must hold exactly the PrometheusRule's groups, in the shape Prometheus loads (the group/rule
schema of tests/support/prometheus_rule_schema.py, every expression parsed by promql-parser). The scrape jobs
are run through Prometheus' relabelling (tests/support/relabel.py) on the targets its pod discovery would produce
(prometheus/prometheus `discovery/kubernetes/pod.go`: one target per declared container port, with
`__meta_kubernetes_pod_label_*`, `..._labelpresent_*`, `..._container_port_name`).
"""

from __future__ import annotations

import io

import jsonschema
import promql_parser
import yaml

from core.monitoring import prometheus_rule_manifest
from core.validation import validate_stack
from tests.support.program import ROOT, stack_config
from tests.support.prometheus_rule_schema import GROUP_SCHEMA
from tests.support.relabel import (
    ENVOY_LABELS,
    ENVOY_PORTS,
    RATELIMIT_LABELS,
    RATELIMIT_PORTS,
    pod_targets,
    relabel,
)
from tools import prometheus_files
from tools.spend.stack import load_stack


def printed(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = prometheus_files.build_parser().parse_args([*argv, "--project-dir", str(ROOT)])
    return prometheus_files.run(args, out, err), out.getvalue(), err.getvalue()


def test_the_rule_file_is_the_prometheus_rules_groups():
    status, out, err = printed("rules", "--stack", "prod")
    assert (status, err) == (0, "")
    groups = yaml.safe_load(out)["groups"]
    validated = validate_stack(load_stack(ROOT, "prod").raw, lambda key: (True, True))
    assert groups == prometheus_rule_manifest(validated.settings, validated.rules, "prod").spec["groups"]
    assert [group["name"] for group in groups] == ["agent-budgets", "agent-budgets-metrics", "agent-budgets-usd"]
    validator = jsonschema.Draft202012Validator(GROUP_SCHEMA)
    for group in groups:
        assert [error.message for error in validator.iter_errors(group)] == []
        for rule in group["rules"]:
            promql_parser.parse(rule["expr"])
    assert "`make spend STACK=prod ARGS='--over 80'`" in groups[0]["rules"][0]["annotations"]["description"]


def test_the_scrape_jobs_keep_exactly_the_ports_the_monitors_name():
    status, out, err = printed("scrape-configs", "--stack", "dev")
    assert (status, err) == (0, "")
    ratelimit_job, router_job, proxy_job = yaml.safe_load(out)["scrape_configs"]
    for job in (ratelimit_job, router_job, proxy_job):
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["envoy-gateway-system"]}}]
    assert [job["metrics_path"] for job in (ratelimit_job, router_job, proxy_job)] == [
        "/metrics",
        "/metrics",
        "/stats/prometheus",
    ]
    ratelimit_pod = pod_targets("envoy-gateway-system", "envoy-ratelimit-7d9f", RATELIMIT_LABELS, RATELIMIT_PORTS)
    envoy_pod = pod_targets("envoy-gateway-system", "envoy-agent-budgets-agent-router-x1", ENVOY_LABELS, ENVOY_PORTS)
    kept = [relabel(t, ratelimit_job["relabel_configs"]) for t in ratelimit_pod + envoy_pod]
    assert kept == [
        None,
        {
            "namespace": "envoy-gateway-system",
            "container": "envoy-ratelimit",
            "pod": "envoy-ratelimit-7d9f",
            "job": "agent-budgets/envoy-ratelimit",
            "endpoint": "metrics",
        },
        None,
        None,
    ]
    kept = [relabel(t, router_job["relabel_configs"]) for t in ratelimit_pod + envoy_pod]
    assert kept[:3] == [None, None, None]
    assert kept[3] == {
        "namespace": "envoy-gateway-system",
        "container": "ai-gateway-extproc",
        "pod": "envoy-agent-budgets-agent-router-x1",
        "job": "agent-budgets/agent-router",
        "endpoint": "aigw-admin",
    }


def test_the_proxy_job_scrapes_envoys_stats_port_and_keeps_only_the_refused_calls():
    """The `envoy` container's `metrics` port of our Gateway's pods (not the rate-limit pod's port of that name), and
    of everything Envoy prints there only the series the dashboard reads."""
    status, out, _ = printed("scrape-configs", "--stack", "dev")
    *_, proxy_job = yaml.safe_load(out)["scrape_configs"]
    assert status == 0 and proxy_job["job_name"] == "podMonitor/agent-budgets/envoy-proxy/0"
    ratelimit_pod = pod_targets("envoy-gateway-system", "envoy-ratelimit-7d9f", RATELIMIT_LABELS, RATELIMIT_PORTS)
    envoy_pod = pod_targets("envoy-gateway-system", "envoy-agent-budgets-agent-router-x1", ENVOY_LABELS, ENVOY_PORTS)
    kept = [relabel(t, proxy_job["relabel_configs"]) for t in ratelimit_pod + envoy_pod]
    assert kept == [
        None,
        None,
        {
            "namespace": "envoy-gateway-system",
            "container": "envoy",
            "pod": "envoy-agent-budgets-agent-router-x1",
            "job": "agent-budgets/envoy-proxy",
            "endpoint": "metrics",
        },
        None,
    ]
    # A sample of what Envoy prints on that port (Envoy's default tag extractors), through metric_relabel_configs.
    printed_series = [
        "envoy_cluster_ratelimit_over_limit",
        "envoy_http_rbac_denied",
        "envoy_http_rbac_allowed",
        "envoy_cluster_upstream_rq_total",
        "envoy_cluster_ratelimit_ok",
        "envoy_server_memory_allocated",
        "envoy_http_downstream_rq_xx",
    ]
    rules = proxy_job["metric_relabel_configs"]
    survivors = [name for name in printed_series if relabel({"__name__": name}, rules) is not None]
    assert survivors == ["envoy_cluster_ratelimit_over_limit", "envoy_http_rbac_denied"]
    status, out, _ = printed("scrape-configs", "--stack", "dev-kubernetes")
    assert status == 0 and len(yaml.safe_load(out)["scrape_configs"]) == 3


def test_pods_that_are_not_running_or_belong_to_another_gateway_are_not_scraped():
    _, out, _ = printed("scrape-configs", "--stack", "dev")
    _, router_job, _ = yaml.safe_load(out)["scrape_configs"]
    other = {**ENVOY_LABELS, "gateway.envoyproxy.io/owning-gateway-name": "other"}
    for target in (
        pod_targets("envoy-gateway-system", "p", ENVOY_LABELS, ENVOY_PORTS[1:], phase="Succeeded")[0],
        pod_targets("envoy-gateway-system", "p", other, ENVOY_PORTS[1:])[0],
    ):
        assert relabel(target, router_job["relabel_configs"]) is None


def test_a_stack_without_its_secrets_still_prints_and_a_bad_one_is_refused(tmp_path):
    assert printed("rules", "--stack", "prod")[0] == 0  # the committed prod stack holds no secret
    status, out, err = printed("rules", "--stack", "nope")
    assert (status, out) == (2, "") and "unknown stack 'nope'" in err
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    bad = {f"agent-budgets:{key}": value for key, value in stack_config("dev").items()}
    bad["agent-budgets:monitoring"] = {"nearLimitPercent": 120}
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": bad}), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    args = prometheus_files.build_parser().parse_args(["rules", "--stack", "bad", "--project-dir", str(tmp_path)])
    assert prometheus_files.run(args, out, err) == 2 and out.getvalue() == ""
    assert "agent-budgets:monitoring.nearLimitPercent" in err.getvalue()

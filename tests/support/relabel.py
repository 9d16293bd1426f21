"""Prometheus' relabelling, for the actions our scrape jobs use (keep, drop, replace), to run the jobs of
tools.prometheus_files and the PodMonitors' metricRelabelings on targets and series.

Follows prometheus/prometheus `model/relabel/relabel.go`: regexes anchored, RE2 syntax with `.` matching newlines,
source labels joined with `;`, `replace` by default with replacement `$1`.
"""

from __future__ import annotations

import re
from typing import Any

import re2


def _expand(replacement: str, groups: list[str | None]) -> str:
    """`$1`-style references replaced by the regex groups (an unmatched group is empty)."""
    return re.sub(r"\$(\d+)", lambda ref: groups[int(ref.group(1))] or "", replacement)


def relabel(target: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling for the actions the jobs use (keep, drop, replace); None = target dropped."""
    labels = dict(target)
    for rule in rules:
        action = rule.get("action", "replace")
        value = ";".join(labels.get(name, "") for name in rule.get("source_labels", []))
        pattern = re2.compile(f"^(?s:{rule.get('regex', '(.*)')})$")
        match = pattern.search(value)
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            labels[rule["target_label"]] = _expand(rule.get("replacement", "$1"), [match.group(0), *match.groups()])
    return {key: value for key, value in labels.items() if not key.startswith("__")}


# Targets as Prometheus' Kubernetes pod discovery gives them (discovery/kubernetes/pod.go), for the pods the
# stack's scrape jobs are meant to pick (our Gateway's Envoy pods) and must not pick (the rate-limit pod).
def _label_name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def pod_targets(
    namespace: str, pod: str, labels: dict[str, str], ports: list[tuple[str, str, int]], phase: str = "Running"
) -> list[dict[str, str]]:
    """The targets Prometheus' pod discovery gives one pod: one per (container, port name, port)."""
    targets = []
    for container, port_name, port in ports:
        meta = {
            "__address__": f"10.0.0.1:{port}",
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_phase": phase,
            "__meta_kubernetes_pod_container_name": container,
            "__meta_kubernetes_pod_container_port_name": port_name,
            "__meta_kubernetes_pod_container_port_number": str(port),
        }
        for key, value in labels.items():
            meta[f"__meta_kubernetes_pod_label_{_label_name(key)}"] = value
            meta[f"__meta_kubernetes_pod_labelpresent_{_label_name(key)}"] = "true"
        targets.append(meta)
    return targets


RATELIMIT_LABELS = {
    "app.kubernetes.io/name": "envoy-ratelimit",
    "app.kubernetes.io/component": "ratelimit",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
ENVOY_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
    "gateway.envoyproxy.io/owning-gateway-name": "agent-router",
    "gateway.envoyproxy.io/owning-gateway-namespace": "agent-budgets",
}
RATELIMIT_PORTS = [("envoy-ratelimit", "grpc", 8081), ("envoy-ratelimit", "metrics", 19001)]
ENVOY_PORTS = [("envoy", "metrics", 19001), ("ai-gateway-extproc", "aigw-admin", 1064)]

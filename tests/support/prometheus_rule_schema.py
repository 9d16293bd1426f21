"""The shape prometheus-operator accepts for a PrometheusRule, as a JSON Schema we keep ourselves.

Facts from prometheus-operator v0.93.0 (`pkg/apis/monitoring/v1/prometheusrule_types.go`, and the CRD it
generates, `example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml`): a group needs a
`name` and holds `rules`; a rule needs `expr` (a string, or an integer); `for`, `keep_firing_for`, `interval`
and `query_offset` are Prometheus durations; labels and annotations map strings to strings. The tests validate
against this schema and against the pinned CRD (`prometheus-operator-v0.93.0` among the pinned CRDs); the
schema adds what the CRD leaves open.

Unlike the API server, which silently prunes unknown fields, this schema refuses them
(`additionalProperties: false`): a misspelt `annotation` would otherwise vanish from the alert.
"""

from __future__ import annotations

from typing import Any

# Prometheus' duration syntax as the CRD writes it: units y, w, d, h, m, s, ms in that order, or 0.
DURATION_PATTERN = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"

_DURATION = {"type": "string", "pattern": DURATION_PATTERN}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "for": _DURATION,
        "keep_firing_for": {**_DURATION, "minLength": 1},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}

GROUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": _DURATION,
        "query_offset": _DURATION,
        "limit": {"type": "integer"},
        "labels": _STRING_MAP,
        "partial_response_strategy": {"type": "string", "pattern": "^(?i)(abort|warn)?$"},
        "rules": {"type": "array", "items": RULE_SCHEMA},
    },
}

PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"groups": {"type": "array", "items": GROUP_SCHEMA}},
        },
    },
}


def group_names_unique(rule: dict[str, Any]) -> bool:
    """The CRD makes `groups` a list-map keyed by `name` (x-kubernetes-list-map-keys): names are unique."""
    names = [group.get("name") for group in rule.get("spec", {}).get("groups", [])]
    return len(names) == len(set(names))

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

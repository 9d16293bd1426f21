"""The real `promtool` (prometheus/prometheus `cmd/promtool`, Prometheus 3.16.0) over the program's rule files, and
the series it is fed, written as the rate-limit service and Agent Router export them.

* `check_rules` runs `promtool check rules --lint=all --lint-fatal`: Prometheus' own rule-file loader
  (`model/rulefmt`: YAML fields, PromQL parsed by Prometheus' parser, template syntax of annotations and labels,
  group names) and its linter (duplicate rules), every finding an error.
* `run_unit_tests` runs `promtool test rules` on a unit-test file (`cmd/promtool/unittest.go`): the rules evaluated
  by Prometheus' own engine every `evaluation_interval` over `input_series`, and with `--debug` every sample it
  holds at the end (the input and every recorded series), which `dumped_samples` reads.
* `RateLimitStats` replays how envoyproxy/ratelimit counts a rule's `near_limit`, `over_limit`, `within_limit` and
  `total_hits` stats (`src/limiter/base_limiter.go` `GetResponseDescriptorStatus`, `checkOverLimitThreshold`,
  `checkNearLimitThreshold`, read at f2fb157 like the rest of the project; unchanged since 38500fe, 2024-12), and
  `stat_labels` the labels Envoy Gateway's statsd mapping gives each stat (envoyproxy/gateway v1.9.0
  `internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml`, served as the text format without `_total`
  suffixes: ratelimit's `src/stats/prom/prometheus_sink.go` uses client_golang v1.19.1 `promhttp.Handler()`, which
  does not offer OpenMetrics).
"""

from __future__ import annotations

import math
import re
import struct
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.real_tools import real_tool

SCRAPE_SECONDS = 30
"""The scrape interval of every input series (Prometheus' default is 1m; kube-prometheus-stack scrapes every 30s)."""
DUMP_START = re.compile(r"^DEBUG: Dump of all data \(input_series and rules\) at .*:$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_POINT = re.compile(r"^(\S+) @\[(-?\d+)\]$")

Labels = frozenset[tuple[str, str]]


def promtool() -> Path:
    """The pinned `promtool` binary (skips on a laptop without it, fails on CI: tests/support/real_tools.py)."""
    return real_tool("promtool")


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`promtool <args>`, its output captured (never raises on a non-zero exit: the tests read the status)."""
    return subprocess.run(
        [str(promtool()), *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False, timeout=None
    )


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8")
    return path


def check_rules(*rule_files: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` with every lint, each lint finding fatal (exit 3; a loading error exits 1)."""
    return run_promtool("check", "rules", "--lint=all", "--lint-fatal", *rule_files)


def run_unit_tests(test_file: Path, *, debug: bool = False) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on one unit-test file (its `rule_files` relative to it)."""
    return run_promtool("test", "rules", *(["--debug"] if debug else []), test_file, cwd=test_file.parent)


def selector(name: str, labels: Mapping[str, str]) -> str:
    """A series as a unit-test file names it: `name{a="b",...}` (values escaped as PromQL strings)."""
    inner = ",".join(f'{key}="{_escaped(value)}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


STALE = "stale"
"""A staleness marker in an input series: what Prometheus writes when a target or a series goes away."""


@dataclass(frozen=True)
class Series:
    """One input series: a value per scrape from time 0 on, None where it has no sample, STALE for a marker."""

    name: str
    labels: Mapping[str, str]
    values: tuple[float | str | None, ...]

    def entry(self) -> dict[str, str]:
        """As an `input_series` item of a unit-test file."""
        text = " ".join("_" if v is None else v if isinstance(v, str) else _number(v) for v in self.values)
        return {"series": selector(self.name, self.labels), "values": text}

    def samples(self) -> list[tuple[float, float]]:
        """(seconds, value) of every real sample (no markers)."""
        return [
            (position * SCRAPE_SECONDS, float(v))
            for position, v in enumerate(self.values)
            if v is not None and not isinstance(v, str)
        ]


def dumped_samples(stderr: str) -> dict[Labels, list[tuple[float, float]]]:
    """Every series of `promtool test rules --debug`'s dump (`promql.Matrix.String()`: the labels, `=>`, then one
    `value @[milliseconds]` per line), as labels (with `__name__`) → [(seconds, value)]. Raises when there is none."""
    lines = stderr.splitlines()
    starts = [index for index, line in enumerate(lines) if DUMP_START.match(line)]
    if len(starts) != 1:
        raise AssertionError(f"expected one debug dump in promtool's output, found {len(starts)}:\n{stderr}")
    found: dict[Labels, list[tuple[float, float]]] = {}
    current: list[tuple[float, float]] | None = None
    for line in lines[starts[0] + 1 :]:
        if line.startswith("DEBUG:"):
            break
        if line.endswith(" =>"):
            series = frozenset((key, _unescaped(value)) for key, value in _LABEL.findall(line[: -len(" =>")]))
            current = found.setdefault(series, [])
            continue
        point = _POINT.match(line)
        if point and current is not None:
            current.append((int(point.group(2)) / 1000, float(point.group(1))))
        elif line.strip():
            raise AssertionError(f"unexpected line in promtool's dump: {line!r}")
    return found


def _unescaped(value: str) -> str:
    return re.sub(r"\\(.)", lambda match: {"n": "\n"}.get(match.group(1), match.group(1)), value)


def without_name(series: Labels) -> Labels:
    return frozenset(item for item in series if item[0] != "__name__")


def named(samples: Mapping[Labels, list[tuple[float, float]]], name: str) -> dict[Labels, list[tuple[float, float]]]:
    """The dumped series called `name`, keyed by their labels without the name."""
    return {without_name(key): points for key, points in samples.items() if dict(key).get("__name__") == name}


def float32(value: float) -> float:
    """`value` rounded to a Go float32."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass
class RateLimitStats:
    """One rule's counter in one window and the service's cumulative stats for the rule, as envoyproxy/ratelimit
    keeps them (no local cache, no shadow mode: Envoy Gateway sets neither for our rules).

    `near_ratio` is `NEAR_LIMIT_RATIO`, a float32 (`src/settings/settings.go`); the near threshold is
    `floor(float32(limit) * ratio)` in float32 arithmetic (`GetResponseDescriptorStatus`). The stats are the
    process's gostats counters: they outlive windows, and lyft/gostats v0.4.14 (`stats.go` `Flush`) never flushes a
    counter that has not moved, so a stat has no Prometheus series until its first non-zero addition.
    """

    limit: int
    near_ratio: float
    current: int = 0
    near_limit: int = 0
    over_limit: int = 0
    within_limit: int = 0
    total_hits: int = 0

    @property
    def near_threshold(self) -> int:
        return math.floor(float32(float32(self.limit) * float32(self.near_ratio)))

    def charge(self, hits: int) -> bool:
        """Add `hits` to the window's counter (increment, then compare); True when the descriptor is over the limit."""
        before, after = self.current, self.current + hits
        self.current = after
        self.total_hits += hits
        near = self.near_threshold
        if after > self.limit:
            if before >= self.limit:
                self.over_limit += hits
            else:
                self.over_limit += after - self.limit
                self.near_limit += self.limit - max(near, before)
            return True
        if after > near:
            self.near_limit += hits if before >= near else after - near
        self.within_limit += hits
        return False

    def new_window(self) -> None:
        """The window's counter key changes (a new day, hour, ...): the count starts over, the stats do not."""
        self.current = 0

    def exported(self) -> dict[str, int]:
        """The stats that have a series: name suffix → value."""
        stats = {
            "near_limit": self.near_limit,
            "over_limit": self.over_limit,
            "within_limit": self.within_limit,
            "total_hits": self.total_hits,
        }
        return {name: value for name, value in stats.items() if value}


def stat_segments(entries: Sequence[tuple[str, str]], distinct_values: Sequence[str]) -> list[str]:
    """The dotted segments of a rule's stat name after its domain: the rate-limit configuration's descriptor keys,
    `key_value` where the descriptor has a value and `key` alone where it counts per value (Envoy Gateway v1.9.0
    `internal/xds/translator/ratelimit.go` `buildRateLimitServiceDescriptors`: a Distinct header match has no
    value; envoyproxy/ratelimit `src/config/config_impl.go` `loadDescriptors` joins them with `.`)."""
    return [key if value in distinct_values else f"{key}_{value}" for key, value in entries]


def stat_labels(domain: str, segments: Sequence[str]) -> dict[str, str]:
    """The labels Envoy Gateway's statsd mapping gives `ratelimit.service.rate_limit.<domain>.<segments>.<stat>`:
    with one segment the glob mapping (domain, key1), with more the regex one (domain, key1, key2)."""
    if any("." in part for part in (domain, *segments)):
        raise ValueError(f"a dot in {domain!r} or {segments!r} would shift the mapping's fields")
    labels = {"domain": domain, "key1": segments[0]}
    if len(segments) > 1:
        labels["key2"] = segments[1]
    return labels

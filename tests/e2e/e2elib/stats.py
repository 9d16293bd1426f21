"""Latency statistics for the latency probe (make bench-e2e)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with at least pct% of the values at or below it."""
    if not values:
        raise ValueError("no values")
    if not 0 < pct <= 100:
        raise ValueError("pct must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class Summary:
    count: int
    median_ms: float
    p95_ms: float


def summarize(values: Sequence[float]) -> Summary:
    return Summary(len(values), median(values), percentile(values, 95))


def report(direct: Summary, full: Summary) -> list[str]:
    """The lines make bench-e2e prints: both paths and what the full path adds."""
    return [
        f"straight to the mock model ({direct.count} calls): "
        f"median {direct.median_ms:.2f} ms, p95 {direct.p95_ms:.2f} ms",
        f"full path, from a sandbox ({full.count} calls):  median {full.median_ms:.2f} ms, p95 {full.p95_ms:.2f} ms",
        f"added by the full path: median {full.median_ms - direct.median_ms:+.2f} ms, "
        f"p95 {full.p95_ms - direct.p95_ms:+.2f} ms",
    ]


@dataclass(frozen=True)
class Level:
    """One load level of the throughput bench: `concurrency` callers at once, `calls` in `seconds`."""

    concurrency: int
    calls: int
    seconds: float
    summary: Summary

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0


def sustained(levels: Sequence[Level]) -> Level | None:
    """The busiest level (by calls per second) whose p95 stays within twice the p95 of the least concurrent one;
    None without levels."""
    if not levels:
        return None
    baseline = min(levels, key=lambda level: level.concurrency).summary.p95_ms
    within = [level for level in levels if level.summary.p95_ms <= 2 * baseline]
    return max(within, key=lambda level: level.calls_per_second)


def throughput_lines(levels: Sequence[Level]) -> list[str]:
    lines = [
        f"concurrency {level.concurrency:>2}: {level.calls} calls in {level.seconds:.1f} s = "
        f"{level.calls_per_second:.1f} calls/s, median {level.summary.median_ms:.2f} ms, "
        f"p95 {level.summary.p95_ms:.2f} ms"
        for level in levels
    ]
    best = sustained(levels)
    if best is not None:
        lines.append(
            f"sustained before p95 doubles: {best.calls_per_second:.1f} calls/s at concurrency {best.concurrency} "
            f"(p95 {best.summary.p95_ms:.2f} ms, twice the baseline is "
            f"{2 * min(levels, key=lambda level: level.concurrency).summary.p95_ms:.2f} ms)"
        )
    return lines

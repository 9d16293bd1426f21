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

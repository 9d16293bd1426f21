"""Benchmark (not a test): the whole program under Pulumi mocks with 100, 1,000 and 10,000 actors.

Prints resources registered and seconds for each size, and the growth ratios: the egress policies are at
most 64 shard resources and the budget policy is one resource whatever the count, so the registrations
stop growing while the per-actor entries inside them grow. Run with `make bench`.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.program import run_program, stack_config  # noqa: E402

SIZES = (100, 1_000, 10_000)


def config_for(actors: int) -> dict:
    """The dev stack with `actors` actors, a tenth of them in 50 classes."""
    config = stack_config("dev")
    ids = [f"agents/agent-{i:05d}" for i in range(actors)]
    members = ids[: actors // 10]
    per_class = max(1, len(members) // 50)
    config["actors"] = ids
    config["budgets"] = {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [
            {
                "name": f"class-{c:02d}",
                "tokens": 1000 + c,
                "per": "Day",
                "actors": members[c * per_class : (c + 1) * per_class],
            }
            for c in range(50)
        ],
    }
    return config


def main() -> None:
    """Run each size once and print a table."""
    results: list[tuple[int, int, float]] = []
    for size in SIZES:
        config = config_for(size)
        start = time.perf_counter()
        run = run_program(config, stack="bench")
        seconds = time.perf_counter() - start
        results.append((size, len(run.resources), seconds))
        print(f"{size:>6} actors: {len(run.resources):>6} resources registered in {seconds:7.2f} s", flush=True)
    print()
    for (small, small_res, small_s), (big, big_res, big_s) in itertools.pairwise(results):
        print(
            f"{small} -> {big} actors (x{big // small}): resources x{big_res / small_res:.1f}, "
            f"time x{big_s / small_s:.1f}, {big_s / big * 1000:.2f} ms per actor"
        )


if __name__ == "__main__":
    main()

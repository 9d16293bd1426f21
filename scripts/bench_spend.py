"""Benchmark (not a test): the spend report for 10,000 actors against a real redis-server on 127.0.0.1.

Starts a local redis-server (the one the dev requirements install), writes 10,000 actors' counters the way
envoyproxy/ratelimit does (INCRBY + EXPIRE), then times each step of `python -m tools.spend` on its own code
paths: planning the keys with the rate-limit model, reading every counter in one pipelined round trip, and
building and rendering the report. Prints the seconds of each (best of several runs). Run with
`make bench-spend`.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import spend  # noqa: E402
from core.validation import validate_stack  # noqa: E402
from tests.support.redis_server import local_redis  # noqa: E402
from tools.spend.store import RedisEndpoint, connect  # noqa: E402

ACTORS = 10_000
CLASSES = 50
RUNS = 5
PASSWORD = "bench-redis-password"


def stack_config() -> dict[str, Any]:
    """10,000 actors, a tenth of them in 50 classes (as `make bench` sizes the program)."""
    ids = [f"agents/agent-{n:05d}" for n in range(ACTORS)]
    members = ids[: ACTORS // 10]
    per_class = len(members) // CLASSES
    return {
        "actors": ids,
        "budgets": {
            "default": {"tokens": 500_000, "per": "Day"},
            "classes": [
                {
                    "name": f"class-{c:02d}",
                    "tokens": 1_000_000 + c,
                    "per": "Day",
                    "actors": members[c * per_class : (c + 1) * per_class],
                }
                for c in range(CLASSES)
            ],
        },
    }


def best(step: Callable[[], Any]) -> tuple[float, float, Any]:
    """(best, median) seconds over RUNS runs, and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main() -> None:
    validated = validate_stack(stack_config(), lambda key: (False, False))
    now = int(time.time())
    plan_best, plan_median, plan = best(
        lambda: spend.plan_counters(validated.settings.actors, validated.rules, "agent-budgets", "agent-budgets", now)
    )
    keys = plan.keys
    with local_redis(PASSWORD) as server:
        client = server.client()
        pipeline = client.pipeline(transaction=False)
        for n, key in enumerate(keys):
            pipeline.incrby(key, 100 + n % 900)
            pipeline.expire(key, 86_400)
        pipeline.execute()
        endpoint = RedisEndpoint("single", (("127.0.0.1", server.port),), "bench Redis", password=server.password)
        with connect(endpoint) as store:
            read_best, read_median, values = best(lambda: store.read(keys))
        report_best, report_median, report = best(
            lambda: spend.build_report("bench", "agent-budgets/agent-budgets", now, plan, values)
        )
        render_best, render_median, _ = best(lambda: spend.render_table(report))
    assert len(report.rows) == ACTORS and all(row.spent > 0 for row in report.rows)
    print(f"spend report, {ACTORS:,} actors ({CLASSES} classes), local redis-server; best / median of {RUNS}:")
    steps = [
        ("plan the counter keys (rate-limit model)", plan_best, plan_median),
        (f"read {len(keys):,} counters in one round trip", read_best, read_median),
        ("build the report", report_best, report_median),
        ("render the table", render_best, render_median),
    ]
    for name, fastest, median in steps:
        print(f"  {name:<42} {fastest:7.3f} s / {median:.3f} s")


if __name__ == "__main__":
    main()

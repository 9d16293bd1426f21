"""Benchmark (not a test): the spend report for 10,000 actors against a real redis-server on 127.0.0.1.

Starts a local redis-server (the one the dev requirements install), writes a stack file of 10,000 actors (a
tenth of them in 50 classes) whose `redis` is that server as an external Redis, charges every actor's counter
the way envoyproxy/ratelimit does (INCRBY + EXPIRE), then times `python -m tools.spend --stack bench` end to
end (in this process: read the stack file, validate it, connect, plan, read, build, render) and each of its
steps on its own code path. Prints the seconds of each (best and median of several runs) against the target:
the whole report in 0.5 s, judged on the best run (the median also holds whatever else a shared machine was
doing). Run with `make bench-spend`.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import io
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import spend  # noqa: E402
from core.manifests import BUDGET_POLICY_NAME  # noqa: E402
from tests.support.budgets import classes_layout  # noqa: E402
from tests.support.redis_server import LocalRedis, local_redis  # noqa: E402
from tools.spend import cli  # noqa: E402
from tools.spend.stack import load_stack  # noqa: E402
from tools.spend.store import RedisEndpoint, connect  # noqa: E402

ACTORS = 10_000
CLASSES = 50
RUNS = 7
PASSWORD = "bench-redis-password"
STACK = "bench"
TARGET_SECONDS = 0.5
"""The whole report, end to end, at 10,000 actors."""


def stack_config(redis_port: int) -> dict[str, Any]:
    """10,000 actors, a tenth of them in 50 classes (as `make bench` sized the program), on an external Redis."""
    ids = [f"agents/agent-{n:05d}" for n in range(ACTORS)]
    return {
        "kubernetes": {"context": "bench"},
        "actors": ids,
        "budgets": classes_layout(ids, CLASSES, 0.1, default_tokens=500_000, class_tokens=1_000_000),
        "redis": {"mode": "external", "url": f"localhost:{redis_port}"},
    }


def write_project(folder: Path, config: dict[str, Any]) -> None:
    """A project folder holding Pulumi.yaml and Pulumi.bench.yaml, as an operator's checkout would."""
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "agent-budgets", "runtime": "python"}))
    document = {f"agent-budgets:{key}": value for key, value in config.items()}
    document["agent-budgets:redisPassword"] = {"secure": "v1:bench-ciphertext"}  # read from the environment
    (folder / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": document}))


def best(step: Callable[[], Any]) -> tuple[float, float, Any]:
    """(best, median) seconds over RUNS runs, and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def end_to_end(project: Path, password: str) -> str:
    """`python -m tools.spend --stack bench` in this process; returns what it printed."""
    args = cli.build_parser().parse_args(["--stack", STACK, "--project-dir", str(project)])
    stdout, stderr = io.StringIO(), io.StringIO()
    status = cli.run(args, stdout, stderr, environ={cli.PASSWORD_ENV: password})
    if status != cli.EXIT_OK:
        raise SystemExit(f"the report failed ({status}): {stderr.getvalue()}")
    return stdout.getvalue()


def charge_every_counter(project: Path, server: LocalRedis) -> None:
    """Write every counter of the stack as envoyproxy/ratelimit does (INCRBY + EXPIRE), 100 to 999 each."""
    validated = load_stack(project, STACK).validate()
    plan = spend.plan_counters(
        validated.settings.actors, validated.rules, "agent-budgets", BUDGET_POLICY_NAME, int(time.time())
    )
    client = server.client()
    pipeline = client.pipeline(transaction=False)
    for n, key in enumerate(plan.keys):
        pipeline.incrby(key, 100 + n % 900)
        pipeline.expire(key, 86_400)
    pipeline.execute()
    client.close()


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    with local_redis(PASSWORD) as server, tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        write_project(project, stack_config(server.port))
        charge_every_counter(project, server)
        # The command runs on its own: nothing of the set-up is left for its garbage collections to walk.
        gc.collect()
        whole_best, whole_median, text = best(lambda: end_to_end(project, server.password))
        assert len(text.splitlines()) == ACTORS + 2, "one row per actor, a header and a footer"

        steps: list[tuple[str, float, float]] = []
        stack = load_stack(project, STACK)
        validated = stack.validate()
        now = int(time.time())
        read_stack = best(lambda: load_stack(project, STACK))
        steps.append(("read the stack file", *read_stack[:2]))
        steps.append(("validate it (the program's checks)", *best(stack.validate)[:2]))
        plan_best, plan_median, plan = best(
            lambda: spend.plan_counters(
                validated.settings.actors, validated.rules, "agent-budgets", BUDGET_POLICY_NAME, now
            )
        )
        steps.append(("plan the counter keys", plan_best, plan_median))
        endpoint = RedisEndpoint("single", (("127.0.0.1", server.port),), "bench Redis", password=server.password)
        with connect(endpoint) as store:
            read_best, read_median, values = best(lambda: store.read(plan.keys))
        steps.append((f"read {len(plan.keys):,} counters (one round trip)", read_best, read_median))
        report_best, report_median, report = best(
            lambda: spend.build_report(STACK, "agent-budgets/agent-budgets", now, plan, values)
        )
        steps.append(("build the report", report_best, report_median))
        steps.append(("render the table", *best(lambda: spend.render_table(report))[:2]))
    assert len(report.rows) == ACTORS and all(row.spent > 0 for row in report.rows)
    print(
        f"make bench-spend, {datetime.date.today().isoformat()}: {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {load} at the start"
    )
    print(f"spend report, {ACTORS:,} actors ({CLASSES} classes), local redis-server; best / median of {RUNS}:")
    for name, fastest, median in steps:
        print(f"  {name:<44} {fastest:7.3f} s / {median:.3f} s")
    print(f"  {'end to end: python -m tools.spend':<44} {whole_best:7.3f} s / {whole_median:.3f} s")
    # The best run is what the code costs; the median also holds whatever else the machine was doing.
    verdict = "met" if whole_best <= TARGET_SECONDS else "NOT MET"
    print(f"  target: the whole report in <= {TARGET_SECONDS:g} s (best run): {verdict}")
    print(f"load average {', '.join(f'{value:.2f}' for value in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()

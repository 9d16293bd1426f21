"""A budget change at scale on the rig (`python -m rig scale --actors 10 10000`, on the deployed dev-kubernetes
stack): how long from `pulumi up` to the first call that sees the new limit, and how long Envoy Gateway took to
translate it.

For each size the stack's actors become its own three (so that the rig can call as one of them) and synthetic
service accounts up to the size, laid out as `make bench` lays them out (scripts/bench_program.py, "50 classes":
2% of the actors in 50 classes, `tests/support/budgets.py` `classes_layout`, one in a thousand suspended); `pulumi
up` applies that, then the default budget's token limit is cut to a fifth (rig/lifecycle.py `lowered_default`)
and applied, and a service account under the default budget calls until its `x-ratelimit-limit` names the new
limit. Envoy Gateway's own figure is the growth of its `watchable_subscribe_duration_seconds` histogram (the time
each runner spent on the updates it received: envoyproxy/gateway v1.9.0 internal/message/metrics.go, on the
`envoy-gateway` Service's metrics port 19001) over the change, for the `gateway-api` runner (the translation
to the intermediate representation) and the `xds-translator` runner (to Envoy's configuration).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from typing import Any

import yaml

from rig import lifecycle, program
from rig.engine import Engine
from rig.node import Node
from rig.processes import StepError, wait_until
from tests.support.budgets import classes_layout

METRICS_PORT = 19001
HISTOGRAM = "watchable_subscribe_duration_seconds"
SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+-]+)$")
CLASSES, MEMBER_SHARE, SUSPENDED_EVERY = 50, 0.02, 1000


def runner_seconds(metrics_text: str) -> dict[str, tuple[float, float]]:
    """runner -> (sum of seconds, count) of the histogram, added over its other labels."""
    totals: dict[str, list[float]] = {}
    for line in metrics_text.splitlines():
        match = SAMPLE.match(line.strip())
        if not match or match["name"] not in (f"{HISTOGRAM}_sum", f"{HISTOGRAM}_count"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        entry = totals.setdefault(labels.get("runner", "?"), [0.0, 0.0])
        entry[0 if match["name"].endswith("_sum") else 1] += float(match["value"])
    return {runner: (values[0], values[1]) for runner, values in totals.items()}


def growth(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, Any]:
    return {
        runner: {
            "seconds": round(after[runner][0] - before.get(runner, (0.0, 0.0))[0], 3),
            "updates": int(after[runner][1] - before.get(runner, (0.0, 0.0))[1]),
        }
        for runner in sorted(after)
        if after[runner][1] > before.get(runner, (0.0, 0.0))[1]
    }


def layout(own: list[str], size: int, run: str = "0") -> tuple[list[str], dict[str, Any], list[str]]:
    """(actors, budgets, suspended): the stack's own actors first, synthetic service accounts up to `size`, named
    for the `run` (counters outlive a run until their window ends, and the measured caller must have spent
    nothing)."""
    synthetic = [f"serviceaccount:bench/agent-{run}-{i:06d}" for i in range(max(size - len(own), 0))]
    budgets = classes_layout(synthetic, CLASSES, MEMBER_SHARE, default_tokens=500, class_tokens=1000)
    budgets["classes"] = [entry for entry in budgets["classes"] if entry["actors"]]
    return [*own, *synthetic], budgets, synthetic[SUSPENDED_EVERY // 2 :: SUSPENDED_EVERY]


def default_callers(actors: list[str], budgets: dict[str, Any], suspended: list[str]) -> tuple[str, str]:
    """The last two service accounts under the default budget, not suspended: one to see the stack serve at its new
    size, and one that has spent nothing when the budget changes, so that its call is admitted and carries
    `x-ratelimit-limit` (a refused call's 429 carries the budget's own body; a call spends 200 tokens, more than
    the lowered limit)."""
    held = set(suspended) | {actor for entry in budgets["classes"] for actor in entry["actors"]}
    free = [a for a in reversed(actors) if a.startswith("serviceaccount:") and a not in held]
    if len(free) < 2:
        raise StepError("fewer than two service accounts under the default budget to call as")
    return free[1], free[0]


def metrics(node: Node) -> str:
    service = json.loads(node.kubectl("get", "service", "envoy-gateway", "-n", program.GATEWAY_NAMESPACE, "-o", "json"))
    url = f"http://{service['spec']['clusterIP']}:{METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=20) as response:
        return response.read().decode()


def one_size(node: Node, engine: Engine, stack: str, own: list[str], size: int) -> dict[str, Any]:
    actors, budgets, suspended = layout(own, size, run=f"{int(time.time()) % 100_000:05d}")
    began = time.monotonic()
    engine.overlay(
        stack, {"agent-budgets:actors": actors, "agent-budgets:budgets": budgets, "agent-budgets:suspended": suspended}
    )
    engine.pulumi("up", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-up-scale-{size}", timeout=3600)
    up_seconds = round(time.monotonic() - began, 1)
    warm, caller = default_callers(actors, budgets, suspended)
    wait_until(
        f"{caller} served at {size} actors",
        lambda: "200" if lifecycle.rate_limit_header(node, engine, stack, warm)[0] == 200 else None,
        600,
    )
    changed, old, new = lifecycle.lowered_default(budgets)
    before = runner_seconds(metrics(node))
    engine.overlay(stack, {"agent-budgets:budgets": changed})
    began = time.monotonic()
    engine.pulumi(
        "up", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-up-scale-{size}-budget", timeout=3600
    )
    applied = round(time.monotonic() - began, 1)
    seen: dict[str, Any] = {}

    def limited_by_new() -> str | None:
        status, limit = lifecycle.rate_limit_header(node, engine, stack, caller)
        seen.update(status=status, limit=limit)
        return limit if limit.split(",")[0].strip() == str(new) else None

    wait_until(f"a call limited by {new} at {size} actors", limited_by_new, 900, interval=0.5)
    first_call = round(time.monotonic() - began, 1)
    time.sleep(5)  # the runners' last updates of this change
    return {
        "actors": len(actors),
        "classes": len(budgets["classes"]),
        "suspended": len(suspended),
        "up_seconds_to_that_size": up_seconds,
        "limit": [old, new],
        "up_seconds_of_the_change": applied,
        "seconds_from_up_to_the_first_call_with_the_new_limit": first_call,
        "call": seen,
        "envoy_gateway_runners": growth(before, runner_seconds(metrics(node))),
    }


def run(node: Node, engine: Engine, stack: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Each size in turn, then the stack file's own actors, budgets and suspensions applied again."""
    path = engine.project / f"Pulumi.{stack}.yaml"
    original = path.read_text(encoding="utf-8")
    config = yaml.safe_load(original)["config"]
    own = list(config["agent-budgets:actors"])
    if not any(actor.startswith("serviceaccount:") for actor in own):
        raise StepError(f"stack {stack} has no service account to call as")
    try:
        return [one_size(node, engine, stack, own, size) for size in sizes]
    finally:
        path.write_text(original, encoding="utf-8")
        engine.pulumi(
            "up", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-up-scale-restore", timeout=3600
        )

"""A budget change at scale on the rig (`python -m rig scale --actors 10 2000`, on the deployed dev-kubernetes
stack; `--program --actors 10000` past what a stack file holds): how long from `pulumi up` to the first call that
sees the new limit, and how long Envoy Gateway took to translate it.

For each size the stack's actors become its own three (so that the rig can call as one of them) and synthetic
service accounts up to the size, laid out as `make bench` lays them out (scripts/bench_program.py, "50 classes":
2% of the actors in 50 classes, `tests/support/budgets.py` `classes_layout`, one in a thousand suspended); `pulumi
up` applies that, then the default budget's token limit is cut to a fifth (rig/lifecycle.py `lowered_default`)
and applied, and a service account under the default budget calls until its `x-ratelimit-limit` names the new
limit. Envoy Gateway's own figure is the growth of its `watchable_subscribe_duration_seconds` histogram (the time
each runner spent on the updates it received: envoyproxy/gateway v1.9.0 internal/message/metrics.go, on the
`envoy-gateway` Service's metrics port 19001) over the change, for the `gateway-api` runner (the translation
to the intermediate representation) and the `xds-translator` runner (to Envoy's configuration). Then Envoy
Gateway's message to Agent Router at that size is measured against `core/xds_size.py` (rig/extension_message.py).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agent_budgets.component import SECTION_FIELDS
from core.config_size import config_env_bytes
from core.validation import parse_settings
from rig import actor_keys, lifecycle, live_stack, program
from rig.engine import Engine
from rig.extension_message import extension_message_check
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


def timed_change(
    node: Node,
    callers: list[live_stack.Caller],
    budgets: dict[str, Any],
    size: int,
    apply: Callable[[dict[str, Any]], float],
    warm_timeout: float = 600,
) -> dict[str, Any]:
    """The default budget's tokens cut to a fifth (`apply` writes the budgets and runs `pulumi up`, answering its
    seconds): from `up` to the first call by the second caller that names the new limit, each poll from
    fresh counters, once the first caller is served; and Envoy Gateway's runner times over the change."""
    warm, caller = callers
    wait_until(
        f"{warm.actor} served at {size} actors", lambda: "200" if warm.rate_limit_header()[0] == 200 else None,
        warm_timeout,
    )  # fmt: skip
    changed, old, new = lifecycle.lowered_default(budgets)
    before = runner_seconds(metrics(node))
    began = time.monotonic()
    applied = apply(changed)
    seen: dict[str, Any] = {}

    def limited_by_new() -> str | None:
        caller.fresh()  # each poll spends the mock's tokens
        status, limit = caller.rate_limit_header()
        seen.update(status=status, limit=limit)
        return limit if limit.split(",")[0].strip() == str(new) else None

    wait_until(f"a call limited by {new} at {size} actors", limited_by_new, 900, interval=0.5)
    first_call = round(time.monotonic() - began, 1)
    time.sleep(5)  # the runners' last updates of this change
    return {
        "limit": [old, new],
        "up_seconds_of_the_change": applied,
        "seconds_from_up_to_the_first_call_with_the_new_limit": first_call,
        "call": seen,
        "envoy_gateway_runners": growth(before, runner_seconds(metrics(node))),
    }


def one_size(node: Node, engine: Engine, stack: str, own: list[str], size: int) -> dict[str, Any]:
    actors, budgets, suspended = layout(own, size, run=f"{int(time.time()) % 100_000:05d}")
    engine.overlay(
        stack, {"agent-budgets:actors": actors, "agent-budgets:budgets": budgets, "agent-budgets:suspended": suspended}
    )
    _, up_seconds = engine.up(stack, log_name=f"{stack}-up-scale-{size}")

    def apply(changed: dict[str, Any]) -> float:
        engine.overlay(stack, {"agent-budgets:budgets": changed})
        return engine.up(stack, log_name=f"{stack}-up-scale-{size}-budget")[1]

    callers = [
        live_stack.Caller.of(node, engine, stack, actor) for actor in default_callers(actors, budgets, suspended)
    ]
    change = timed_change(node, callers, budgets, size, apply)
    return {
        "actors": len(actors),
        "classes": len(budgets["classes"]),
        "suspended": len(suspended),
        "up_seconds_to_that_size": up_seconds,
        **change,
        # The message of this size against the model (rig diff's sixth check): it restarts Envoy Gateway, so after
        # the runners' figures.
        "extension_message": extension_message_check(node, engine, stack),
    }


def run(node: Node, engine: Engine, stack: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Each size in turn, then the stack file's own actors, budgets and suspensions applied again."""
    own = list(engine.stack_config(stack)["agent-budgets:actors"])
    if not any(actor.startswith("serviceaccount:") for actor in own):
        raise StepError(f"stack {stack} has no service account to call as")
    with engine.restoring(stack, log_name=f"{stack}-up-scale-restore"):
        return [one_size(node, engine, stack, own, size) for size in sizes]


# --- past what a stack file holds: a Python program building AgentBudgets from a file ---------------------------

PROGRAM_PROJECT = "agent-budgets-scale"
PROGRAM_STACK = "scale"
PROGRAM_MESSAGE_LIMIT = "32Mi"
PROGRAM_MAIN = """\
\"\"\"A Python program using AgentBudgets, its sections read from a file: the way past what a stack file can hold
(docs/configuration.md, "How large a stack file can be"). Made by rig/scale.py.\"\"\"

import json
import sys
from pathlib import Path

sys.path.insert(0, {project!r})  # agent-budgets as a checkout, not an installed distribution

import pulumi  # noqa: E402

from agent_budgets import AgentBudgets, AgentBudgetsArgs  # noqa: E402

sections = json.loads((Path(__file__).parent / "sections.json").read_text(encoding="utf-8"))
budgets = AgentBudgets("agent-budgets", AgentBudgetsArgs(**sections))
for key, value in budgets.stack_outputs.items():
    pulumi.export(key, value)
"""


def program_sections(stack_file: Path, overlay: dict[str, Any]) -> dict[str, Any]:
    """A stack file's sections with the overlay, as AgentBudgetsArgs' fields (`rateLimit` -> `rate_limit`)."""
    config = (yaml.safe_load(stack_file.read_text(encoding="utf-8")) or {}).get("config") or {}
    merged = {
        key.split(":", 1)[1]: value for key, value in {**config, **overlay}.items() if key.startswith("agent-budgets:")
    }
    return {SECTION_FIELDS[key]: value for key, value in merged.items() if key in SECTION_FIELDS}


def write_program(directory: Path, project: Path, venv: Path, sections: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "__main__.py").write_text(PROGRAM_MAIN.format(project=str(project)), encoding="utf-8")
    (directory / "sections.json").write_text(json.dumps(sections), encoding="utf-8")
    document = {
        "name": PROGRAM_PROJECT,
        "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(venv)}},
    }
    (directory / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def through_a_program(node: Node, engine: Engine, stack: str, size: int) -> dict[str, Any]:
    """On an emptied cluster: `stack`'s file with `size` actors, deployed by a Python program that reads its
    sections from a file; the budget change timed as `one_size` times it; destroyed."""
    lifecycle.wait_namespaces_gone(node)  # the stack's namespaces are this program's too
    directory = engine.directory / "scale-program"
    overlay = program.overlay(node.layout, engine.by_hand)
    base = program_sections(engine.project / f"Pulumi.{stack}.yaml", overlay)
    own = list(base["actors"])
    actors, budgets, suspended = layout(own, size, run=f"{int(time.time()) % 100_000:05d}")
    sections = {**base, "actors": actors, "budgets": budgets, "suspended": suspended}
    # What the program's own check asks for at 10,000 service accounts (the SecurityPolicy's principals make Envoy
    # Gateway's message to Agent Router about 14 MB, more than 16Mi holds with its 25% headroom).
    sections["platform"] = {**sections.get("platform", {}), "extensionMessageLimit": PROGRAM_MESSAGE_LIMIT}
    write_program(directory, engine.project, engine.project_root / "venv", sections)
    engine.pulumi("stack", "select", "--create", PROGRAM_STACK, cwd=directory, log_name="scale-program-init")
    _, up_seconds = engine.up(PROGRAM_STACK, log_name="scale-program-up", cwd=directory)
    evidence: dict[str, Any] = {
        "actors": len(actors),
        "classes": len(budgets["classes"]),
        "suspended": len(suspended),
        "extensionMessageLimit": PROGRAM_MESSAGE_LIMIT,
    }
    evidence["up_seconds_from_nothing"] = up_seconds
    evidence["config_bytes_it_would_take_in_a_stack_file"] = config_env_bytes(
        json.dumps({f"agent-budgets:{key}": json.dumps(value) for key, value in yaml_sections(sections).items()})
    )
    settings = parse_settings(yaml_sections(sections))
    evidence["keys_published"] = actor_keys.publish_keys_of(node, engine, settings)
    outputs = engine.outputs(PROGRAM_STACK, cwd=directory)

    def apply(changed: dict[str, Any]) -> float:
        (directory / "sections.json").write_text(json.dumps({**sections, "budgets": changed}), encoding="utf-8")
        return engine.up(PROGRAM_STACK, log_name="scale-program-budget", cwd=directory)[1]

    callers = [
        live_stack.Caller.at(node, engine, settings, outputs, actor)
        for actor in default_callers(actors, budgets, suspended)
    ]
    evidence |= timed_change(node, callers, budgets, size, apply, warm_timeout=900)
    evidence["destroy"] = program.destroy(node, engine, PROGRAM_STACK, log_name="scale-program-destroy", cwd=directory)
    engine.pulumi("stack", "rm", PROGRAM_STACK, "--yes", cwd=directory, log_name="scale-program-destroy")
    return evidence


def yaml_sections(fields: dict[str, Any]) -> dict[str, Any]:
    """AgentBudgetsArgs' fields back to the sections' keys (what parse_settings reads)."""
    keys = {field: key for key, field in SECTION_FIELDS.items()}
    return {keys[field]: value for field, value in fields.items() if field in keys}

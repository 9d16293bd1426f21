"""The move under `AgentBudgets` on the real engine: a stack deployed by the program at the commit before the
component, then upgraded to today's program, is updated in place with nothing replaced or deleted (what
tests/test_agent_budgets_urns.py promises, by the engine's own rules here).

The program at that commit fetches Envoy Gateway's and Agent Router's charts from their public registries: it has no
`platform.charts` (nor `platform.images`), and the rig may not reach a public address. So the stack runs with
`platform.install: false`, the setting the program has for a platform someone else installs "with our values": the
rig installs the three releases with Helm first, with the values today's program computes for the rig
(core/platform_values.py `release_specs`, the charts and images the rig has). Everything the stack itself registers
(the Kubernetes provider, the namespaces, Redis and its Secrets, the Gateway, routes and policies, the mock model, the
API keys) is deployed by the old program and taken over by today's; the three Helm releases' own move is the unit
suite's (the baseline's `full`, `dev` and `prod` stacks).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import yaml

from agent_budgets.component import TYPE_TOKEN
from core.platform_values import release_specs
from core.validation import parse_settings
from rig import actor_keys, cache, program
from rig.engine import Engine, changed_resources, preview_counts
from rig.node import Node
from rig.processes import StepError
from tools.spend.stack import load_stack

MOVE_STACK = "move"
COMPONENT_FILE = "agent_budgets/component.py"
CONFIG_MAP_TYPE = "$kubernetes:core/v1:ConfigMap::"
REPLACEMENT_OPERATIONS = ("replace", "create-replacement", "delete-replaced")
REFUSED_OPERATIONS = ("replace", "create-replacement", "delete-replaced", "delete", "discard", "import-replacement")


def commit_of_the_component(project_root: Path) -> str:
    """The commit that added agent_budgets/component.py (the move)."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", COMPONENT_FILE],
        cwd=project_root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise StepError(f"no commit adds {COMPONENT_FILE}: a shallow clone? (git fetch --unshallow)")
    return added[-1]


def parent_of(project_root: Path, commit: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", f"{commit}^"], cwd=project_root, capture_output=True, text=True, check=True
    ).stdout.strip()


def export_commit(project_root: Path, commit: str, target: Path) -> Path:
    """The tracked files of `commit` (what a clone at it holds), the project's virtualenv linked in."""
    archive = subprocess.run(["git", "archive", commit], cwd=project_root, capture_output=True, check=True).stdout
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    venv = target / "venv"
    if not venv.exists():
        venv.symlink_to(project_root / "venv")
    return target


def old_overlay(overlay: dict[str, Any]) -> dict[str, Any]:
    """The rig's overlay as the old program takes it: no `platform.charts` or `platform.images` (it has neither; it
    refuses unknown keys), the platform installed by the rig."""
    kept = {key: value for key, value in overlay.items() if key != "agent-budgets:platform"}
    return {**kept, "agent-budgets:platform": {"install": False}}


def judge_upgrade(changes: list[tuple[str, str]]) -> list[str]:
    """The move's own commit: what breaks the promise is any replacement or deletion, and any creation but the
    AgentBudgets component's."""
    problems = [f"{op} {urn}" for op, urn in changes if op in REFUSED_OPERATIONS]
    problems += [f"create {urn}" for op, urn in changes if op == "create" and f"::{TYPE_TOKEN}::" not in urn]
    if not any(op == "create" and f"::{TYPE_TOKEN}::" in urn for op, urn in changes):
        problems.append("the AgentBudgets component is not created")
    return problems


def judge_later_commits(changes: list[tuple[str, str]]) -> list[str]:
    """From the move's commit to today's: nothing created or deleted, and a replacement only of a ConfigMap, which
    pulumi-kubernetes replaces when its data changes (the CHANGELOG names each such change: the mock model's server
    source, the dashboard)."""
    return [
        f"{op} {urn}"
        for op, urn in changes
        if op in (*REFUSED_OPERATIONS, "create") and not (op in REPLACEMENT_OPERATIONS and CONFIG_MAP_TYPE in urn)
    ]


def helm_install_platform(node: Node, engine: Engine, stack_file: Path, log: Path) -> list[str]:
    """The three releases with the values today's program computes for `stack_file` (the rig's full overlay)."""
    helm = cache.tool("helm")
    if helm is None:
        raise StepError("helm is not built: python -m rig.build helm")
    stack_name = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    settings = parse_settings(load_stack(stack_file.parent, stack_name).raw)
    installed = []
    for spec in release_specs(settings):
        values = log.parent / f"helm-values-{spec.release_name}.yaml"
        values.write_text(yaml.safe_dump(spec.values), encoding="utf-8")
        argv = [
            str(helm),
            "upgrade",
            "--install",
            spec.release_name,
            spec.chart,
            "--namespace",
            spec.namespace,
            "--create-namespace",
            "--values",
            str(values),
            "--wait",
            "--wait-for-jobs",
            "--timeout",
            f"{spec.timeout_seconds}s",
            "--kubeconfig",
            str(node.layout.kubeconfig("admin")),
        ]
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(argv)}\n")
            handle.flush()
            result = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, timeout=900, check=False)
        if result.returncode != 0:
            raise StepError(f"helm install {spec.release_name} exited {result.returncode} (log: {log})")
        installed.append(f"{spec.release_name} in {spec.namespace} from {Path(spec.chart).name}")
    return installed


def helm_uninstall_platform(node: Node, log: Path) -> None:
    helm = cache.tool("helm")
    assert helm is not None
    for release, namespace in (
        ("aieg", "envoy-ai-gateway-system"),
        ("aieg-crd", "envoy-ai-gateway-system"),
        ("eg", "envoy-gateway-system"),
    ):
        with log.open("a", encoding="utf-8") as handle:
            subprocess.run(
                [
                    str(helm),
                    "uninstall",
                    release,
                    "--namespace",
                    namespace,
                    "--wait",
                    "--kubeconfig",
                    str(node.layout.kubeconfig("admin")),
                ],
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=600,
                check=False,
            )
    for namespace in ("envoy-ai-gateway-system", "envoy-gateway-system"):
        node.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)


def upgrade(engine: Engine, directory: Path, log_name: str) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The preview's changes of the program in `directory` on the move stack, and what they are (the caller judges
    them, then runs `up`)."""
    changes = changed_resources(
        engine.pulumi("preview", "--stack", MOVE_STACK, "--json", cwd=directory, log_name=f"{log_name}-preview")
    )
    return changes, {
        "operations": sorted({op for op, _ in changes}),
        "created": [urn.rsplit("::", 1)[-1] for op, urn in changes if op == "create"],
        "replaced": [urn.rsplit("::", 1)[-1] for op, urn in changes if op == "replace"],
        "updated": [urn.rsplit("::", 1)[-1] for op, urn in changes if op == "update"],
    }


def run(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """`stack`'s file deployed by the program at the commit before the move, upgraded to the move's commit (nothing
    replaced, deleted or created but the component), then to today's (only the ConfigMap replacements the CHANGELOG
    records), served, destroyed."""
    moved_at = commit_of_the_component(engine.project_root)
    before = parent_of(engine.project_root, moved_at)
    old = export_commit(engine.project_root, before, engine.directory / "move-before")
    moved = export_commit(engine.project_root, moved_at, engine.directory / "move-commit")
    overlay = program.overlay(node.layout, engine.by_hand)
    log = (engine.log_dir or engine.directory) / "move-helm.log"
    evidence: dict[str, Any] = {"commit_before": before[:12], "commit_of_the_move": moved_at[:12]}

    # The platform, installed as a user of `platform.install: false` would, with today's values for the rig.
    today_file = engine.project / f"Pulumi.{MOVE_STACK}.yaml"
    today_file.write_text((engine.project / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    engine.overlay(MOVE_STACK, overlay)
    evidence["platform"] = helm_install_platform(node, engine, today_file, log)

    # The stack with the old program.
    old_file = old / f"Pulumi.{MOVE_STACK}.yaml"
    old_file.write_text((old / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    document = yaml.safe_load(old_file.read_text(encoding="utf-8"))
    document["config"].update(old_overlay(overlay))
    old_file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    engine.pulumi("stack", "select", "--create", MOVE_STACK, cwd=old, log_name="move-init")
    output, seconds = engine.up(MOVE_STACK, log_name="move-old-up", cwd=old)
    evidence["old_up"] = {"seconds": seconds, "resources": preview_counts(output)}
    evidence["keys_published"] = actor_keys.publish_keys_of(
        node, engine, parse_settings(load_stack(old, MOVE_STACK).raw)
    )

    # The move's commit, then today's, on the same stack file (its salt and config as the old program left them):
    # `today_file` now holds the old program's file, the one today's program upgrades.
    for directory, name, judge in (
        (moved, "move-commit", judge_upgrade),
        (engine.project, "move-today", judge_later_commits),
    ):
        (directory / f"Pulumi.{MOVE_STACK}.yaml").write_text(old_file.read_text(encoding="utf-8"), encoding="utf-8")
        changes, seen = upgrade(engine, directory, name)
        evidence[name] = seen
        problems = judge(changes)
        if problems:
            raise StepError(f"{name}: the upgrade would {'; '.join(problems[:10])}")
        output, seconds = engine.up(MOVE_STACK, log_name=f"{name}-up", cwd=directory)
        seen["up"] = {"seconds": seconds, "resources": preview_counts(output)}
    engine.pulumi("preview", "--stack", MOVE_STACK, "--expect-no-changes", log_name="move-no-changes")
    evidence["after_upgrade"] = "preview --expect-no-changes passed"
    url, host = program.gateway_address(node, engine.outputs(MOVE_STACK))
    actor = next(
        a for a in yaml.safe_load(today_file.read_text())["config"]["agent-budgets:actors"] if a.startswith("service")
    )
    audience = engine.stack_settings(stack).identity.kubernetes.audience
    evidence["call_after_upgrade"] = program.served_as(
        node, url, host, actor, audience, f"a call as {actor} after the upgrade"
    )

    evidence["destroy"] = program.destroy(node, engine, MOVE_STACK, log_name="move-destroy")
    engine.pulumi("stack", "rm", MOVE_STACK, "--yes", log_name="move-destroy")
    helm_uninstall_platform(node, log)
    return evidence

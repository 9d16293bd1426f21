"""Substrate egress policies on the real engine: the shards (components/egress_provider.py) under Pulumi's real
dynamic-provider host, with the fake `kubectl ate` standing in for Substrate's API server.

The rig has no Substrate, so `substrate.egress.kubectl` names the fake (tests/fake_kubectl.py: it answers what
agent-substrate/substrate's `cmd/kubectl-ate/internal/cmd/{root,egress_policy,actor}.go`, `internal/printer/*.go`
and `internal/ateclient/builder.go` answer, at the commits its docstring names; its store is a directory). On the
deployed stack (one with the `substrate` source): egress turned on creates one shard per occupied shard index, each
actor's policy in the fake's store; a preview with nothing changed runs no `kubectl` process; an actor added to an
occupied shard previews as one update of that shard whose diff names `actors` and never the guards (`policies`,
hidden by `hideDiffs`), and `up` writes that one policy; `pulumi destroy` (the lifecycle's last step) deletes them.

The fake resolves the cluster from the kubeconfig as client-go does, but reads JSON only (its docstring); the stack's
`kubernetes.kubeconfig` becomes a JSON copy of the rig's admin kubeconfig, the same document.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from core.egress.shards import shard_of, shard_resource_name
from core.identity import SUBSTRATE, actors_of_source
from rig.engine import FAKE_ATE_DIRECTORY, Engine, changed_resources
from rig.node import Node
from rig.processes import StepError
from tests.fake_ate import FakeAte, make_fake

SHARD_TYPE = "pulumi-python:dynamic:EgressPolicyShard"
RESOURCE_HEADER = re.compile(r"^\s*\S{1,3} [\w./-]+:[\w./-]*:[\w./-]+: \(")
"""A resource's first line in `pulumi preview --diff`: `~ pulumi-python:dynamic:EgressPolicyShard: (update)`."""


def fake_of(engine: Engine) -> FakeAte | None:
    """The run's fake, when the egress step made one."""
    root = engine.directory / FAKE_ATE_DIRECTORY
    if not (root / "ate-state").is_dir():
        return None
    return FakeAte(root / "ate-state", str(root / "bin" / "kubectl"), root / "kubeconfig.json")


def json_kubeconfig(source: Path, target: Path) -> Path:
    target.write_text(json.dumps(yaml.safe_load(source.read_text(encoding="utf-8"))), encoding="utf-8")
    target.chmod(0o600)
    return target


def actor_in_shard(shard: int, taken: set[str], atespace: str = "agents") -> str:
    """A new actor id whose policy lands in `shard` (so adding it updates that shard rather than creating one)."""
    for number in range(100_000):
        candidate = f"{atespace}/actor-egress-{number}"
        if candidate not in taken and shard_of(candidate) == shard:
            return candidate
    raise StepError(f"no actor name found for shard {shard}")


def shard_steps(preview_json: str) -> list[tuple[str, str]]:
    """(operation, resource name) of every changed step (the URN's last part names the shard)."""
    return [(op, urn.rsplit("::", 1)[-1]) for op, urn in changed_resources(preview_json)]


def run(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    settings = engine.stack_settings(stack)
    if SUBSTRATE not in settings.identity.sources:
        return {"not_applicable": f"stack {stack} has no Substrate actors, so no egress policies"}
    root = engine.directory / FAKE_ATE_DIRECTORY
    fake = fake_of(engine) or make_fake(root, python=sys.executable)
    server = node.layout.apiserver_url
    substrate_actors = actors_of_source(settings.actors, SUBSTRATE)
    kubeconfig = json_kubeconfig(node.layout.kubeconfig("admin"), root / "admin.json")
    evidence: dict[str, Any] = {"fake": "tests/fake_kubectl.py", "server": server}

    config = engine.stack_config(stack)
    substrate = dict(config.get("agent-budgets:substrate") or {})
    substrate["egress"] = {**(substrate.get("egress") or {}), "enabled": True, "kubectl": fake.kubectl}
    kubernetes = {**config["agent-budgets:kubernetes"], "kubeconfig": str(kubeconfig)}
    wanted = sorted({shard_of(actor) for actor in substrate_actors})

    # Egress on, the fake's actors in place (a missing actor is FailedPrecondition, as ateapi answers).
    fake.add_actors(substrate_actors, server=server)
    engine.overlay(stack, {"agent-budgets:substrate": substrate, "agent-budgets:kubernetes": kubernetes})
    steps = shard_steps(engine.pulumi("preview", "--stack", stack, "--json", log_name=f"{stack}-preview-egress-on"))
    creates = sorted(name for op, name in steps if op == "create" and name.startswith("egress-shard-"))
    if creates != sorted(shard_resource_name(index) for index in wanted):
        raise StepError(f"egress on previews {steps}, not a create of shards {wanted}")
    engine.up(stack, log_name=f"{stack}-up-egress-on")
    policies = fake.policies(server)
    if sorted(policies) != sorted(substrate_actors):
        raise StepError(f"the fake holds policies for {sorted(policies)}, not for {substrate_actors}")
    evidence["egress_on"] = {
        "preview": steps,
        "policies": {actor: policy["metadata"].get("version") for actor, policy in policies.items()},
        "one_stored_policy": json.dumps(policies[substrate_actors[0]])[:400],
    }

    # Nothing changed: the fingerprints answer, no process runs.
    fake.clear_calls()
    engine.pulumi("preview", "--stack", stack, "--expect-no-changes", log_name=f"{stack}-preview-egress-same")
    evidence["no_op_preview_kubectl_calls"] = len(fake.calls())
    if fake.calls():
        raise StepError(f"a preview with nothing changed ran kubectl: {fake.verbs()}")

    # One actor more, in an occupied shard: one update of that shard, the guards out of the diff.
    shard = wanted[0]
    added = actor_in_shard(shard, set(settings.actors))
    fake.add_actors([added], server=server)
    actors = [*config["agent-budgets:actors"], added]
    engine.overlay(stack, {"agent-budgets:actors": actors})
    steps = shard_steps(engine.pulumi("preview", "--stack", stack, "--json", log_name=f"{stack}-preview-egress-add"))
    shard_changes = [(op, name) for op, name in steps if name.startswith("egress-shard-")]
    if shard_changes != [("update", shard_resource_name(shard))]:
        raise StepError(f"adding {added} previews the shards as {shard_changes}, not one update of shard {shard}")
    diff = engine.pulumi("preview", "--stack", stack, "--diff", log_name=f"{stack}-preview-egress-diff")
    block = shard_block(diff, shard_resource_name(shard))
    if "actors" not in block or "policies" in block:
        raise StepError(f"the shard's diff shows the guards or not the actor: {block[:800]}")
    fake.clear_calls()
    engine.up(stack, log_name=f"{stack}-up-egress-add")
    verbs = fake.verbs()
    if verbs != ["create"] or added not in fake.policies(server):
        raise StepError(f"adding {added} ran {verbs}, not one create of its policy")
    evidence["actor_added"] = {
        "actor": added,
        "shard": shard_resource_name(shard),
        "preview": steps,
        "diff": [line.strip() for line in block.splitlines() if line.strip()][:12],
        "kubectl_calls_of_up": verbs,
    }
    return evidence


def shard_block(diff: str, shard_name: str) -> str:
    """The lines `pulumi preview --diff` prints for one resource: from its header to the next resource's."""
    lines = diff.splitlines()
    start = next((i for i, line in enumerate(lines) if f"::{shard_name}]" in line), None)
    if start is None:
        return ""
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if RESOURCE_HEADER.match(line) or line.strip().startswith(("Resources:", "Diagnostics:")):
            break
        block.append(line)
    return "\n".join(block)


def before_destroy(engine: Engine) -> None:
    """The fake's call log emptied, so that `destroyed` names the calls of the destroy alone."""
    fake = fake_of(engine)
    if fake is not None:
        fake.clear_calls()


def destroyed(engine: Engine, node: Node) -> dict[str, Any] | None:
    """After `pulumi destroy`: the fake's store (None when the egress step made no fake)."""
    fake = fake_of(engine)
    if fake is None:
        return None
    left = fake.policies(node.layout.apiserver_url)
    if left:
        raise StepError(f"egress policies left after destroy: {sorted(left)}")
    verbs = fake.verbs()
    return {
        "egress_policies_left": 0,
        "kubectl_calls_of_destroy": {verb: verbs.count(verb) for verb in sorted(set(verbs))},
    }

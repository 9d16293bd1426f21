"""The component package on the real engine: a Pulumi YAML program using `AgentBudgets` through `plugin/`.

docs/use-from-your-program.md promises two things of a program in another language: the package deploys a stack
without egress policies, and with them on (`substrate.egress.enabled`, the default, with a Substrate actor) the
component refuses the input as documented (`property substrate.egress.enabled has a problem: is true (the
default). ...`). Here both run with the
real CLI and the YAML language host (`pulumi-language-yaml`, built from the Go module proxy: rig/versions.toml), the
package referenced by its local path in the YAML program's `packages:` (what `pulumi package add ./plugin` writes),
its Python host running `plugin/__main__.py` from the project copy. The program's properties are a stack file's
sections, the rig's overlay on top, as a user of the package would write them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent_budgets.component import TYPE_TOKEN
from core.validation import parse_settings
from rig import actor_keys, program
from rig.engine import Engine, preview_counts
from rig.node import Node
from rig.processes import StepError

PACKAGE_PROJECT = "agent-budgets-yaml"
PACKAGE_STACK = "yaml"
EGRESS_PROPERTY = "substrate.egress.enabled"
EGRESS_REASON_START = "is true (the default)."
EGRESS_REFUSAL_START = f"property {EGRESS_PROPERTY} has a problem: {EGRESS_REASON_START}"
"""How the engine reports the component's refused input (an InputPropertyError: agent_budgets/package.py)."""


def properties_of(stack_file: Path) -> dict[str, Any]:
    """A stack file's `agent-budgets:<section>` values as the component's properties (the same names)."""
    config = (yaml.safe_load(stack_file.read_text(encoding="utf-8")) or {}).get("config") or {}
    return {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("agent-budgets:")}


def yaml_program(plugin: Path, properties: dict[str, Any]) -> dict[str, Any]:
    """Pulumi.yaml of a YAML program with one AgentBudgets and its gateway's address as outputs."""
    return {
        "name": PACKAGE_PROJECT,
        "runtime": "yaml",
        "packages": {"agent-budgets": str(plugin)},
        "resources": {"budgets": {"type": TYPE_TOKEN, "properties": properties}},
        "outputs": {"gatewayUrl": "${budgets.gatewayUrl}", "worstCase": "${budgets.worstCase}"},
    }


def write_program(directory: Path, plugin: Path, properties: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "Pulumi.yaml"
    path.write_text(yaml.safe_dump(yaml_program(plugin, properties), sort_keys=False), encoding="utf-8")
    return path


def with_egress(properties: dict[str, Any]) -> dict[str, Any]:
    """The same program with a Substrate actor and the egress policies left at their default (on)."""
    sources = list((properties.get("identity") or {}).get("sources") or ["kubernetes"])
    return {
        **properties,
        "identity": {**(properties.get("identity") or {}), "sources": ["substrate", *sources]},
        "substrate": {"trust": {"mode": "localJwks"}},
        "actors": [*properties.get("actors", []), "agents/actor-yaml"],
    }


def run(node: Node, engine: Engine, stack: str, overlay: dict[str, Any]) -> dict[str, Any]:
    """Egress on: the preview fails with the documented error. Egress off: `up` deploys, a service account's call is
    served through the gateway the program's output names, `destroy` removes it all."""
    plugin = engine.project / "plugin"
    plugin_venv = plugin / "venv"
    if not plugin_venv.exists():
        plugin_venv.symlink_to(engine.project_root / "venv")
    properties = properties_of(engine.project / f"Pulumi.{stack}.yaml")
    properties.update({key.split(":", 1)[1]: value for key, value in overlay.items()})
    directory = engine.directory / "yaml-program"
    evidence: dict[str, Any] = {"program": str(directory / "Pulumi.yaml"), "package": str(plugin)}

    write_program(directory, plugin, with_egress(properties))
    # `select --create`: a stack left by an interrupted run is taken as it is.
    engine.pulumi("stack", "select", "--create", PACKAGE_STACK, cwd=directory, log_name="yaml-init")
    engine.pulumi("preview", "--stack", PACKAGE_STACK, cwd=directory, check=False, log_name="yaml-egress")
    output = engine.last_output
    refusal = [line.strip() for line in output.splitlines() if EGRESS_REFUSAL_START in line]
    if not refusal or "Traceback" in output or "Unexpected <class" in output:
        raise StepError(f"with egress on, the YAML program's preview did not fail as documented: {output[-800:]}")
    evidence["egress_on"] = {"preview": "failed", "error": refusal[0][:300]}

    write_program(directory, plugin, properties)
    output, seconds = engine.up(PACKAGE_STACK, log_name="yaml-up", cwd=directory, timeout=2400)
    evidence["up"] = {"seconds": seconds, "resources": preview_counts(output)}
    outputs = engine.outputs(PACKAGE_STACK, cwd=directory)
    url, host = program.gateway_address(node, outputs)
    actor = next(a for a in properties["actors"] if str(a).startswith("serviceaccount:"))
    settings = parse_settings(properties)
    evidence["published_keys"] = actor_keys.publish_keys_of(node, engine, settings)
    audience = settings.identity.kubernetes.audience
    seen = program.served_as(node, url, host, actor, audience, f"a call as {actor} through the YAML program's gateway")
    evidence["call"] = {"actor": actor, "gateway": outputs["gatewayUrl"], **seen}
    evidence["destroy"] = program.destroy(node, engine, PACKAGE_STACK, log_name="yaml-destroy", cwd=directory)
    engine.pulumi("stack", "rm", PACKAGE_STACK, "--yes", cwd=directory, log_name="yaml-destroy")
    return evidence

"""An existing stack's `pulumi up` after `AgentBudgets` replaces nothing and deletes nothing.

The baseline (tests/fixtures/resource-baseline/, written by scripts/gen_resource_baseline.py from the program as it
was before `AgentBudgets`) is what the dev and prod stacks hold, and `full`, a stack with every optional feature on
(the components only such a stack has, their children and grandchildren). Today's program runs under the same
mocks, and the engine's own rules (tests/support/engine_urns.py) decide which old resource each registration takes
over: every old one must be taken over, by a resource of the same type and name with the same inputs, provider, parent,
dependencies and options, and the only new resource is the `AgentBudgets` component itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripts.gen_resource_baseline import BASELINE_DIR, inputs_digest, stack_inputs
from tests.support.engine_urns import (
    AliasSpec,
    EngineResource,
    engine_resources,
    match_all,
    old_urn,
)
from tests.support.program import PROJECT, run_program


def baseline(stack: str) -> dict[str, dict[str, Any]]:
    return {item["urn"]: item for item in json.loads((BASELINE_DIR / f"{stack}.json").read_text())["resources"]}


def today(stack: str) -> list[EngineResource]:
    config, secrets = stack_inputs(stack)
    run = run_program(config, secrets=secrets, stack=stack)
    return engine_resources(run.monitor.registrations, stack, PROJECT)


@pytest.mark.parametrize("stack", ["dev", "prod", "full"])
def test_every_resource_of_the_stack_is_taken_over_unchanged(stack):
    olds = baseline(stack)
    resources = today(stack)
    matches = match_all(resources, olds, stack, PROJECT)

    assert set(matches.values()) == set(olds), f"deleted: {sorted(set(olds) - set(matches.values()))}"
    created = [resource for resource in resources if resource.urn not in matches]
    assert [(resource.type, resource.name) for resource in created] == [
        ("agent-budgets:index:AgentBudgets", "agent-budgets")
    ]
    [component] = created
    # Since the baseline, each model route also waits for the policies that authenticate and meter its calls
    # (components/stack.py): a dependency the engine records without a diff, so nothing is replaced.
    route_guards = [
        urn
        for urn, old in olds.items()
        if old["type"].endswith(":SecurityPolicy") or old["name"] == "backendtrafficpolicy-agent-budgets"
    ]
    assert route_guards
    # Since the baseline, with API keys on, each AIServiceBackend also removes the API-key headers before the provider
    # (its spec only: an update in place, its name and namespace unchanged); the `full` stack has API keys.
    updated_backends = stack == "full"
    moved = 0
    for resource in resources:
        if resource is component:
            continue
        old = olds[matches[resource.urn]]
        moved += resource.urn != old["urn"]
        parent = "" if resource.parent == component.urn else old_urn(matches, resource.parent)
        guards = route_guards if resource.type.endswith(":AIGatewayRoute") else []
        inputs = inputs_digest(resource.inputs)
        if updated_backends and resource.type.endswith(":AIServiceBackend"):
            assert inputs != old["inputs"], resource.urn
            inputs = old["inputs"]
        assert {
            "urn": old["urn"],
            "type": resource.type,
            "name": resource.name,
            "parent": parent,
            "custom": resource.custom,
            "provider": old_urn(matches, resource.provider),
            "dependencies": sorted(old_urn(matches, urn) for urn in resource.dependencies),
            "protect": resource.protect,
            "deleteBeforeReplace": resource.delete_before_replace,
            "inputs": inputs,
        } == {**old, "dependencies": sorted({*old["dependencies"], *guards})}, resource.urn
    # Every resource moved under the component (the URN of each has changed), so the aliases did all the work.
    assert moved == len(olds)


def test_the_engine_model_follows_a_parent_alias_to_its_children_and_no_further():
    """The matcher itself: a child of a re-parented component is found through the parent's alias; a resource
    with no alias under a new parent is not (it would be created, and the old one deleted)."""
    root = AliasSpec(no_parent=True)
    olds = {
        "urn:pulumi:s::p::t:m:Platform::platform",
        "urn:pulumi:s::p::t:m:Platform$k:v:Secret::platform-secret",
        "urn:pulumi:s::p::t:m:Lonely::lonely",
    }

    def resource(urn: str, parent: str, aliases: tuple[AliasSpec, ...] = ()) -> EngineResource:
        type_, name = urn.split("::")[2].rsplit("$", 1)[-1], urn.split("::")[3]
        return EngineResource(urn, type_, name, parent, True, "", (), False, False, {}, aliases)

    component = resource("urn:pulumi:s::p::t:index:AgentBudgets::ab", "")
    platform = resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Platform::platform", component.urn, (root,))
    secret = resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Platform$k:v:Secret::platform-secret", platform.urn)
    lonely = resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Lonely::lonely", component.urn)
    matches = match_all([component, platform, secret, lonely], olds, "s", "p")
    assert matches == {
        platform.urn: "urn:pulumi:s::p::t:m:Platform::platform",
        secret.urn: "urn:pulumi:s::p::t:m:Platform$k:v:Secret::platform-secret",
    }

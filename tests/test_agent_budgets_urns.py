"""An existing stack's `pulumi up` after `AgentBudgets` replaces nothing and deletes nothing.

The baseline (tests/fixtures/resource-baseline/, its URNs written by scripts/gen_resource_baseline.py from the program
as it was before `AgentBudgets`) is what the dev and prod stacks hold, and `full`, a stack with every optional feature
on (the components only such a stack has, their children and grandchildren). Today's program runs under the same
mocks, and the engine's own rules (tests/support/engine_urns.py) decide which old resource each registration takes
over: every old one must be taken over through an alias, by a resource of the same type, name, parent and provider,
and the only new resource is the `AgentBudgets` component itself. Its inputs digest, dependencies and options must be
the ones the file records: a change there is accepted only by `gen_resource_baseline.py --refresh` and a reviewed diff
of the fixture (docs/development.md "The resource baseline").
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from scripts.gen_resource_baseline import (
    COMPONENT_TYPE,
    REGENERABLE_FIELDS,
    STACKS,
    committed,
    engine_resources,
    takeover,
)
from tests.support.engine_urns import AliasSpec, EngineResource, match_all


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_of_the_stack_is_taken_over_unchanged(stack):
    olds = committed(stack)
    result = takeover(engine_resources(stack), olds, stack)
    assert not result.problems, "\n".join(result.problems)
    assert result.records.keys() == olds.keys()
    for urn, old in olds.items():
        assert result.records[urn] == old, f"{urn} changed: refresh the baseline and read its diff"


def _resource(
    urn: str, parent: str, aliases: tuple[AliasSpec, ...] = (), inputs: dict[str, Any] | None = None
) -> EngineResource:
    type_, name = urn.split("::")[2].rsplit("$", 1)[-1], urn.split("::")[3]
    return EngineResource(urn, type_, name, parent, True, "", (), False, False, inputs or {}, aliases)


def test_the_takeover_names_every_resource_deleted_created_or_kept_at_its_urn():
    """What `--refresh` refuses: the component's child without an alias (its old URN deleted, it created), a
    resource at its own URN (the baseline is not of the program before the component), a changed type."""
    root = AliasSpec(no_parent=True)
    old_platform = "urn:pulumi:s::agent-budgets::t:m:Platform::platform"
    old_lonely = "urn:pulumi:s::agent-budgets::t:m:Lonely::lonely"
    old_kept = "urn:pulumi:s::agent-budgets::t:m:Kept::kept"
    olds = {
        urn: {"urn": urn, "type": urn.split("::")[2], "name": urn.split("::")[3], "parent": "", "custom": True}
        | {"provider": "", "dependencies": [], "protect": False, "deleteBeforeReplace": False, "inputs": ""}
        for urn in (old_platform, old_lonely, old_kept)
    }
    olds[old_platform]["type"] = "t:m:Was"
    component = _resource(f"urn:pulumi:s::agent-budgets::{COMPONENT_TYPE}::agent-budgets", "")
    under = f"urn:pulumi:s::agent-budgets::{COMPONENT_TYPE}$"
    platform = _resource(f"{under}t:m:Platform::platform", component.urn, (root,), {"replicas": 2})
    lonely = _resource(f"{under}t:m:Lonely::lonely", component.urn)
    kept = _resource(old_kept, "")
    result = takeover([component, platform, lonely, kept], olds, "s")
    assert result.problems == [
        f"deleted (no registration takes it over): {old_lonely}",
        f"created: {lonely.urn}",
        f"{old_platform}: type was 't:m:Was', is 't:m:Platform'",
        f"taken over at its own URN, not through an alias: {old_kept}",
    ]
    assert result.records[old_platform]["parent"] == ""
    assert set(REGENERABLE_FIELDS) < set(result.records[old_platform])
    assert result.records[old_platform]["inputs"] != olds[old_platform]["inputs"]


def test_the_engine_model_follows_a_parent_alias_to_its_children_and_no_further():
    """The matcher itself: a child of a re-parented component is found through the parent's alias; a resource
    with no alias under a new parent is not (it would be created, and the old one deleted)."""
    root = AliasSpec(no_parent=True)
    olds = {
        "urn:pulumi:s::p::t:m:Platform::platform",
        "urn:pulumi:s::p::t:m:Platform$k:v:Secret::platform-secret",
        "urn:pulumi:s::p::t:m:Lonely::lonely",
    }

    component = _resource("urn:pulumi:s::p::t:index:AgentBudgets::ab", "")
    platform = _resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Platform::platform", component.urn, (root,))
    secret = _resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Platform$k:v:Secret::platform-secret", platform.urn)
    lonely = _resource("urn:pulumi:s::p::t:index:AgentBudgets$t:m:Lonely::lonely", component.urn)
    matches = match_all([component, platform, secret, lonely], olds, "s", "p")
    assert matches == {
        platform.urn: "urn:pulumi:s::p::t:m:Platform::platform",
        secret.urn: "urn:pulumi:s::p::t:m:Platform$k:v:Secret::platform-secret",
    }


def test_refresh_writes_nothing_when_an_old_resource_is_not_taken_over(tmp_path, monkeypatch):
    """`--refresh` with one old resource no longer registered (the dev stack's Redis StatefulSet, say) stops naming
    it, and leaves every baseline file as it was; with nothing missing it rewrites the file to what it was (the
    committed file is exactly its own refresh) and never moves a frozen URN."""
    from scripts import gen_resource_baseline as baseline

    copy = tmp_path / "resource-baseline"
    shutil.copytree(baseline.BASELINE_DIR, copy)
    monkeypatch.setattr(baseline, "BASELINE_DIR", copy)
    monkeypatch.setattr(baseline, "STACKS", ("dev",))
    today = engine_resources("dev")
    monkeypatch.setattr(baseline, "engine_resources", lambda stack: today)
    before = (copy / "dev.json").read_text()
    assert baseline.main(["--refresh"]) == 0
    assert (copy / "dev.json").read_text() == before
    [redis] = [r for r in today if r.type == "kubernetes:apps/v1:StatefulSet" and r.name.endswith("-redis")]
    monkeypatch.setattr(baseline, "engine_resources", lambda stack: [r for r in today if r is not redis])
    (copy / "dev.json").write_text(before.replace('"inputs": "', '"inputs": "0', 1))  # any refresh would undo this
    with pytest.raises(SystemExit, match=r"dev: the baseline cannot be refreshed:\n  deleted \(no registration"):
        baseline.main(["--refresh"])
    assert (copy / "dev.json").read_text() == before.replace('"inputs": "', '"inputs": "0', 1)

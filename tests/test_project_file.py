"""Pulumi.yaml: what the CLI must be able to do for the program's stacks."""

from __future__ import annotations

from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_must_honour_every_option_the_program_sends_and_resolve_childrens_aliases() -> None:
    """Two engine features set the floor. `hideDiffs` (the egress shards' `policies`, components/egress_provider.py)
    is honoured from pulumi/pulumi 3.200.0 (#20631, pkg/resource/deploy/source_eval.go); the SDK 3.272.0 sends it
    without asking the engine (pulumi/runtime/resource.py), so an older CLI would print every guard as removed. The
    move under `AgentBudgets` relies on the engine following a parent's alias to its children, fixed through
    3.72.0-3.83.0 (CHANGELOG.md). The range is read by ValidatePulumiVersionRange
    (sdk/go/common/resource/plugin/plugin.go, blang/semver syntax, which ">=3.200.0" also is)."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    allowed = SpecifierSet(project["requiredPulumiVersion"])
    assert Version("3.199.9") not in allowed and Version("3.200.0") in allowed and Version("3.272.0") in allowed
    assert Version("3.82.9") not in allowed

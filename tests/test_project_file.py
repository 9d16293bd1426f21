"""Pulumi.yaml: what the CLI must be able to do for the program's stacks."""

from __future__ import annotations

from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def test_an_existing_stack_is_moved_only_by_a_cli_that_resolves_childrens_aliases() -> None:
    """The move under `AgentBudgets` relies on the engine following a parent's alias to its children, fixed through
    pulumi/pulumi 3.72.0-3.83.0 (CHANGELOG.md): the project refuses an older CLI (ValidatePulumiVersionRange,
    sdk/go/common/resource/plugin/plugin.go, reads the blang/semver range syntax, which ">=3.83.0" also is)."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    allowed = SpecifierSet(project["requiredPulumiVersion"])
    assert Version("3.82.9") not in allowed and Version("3.83.0") in allowed and Version("3.272.0") in allowed

"""Every version the pages quote is the one its single source holds (docs/development.md, "Pinned versions").

The sources are the repository's own files (Pulumi.yaml, pyproject.toml, scripts/versions.env, requirements.txt,
the platform settings' defaults); no upstream behaviour is checked here. Broken once to see it fail: with
Pulumi.yaml's minimum raised and docs/dev-environment.md left at the old one (the 3.83.0 / 3.200.0 split this
test was written for), `test_the_pulumi_cli_minimum_is_quoted_as_pulumi_yaml_writes_it` names the page and both
versions.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from core.settings.platform import PlatformSettings
from tests.test_docs import documentation_files

ROOT = Path(__file__).resolve().parents[1]


def _pages() -> dict[str, str]:
    """README.md, the manual and CHANGELOG.md's `[Unreleased]` section (a released version's notes are history)."""
    pages = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in documentation_files()}
    changelog = pages.pop("CHANGELOG.md")
    unreleased = changelog.split("\n## [Unreleased]", 1)[1]
    pages["CHANGELOG.md"] = re.split(r"\n## \[\d", unreleased, maxsplit=1)[0]
    return pages


def _minimum(specifier: str) -> str:
    (clause,) = [spec for spec in SpecifierSet(specifier) if spec.operator == ">="]
    return clause.version


def _versions_env() -> dict[str, str]:
    values = {}
    for line in (ROOT / "scripts" / "versions.env").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key] = value.strip("'\"")
    return values


def _quotes(pattern: str) -> list[tuple[str, str]]:
    """(page, version) for every match of the pattern's one group, across the pages of `_pages`."""
    return [(page, match) for page, text in _pages().items() for match in re.findall(pattern, text)]


def test_the_pulumi_cli_minimum_is_quoted_as_pulumi_yaml_writes_it():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    minimum = _minimum(project["requiredPulumiVersion"])
    quotes = _quotes(r"Pulumi CLI \(\[?≥ ?v?(\d+\.\d+\.\d+)") + _quotes(r"requiredPulumiVersion: \"?>=(\d+\.\d+\.\d+)")
    assert quotes, "no page quotes the minimum Pulumi CLI any more: the prerequisites must"
    assert [(page, v) for page, v in quotes if v != minimum] == [], f"Pulumi.yaml says >={minimum}"


def test_the_python_minimum_is_quoted_as_pyproject_writes_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    minimum = _minimum(project["project"]["requires-python"])
    quotes = _quotes(r"\bPython (\d+\.\d+)\+")
    assert quotes
    assert [(page, v) for page, v in quotes if v != minimum] == []


def test_the_kind_minimums_are_those_of_versions_env():
    env = _versions_env()
    allowed = {env["KIND_MIN_VERSION"], env["KUBERNETES_KIND_MIN_VERSION"]}
    quotes = _quotes(r"\bkind ≥ v?(\d+\.\d+\.\d+)")
    assert {v for _, v in quotes} == allowed


def test_the_default_chart_versions_are_quoted_as_the_settings_default_them():
    defaults = PlatformSettings()
    eg, ar = defaults.envoy_gateway_version, defaults.agent_router_version
    stated = _quotes(r"deployed defaults (v\d+\.\d+\.\d+ and v\d+\.\d+\.\d+)")
    stated += _quotes(r"deploys (Envoy Gateway v\d+\.\d+\.\d+ and Agent Router v\d+\.\d+\.\d+) by default")
    assert stated
    expected = {f"{eg} and {ar}", f"Envoy Gateway {eg} and Agent Router {ar}"}
    assert [(page, v) for page, v in stated if v not in expected] == []


def test_the_policy_pack_pins_its_shared_dependencies_as_the_program_does():
    def pins(path: Path) -> dict[str, SpecifierSet]:
        found = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                requirement = Requirement(line)
                found[requirement.name.lower()] = requirement.specifier
        return found

    program, policy = pins(ROOT / "requirements.txt"), pins(ROOT / "policy" / "requirements.txt")
    shared = program.keys() & policy.keys()
    assert "pulumi" in shared
    assert {name: (program[name], policy[name]) for name in shared if program[name] != policy[name]} == {}
    assert Version(_minimum(str(program["pulumi"]))) >= Version("3.200.0")

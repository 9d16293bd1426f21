"""The distribution `pip install` makes of this repository carries what docs/use-from-your-program.md promises.

The wheel is built as pip builds it for a user (`pip wheel`, setuptools from pyproject.toml's `[build-system]`, in
an isolated build environment), installed with its requirements from the package index into a fresh venv with no
access to this checkout or to the test venv, and used from there: the spend report's `--help` runs, the component
imports, and the egress policies' dynamic provider imports from the installed `components` package. The packages
are found by setuptools (pyproject.toml, `[tool.setuptools.packages.find]`); a listed `packages = [...]` once left
out `tools.spend`, so `python -m tools.spend` failed in every program that installed the package.

Broken once to see it fail: with `exclude = ["tools.spend*"]` in the package discovery (what the old explicit list
amounted to), the wheel lacks `tools/spend/*.py` and the installed `python -m tools.spend --help` exits 1 with
"No module named tools.spend".

Needs the package index (the requirements are installed from it): skipped without it on a laptop, failed on CI
(tests/support/ci.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from agent_budgets.version import VERSION
from tests.support.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "use-from-your-program.md"
# pip's messages when it cannot reach the index (pip/_internal/network, urllib3's NewConnectionError).
OFFLINE = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable|"
    r"No matching distribution found for setuptools|ProxyError|Could not fetch URL"
)


def _roots() -> list[str]:
    """The top-level packages pyproject.toml ships: the `include` patterns of its package discovery."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert all(pattern.endswith("*") for pattern in patterns), patterns
    return sorted(pattern.removesuffix("*") for pattern in patterns)


def _source_modules(root: str) -> set[str]:
    """Every module of a package root in this checkout, as a wheel names it (`tools/spend/cli.py`)."""
    found = set()
    for path in (ROOT / root).rglob("*.py"):
        package = path.parent
        # A directory without __init__.py is not a package (namespaces = false) and does not ship.
        if "__pycache__" in path.parts or not (package / "__init__.py").exists():
            continue
        found.add(path.relative_to(ROOT).as_posix())
    return found


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the checkout (the build writes build/ and *.egg-info into its source)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy2(ROOT / name, source / name)
    for root in _roots():
        shutil.copytree(ROOT / root, source / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(source)], source)
    if built.returncode != 0 and OFFLINE.search(built.stdout + built.stderr):
        skip_or_fail(f"pip cannot reach the package index to build the wheel:\n{built.stderr[-2000:]}")
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) holding the wheel and its requirements; its python."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True, system_site_packages=False)
    python = home / "bin" / "python"
    result = _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], home)
    if result.returncode != 0 and OFFLINE.search(result.stdout + result.stderr):
        skip_or_fail(f"pip cannot reach the package index for the wheel's requirements:\n{result.stderr[-2000:]}")
    assert result.returncode == 0, result.stdout + result.stderr
    return python


def _clean_env() -> dict[str, str]:
    """The environment minus anything that would let the venv import this checkout instead of what it installed."""
    return {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONHOME"}}


def test_the_wheel_holds_every_module_of_the_packages_the_guide_names(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert wheel.name == f"agent_budgets-{VERSION}-py3-none-any.whl"
    for root in _roots():
        missing = sorted(_source_modules(root) - names)
        assert not missing, f"{root}: not in the wheel: {missing}"
    # The guide names the top-level packages the distribution brings (so a program knows which names it takes).
    guide = GUIDE.read_text(encoding="utf-8")
    sentence = re.search(r"brings the component \(`agent_budgets`\) and the code it builds on[^(]*\(([^)]*)\)", guide)
    assert sentence, "docs/use-from-your-program.md no longer says which packages the distribution brings"
    named = {"agent_budgets", *re.findall(r"`([a-z_]+)`", sentence.group(1))}
    assert named == set(_roots())
    top_level = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == set(_roots())


def test_the_installed_spend_report_runs_from_the_venv(installed: Path, tmp_path: Path):
    result = _run([str(installed), "-m", "tools.spend", "--help"], tmp_path, _clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m tools.spend"), result.stdout
    assert "--stack STACK" in result.stdout
    where = _run([str(installed), "-c", "import tools.spend; print(tools.spend.__file__)"], tmp_path, _clean_env())
    assert Path(where.stdout.strip()).is_relative_to(installed.parents[1]), where.stdout + where.stderr


def test_the_installed_component_and_egress_provider_import_from_the_venv(installed: Path, tmp_path: Path):
    code = (
        "from agent_budgets import AgentBudgets, AgentBudgetsArgs\n"
        "from agent_budgets.version import VERSION\n"
        "import components.egress_provider, mock_model.server\n"
        "import importlib.metadata as m\n"
        "print(VERSION, m.version('agent-budgets'))\n"
    )
    result = _run([str(installed), "-c", code], tmp_path, _clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [VERSION, VERSION]

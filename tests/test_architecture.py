"""The two layers stay apart: `core/` is pure (no Pulumi, no components), `components/` wires it into resources.

These checks read the import statements of every module, so a shortcut that would make the pure layer
depend on the engine fails here, before a reviewer has to spot it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE_MODULES = sorted((ROOT / "core").rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Top-level module names imported anywhere in the file (including inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_holds_the_pure_modules():
    names = {path.stem if path.stem != "__init__" else path.parent.name for path in CORE_MODULES}
    assert {"settings", "budget_rules", "ratelimit_model", "manifests", "platform_values", "egress"} <= names


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda path: str(path.relative_to(ROOT / "core")))
def test_core_never_imports_pulumi_or_components(path):
    forbidden = {
        name
        for name in imported_modules(path)
        if name.split(".")[0] in {"pulumi", "pulumi_kubernetes", "pulumi_random", "pulumi_policy", "components"}
    }
    assert forbidden == set(), f"{path.name} imports {sorted(forbidden)}: core/ must stay pure"


def test_the_program_builds_agent_budgets_which_builds_the_stack():
    """__main__.py → AgentBudgets (agent_budgets/component.py) → components.stack; components.program only reads
    the stack's configuration, and nothing under components/ imports the program or the component."""
    main = imported_modules(ROOT / "__main__.py")
    program = imported_modules(ROOT / "components" / "program.py")
    component = imported_modules(ROOT / "agent_budgets" / "component.py")
    assert {"agent_budgets", "components.program"} <= main
    assert "components.stack" in component
    assert "components.stack" not in program
    for path in (ROOT / "components").glob("*.py"):
        imported = imported_modules(path)
        assert "components.program" not in imported, path.name
        assert not any(name.split(".")[0] == "agent_budgets" for name in imported if path.stem != "program"), path.name


def test_the_dynamic_provider_keeps_its_import_path():
    """Pulumi pickles the egress provider by reference to this module: moving it breaks existing stacks."""
    assert (ROOT / "components" / "egress_provider.py").is_file()


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda path: str(path.relative_to(ROOT / "core")))
def test_core_does_no_io_of_the_operator_tools(path):
    """The spend report's pure half stays pure: Redis, kubectl and the CLI live in tools/."""
    forbidden = {name for name in imported_modules(path) if name.split(".")[0] in {"tools", "redis", "subprocess"}}
    assert forbidden == set(), f"{path.name} imports {sorted(forbidden)}: I/O belongs in tools/"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "tools").rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT / "tools"))
)
def test_tools_never_need_the_pulumi_engine(path):
    """Operator tools read a stack file and the cluster; they must run without the Pulumi CLI or engine."""
    forbidden = {
        name
        for name in imported_modules(path)
        if name.split(".")[0] in {"pulumi", "pulumi_kubernetes", "pulumi_random", "pulumi_policy", "components"}
    }
    assert forbidden == set(), f"{path} imports {sorted(forbidden)}"


def test_every_name_the_dynamic_provider_calls_resolves_in_core_egress():
    """The pickled provider calls `egress.<name>` at refresh and destroy time: `core.egress` (a package of one
    module per concern) must keep re-exporting each of those names."""
    import core.egress

    tree = ast.parse((ROOT / "components" / "egress_provider.py").read_text(encoding="utf-8"))
    called = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "egress"
    }
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "core.egress"
        for alias in node.names
    }
    assert {"shard_diff", "plan_shard", "ShardInputs"} <= called | imported
    missing = sorted(name for name in called | imported if not hasattr(core.egress, name))
    assert missing == [], f"components/egress_provider.py uses core.egress names that are gone: {missing}"
    assert set(core.egress.__all__) <= set(dir(core.egress))

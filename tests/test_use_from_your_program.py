"""docs/use-from-your-program.md: each example works against the component as it is.

The Python example runs under Pulumi mocks. The TypeScript and Pulumi YAML examples are read (the TypeScript object
literal with a small parser of its own, the YAML with PyYAML): every property they set is an input of the schema
with that type, every output they read is an output of the schema, and the configuration they pass meets the
component's checks (core.validation, with their secret inputs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_budgets.component import SECTION_FIELDS
from agent_budgets.package import package_schema
from core.validation import SecretInputs, validate_stack
from tests.support.program import run_program

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "use-from-your-program.md"
COMPONENT_TYPE = "agent-budgets:index:AgentBudgets"
SECRET_INPUTS = {"kubeconfig", "providerApiKeys", "redisPassword", "redisSentinelPassword"}


def code_block(language: str) -> str:
    [block] = re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    return block


@dataclass(frozen=True)
class Expression:
    """A value the example computes (`config.requireSecret(...)`, `${openaiApiKey}`): a string Output."""

    text: str


# --- a parser of the TypeScript object literal the example passes ------------------------------------------------

TOKEN = re.compile(
    r"""\s*(?:(?P<string>"[^"]*"|'[^']*')|(?P<number>-?\d+(?:\.\d+)?)|(?P<punct>[{}\[\]:,])"""
    r"""|(?P<word>[A-Za-z_$][\w$.]*(?:\([^()]*\))?))"""
)


def tokens(text: str) -> list[tuple[str, str]]:
    found, position = [], 0
    while position < len(text.rstrip()):
        match = TOKEN.match(text, position)
        assert match, f"cannot read the TypeScript example at {text[position : position + 40]!r}"
        kind = match.lastgroup
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def parse_value(items: list[tuple[str, str]], index: int) -> tuple[Any, int]:
    kind, text = items[index]
    if text == "{":
        value: dict[str, Any] = {}
        index += 1
        while items[index][1] != "}":
            key = items[index][1].strip("\"'")
            assert items[index + 1][1] == ":", f"expected ':' after {key}"
            value[key], index = parse_value(items, index + 2)
            if items[index][1] == ",":
                index += 1
        return value, index + 1
    if text == "[":
        array: list[Any] = []
        index += 1
        while items[index][1] != "]":
            item, index = parse_value(items, index)
            array.append(item)
            if items[index][1] == ",":
                index += 1
        return array, index + 1
    if kind == "string":
        return text[1:-1], index + 1
    if kind == "number":
        return (float(text) if "." in text else int(text)), index + 1
    if text in ("true", "false"):
        return text == "true", index + 1
    return Expression(text), index + 1


def typescript_example() -> tuple[dict[str, Any], set[str]]:
    """The arguments of `new agentBudgets.AgentBudgets(...)`, and the outputs the example reads."""
    code = code_block("typescript")
    start = code.index("new agentBudgets.AgentBudgets(")
    literal = code[code.index("{", start) :]
    args, _ = parse_value(tokens(literal[: literal.index("});") + 1]), 0)
    return args, set(re.findall(r"\bbudgets\.(\w+)", code))


def yaml_example() -> tuple[dict[str, Any], set[str]]:
    project = yaml.safe_load(code_block("yaml"))
    resource = project["resources"]["budgets"]
    assert resource["type"] == COMPONENT_TYPE
    # No release is tagged: the guide pins a commit, which `pulumi package add` takes as a version too.
    assert project["packages"]["agent-budgets"] == "github.com/<org>/agent-budgets.git/plugin@<commit>"

    def expressions(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: expressions(item) for key, item in value.items()}
        if isinstance(value, list):
            return [expressions(item) for item in value]
        return Expression(value) if isinstance(value, str) and value.startswith("${") else value

    outputs = {match for value in project["outputs"].values() for match in re.findall(r"\$\{budgets\.(\w+)\}", value)}
    return expressions(resource["properties"]), outputs


# --- the checks ----------------------------------------------------------------------------------------------------

JSON_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict}


def type_problems(path: str, value: Any, prop: dict[str, Any]) -> list[str]:
    """Where `value` is not of the schema property's type (pulumi.json#/Any takes anything)."""
    if prop.get("$ref") == "pulumi.json#/Any":
        return []
    kind = prop["type"]
    if isinstance(value, Expression):
        return [] if kind == "string" else [f"{path}: an expression where the schema wants {kind}"]
    if kind in ("integer", "number"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not a {kind}"]
    if not isinstance(value, JSON_TYPES[kind]):
        return [f"{path}: {value!r} is not a {kind}"]
    if kind == "array":
        items = prop["items"]
        return [problem for i, item in enumerate(value) for problem in type_problems(f"{path}[{i}]", item, items)]
    if kind == "object" and "additionalProperties" in prop:
        extra = prop["additionalProperties"]
        return [problem for key, item in value.items() for problem in type_problems(f"{path}.{key}", item, extra)]
    return []


def check_example(args: dict[str, Any], outputs: set[str]) -> None:
    resource = package_schema()["resources"][COMPONENT_TYPE]
    inputs = resource["inputProperties"]
    assert set(args) <= set(inputs), f"not inputs of the schema: {sorted(set(args) - set(inputs))}"
    assert set(resource["requiredInputs"]) <= set(args)
    problems = [problem for key, value in args.items() for problem in type_problems(key, value, inputs[key])]
    assert problems == []
    assert outputs and outputs <= set(resource["properties"]), sorted(outputs - set(resource["properties"]))
    # The configuration itself passes the component's checks, with the secret inputs the example gives.
    provided = {f"providerApiKeys.{name}" for name in args.get("providerApiKeys", {})}
    provided |= {key for key in ("redisPassword", "redisSentinelPassword") if key in args}
    sections = {key: value for key, value in args.items() if key not in SECRET_INPUTS}
    assert set(sections) <= set(SECTION_FIELDS)
    validated = validate_stack(sections, SecretInputs(frozenset(provided)))
    assert not validated.settings.substrate.egress.enabled  # the package refuses the egress policies


@pytest.mark.parametrize("example", [typescript_example, yaml_example], ids=["typescript", "yaml"])
def test_the_example_uses_the_schema_as_it_is(example):
    check_example(*example())


def test_a_property_the_schema_lacks_or_of_another_type_fails_the_check():
    args, outputs = typescript_example()
    with pytest.raises(AssertionError, match="rateLimits"):
        check_example({**args, "rateLimits": {}}, outputs)
    with pytest.raises(AssertionError, match="actors"):
        check_example({**args, "actors": "agents/support-1"}, outputs)
    with pytest.raises(AssertionError, match="gatewayURL"):
        check_example(args, {*outputs, "gatewayURL"})


def test_the_python_example_runs():
    """Under mocks, with the example's secret config set (project `agent-budgets`, as `pulumi.Config()` reads it)."""
    exported: dict[str, Any] = {}
    code = code_block("python")

    def main() -> None:
        namespace: dict[str, Any] = {}
        exec(compile(code, str(PAGE), "exec"), namespace)
        exported["budgets"] = namespace["budgets"]

    run = run_program({}, secrets={"openaiApiKey": "sk-example"}, main=main)
    assert set(run.outputs) == {"gatewayUrl", "worstCase"}
    assert exported["budgets"].stack_outputs["actors"] == 2
    [policy] = run.of_kind("BackendTrafficPolicy")
    assert len(policy.inputs["spec"]["rateLimit"]["global"]["rules"]) == 2  # the default and the class

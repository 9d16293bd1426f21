"""Envoy Gateway's Helm chart as its release packages it, `helm template` of it, and what its templates read.

The chart comes from Envoy Gateway's Go module (`charts/gateway-helm` of github.com/envoyproxy/gateway@v1.9.0), as
rig/chart.py prepares it (`make tools`): the two steps of Envoy Gateway's release that change what renders
(`tools/make/helm.mk` at v1.9.0: `helm-generate` fills `values.tmpl.yaml` into `values.yaml` with envsubst, the
release workflow passing `IMAGE=docker.io/envoyproxy/gateway`, the tag and `IMAGE_PULL_POLICY=IfNotPresent`;
`helm-package` sets the chart's version and appVersion to the tag).

`chart_reads` lists the `.Values` paths the chart's templates read, following the Go template actions (`with`
and `range` change the dot, `$x := .Values...` names a path, a `define` counts only when something that renders
includes it), so a test can hold a hand-written list of the chart's value names to the chart itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENVOY_GATEWAY_MODULE = "github.com/envoyproxy/gateway@v1.9.0"
ENVOY_GATEWAY_TAG = "v1.9.0"

ValuesPath = tuple[str, ...]


class HelmTemplateError(Exception):
    """`helm template` refused the values (its exit status was not 0); the message is Helm's."""


@dataclass(frozen=True)
class Render:
    """What `helm template` printed: the objects (parsed) and its warnings (such as a value whose type differs from
    the chart's default: `coalesce.go: warning: cannot overwrite table with non table`)."""

    documents: list[dict[str, Any]]
    warnings: list[str]


def helm_template(
    helm: Path, chart: Path, values: Mapping[str, Any], release: str, namespace: str, workdir: Path
) -> Render:
    """The objects `helm template` renders from `values` (no CRDs); Helm's own folders in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    values_file = workdir / "values.json"
    values_file.write_text(json.dumps(values), encoding="utf-8")
    env = {**os.environ, **{f"HELM_{kind}_HOME": str(workdir / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}}
    command = [str(helm), "template", release, str(chart), "--namespace", namespace, "--values", str(values_file)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise HelmTemplateError(result.stderr.strip())
    documents = [doc for doc in yaml.safe_load_all(result.stdout) if isinstance(doc, dict)]
    return Render(documents, [line for line in result.stderr.splitlines() if line.strip()])


def rendered(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one rendered object of `kind` and `name`."""
    found = [doc for doc in documents if doc.get("kind") == kind and doc.get("metadata", {}).get("name") == name]
    assert len(found) == 1, f"{len(found)} rendered {kind} named {name}"
    return found[0]


def envoy_gateway_configuration(render: Render) -> dict[str, Any]:
    """What Envoy Gateway reads: `envoy-gateway.yaml` of the ConfigMap `envoy-gateway-config`, parsed."""
    config_map = rendered(render.documents, "ConfigMap", "envoy-gateway-config")
    return yaml.safe_load(config_map["data"]["envoy-gateway.yaml"])


def scalars(value: Any) -> Iterator[str]:
    """Every map key and scalar in a rendered document, as text."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from scalars(item)
    elif value is not None:
        yield str(value)
        if isinstance(value, str) and "\n" in value:  # a file in a ConfigMap: its own YAML
            with contextlib.suppress(yaml.YAMLError):
                yield from scalars(yaml.safe_load(value))


# --- what the templates read -------------------------------------------------------------------------------

_ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}", re.DOTALL)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_VALUES = re.compile(rf"(?<![\w)\]])\$?\.Values((?:\.{_NAME})*)")
_VARIABLE_PATH = re.compile(rf"(\$[A-Za-z_]\w*)((?:\.{_NAME})+)")
_RELATIVE = re.compile(rf"(?<![\w)\]$.])(\.(?:{_NAME})?(?:\.{_NAME})*)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`')
_ASSIGN = re.compile(r"^(\$[A-Za-z_]\w*)\s*:?=\s*(.+)$")
_INCLUDE = re.compile(r'\b(?:include|template)\s+"([^"]+)"')
_BUILTIN_ROOTS = frozenset({"Release", "Chart", "Capabilities", "Template", "Files", "Subcharts"})


@dataclass
class _Frame:
    keyword: str
    dot: ValuesPath | None  # the .Values path the dot is, None when it is something else (the root, a range item)
    outer: ValuesPath | None


def _path_of(expression: str, dot: ValuesPath | None, variables: Mapping[str, ValuesPath]) -> ValuesPath | None:
    """The .Values path a pipeline's first operand names, if any."""
    operand = expression.strip().split()[0] if expression.strip() else ""
    values = _VALUES.fullmatch(operand)
    if values:
        return tuple(part for part in values.group(1).split(".") if part)
    variable = _VARIABLE_PATH.fullmatch(operand) or re.fullmatch(r"(\$[A-Za-z_]\w*)()", operand)
    if variable and variable.group(1) in variables:
        return variables[variable.group(1)] + tuple(part for part in variable.group(2).split(".") if part)
    if dot is not None and re.fullmatch(rf"\.(?:{_NAME})?(?:\.{_NAME})*", operand):
        return dot + tuple(part for part in operand.split(".") if part)
    return None


def _scan(text: str, where: str) -> tuple[dict[str, set[ValuesPath]], dict[str, set[str]]]:
    """The .Values paths read and the defines included, by define name ("" for the text outside defines)."""
    reads: dict[str, set[ValuesPath]] = {"": set()}
    includes: dict[str, set[str]] = {"": set()}
    stack: list[_Frame] = []
    variables: dict[str, ValuesPath] = {}
    current = ""
    for match in _ACTION.finditer(text):
        action = match.group(1).strip()
        if action.startswith("/*"):
            continue
        dot = stack[-1].dot if stack else None
        keyword, _, rest = action.partition(" ")
        if keyword == "define":
            current = rest.strip().strip('"')
            reads.setdefault(current, set())
            includes.setdefault(current, set())
            stack.append(_Frame("define", None, None))
            continue
        if keyword == "end":
            frame = stack.pop()
            if frame.keyword == "define":
                current = ""
            continue
        for values in _VALUES.finditer(action):
            path = tuple(part for part in values.group(1).split(".") if part)
            if not path:
                raise ValueError(f"{where}: `{action}` reads the whole of .Values")
            reads[current].add(path)
        for variable in _VARIABLE_PATH.finditer(action):
            if variable.group(1) in variables:
                reads[current].add(variables[variable.group(1)] + tuple(variable.group(2).split(".")[1:]))
        if dot is not None:
            for relative in _RELATIVE.finditer(_STRING.sub('""', action)):
                names = tuple(part for part in relative.group(1).split(".") if part)
                if not names or names[0] not in _BUILTIN_ROOTS | {"Values"}:
                    reads[current].add(dot + names)
        includes[current].update(_INCLUDE.findall(action))
        assignment = _ASSIGN.match(action)
        if assignment:
            path = _path_of(assignment.group(2), dot, variables)
            if path is not None:
                variables[assignment.group(1)] = path
        if keyword in {"if", "with", "range", "block"}:
            target = _path_of(rest, dot, variables) if keyword == "with" else None
            stack.append(_Frame(keyword, dot if keyword == "if" else target, dot))
        elif keyword == "else" and stack:
            frame = stack[-1]
            branch, _, expression = rest.partition(" ")
            frame.dot = _path_of(expression, frame.outer, variables) if branch == "with" else frame.outer
    if stack:
        raise ValueError(f"{where}: {len(stack)} blocks without their end")
    return reads, includes


def chart_reads(chart: Path, prefix: ValuesPath = ()) -> set[ValuesPath]:
    """Every `.Values` path the templates of `chart` (and of its subcharts, under their names) read when they render:
    text outside defines, and the defines it includes, transitively."""
    reads: dict[str, set[ValuesPath]] = {"": set()}
    includes: dict[str, set[str]] = {"": set()}
    for template in sorted((chart / "templates").rglob("*")):
        if not template.is_file() or template.suffix not in {".yaml", ".yml", ".tpl", ".txt"}:
            continue
        file_reads, file_includes = _scan(template.read_text(encoding="utf-8"), str(template.relative_to(chart)))
        for name, paths in file_reads.items():
            reads.setdefault(name, set()).update(paths)
        for name, names in file_includes.items():
            includes.setdefault(name, set()).update(names)
    used, pending = {""}, [""]
    while pending:
        for name in includes.get(pending.pop(), set()) - used:
            used.add(name)
            pending.append(name)
    found = {prefix + path for name in used for path in reads.get(name, set())}
    metadata = yaml.safe_load((chart / "Chart.yaml").read_text(encoding="utf-8"))
    for dependency in metadata.get("dependencies") or []:
        name = dependency["name"]
        found.add((*prefix, name))  # the subchart's values, and its `condition` (name.enabled) read by Helm
        subchart = chart / "charts" / name
        if subchart.is_dir():
            found |= chart_reads(subchart, (*prefix, name))
    return found

"""A chart out of a Go module zip, made what upstream's release packages.

Envoy Gateway's chart in its module has no values.yaml, only values.tmpl.yaml, and Chart.yaml says
`version: v0.0.0-latest`. Its release (v1.9.0 tools/make/helm.mk, `helm-generate` then `helm-package`) fills the
template with envsubst and packages the chart with `--version` and `--app-version`; the chart's .helmignore leaves the
template (`*.tmpl.*`) out of the package. This module does the same to a copy (module cache files are read-only).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

# envsubst replaces `$NAME` and `${NAME}` (NAME: a letter or `_`, then letters, digits, `_`).
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_TOP_LEVEL_KEY = r"^{key}:[^\n]*$"


class ChartError(ValueError):
    """The chart is not what the release process expects; the message says which file and what."""


def substitute(template: str, values: Mapping[str, str], where: str) -> str:
    """envsubst of `template` with `values`. A variable without a value is refused (envsubst would leave it empty
    without a word, and a new variable in a new chart version would go unnoticed); a value never set is refused
    too (a typo in the versions file)."""
    used: set[str] = set()
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            missing.append(name)
            return match.group(0)
        used.add(name)
        return values[name]

    result = _VARIABLE.sub(one, template)
    if missing:
        raise ChartError(f"{where} uses {', '.join(sorted(set(missing)))}, which rig/versions.toml gives no value")
    unused = sorted(set(values) - used)
    if unused:
        raise ChartError(f"{where} does not use {', '.join(unused)}, which rig/versions.toml sets: check the chart")
    return result


def set_chart_versions(chart_yaml: str, version: str, app_version: str) -> str:
    """Chart.yaml with its top-level `version` and `appVersion` set, as `helm package --version --app-version` sets
    them; every other line (the dependencies' own `version`, indented) unchanged."""
    for key, value in (("version", version), ("appVersion", app_version)):
        pattern = re.compile(_TOP_LEVEL_KEY.format(key=key), re.MULTILINE)
        if len(pattern.findall(chart_yaml)) != 1:
            raise ChartError(f"Chart.yaml has no single top-level {key}: line")
        chart_yaml = pattern.sub(f'{key}: "{value}"', chart_yaml)
    return chart_yaml


def copy_tree(source: Path, target: Path) -> None:
    """Copy a directory's files (not their read-only modes: the module cache's are) into a new directory."""
    for directory, _, files in os.walk(source):
        relative = Path(directory).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copyfile(Path(directory) / name, target / relative / name)


def prepare(
    source: Path,
    target: Path,
    template: str | None,
    values: Mapping[str, str],
    version: str,
    app_version: str,
) -> None:
    """Copy the chart at `source` to `target` (a new directory) and make it the release's chart."""
    if not (source / "Chart.yaml").is_file():
        raise ChartError(f"{source} holds no Chart.yaml")
    copy_tree(source, target)
    if template is not None:
        template_path = target / template
        if not template_path.is_file():
            raise ChartError(f"the chart has no {template}")
        if (target / "values.yaml").exists():
            raise ChartError(f"the chart has both {template} and values.yaml: which one does the release use?")
        filled = substitute(template_path.read_text(encoding="utf-8"), values, template)
        (target / "values.yaml").write_text(filled, encoding="utf-8")
        template_path.unlink()
    chart_yaml = target / "Chart.yaml"
    chart_yaml.write_text(set_chart_versions(chart_yaml.read_text(encoding="utf-8"), version, app_version), "utf-8")

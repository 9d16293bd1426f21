"""Read a stack's configuration from `Pulumi.<stack>.yaml` (no Pulumi CLI, no backend, no passphrase).

Budgets are not secret, so the stack file is enough. The raw `agent-budgets:*` map is built the way the
program's edge builds it from the engine (`components/program.py`): keys without the project prefix,
structured values as data, and every secret replaced by a placeholder (its value is never read here). It is
then checked by the program's own validation, `core.validation.validate_stack`, so a configuration that
`pulumi preview` refuses is refused here with the same messages.

Pulumi's rules followed here (pulumi/pulumi `sdk/go/common/workspace/project.go` and `config` packages):
stack files live beside `Pulumi.yaml` unless `stackConfigDir` says otherwise; a secret is stored as
`{secure: <ciphertext>}`; project-level values in `Pulumi.yaml` (`config: {key: value}` or
`{key: {value: ...}}`) apply to every stack and a stack file overrides them. Pulumi reads both files with
gopkg.in/yaml.v3 (sdk/go/common/workspace/loaders.go `LoadProjectStackBytes` and `LoadProjectBytes` through
sdk/go/common/encoding/marshal.go, pulumi v3.259.0), whose decoder refuses a map that holds the same key twice
(yaml.v3 v3.0.1 decode.go `mapping`, `uniqueKeys`): so is such a file refused here, never read last-wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from core.settings import PROJECT, SECRET_PLACEHOLDER, decode_config_value
from core.validation import ValidatedStack, validate_stack

PROJECT_FILE = "Pulumi.yaml"
# What Pulumi accepts as a stack name (pulumi/pulumi pkg/backend/filestate/backend.go `validateStackName`,
# `stackNameAndProjectRegexp`); anything else never names a stack file, however long or odd it is.
STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}\Z")
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (its wheels do): the same documents as the pure-Python
`SafeLoader`, read about ten times faster (a second for a stack file of 10,000 actors otherwise)."""
# Keys of a project-level config entry written as a schema rather than a plain value.
_SCHEMA_KEYS = frozenset({"type", "description", "default", "value", "secret", "items"})


class StackError(Exception):
    """The stack cannot be read: no project, no such stack, or a stack file that is not YAML."""


@dataclass(frozen=True)
class StackConfig:
    """One stack's `agent-budgets:*` configuration as the program would receive it."""

    name: str
    path: Path
    raw: dict[str, Any]
    secret_keys: frozenset[str]

    def secret_state(self, key: str) -> tuple[bool, bool]:
        """Whether `agent-budgets:<key>` is set, and whether it is stored as a secret."""
        return key in self.raw, key in self.secret_keys

    def validate(self) -> ValidatedStack:
        """The program's own validation; raises `core.settings.ConfigError` exactly as `pulumi preview` would."""
        return validate_stack(self.raw, self.secret_state)


def find_project_dir(start: Path) -> Path:
    """The nearest folder at or above `start` holding `Pulumi.yaml`."""
    for folder in (start, *start.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    raise StackError(
        f"no {PROJECT_FILE} in {start} or above it: run from the agent-budgets checkout, or pass --project-dir"
    )


def _key_path(path: str, key: yaml.Node) -> str:
    text = str(key.value) if isinstance(key, yaml.ScalarNode) else "<" + key.id + ">"
    return f"{path}.{text}" if path else text


def duplicate_key(document: yaml.Node) -> str | None:
    """The first map in `document` that holds a key twice, described for the user; None when there is none.

    Keys are compared as yaml.v3 compares them: by node kind and written value, so `a`, `'a'` and `"a"` are the
    same key (and `1` and `"1"` too), while `true` and `True` are not.
    """
    visited: set[int] = set()
    pending: list[tuple[yaml.Node, str]] = [(document, "")]
    while pending:
        node, path = pending.pop()
        if id(node) in visited:  # an alias names a node already walked
            continue
        visited.add(id(node))
        children: list[tuple[yaml.Node, str]] = []
        if isinstance(node, yaml.MappingNode):
            first_line: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                identity = (key.id, str(key.value) if isinstance(key, yaml.ScalarNode) else "")
                line = key.start_mark.line + 1
                if identity in first_line:
                    return (
                        f"line {line}: the key {identity[1]!r} is written twice in one map "
                        f"({_key_path(path, key)}, first at line {first_line[identity]}); Pulumi refuses the file "
                        f'(mapping key "{identity[1]}" already defined at line {first_line[identity]}): keep one'
                    )
                first_line[identity] = line
                children.append((value, _key_path(path, key)))
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, f"{path}[{index}]") for index, item in enumerate(node.value)]
        pending.extend(reversed(children))
    return None


def _read_yaml(text: str) -> Any:
    """The one document in `text`, refused as Pulumi refuses it when a map holds a key twice."""
    loader = SAFE_LOADER(text)
    try:
        document = loader.get_single_node()
        if document is None:
            return None
        duplicate = duplicate_key(document)
        if duplicate:
            raise StackError(duplicate)
        return loader.construct_document(document)
    finally:
        loader.dispose()


def _load_yaml(path: Path) -> Any:
    try:
        return _read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise StackError(
            f"{path} is not UTF-8 text (byte 0x{error.object[error.start]:02X} at offset {error.start}; "
            "an editor may have saved it as Latin-1 or UTF-16): save it as UTF-8"
        ) from None
    except yaml.YAMLError as error:
        # libyaml stops at 1,000 levels itself (the pure-Python reader runs out of stack first, below).
        if "exceeded maximum nesting depth" in str(error):
            raise StackError(_too_deep(path)) from None
        raise StackError(f"{path} is not valid YAML: {error}") from None
    except StackError as error:
        raise StackError(f"{path} {error}") from None
    except OSError as error:
        raise StackError(f"{path} cannot be read: {error.strerror}") from None
    except RecursionError:
        raise StackError(_too_deep(path)) from None


def _too_deep(path: Path) -> str:
    return (
        f"{path} nests lists or maps deeper than a YAML reader goes (hundreds of levels): it is no stack file "
        "a person wrote; restore it from version control"
    )


def _is_secure(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"secure"}


def _without_secrets(value: Any) -> tuple[Any, bool]:
    """The value with every `{secure: ...}` replaced by the placeholder, and whether there was one."""
    if isinstance(value, str):
        return value, False  # most values are (every actor is one): no Mapping check for them
    if _is_secure(value):
        return SECRET_PLACEHOLDER, True
    if isinstance(value, Mapping):
        found = False
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            cleaned[key], secret = _without_secrets(item)
            found = found or secret
        return cleaned, found
    if isinstance(value, list):
        items = [_without_secrets(item) for item in value]
        return [item for item, _ in items], any(secret for _, secret in items)
    return value, False


def _project_key(key: str) -> str | None:
    """`agent-budgets:actors` → `actors`; keys of other namespaces → None."""
    if key.startswith(f"{PROJECT}:"):
        return key.removeprefix(f"{PROJECT}:")
    return None


def project_defaults(project_document: Mapping[str, Any]) -> dict[str, Any]:
    """Project-level `agent-budgets:*` values of `Pulumi.yaml` (a bare key belongs to the project)."""
    values: dict[str, Any] = {}
    for key, entry in (project_document.get("config") or {}).items():
        name = _project_key(key) if ":" in key else key
        if name is None:
            continue
        if isinstance(entry, Mapping) and entry and set(entry) <= _SCHEMA_KEYS:
            if "value" in entry:
                values[name] = entry["value"]
            elif "default" in entry:
                values[name] = entry["default"]
            continue
        values[name] = entry
    return values


def stack_names(config_dir: Path) -> list[str]:
    """The stacks that have a file in `config_dir`."""
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in config_dir.glob("Pulumi.*.yaml"))


def load_stack(project_dir: Path, stack: str) -> StackConfig:
    """`Pulumi.<stack>.yaml` (over the project's defaults) as the raw map the program validates."""
    project_document = _load_yaml(project_dir / PROJECT_FILE) or {}
    if not isinstance(project_document, Mapping):
        raise StackError(f"{project_dir / PROJECT_FILE} is not a Pulumi project file")
    config_dir = project_dir / str(project_document.get("stackConfigDir") or ".")
    if not STACK_NAME.match(stack):
        raise StackError(
            f"{stack!r:.120} is not a stack name: Pulumi's are 1 to 100 letters, digits, '-', '_' or '.'; use the "
            "name of a Pulumi.<stack>.yaml, e.g. dev"
        )
    path = config_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = stack_names(config_dir)
        raise StackError(
            f"unknown stack {stack!r}: there is no {path.name} in {config_dir}. "
            f"Stacks with a file here: {', '.join(known) or 'none'}"
        )
    document = _load_yaml(path) or {}
    if not isinstance(document, Mapping) or not isinstance(document.get("config") or {}, Mapping):
        raise StackError(f"{path} has no `config:` map: it is not a Pulumi stack file")
    raw, secret_keys = raw_config(project_document, document)
    return StackConfig(stack, path, raw, secret_keys)


def raw_config(
    project_document: Mapping[str, Any], stack_document: Mapping[str, Any]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The raw `agent-budgets:*` map of a stack file over its project's defaults, and the keys held as secrets."""
    raw = {key: decode_config_value(value) for key, value in project_defaults(project_document).items()}
    secret_keys: set[str] = set()
    for key, value in (stack_document.get("config") or {}).items():
        name = _project_key(str(key))
        if name is None:
            continue
        cleaned, secret = _without_secrets(value)
        raw[name] = cleaned if secret else decode_config_value(cleaned)
        if secret:
            secret_keys.add(name)
    return raw, frozenset(secret_keys)

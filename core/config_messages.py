"""Messages for the mistakes people make in stack files, in the words of the stack file.

pydantic knows *that* a value is wrong; this module says *what to write instead*: a YAML null where a
value is required, a number written as text (`"5,000"`, `5k`), a map where a list belongs (shown in list
form), a flat dotted key set without `--path`, a snake_case key, a key that was renamed or removed. Every
message names the full key (`agent-budgets:budgets.classes[0].actors[1]`) and the bad value.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticUndefined

from core.problems import PROJECT, Problem, key_path, short
from core.settings import RETIRED_KEYS, StackSettings, number_text_hint

_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")


# ---------------------------------------------------------------------------------------------------------
# Where a key lives in the models


def aliases(model: type[BaseModel]) -> dict[str, str]:
    """The keys a model accepts in a stack file (camelCase), each mapped to its Python field name."""
    return {(field.alias or name): name for name, field in model.model_fields.items()}


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `list[M]`, `M | None`, `Annotated[M, ...]`, or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _inner_model(argument)
        if found is not None:
            return found
    return None


def field_at(parts: Sequence[str | int]) -> FieldInfo | None:
    """The field a key path (`("budgets", "classes", 0, "tokens")`) names, or None when it names none."""
    model: type[BaseModel] | None = StackSettings
    field: FieldInfo | None = None
    map_key_next = False  # after a `dict[str, Model]` field (prices) comes a key the user chose
    for part in parts:
        if isinstance(part, int):
            continue
        if map_key_next:
            map_key_next = False
            continue
        if model is None:
            return None
        name = aliases(model).get(part)
        if name is None:
            return None
        field = model.model_fields[name]
        model = _inner_model(field.annotation)
        map_key_next = _is_map(field.annotation)
    return field


def map_entry_model(parts: Sequence[str | int]) -> type[BaseModel] | None:
    """The model of the entry a path names when its last part is a key the user chose in a map of models
    (`("prices", "gpt-4o")` → ModelPrices), else None."""
    names = [part for part in parts if not isinstance(part, int)]
    field = field_at(names[:-1]) if len(names) > 1 else None
    if field is None or not _is_map(field.annotation) or field_at(names) is not field:
        return None
    return _inner_model(field.annotation)


def unwrap_annotated(annotation: Any) -> Any:
    """The type inside any number of `Annotated[...]` layers."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_map(annotation: Any) -> bool:
    return typing.get_origin(unwrap_annotated(annotation)) is dict


def model_at(parts: Sequence[str | int]) -> type[BaseModel] | None:
    """The model whose keys sit at this path (StackSettings for the top level)."""
    if not [part for part in parts if not isinstance(part, int)]:
        return StackSettings
    field = field_at(parts)
    return _inner_model(field.annotation) if field is not None else None


def is_sensitive(field: FieldInfo | None) -> bool:
    """Whether a field may hold credentials, so that no message shows its value."""
    extra = field.json_schema_extra if field is not None else None
    return isinstance(extra, dict) and extra.get("sensitive") is True


def expected_text(field: FieldInfo | None) -> str:
    """What a field holds, in stack-file words: `a whole number`, `a list`, `one of 'a', 'b'`, ..."""
    return annotation_text(field.annotation) if field is not None else "a value"


def _without_none(annotation: Any) -> Any:
    """`X | None` → `X` (inside any `Annotated` layers); anything else unchanged."""
    annotation = unwrap_annotated(annotation)
    options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(options) == 1:
        return unwrap_annotated(options[0])
    return annotation


def item_annotation(field: FieldInfo) -> Any:
    """What one item of a list or map field holds (`list[X]`, `dict[str, X]` → X), or None for other fields."""
    annotation = _without_none(field.annotation)
    origin = typing.get_origin(annotation)
    if origin is list:
        return typing.get_args(annotation)[0]
    if origin is dict:
        return typing.get_args(annotation)[1]
    return None


def names_an_item(parts: Sequence[str | int], field: FieldInfo | None) -> bool:
    """Whether a key path ends inside a list or map field (`actors[1]`, `monitoring.ruleLabels.team`) rather than
    at the field itself (`actors`)."""
    if field is None or not parts or item_annotation(field) is None:
        return False
    return isinstance(parts[-1], int) or parts[-1] != field.alias


def annotation_text(annotation: Any) -> str:
    """What a value of this type is, in stack-file words."""
    annotation = unwrap_annotated(annotation)
    options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(options) == 1:
        annotation = unwrap_annotated(options[0])
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(value) for value in typing.get_args(annotation))
    if origin is list or annotation is list:
        return "a list"
    if origin is dict or annotation is dict:
        return "a map"
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "text"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a map of settings"
    return "a value"


def flow_yaml(value: Any) -> str:
    """A value as one line of YAML flow style, the way a user could paste it into a stack file."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000)
    return text.strip().removesuffix("...").strip()


def default_text(field: FieldInfo | None) -> str | None:
    """The field's default as YAML, or None when the field is required."""
    if field is None or field.is_required():
        return None
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return None
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return None  # a section: its own keys carry the defaults
    if isinstance(value, list):
        value = [
            item.model_dump(by_alias=True, exclude_defaults=True) if isinstance(item, BaseModel) else item
            for item in value
        ]
    return "~ (unset)" if value is None else flow_yaml(value)


def _range_text(field: FieldInfo | None) -> str | None:
    if field is None:
        return None
    low = high = None
    for rule in field.metadata:
        low = getattr(rule, "ge", low)
        high = getattr(rule, "le", high)
    if low is not None and high is not None:
        return f"from {low:,} to {high:,}"
    if low is not None:
        return f"at least {low:,}"
    if high is not None:
        return f"at most {high:,}"
    return None


# ---------------------------------------------------------------------------------------------------------
# Field errors


def _list_form(parts: Sequence[str | int], value: Mapping[str, Any]) -> str:
    """A map the user wrote where a list belongs, rewritten as that list (after "write it ")."""
    item_model = model_at([*parts, 0])
    fields = set(aliases(item_model)) if item_model is not None else set()
    if value and set(value) <= fields:
        items: list[Any] = [dict(value)]  # one entry written without its `- `
    elif "name" in fields and all(isinstance(v, Mapping) for v in value.values()):
        items = [{"name": key, **entry} for key, entry in value.items()]
    elif all(entry is None for entry in value.values()):
        items = list(value)
    else:
        return "as a list, one `- ` line per entry"
    return f"as a list: {parts[-1]}: {flow_yaml(items)}"


def _required(model: type[BaseModel]) -> list[str]:
    return [alias for alias, name in aliases(model).items() if model.model_fields[name].is_required()]


def _map_entry_fields(model: type[BaseModel]) -> str:
    """`input and output (required), cachedInput and cacheWrite (optional)` for the entries of a map."""
    required = _required(model)
    optional = [alias for alias in aliases(model) if alias not in required]
    parts = [f"{' and '.join(required)} (required)"] if required else []
    parts += [f"{' and '.join(optional)} (optional)"] if optional else []
    return ", ".join(parts)


def describe_field_error(error: ErrorDetails) -> Problem:
    """One pydantic error as a Problem with the full key, the bad value and what to write instead."""
    parts = list(error.get("loc", ()))
    if parts and parts[-1] == "[key]" and isinstance(error.get("input"), str):
        # The error is about a map's key: name the entry (`prices.<model>`) by the key as written (the location
        # holds pydantic's copy, in which a lone surrogate became U+FFFD).
        parts[-2:] = [error["input"]]
    key = key_path(parts)
    kind = error.get("type", "")
    value = error.get("input")
    field = field_at(parts)
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if is_sensitive(field) and kind not in {"extra_forbidden", "missing", "value_error"}:
        # Never echo what may be credentials (kubeconfig contents): say what the key takes instead. A sensitive
        # field's own validators never quote the value, so their messages are shown.
        return Problem(key, f"got a value that is not {expected_text(field)} (not shown: it may hold credentials)")

    if kind == "extra_forbidden":
        return unknown_key_problem(parts[:-1], str(parts[-1]), value)
    if kind == "missing":
        return Problem(key, "required but not set: add it to Pulumi.<stack>.yaml")
    if kind == "value_error":
        return Problem(key, message)
    entry_model = map_entry_model(parts)
    if value is None and entry_model is not None:
        example = ", ".join(f"{name}: <value>" for name in _required(entry_model))
        return Problem(
            key,
            f"is empty (YAML null: `~`, `null` or nothing after the colon): give {parts[-1]} its settings, "
            f"{_map_entry_fields(entry_model)}, e.g. {parts[-1]}: {{{example}}}",
        )
    item = names_an_item(parts, field)
    expected = annotation_text(item_annotation(field)) if item and field is not None else expected_text(field)
    if value is None:
        default = None if item else default_text(field)
        fix = f"remove the key to use the default ({default})" if default else "it is required"
        if item:
            fix = f"remove the {'entry' if isinstance(parts[-1], int) else 'key'}"
        return Problem(key, f"is empty (YAML null: `~`, `null` or nothing after the colon): give {expected}, or {fix}")
    if expected == "a list" and isinstance(value, Mapping):
        return Problem(key, f"got a map where a list belongs: write it {_list_form(parts, value)}")
    if expected == "a list" and isinstance(value, str | int | float):
        return Problem(key, f"got a single value {short(value)}: write a list, e.g. {parts[-1]}: [{value}]")
    if (expected == "a map of settings" or kind in {"model_type", "dict_type"}) and not isinstance(value, Mapping):
        holder = "entry" if item and isinstance(parts[-1], int) else "key"
        return Problem(
            key, f"got {short(value)}: this {holder} holds a map of settings (`key: value` lines indented below it)"
        )
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        if isinstance(value, str):
            return Problem(key, f"got {short(value)}: {number_text_hint(value, str(parts[-1]))}")
        return Problem(key, f"got {short(value)}: give a whole number")
    if kind in {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}:
        allowed = _range_text(field)
        negative = isinstance(value, int | float) and value < 0
        return Problem(
            key, f"got {short(value)}{', a negative number' if negative else ''}: use a value {allowed or message}"
        )
    if kind in {"literal_error", "enum"}:
        return Problem(key, f"got {short(value)}: use {expected}")
    if kind in {"bool_parsing", "bool_type"}:
        return Problem(key, f"got {short(value)}: use true or false")
    if kind == "string_type":
        return Problem(key, f"got {short(value)}: give text (quote it if YAML reads it as something else)")
    if kind in {"too_short", "too_long"}:
        return Problem(key, f"{message.rstrip('.')}: got {short(value)}")
    return Problem(key, f"got {short(value)}: {message}")


# ---------------------------------------------------------------------------------------------------------
# Keys that do not exist


def _snake_to_camel(key: str) -> str | None:
    return to_camel(key) if _SNAKE_CASE.match(key) else None


def unknown_key_problem(parent: Sequence[str | int], key: str, value: Any) -> Problem:
    """A key no model has at this place: renamed, snake_case, misspelt, or simply unknown."""
    parts = [*parent, key]
    path = key_path(parts)
    dotted = re.sub(r"\[\d+\]", "", path)
    retired = RETIRED_KEYS.get(dotted)
    if retired is not None:
        where = f"moved to `{PROJECT}:{retired.replacement}`" if retired.replacement else "was removed"
        return Problem(path, f"this key {where} (see CHANGELOG.md): {retired.how}")
    model = model_at(parent)
    known = sorted(aliases(model)) if model is not None else []
    camel = _snake_to_camel(key)
    if camel is not None and camel in known:
        return Problem(path, f"keys are camelCase: write `{camel}` instead of `{key}`")
    by_case = {name.lower(): name for name in known}
    if key.lower() in by_case:
        return Problem(path, f"keys are case-sensitive camelCase: write `{by_case[key.lower()]}` instead of `{key}`")
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if close:
        return Problem(path, f"unknown key: did you mean `{close[0]}`? (known here: {', '.join(known)})")
    return Problem(path, f"unknown key: remove it or fix its spelling (known here: {', '.join(known)})")


def flat_key_problem(key: str, value: Any) -> Problem | None:
    """A top-level key with a dot or index in its name: `pulumi config set` without `--path` stored it."""
    if not re.search(r"[.\[]", key):
        return None
    first = re.split(r"[.\[]", key, maxsplit=1)[0]
    known = aliases(StackSettings)
    camel = _snake_to_camel(first)
    if first not in known and camel not in known:
        return None
    path = key if first in known else camel + key[len(first) :]
    shown = value if isinstance(value, str) else flow_yaml(value)
    return Problem(
        key,
        f"is one flat key with dots in its name: `pulumi config set` without `--path` stores it that way. Run "
        f"`pulumi config rm {PROJECT}:{key}`, then `pulumi config set --path '{PROJECT}:{path}' {shown}`",
    )

"""The configuration reference, generated from the pydantic models so that it cannot drift from them.

`reference_rows()` walks `StackSettings` and yields one row per key (type, default, rule);
`render_reference()` turns them into the markdown tables that docs/configuration.md holds in its
`config-reference` GENERATED block. `make docs` (scripts/gen_docs.py) writes them; tests/test_generated_docs.py
fails when the committed page differs from what the models say.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from core.config_messages import aliases, flow_yaml, unwrap_annotated
from core.settings import RETIRED_KEYS, StackSettings


@dataclass(frozen=True)
class ReferenceRow:
    """One configuration key as the docs show it."""

    key: str
    type: str
    default: str
    rule: str


def _optional_inner(annotation: Any) -> tuple[Any, bool]:
    annotation = unwrap_annotated(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(options) == 1:
            return unwrap_annotated(options[0]), True
    return annotation, False


def type_text(annotation: Any) -> str:
    """`int` → integer, `list[Route]` → list of maps, `Literal['a','b']` → `a` \\| `b`."""
    inner, _ = _optional_inner(annotation)
    origin = typing.get_origin(inner)
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(inner))
    if origin is list:
        item = unwrap_annotated(typing.get_args(inner)[0])
        if isinstance(item, type) and issubclass(item, BaseModel):
            return "list of maps"
        if typing.get_origin(item) is Literal:
            return f"list of {type_text(item)}"
        return f"list of {type_text(item)}s"
    if origin is dict:
        value = unwrap_annotated(typing.get_args(inner)[1])
        if isinstance(value, type) and issubclass(value, BaseModel):
            return "map of maps"
        return f"map of {type_text(value)}s"
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return "map"
    return {int: "integer", str: "string", bool: "boolean", float: "number", Decimal: "number"}.get(inner, str(inner))


def _plain(item: Any) -> Any:
    return item.model_dump(by_alias=True, exclude_defaults=True) if isinstance(item, BaseModel) else item


def default_cell(field: FieldInfo) -> str:
    """The default as the docs show it: required, a value, or unset."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, list):
        if not value:
            return "`[]`"
        value = [
            item.model_dump(by_alias=True, exclude_defaults=True) if isinstance(item, BaseModel) else item
            for item in value
        ]
    if value is PydanticUndefined:  # pragma: no cover - required fields are handled above
        return "required"
    text = flow_yaml(value)
    return f"`{text}`"


def _range(field: FieldInfo) -> str:
    low = high = min_items = max_items = None
    for rule in field.metadata:
        low = getattr(rule, "ge", low)
        high = getattr(rule, "le", high)
        min_items = getattr(rule, "min_length", min_items)
        max_items = getattr(rule, "max_length", max_items)
    parts = []
    if low is not None and high is not None:
        parts.append(f"{low:,} to {high:,}")
    elif low is not None:
        parts.append(f"≥ {low:,}")
    elif high is not None:
        parts.append(f"≤ {high:,}")
    is_list = typing.get_origin(_optional_inner(field.annotation)[0]) is list
    if is_list and (min_items is not None or max_items is not None):
        parts.append(f"{min_items or 0} to {max_items:,} entries" if max_items else f"at least {min_items} entries")
    return "; ".join(parts)


def _item_model(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _optional_inner(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner
    if typing.get_origin(inner) in (list, dict):
        item = unwrap_annotated(typing.get_args(inner)[-1])
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item
    return None


def map_key_name(field: FieldInfo) -> str:
    """How the reference names the keys of a map of sections: `prices.<model>.input`."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return str(extra.get("mapKey", "name"))


def reference_rows(model: type[BaseModel] = StackSettings, prefix: str = "") -> Iterator[ReferenceRow]:
    """One row per key of `model`, sections first as a row of their own, then their keys, depth first."""
    names = {name: alias for alias, name in aliases(model).items()}
    for name, field in model.model_fields.items():
        key = f"{prefix}{names[name]}"
        rule = (field.description or "").strip()
        limits = _range(field)
        if limits:
            rule = f"{rule} Range: {limits}." if rule else f"Range: {limits}."
        yield ReferenceRow(key, type_text(field.annotation), default_cell(field), rule)
        inner = _item_model(field.annotation)
        if inner is not None:
            container = typing.get_origin(_optional_inner(field.annotation)[0])
            if container is list:
                yield from reference_rows(inner, f"{key}[].")
            elif container is dict:
                yield from reference_rows(inner, f"{key}.<{map_key_name(field)}>.")
            else:
                yield from reference_rows(inner, f"{key}.")


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell: pipes escaped (once), no line breaks."""
    return re.sub(r"(?<!\\)\|", r"\\|", text).replace("\n", " ")


def render_reference() -> str:
    """The markdown between the GENERATED markers: every key, then the retired keys."""
    lines = ["| key | type | default | rule |", "| --- | --- | --- | --- |"]
    for row in reference_rows():
        lines.append(f"| `{row.key}` | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.rule)} |")
    lines += ["", "Keys that no longer exist (a stack that sets one is refused with the replacement named):", ""]
    lines += ["| old key | now | what to do |", "| --- | --- | --- |"]
    for old, retired in sorted(RETIRED_KEYS.items()):
        now = f"`{retired.replacement}`" if retired.replacement else "removed"
        lines.append(f"| `{old}` | {now} | {_cell(retired.how)} |")
    return "\n".join(lines)

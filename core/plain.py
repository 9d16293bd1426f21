"""Reading plain data (parsed YAML and JSON, Helm values, resource inputs) where any step may be missing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def dig(value: Any, *path: str) -> Any:
    """`value[path[0]][path[1]]...`, or None where a step is missing or not a mapping."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value

"""Values as Pulumi's engine hands them over: protobuf ``Struct`` numbers are doubles.

Props reach a dynamic provider, and resources reach the policy analyzer, as ``google.protobuf.Value``s,
whose only number kind is a double (struct.proto), so every integer arrives as a float.
"""

from __future__ import annotations

from typing import Any


def engine_value(value: Any) -> Any:
    """``value`` after the round trip through protobuf: integers (not bools) become floats, at any depth."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: engine_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [engine_value(v) for v in value]
    return value

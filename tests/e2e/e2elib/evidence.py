"""The evidence lines the checks print, in the example write-up's format."""

from __future__ import annotations

import json
from collections.abc import Mapping

from core.identity import parse_header_value

from .probe import Call

INDENT = " " * 7


def short_name(subject: str) -> str:
    """The agent's own name in an `x-actor-id`: actor/agents/actor-a, system:serviceaccount:agents:actor-a and
    apikey.actor-a -> actor-a (plain names pass through)."""
    caller = parse_header_value(subject)
    return caller.name if caller is not None else subject.rsplit("/", 1)[-1]


def format_counters(totals: Mapping[str, int]) -> str:
    """actor-a=200 actor-b=200, in the mapping's order."""
    return " ".join(f"{short_name(subject)}={value}" for subject, value in totals.items())


def format_call(call: Call) -> str:
    """{"status":200,"total_tokens":200,"remaining":"100"}"""
    return json.dumps(call.summary(), separators=(",", ":"))


def format_transition(name: str, before: int, after: int) -> str:
    return f"{short_name(name)} counter {before} -> {after}"


def excerpt(text: str, limit: int = 80) -> str:
    """One line, at most limit characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def thousands(value: int) -> str:
    return f"{value:,}"


def describe_outcome(call: Call) -> str:
    """What a caller saw, in words (check 4 prints this for the name and for the Service IP)."""
    detail = f"{call.error_type}: {call.error}" if call.error_type else (call.error or "")
    stage = call.error_stage
    if stage == "dns":
        return f"the name does not resolve ({excerpt(detail)})"
    if stage == "connect":
        return f"the connection is refused or fails ({excerpt(detail)})"
    if stage in ("send", "receive"):
        return f"the connection is reset or closed with no answer ({excerpt(detail)})"
    if stage == "timeout":
        return f"no answer before the timeout ({excerpt(detail)})"
    if stage == "ingress":
        return f"the probe agent could not be reached: {excerpt(detail, 120)}"
    if stage == "probe-input":
        return f"the probe agent rejected the request: {excerpt(detail, 120)}"
    if stage:
        return f"failed at {stage} ({excerpt(detail)})"
    if call.status is None:
        return "no answer"
    body = excerpt(call.body, 60)
    return f"HTTP {call.status}{' ' + call.reason if call.reason else ''}" + (f": {body}" if body else "")

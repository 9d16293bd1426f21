"""Text a stack configuration can hold: every key and every string must be UTF-8.

A Python string may hold a lone surrogate (U+D800 to U+DFFF without its other half): a `\\ud83d` escape in a
JSON or YAML double-quoted string, or half an emoji cut by a tool that counts UTF-16 units. It is no character
and has no UTF-8 encoding, so the engine cannot carry it: the first resource that holds it fails to register
("surrogates not allowed"), after others were already declared. So every key and string of the configuration is
checked here, before anything else, and each one is reported by its full key.

Rules about which characters a particular value may hold (a DNS label, a model name) belong to that value's own
field; this check is the floor under all of them, and stays silent where a field's own check already names the
same character (`reported_elsewhere`), so each mistake is one line of the report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from core.problems import Problem, key_path

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> re.Match[str] | None:
    """The first lone surrogate in `text` (Python strings never hold paired ones), or None."""
    return _LONE_SURROGATE.search(text)


def lone_surrogate_problem(text: str) -> str | None:
    """Why `text` cannot be stored (it holds a lone surrogate), or None: for a field whose own check must say it
    (so that the report holds one line for the mistake, see `reported_elsewhere`)."""
    found = lone_surrogate(text)
    return _explain(text, found) if found else None


def _explain(text: str, found: re.Match[str]) -> str:
    character = f"U+{ord(found.group()):04X}"
    return (
        f"{text!r:.120} holds {character} at character {found.start() + 1}, half of a UTF-16 surrogate pair "
        "without its other half: it is no character and cannot be stored as UTF-8, so Pulumi could not record "
        "it. Retype the value (a `\\ud8xx` escape or a copy from a UTF-16 tool leaves one)"
    )


def _walk(value: Any, path: tuple[str | int, ...]) -> Iterator[Problem]:
    if isinstance(value, str):
        found = lone_surrogate(value)
        if found:
            yield Problem(key_path(path), _explain(value, found))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found = lone_surrogate(key) if isinstance(key, str) else None
            if found:
                yield Problem(key_path((*path, key)), f"the key {_explain(key, found)}")
            yield from _walk(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def text_problems(raw: Mapping[str, Any]) -> list[Problem]:
    """One problem per key or string value of the raw configuration that cannot be written as UTF-8."""
    return list(_walk(raw, ()))


def reported_elsewhere(problem: Problem, others: Sequence[Problem]) -> bool:
    """Whether a field's own check already reports this lone surrogate (a model name says why Agent Router's
    CEL parser refuses it): the same key or the list or map that holds it, naming the same character."""
    found = re.search(r"holds (U\+D[89A-F][0-9A-F]{2}) ", problem.message)
    if found is None:
        return False
    return any(
        found.group(1) in other.message
        and (problem.key == other.key or problem.key.startswith((f"{other.key}[", f"{other.key}.")))
        for other in others
    )

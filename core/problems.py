"""How configuration problems are reported: one line per problem, every line naming its full key.

A `Problem` is one thing wrong with the stack configuration: the key it concerns (as the user writes it
under `agent-budgets:`, with list indexes: `budgets.classes[0].actors[1]`) and a message that states the
bad value and the fix. `ConfigError` carries every problem found in one run, so a single `pulumi preview`
shows them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PROJECT = "agent-budgets"
REPORT_HEADER = "invalid stack configuration:"


@dataclass(frozen=True)
class Problem:
    """One configuration problem: the key (without the project prefix) and what to do about it."""

    key: str
    message: str

    @property
    def full_key(self) -> str:
        """`agent-budgets:<key>`, the way `pulumi config` names it."""
        return f"{PROJECT}:{self.key}" if self.key else f"{PROJECT}:<config>"

    def render(self) -> str:
        """The report line: `agent-budgets:<key>: <message>`, on one line and printable whatever the user wrote."""
        return printable(f"{self.full_key}: {self.message}")


def printable(text: str) -> str:
    """`text` with every character that is not printable escaped as Python writes it (`\\n`, `\\u202e`, `\\ud800`).

    A message quotes what the user wrote, and a report line must stay one line of UTF-8 that reads as it is:
    a newline would split it, a right-to-left override would reorder it on screen, a lone surrogate could not
    be sent to the engine at all.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def short(value: Any) -> str:
    """`repr` of a value, cut to a readable length (how every report line quotes a value the user wrote)."""
    text = repr(value[:80] if isinstance(value, str) else value)
    return text if len(text) <= 80 else text[:77] + "..."


def key_path(parts: Iterable[str | int]) -> str:
    """`("budgets", "classes", 0, "actors", 1)` → `budgets.classes[0].actors[1]`."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def render_report(problems: Sequence[Problem]) -> str:
    """The block `pulumi preview` prints: the header, then one `  - ` line per problem."""
    return REPORT_HEADER + "".join(f"\n  - {problem.render()}" for problem in problems)


class ConfigError(ValueError):
    """A stack configuration that agent-budgets refuses; `problems` lists every reason at once."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(render_report(self.problems))

    @property
    def keys(self) -> list[str]:
        """The full keys of every problem, in report order."""
        return [problem.full_key for problem in self.problems]

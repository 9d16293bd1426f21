"""What an egress-policy check reports: one :class:`Problem` per finding, raised together as
:class:`EgressConfigError` (the provider's and the component's error; ``core.validation`` maps each
``Problem.field`` to its configuration key)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class EgressConfigError(ValueError):
    """A configuration that Substrate would reject, or that this project forbids."""

    def __init__(self, problems: Sequence[Problem | str]) -> None:
        self.problems = [p if isinstance(p, Problem) else Problem("", p) for p in problems]
        lines = "\n".join(f"  - {p.message}" for p in self.problems)
        super().__init__(f"invalid egress policy configuration:\n{lines}")


@dataclass(frozen=True)
class Problem:
    """One validation failure: the input it concerns (may be empty) and a message naming the fix."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message

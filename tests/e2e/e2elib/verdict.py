"""A check's verdict: PASS or FAIL, the evidence it prints, and why it failed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .evidence import INDENT


@dataclass
class Verdict:
    number: int
    title: str
    evidence: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def note(self, line: str) -> None:
        self.evidence.append(line)

    def expect(self, condition: bool, failure: str) -> bool:
        if not condition:
            self.failures.append(failure)
        return condition

    def expect_equal(self, label: str, actual: Any, expected: Any) -> bool:
        return self.expect(actual == expected, f"{label}: expected {expected!r}, got {actual!r}")

    def render(self) -> str:
        head = f"[{'PASS' if self.passed else 'FAIL'}] {self.number}. {self.title}"
        lines = [head, *(INDENT + line for line in self.evidence)]
        lines += [f"{INDENT}why: {failure}" for failure in self.failures]
        return "\n".join(lines)

    def failure_message(self) -> str:
        return f"check {self.number} failed: " + "; ".join(self.failures)


@contextmanager
def reporting(
    number: int,
    title: str,
    *,
    record: Callable[[Verdict], None],
    fail: Callable[[str], NoReturn],
    emit: Callable[[str], None] = print,
) -> Iterator[Verdict]:
    """Runs one check: the body fills the verdict; then it is printed and recorded, and ``fail`` is
    called when it did not pass. An exception in the body is a FAIL that names it."""
    verdict = Verdict(number, title)
    try:
        yield verdict
    except Exception as exc:
        verdict.failures.append(f"the check could not run: {type(exc).__name__}: {exc}")
    emit("\n" + verdict.render())
    record(verdict)
    if not verdict.passed:
        fail(verdict.failure_message())

"""Running commands (kubectl, kubectl-ate, pulumi) behind one small interface a test can fake."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_error_line(self) -> str:
        lines = [line for line in (self.stderr or self.stdout).splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"exit status {self.returncode}"


class CommandError(RuntimeError):
    def __init__(self, result: Result, what: str = "") -> None:
        self.result = result
        shown = " ".join(result.argv[:6]) + (" ..." if len(result.argv) > 6 else "")
        super().__init__(f"{what or shown} failed: {result.last_error_line()}")


class Runner(Protocol):
    def __call__(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Result: ...


class SubprocessRunner:
    """Runs a command to completion; a missing binary or a timeout is a failed Result, not an exception."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Result:
        args = tuple(argv)
        try:
            done = subprocess.run(
                args,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                check=False,
            )
        except FileNotFoundError:
            return Result(args, 127, "", f"{args[0]}: command not found")
        except subprocess.TimeoutExpired:
            return Result(args, 124, "", f"{args[0]}: timed out after {timeout:g}s")
        return Result(args, done.returncode, done.stdout, done.stderr)


def check(result: Result, what: str = "") -> Result:
    if not result.ok:
        raise CommandError(result, what)
    return result

"""End-to-end checks against the live dev stack (`make e2e`; never part of the unit run).

`make e2e` fails, naming the reason, when there is no reachable dev stack (a bare `pytest tests/e2e`
skips instead): the kube context
kind-agent-budgets, its API server, the gateway Service agent-router, Substrate's ingress, the
rate-limit Redis, build/bin/kubectl-ate, and a probe agent answering in each demo actor through
atenet-router. Each check prints PASS or FAIL with its evidence; the summary repeats them at the end.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.e2e.e2elib.checks import TITLES
from tests.e2e.e2elib.config import load_settings
from tests.e2e.e2elib.env import LiveEnv, StackUnavailableError, cli_missing_outcome, live_env, unavailable_outcome
from tests.e2e.e2elib.verdict import Verdict, reporting

VERDICTS: list[Verdict] = []


def require_pulumi_cli(check_number: int) -> None:
    """Stop a check that changes the stack when the Pulumi CLI is missing: a failure under `make e2e`."""
    outcome = cli_missing_outcome(check_number, shutil.which, os.environ)
    if outcome is None:
        return
    verdict, message = outcome
    if verdict == "fail":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def env() -> Iterator[LiveEnv]:
    settings = load_settings()
    try:
        with live_env(settings) as live:
            yield live
    except StackUnavailableError as exc:
        outcome, message = unavailable_outcome(str(exc), os.environ)
        if outcome == "fail":  # `make e2e`: a run with no stack must not pass
            pytest.exit(message, returncode=1)
        pytest.skip(message)


@pytest.fixture
def report() -> Callable[..., AbstractContextManager[Verdict]]:
    """`with report(n) as v:` gathers one check; afterwards the verdict is printed and recorded, and the
    test fails when the verdict does (an exception while gathering is a FAIL with its message)."""

    def run(number: int, title: str | None = None) -> AbstractContextManager[Verdict]:
        return reporting(
            number,
            title or TITLES[number],
            record=VERDICTS.append,
            fail=lambda message: pytest.fail(message, pytrace=False),
            emit=lambda text: print(text, flush=True),
        )

    return run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not VERDICTS:
        return
    terminalreporter.section("agent-budgets end-to-end checks")
    for verdict in sorted(VERDICTS, key=lambda v: v.number):
        terminalreporter.write_line(verdict.render())
    passed = sum(v.passed for v in VERDICTS)
    terminalreporter.write_line(f"{passed}/{len(VERDICTS)} checks passed")

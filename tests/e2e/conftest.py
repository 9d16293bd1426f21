"""End-to-end checks against the live dev stack (`make e2e`; never part of the unit run).

`make e2e` fails, naming the reason, when there is no reachable dev stack (a bare `pytest tests/e2e`
skips instead): the kube context, its API server, the gateway Service agent-router with a port for each listener
the stack's identity sources give the Gateway, the rate-limit Redis, and a probe agent answering for each agent
the stack lists (through Substrate's ingress in the Substrate environment,
with build/bin/kubectl-ate; through a port-forward to its pod in the Substrate-free one, `IDENTITY=kubernetes`).
Each check prints PASS or FAIL with its evidence; the summary repeats them at the end, with every check the
stack's identity sources make inapplicable and why (a check marked `identity_source("<source>")` runs only
when the stack accepts that source; the mark, not an edit, decides).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.e2e.e2elib.checks import TITLES, inapplicable_reason
from tests.e2e.e2elib.config import Settings, load_settings
from tests.e2e.e2elib.env import LiveEnv, StackUnavailableError, cli_missing_outcome, live_env, unavailable_outcome
from tests.e2e.e2elib.verdict import Verdict, reporting

VERDICTS: list[Verdict] = []
SKIPPED: dict[int, str] = {}
"""Check number → why the stack's identity sources make it inapplicable."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every check whose identity source the stack does not accept, saying so (the stack decides, not an
    edit). A stack file that cannot be read leaves every check in: the `env` fixture then reports why."""
    marked = [(item, item.get_closest_marker("identity_source")) for item in items]
    if not any(mark for _, mark in marked):
        return
    try:
        settings: Settings = load_settings()
    except Exception:
        return
    for item, mark in marked:
        if mark is None:
            continue
        reason = inapplicable_reason(_check_number(item), str(mark.args[0]), settings)
        if reason is not None:
            SKIPPED[_check_number(item)] = reason
            item.add_marker(pytest.mark.skip(reason=reason))


def _check_number(item: pytest.Item) -> int:
    """The check number of a test module `test_e2e_<NN>_<name>.py`."""
    return int(item.path.name.split("_")[2])


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
    if not VERDICTS and not SKIPPED:
        return
    terminalreporter.section("agent-budgets end-to-end checks")
    for verdict in sorted(VERDICTS, key=lambda v: v.number):
        terminalreporter.write_line(verdict.render())
    for number, reason in sorted(SKIPPED.items()):
        terminalreporter.write_line(f"[SKIP] {number}. {TITLES[number]}\n       why: {reason}")
    passed = sum(v.passed for v in VERDICTS)
    skipped = f", {len(SKIPPED)} skipped: not for this stack's identity sources" if SKIPPED else ""
    terminalreporter.write_line(f"{passed}/{len(VERDICTS)} checks passed{skipped}")

"""End-to-end checks against the live dev stack (`make e2e`; never part of the unit run).

`make e2e` fails, naming the reason, when there is no reachable dev stack (a bare `pytest tests/e2e`
skips instead): the kube context, its API server, the gateway Service agent-router with a port for each listener
the stack's identity sources give the Gateway, the rate-limit Redis, and a probe agent answering for each agent
the stack lists (through Substrate's ingress in the Substrate environment,
with build/bin/kubectl-ate; through a port-forward to its pod in the Substrate-free one, `IDENTITY=kubernetes`).
Each check prints PASS or FAIL with its evidence; the summary repeats them at the end, with every check the
stack's identity sources and agents make inapplicable and why (the marks, not an edit, decide: see
`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.e2e.e2elib.checks import TITLES, agents_for, skip_reason
from tests.e2e.e2elib.config import Settings, load_settings
from tests.e2e.e2elib.env import LiveEnv, StackUnavailableError, cli_missing_outcome, live_env, unavailable_outcome
from tests.e2e.e2elib.verdict import Verdict, reporting

VERDICTS: list[Verdict] = []
SKIPPED: dict[int, str] = {}
"""Check number → why the stack's identity sources make it inapplicable."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every check the stack and its dev environment cannot run, saying why (the marks decide, not an edit):
    `identity_source(<source>)` runs only where the stack accepts that source and the environment runs its agent,
    `listener(<name>)` only where the Gateway has that listener, and `agents(<n>)` only where the environment runs
    n agents of the stack, of any source. A stack file that cannot be read leaves every check in: the `env`
    fixture then reports why."""
    try:
        settings: Settings = load_settings()
    except Exception:
        return
    for item in items:
        number = _check_number(item)
        reason = skip_reason(number, settings, **_needs(item))
        if reason is not None:
            SKIPPED[number] = reason
            item.add_marker(pytest.mark.skip(reason=reason))


def _needs(item: pytest.Item) -> dict[str, Any]:
    """What a check's marks say it needs, as `skip_reason` takes it."""
    needs: dict[str, Any] = {}
    for mark, key in (("identity_source", "source"), ("listener", "listener"), ("agents", "agents")):
        marker = item.get_closest_marker(mark)
        if marker is not None:
            needs[key] = marker.args[0]
    return needs


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


def agents_of(check: Callable[..., object], settings: Settings) -> tuple[str, ...]:
    """The agents check function `check`, marked `agents(<n>)` in its module, calls as: the first n the stack's
    environment runs, of any source (Settings.listed_agents), so one check runs unchanged on Substrate actors,
    service accounts or API keys."""
    marks = getattr(sys.modules[check.__module__], "pytestmark", [])
    wanted = [mark for mark in (marks if isinstance(marks, list) else [marks]) if mark.name == "agents"]
    if not wanted:
        raise pytest.UsageError(f"{check.__module__} uses the agents fixture without an agents(<n>) mark")
    return agents_for(int(wanted[0].args[0]), settings)


@pytest.fixture
def agents(request: pytest.FixtureRequest, env: LiveEnv) -> tuple[str, ...]:
    return agents_of(request.function, env.settings)


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
    skipped = f", {len(SKIPPED)} skipped: not for this stack's identity sources and agents" if SKIPPED else ""
    terminalreporter.write_line(f"{passed}/{len(VERDICTS)} checks passed{skipped}")

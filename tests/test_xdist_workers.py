"""`make test` (`pytest -n auto`) starts one worker per CPU the run may use: its affinity and its cgroup quota, not
the host's cores that pytest-xdist's own `auto` counts through psutil (tests/support/workers.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.workers import auto_workers, cgroup_cpu_limit, usable_cpus

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")


@needs_affinity
def test_auto_counts_the_cpus_this_process_may_run_on(pytestconfig, monkeypatch):
    """Pinned to one CPU (as `taskset -c 0 make test` or a one-CPU cpuset is), `-n auto` asks for one worker."""
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        asked = pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig)
    finally:
        os.sched_setaffinity(0, allowed)
    assert asked == 1
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig) == 3


def test_a_cgroup_quota_caps_the_workers(tmp_path):
    """cgroup v2 `cpu.max` and v1 `cfs_quota_us`/`cfs_period_us`, as the kernel writes them."""
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(v1) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    assert cgroup_cpu_limit(v1) == 1.0
    assert [usable_cpus(64, limit) for limit in (None, 1.0, 1.5, 0.5)] == [64, 1, 2, 1]
    assert auto_workers({}, v1) == 1
    assert auto_workers({"PYTEST_XDIST_AUTO_NUM_WORKERS": "4"}, v1) == 4

"""`make rig-down`: take the rig's node apart and say what was removed, leaving nothing of it on the machine.

In order: every process of the rig (by pid file, by the node's network namespace, by the kubelet's cgroup root:
a pod's processes sit in namespaces of their own but always under that root), every mount under the cluster's
state and run directories (the kubelet's volumes and root, containerd's snapshots, the pods' network namespaces and
shared memory), every cgroup under the kubelet's root in every hierarchy, the drop rule and the network namespace
itself (which takes its interfaces, routes and the kubelet's and kube-proxy's iptables chains with it), and the
cluster's state. What survives is what `Layout.kept` names: the built images, the registry's storage, the run logs.

Safe to run at any time, twice, or after a half-made rig: each part removes what it finds.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rig import isolation, processes
from rig.layout import CGROUP_ROOT, NETNS, Layout

MNT_DETACH = 2


@dataclass
class Removed:
    """What the clean-up found and removed, by kind (the lines `make rig-down` prints and the report keeps)."""

    processes: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    iptables_rules: list[str] = field(default_factory=list)
    network_namespaces: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for kind, items in (
            ("processes stopped", self.processes),
            ("of them killed after the grace period", self.killed),
            ("mounts", self.mounts),
            ("cgroups", self.cgroups),
            ("iptables rules", self.iptables_rules),
            ("network namespaces (with their interfaces, routes and rules)", self.network_namespaces),
            ("directories", self.directories),
        ):
            shown = ", ".join(items[:6]) + (f", ... ({len(items) - 6} more)" if len(items) > 6 else "")
            out.append(f"{kind}: {len(items)}" + (f" ({shown})" if items else ""))
        out.extend(f"problem: {problem}" for problem in self.problems)
        return out


def _unescape(path: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def mount_points(mountinfo: str) -> list[str]:
    """The mount points of /proc/self/mountinfo, in its order."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(_unescape(fields[4]))
    return points


def mounts_under(mountinfo: str, roots: list[Path]) -> list[str]:
    """The mount points at or under any of `roots`, deepest (and latest) first: the order to unmount them in."""
    prefixes = [str(root).rstrip("/") for root in roots]
    chosen = [
        point
        for point in mount_points(mountinfo)
        if any(point == prefix or point.startswith(prefix + "/") for prefix in prefixes)
    ]
    # Reverse mount order first (a later mount may cover an earlier one), then deepest first.
    ordered = list(reversed(chosen))
    return sorted(dict.fromkeys(ordered), key=lambda point: -point.count("/"))


def cgroup_hierarchies(mountinfo: str) -> list[str]:
    """The mount points of every cgroup v1 hierarchy and the cgroup2 tree."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()[:1]
        if len(fields) > 4 and kind and kind[0] in ("cgroup", "cgroup2"):
            found.append(_unescape(fields[4]))
    return found


def rig_cgroup_dirs(hierarchies: list[str], root: str = CGROUP_ROOT) -> list[Path]:
    """Every directory under the kubelet's cgroup root in every hierarchy, deepest first (rmdir order)."""
    directories: list[Path] = []
    for hierarchy in hierarchies:
        top = Path(hierarchy) / root.strip("/")
        if top.is_dir():
            directories.extend(path for path in top.rglob("*") if path.is_dir())
            directories.append(top)
    return sorted(directories, key=lambda path: -len(path.parts))


def cgroup_pids(directories: list[Path]) -> set[int]:
    pids: set[int] = set()
    for directory in directories:
        try:
            text = (directory / "cgroup.procs").read_text(encoding="utf-8")
        except OSError:
            continue
        pids.update(int(line) for line in text.split() if line.isdigit())
    return pids


def _umount(point: str) -> str | None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(point.encode(), MNT_DETACH) != 0:
        error = ctypes.get_errno()
        return f"umount {point}: {os.strerror(error)}"
    return None


def tear_down(layout: Layout) -> Removed:
    """Remove every trace of the rig's node (see the module's docstring); never raises for what is already gone."""
    removed = Removed()
    namespace = layout.netns_path
    namespace_id = processes.network_namespace_id_of_path(namespace)
    mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    hierarchies = cgroup_hierarchies(mountinfo)

    # 1. Processes: the components, everything in the node's namespace, everything in the pods' cgroups.
    targets = set(processes.read_pids(layout.pids).values())
    if namespace_id is not None:
        targets.update(processes.pids_in_namespace(namespace_id))
    targets.update(cgroup_pids(rig_cgroup_dirs(hierarchies)))
    targets.discard(os.getpid())
    live = sorted(pid for pid in targets if processes.alive(pid))
    names = {pid: processes.describe(pid) for pid in live}
    # The kubelet first, so it does not restart what is being stopped; then the rest at once.
    kubelet = [pid for pid in live if names[pid].endswith("(kubelet)")]
    killed = processes.stop(kubelet) + processes.stop([pid for pid in live if pid not in kubelet])
    removed.processes = [names[pid] for pid in live]
    removed.killed = [names[pid] for pid in killed]
    # Processes that started while the others were stopped (a restarting shim): once more.
    late = sorted(cgroup_pids(rig_cgroup_dirs(hierarchies)) - {os.getpid()})
    if late:
        removed.killed += [processes.describe(pid) for pid in processes.stop(late, grace=2)]

    # 2. Mounts under the cluster's state and the run directory (the pods' network namespaces among them).
    for point in mounts_under(mountinfo, [layout.cluster, layout.run_root]):
        # A shared mount's peers go with it: only what is still mounted is unmounted.
        if point not in mount_points(Path("/proc/self/mountinfo").read_text(encoding="utf-8")):
            removed.mounts.append(point)
            continue
        problem = _umount(point)
        if problem is None:
            removed.mounts.append(point)
        else:
            removed.problems.append(problem)

    # 3. cgroups, deepest first.
    for directory in rig_cgroup_dirs(hierarchies):
        try:
            directory.rmdir()
            removed.cgroups.append(str(directory))
        except OSError as error:
            removed.problems.append(f"rmdir {directory}: {error.strerror}")

    # 4. The drop rule, then the namespace with everything in it.
    if namespace.exists():
        rules = subprocess.run(
            ["ip", "netns", "exec", NETNS, "iptables", "-w", "-S", isolation.IPTABLES_CHAIN],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        removed.iptables_rules = [line for line in rules.splitlines() if line.startswith("-A ")]
        for argv in isolation.remove_rules().ipv4:
            subprocess.run(["ip", "netns", "exec", NETNS, "iptables", *argv], capture_output=True, check=False)
        for argv in isolation.remove_rules().ipv6:
            subprocess.run(["ip", "netns", "exec", NETNS, "ip6tables", *argv], capture_output=True, check=False)
        result = subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True, text=True, check=False)
        if result.returncode == 0:
            removed.network_namespaces.append(NETNS)
        else:
            removed.problems.append(f"ip netns delete {NETNS}: {result.stderr.strip()}")

    # 5. The cluster's state and the run directory.
    for directory in (layout.cluster, layout.run_root):
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
            if directory.exists():
                removed.problems.append(f"{directory} could not be removed")
            else:
                removed.directories.append(str(directory))
    return removed


def leftovers(layout: Layout) -> list[str]:
    """What of the rig is still on the machine (empty after a clean `rig-down`): the check the tests and the
    second `make rig` run."""
    found: list[str] = []
    if layout.netns_path.exists():
        found.append(f"network namespace {NETNS}")
    mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    found += [f"mount {point}" for point in mounts_under(mountinfo, [layout.cluster, layout.run_root])]
    found += [f"cgroup {path}" for path in rig_cgroup_dirs(cgroup_hierarchies(mountinfo))]
    found += [
        f"process {processes.describe(pid)}"
        for pid in processes.read_pids(layout.pids).values()
        if processes.alive(pid)
    ]
    for directory in (layout.cluster, layout.run_root):
        if directory.exists():
            found.append(f"directory {directory}")
    return found

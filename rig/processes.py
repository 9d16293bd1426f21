"""The rig's processes: started in the node's network namespace, each with its log in the run directory and a pid
file, waited on until it answers, and found again by `make rig-down` (by pid file, by network namespace, and by
cgroup: a pod's processes sit in their own namespaces but under the kubelet's cgroup root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000


class StepError(Exception):
    """A step of the rig did not reach its goal; the message says what was seen and names the log to read."""


def enter_network_namespace(path: Path) -> None:
    """Move this process into the network namespace at `path` (setns(2)); every process it starts after this is
    there too. Only the network namespace changes: the mounts (and /sys/fs/cgroup) stay the machine's, which
    `ip netns exec` would not leave alone (it remounts /sys)."""
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(descriptor, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({path}): {os.strerror(error)}")
    finally:
        os.close(descriptor)


def network_namespace_id(pid: int | str = "self") -> int | None:
    """The inode of a process's network namespace, or None when it is gone or unreadable."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def network_namespace_id_of_path(path: Path) -> int | None:
    """The inode of the network namespace bound at `path` (`/run/netns/<name>`), or None when there is none."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


@dataclass(frozen=True)
class Started:
    name: str
    pid: int
    log: Path


def start(
    name: str,
    argv: Sequence[str],
    logs: Path,
    pids: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Started:
    """Start a component in its own session (so it outlives `make rig` and a Ctrl-C in the terminal does not reach
    it), its output appended to `<logs>/<name>.log`, its pid in `<pids>/<name>.pid`."""
    logs.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as output:
        output.write(f"$ {' '.join(argv)}\n".encode())
        output.flush()
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(os.environ if env is None else env),
            cwd=cwd,
            start_new_session=True,
        )
    (pids / f"{name}.pid").write_text(f"{process.pid}\n", encoding="utf-8")
    return Started(name, process.pid, log)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until(
    what: str,
    check: Callable[[], str | None],
    timeout: float,
    started: Started | None = None,
    interval: float = 0.5,
) -> str:
    """Call `check` until it answers evidence (a string); fail after `timeout` seconds, or at once when the
    component's process has exited, naming its log."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            evidence = check()
        except Exception as error:
            evidence, last_error = None, f"{type(error).__name__}: {error}"
        if evidence is not None:
            return evidence
        if started is not None and not alive(started.pid):
            raise StepError(f"{what}: {started.name} exited before it was ready; log: {started.log}")
        if time.monotonic() > deadline:
            where = f"; log: {started.log}" if started else ""
            seen = f" (last: {last_error})" if last_error else ""
            raise StepError(f"{what}: not ready after {timeout:.0f} s{seen}{where}")
        time.sleep(interval)


def read_pids(pids: Path) -> dict[str, int]:
    """The pid files of the rig's components."""
    found: dict[str, int] = {}
    for path in sorted(pids.glob("*.pid")) if pids.is_dir() else ():
        try:
            found[path.stem] = int(path.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
    return found


def pids_in_namespace(namespace_id: int) -> list[int]:
    """Every process whose network namespace is the rig's (the control plane, containerd's shims, host-network
    pods), this process excepted."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and network_namespace_id(entry.name) == namespace_id:
            found.append(int(entry.name))
    return sorted(found)


def stop(pids: Iterable[int], grace: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL after `grace` seconds for whatever is left; answers the pids that had to be killed."""
    targets = [pid for pid in pids if alive(pid)]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in targets):
        time.sleep(0.2)
    killed = [pid for pid in targets if alive(pid)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in killed):
        time.sleep(0.1)
    return killed


def describe(pid: int) -> str:
    """`pid (comm)` for the clean-up's report."""
    try:
        return f"{pid} ({Path(f'/proc/{pid}/comm').read_text(encoding='utf-8').strip()})"
    except OSError:
        return str(pid)

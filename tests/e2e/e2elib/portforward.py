"""`kubectl port-forward` to 127.0.0.1 on a free local port, restarted if it dies.

The forward itself is the spend report's (`tools/spend/kube.py` `PortForward`: start, the `Forwarding from`
line, the output drain, stop); the checks add a restart when kubectl has exited (its pod went away).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tools.spend.kube import Kubectl
from tools.spend.kube import PortForward as _Forward
from tools.spend.kube import parse_forwarding_line as parse_forward_port

__all__ = ["PortForward", "parse_forward_port"]


class PortForward(_Forward):
    """A forward with the stack's kube context that `port` restarts when kubectl has exited."""

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
        super().__init__(Kubectl(context, None, kubectl, timeout), namespace, resource, remote_port, timeout, popen)

    def start(self) -> int:
        self.stop()
        return super().start()

    @property
    def port(self) -> int:
        """The local port; restarts the forward when kubectl has exited (its pod went away)."""
        if self.process is None or self.process.poll() is not None or self.local_port is None:
            return self.start()
        return self.local_port

    def __enter__(self) -> PortForward:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

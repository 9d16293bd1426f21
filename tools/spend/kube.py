"""kubectl for the spend report: read the in-cluster Redis password, and a port-forward that always stops.

Only two kubectl calls are used, always with the stack's explicit context (never the ambient one):

* `kubectl get secret <name> -o jsonpath={.data.<key>}`: prints the base64 value with no newline;
* `kubectl port-forward --address 127.0.0.1 service/<name> :<port>`: binds a free local port and prints
  `Forwarding from 127.0.0.1:<local> -> <remote>` (kubernetes client-go `tools/portforward/portforward.go`),
  then one `Handling connection for <local>` line per connection, and runs until it is stopped.

A port-forward connects to the pod from its own network namespace (the kubelet dials the port inside the
pod), so the Redis NetworkPolicy, which admits only envoy-ratelimit pods, does not stand in its way.
"""

from __future__ import annotations

import base64
import binascii
import queue
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any

_FORWARDING = re.compile(r"^Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)\s*$")
# kubectl says one or the other, depending on where client-go notices (`tools/clientcmd`).
_NO_CONTEXT = re.compile(r'context was not found for specified context|error: context "[^"]*" does not exist')
# client-go's loading rules stat an explicit --kubeconfig first (`tools/clientcmd/loader.go`), and kubectl prints
# the error as `error: stat <path>: no such file or directory`.
_NO_KUBECONFIG = re.compile(r"stat [^:]+: no such file or directory")


class KubeError(RuntimeError):
    """kubectl failed; the message says what was asked, what kubectl answered and how to fix it."""


def parse_forwarding_line(line: str) -> int | None:
    """The local port from kubectl's `Forwarding from 127.0.0.1:PORT -> REMOTE` line, else None."""
    match = _FORWARDING.match(line.strip())
    return int(match.group(1)) if match else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _hint(stderr: str, context: str) -> str:
    if _NO_KUBECONFIG.search(stderr):
        return (
            " The kubeconfig file does not exist on this machine: pass --kubeconfig PATH to a kubeconfig holding "
            f"context {context!r}"
        )
    if _NO_CONTEXT.search(stderr):
        return (
            f" The kube context {context!r} (agent-budgets:kubernetes.context) is not in your kubeconfig: "
            "`kubectl config get-contexts` lists them"
        )
    if "NotFound" in stderr or "not found" in stderr:
        return " Is the stack deployed (`pulumi up`) to this cluster?"
    if "Forbidden" in stderr or "forbidden" in stderr:
        return " Your kube user needs `get secrets` and `create pods/portforward` in the Redis namespace"
    if "command not found" in stderr or "No such file" in stderr:
        return " Install kubectl, or pass --kubectl with its path"
    return ""


@dataclass(frozen=True)
class Kubectl:
    """kubectl bound to one context (and kubeconfig file, when the stack names one)."""

    context: str
    kubeconfig: str | None = None
    binary: str = "kubectl"
    timeout: float = 30.0

    def argv(self, *args: str) -> list[str]:
        """The full command line: binary, the stack's kubeconfig and context, then `args`."""
        command = [self.binary]
        if self.kubeconfig:
            command += ["--kubeconfig", self.kubeconfig]
        return [*command, "--context", self.context, *args]

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret, decoded. The value never appears on a command line or in a message."""
        command = self.argv("-n", namespace, "get", "secret", name, "-o", f"jsonpath={{.data.{key}}}")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise KubeError(f"{self.binary}: command not found. Install kubectl, or pass --kubectl") from None
        except subprocess.TimeoutExpired:
            raise KubeError(
                f"kubectl get secret {namespace}/{name} gave no answer in {self.timeout:g}s: is the cluster of "
                f"context {self.context!r} reachable?"
            ) from None
        if done.returncode != 0:
            raise KubeError(
                f"cannot read the Redis password from Secret {namespace}/{name}: "
                f"{_last_line(done.stderr) or f'kubectl exited {done.returncode}'}.{_hint(done.stderr, self.context)}"
            )
        encoded = done.stdout.strip()
        if not encoded:
            raise KubeError(f"Secret {namespace}/{name} has no key {key!r}: is the stack deployed with this version?")
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise KubeError(f"Secret {namespace}/{name} key {key!r} is not base64-encoded text") from None


class PortForward:
    """`kubectl port-forward` to a free port on 127.0.0.1; stopped on exit, on error and on SIGTERM/SIGINT.

    The one implementation for the spend report and the end-to-end checks (tests/e2e/e2elib/portforward.py
    adds restarting); `popen` is there for tests that stand in for kubectl.
    """

    def __init__(
        self,
        kubectl: Kubectl,
        namespace: str,
        resource: str,
        remote_port: int,
        timeout: float = 30.0,
        popen: Callable[..., Any] = subprocess.Popen,
    ) -> None:
        self.command = kubectl.argv(
            "-n", namespace, "port-forward", "--address", "127.0.0.1", resource, f":{remote_port}"
        )
        self.description = f"{namespace}/{resource}:{remote_port}"
        self.context = kubectl.context
        self.timeout = timeout
        self.popen = popen
        self.process: Any = None
        self.recent: deque[str] = deque(maxlen=20)
        self.local_port: int | None = None

    def _drain(self, stream: IO[str], lines: queue.Queue[str]) -> None:
        # kubectl prints a line per connection: keep reading so its pipe never fills and blocks it.
        for line in stream:
            self.recent.append(line.rstrip())
            lines.put(line)
        lines.put("")

    def start(self) -> int:
        """Start kubectl and wait for its `Forwarding from` line; return the local port."""
        try:
            self.process = self.popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
            )
        except FileNotFoundError:
            raise KubeError(f"{self.command[0]}: command not found. Install kubectl, or pass --kubectl") from None
        assert self.process.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.process.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line == "":
                break  # kubectl exited
            port = parse_forwarding_line(line)
            if port is not None:
                self.local_port = port
                return port
        said = " | ".join(self.recent) or "no output"
        self.stop()
        raise KubeError(
            f"kubectl port-forward {self.description} did not start within {self.timeout:g}s: {said}."
            f"{_hint(said, self.context)}"
        )

    def stop(self) -> None:
        """Terminate kubectl (then kill it if it lingers); safe to call twice."""
        process, self.process = self.process, None
        self.local_port = None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextmanager
def port_forward(
    kubectl: Kubectl, namespace: str, resource: str, remote_port: int, timeout: float = 30.0
) -> Iterator[int]:
    """Yield the local port of a running port-forward; kubectl is stopped however the block ends.

    SIGTERM (a CronJob's deadline, `kill`) is turned into an exception for the duration, so the `finally`
    runs and kubectl does not outlive the report.
    """
    forward = PortForward(kubectl, namespace, resource, remote_port, timeout)
    previous = _raise_on_sigterm()
    try:
        yield forward.start()
    finally:
        forward.stop()
        _restore_sigterm(previous)


class TerminatedError(BaseException):
    """SIGTERM arrived while a port-forward was open.

    A BaseException, like KeyboardInterrupt, so that no library's `except Exception` swallows or rewraps it
    on its way to the `finally` that stops kubectl.
    """


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise TerminatedError(f"stopped by signal {signum}")


def _raise_on_sigterm() -> Sequence[object] | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    return (signal.signal(signal.SIGTERM, _on_sigterm),)


def _restore_sigterm(previous: Sequence[object] | None) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous[0])  # type: ignore[arg-type]

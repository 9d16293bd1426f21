"""Probe agent: a tiny HTTP server that runs inside a demo actor and makes model calls on request.

The e2e checks reach it through Substrate's ingress (``atenet-router`` with the header
``ate-target-actor: <atespace>/<actor>``), so every model call it makes starts inside a sandbox and
leaves through the egress gateway, exactly like a real agent's. Standard library only.

Endpoints
    GET  /readyz, /healthz   200 {"status": "ok"}; /readyz 503 while $PROBE_AUTHORIZATION_FILE cannot be read
    POST /call               one model call; the JSON body says how (all fields optional):
        model          model name (default $PROBE_MODEL)
        stream         bool, default false
        include_usage  bool; when given, sets stream_options.include_usage (omitted otherwise)
        messages       chat messages (default: one short user message)
        body           the whole request body, used as is (the fields above are then ignored)
        authorization  the Authorization header; default `Bearer <the file $PROBE_AUTHORIZATION_FILE>` when
                       that is set (a projected service-account token or an API key, read on every call:
                       the kubelet replaces the token before it expires), else $PROBE_AUTHORIZATION
                       ("Bearer placeholder", which the egress gateway replaces with the actor JWT); null
                       sends none
        headers        extra request headers, e.g. {"x-actor-id": "actor/agents/actor-b"}
        url            full http:// URL to call instead of $PROBE_UPSTREAM + path
        path           path (and query) on $PROBE_UPSTREAM, default /v1/chat/completions
        timeout        seconds, default $PROBE_TIMEOUT
      200 {"ok": true, "request", "status", "reason", "headers", "body", "json", "stream", "elapsed_ms"}
          for any HTTP answer from upstream (the upstream status is in "status");
      502 {"ok": false, "request", "error": {"stage", "type", "message"}, "elapsed_ms"} when no
          answer came: stage dns (the name does not resolve), connect, send, receive (reset or
          closed without a response) or timeout;
      400 for a malformed request to the probe itself; 500 when its credential file cannot be read.
    POST /bench              {"count": N, ...the /call fields}: N sequential calls on one kept-alive
                             connection; 200 {"ok", "count", "statuses", "errors", "latencies_ms"}.

Environment: PORT (8080), PROBE_BIND (0.0.0.0), PROBE_UPSTREAM
(http://agent-router.envoy-gateway-system.svc.cluster.local), PROBE_MODEL (mock-small),
PROBE_AUTHORIZATION (Bearer placeholder), PROBE_AUTHORIZATION_FILE (unset), PROBE_TIMEOUT (30).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DEFAULT_UPSTREAM = "http://agent-router.envoy-gateway-system.svc.cluster.local"
DEFAULT_PATH = "/v1/chat/completions"
DEFAULT_AUTHORIZATION = "Bearer placeholder"
DEFAULT_MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "Say hello in five words."}]
MAX_REQUEST_BYTES = 1024 * 1024
MAX_BENCH_COUNT = 10_000
BODY_LIMIT = 256 * 1024  # bytes of upstream body echoed back


class InputError(ValueError):
    """The request to the probe itself is malformed (answered with 400)."""


class CredentialError(RuntimeError):
    """The probe's own credential file cannot be read (answered with 500: the agent, not the request, is broken)."""


@dataclass(frozen=True)
class Settings:
    port: int = 8080
    bind: str = "0.0.0.0"
    upstream: str = DEFAULT_UPSTREAM
    model: str = "mock-small"
    authorization: str = DEFAULT_AUTHORIZATION
    timeout: float = 30.0
    authorization_file: str | None = None
    """A file holding the credential (no `Bearer `): the Substrate-free dev environment's agents call the gateway
    with their projected service-account token or their API key, each mounted as a file."""

    def default_authorization(self) -> str:
        """The Authorization header of a call that does not set one: the file's credential, read now (a projected
        token is rewritten in place when it is refreshed), else `authorization`."""
        if self.authorization_file is None:
            return self.authorization
        try:
            with open(self.authorization_file, encoding="utf-8") as handle:
                credential = handle.read().strip()
        except OSError as exc:
            raise CredentialError(f"cannot read PROBE_AUTHORIZATION_FILE {self.authorization_file}: {exc}") from exc
        if not credential:
            raise CredentialError(f"PROBE_AUTHORIZATION_FILE {self.authorization_file} is empty")
        return f"Bearer {credential}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        port = int(env.get("PORT", "8080"))
        timeout = float(env.get("PROBE_TIMEOUT", "30"))
        if not 0 <= port <= 65535 or timeout <= 0:
            raise ValueError("PORT must be 0-65535 and PROBE_TIMEOUT positive")
        return cls(
            port=port,
            bind=env.get("PROBE_BIND", "0.0.0.0"),
            upstream=env.get("PROBE_UPSTREAM", DEFAULT_UPSTREAM).rstrip("/"),
            model=env.get("PROBE_MODEL", "mock-small"),
            authorization=env.get("PROBE_AUTHORIZATION", DEFAULT_AUTHORIZATION),
            timeout=timeout,
            authorization_file=env.get("PROBE_AUTHORIZATION_FILE") or None,
        )


@dataclass(frozen=True)
class CallSpec:
    """One model call, resolved from a /call request and the settings."""

    host: str
    port: int
    target: str  # path and query
    headers: dict[str, str]
    body: bytes
    timeout: float
    url: str
    sent_body: Any = field(default=None, compare=False)

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "headers": dict(self.headers), "body": self.sent_body}


def _str_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(f"{name} must be an object of string values")
    return dict(value)


def build_body(request: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """The chat-completions body for a /call request (or its explicit ``body``)."""
    if "body" in request:
        body = request["body"]
        if not isinstance(body, dict):
            raise InputError("body must be a JSON object")
        return body
    model = request.get("model", settings.model)
    messages = request.get("messages", DEFAULT_MESSAGES)
    stream = request.get("stream", False)
    if not isinstance(model, str) or not model:
        raise InputError("model must be a non-empty string")
    if not isinstance(messages, list):
        raise InputError("messages must be a list")
    if not isinstance(stream, bool):
        raise InputError("stream must be true or false")
    body: dict[str, Any] = {"model": model, "messages": messages}
    if stream:
        body["stream"] = True
    include_usage = request.get("include_usage")
    if include_usage is not None:
        if not isinstance(include_usage, bool):
            raise InputError("include_usage must be true, false or absent")
        body["stream_options"] = {"include_usage": include_usage}
    return body


def build_call(request: Mapping[str, Any], settings: Settings) -> CallSpec:
    """Resolves a /call request into the exact HTTP request the probe will send."""
    if not isinstance(request, Mapping):
        raise InputError("the request must be a JSON object")
    url = request.get("url")
    if url is None:
        path = request.get("path", DEFAULT_PATH)
        if not isinstance(path, str) or not path.startswith("/"):
            raise InputError("path must start with /")
        url = settings.upstream + path
    if not isinstance(url, str):
        raise InputError("url must be a string")
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise InputError("url must be an http:// URL with a host")
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise InputError(f"bad port in url: {exc}") from exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    authorization = request["authorization"] if "authorization" in request else settings.default_authorization()
    if authorization is not None:
        if not isinstance(authorization, str):
            raise InputError("authorization must be a string or null")
        headers["Authorization"] = authorization
    headers.update(_str_map(request.get("headers"), "headers"))

    body = build_body(request, settings)
    timeout = request.get("timeout", settings.timeout)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise InputError("timeout must be a positive number")
    return CallSpec(
        host=parts.hostname,
        port=port,
        target=target,
        headers=headers,
        body=json.dumps(body).encode(),
        timeout=float(timeout),
        url=url,
        sent_body=body,
    )


def parse_sse(data: bytes) -> dict[str, Any]:
    """What a client sees in an SSE body: event count, [DONE], the last usage, the mock's report."""
    events = 0
    done = False
    usage: Any = None
    mock_received: Any = None
    for raw in data.split(b"\n"):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            continue
        events += 1
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            if chunk.get("usage") is not None:
                usage = chunk["usage"]
            if mock_received is None and "mock_received" in chunk:
                mock_received = chunk["mock_received"]
    return {"events": events, "done": done, "usage": usage, "mock_received": mock_received}


def _error(stage: str, exc: BaseException) -> dict[str, str]:
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc) or type(exc).__name__}


def _lower_headers(pairs: list[tuple[str, str]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def perform_call(spec: CallSpec) -> tuple[int, dict[str, Any]]:
    """Makes the call; returns the probe's own HTTP status (200 or 502) and its JSON answer."""
    started = time.perf_counter()

    def elapsed() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    def failed(stage: str, exc: BaseException) -> tuple[int, dict[str, Any]]:
        return 502, {"ok": False, "request": spec.describe(), "error": _error(stage, exc), "elapsed_ms": elapsed()}

    try:
        socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return failed("dns", exc)
    conn = http.client.HTTPConnection(spec.host, spec.port, timeout=spec.timeout)
    try:
        try:
            conn.connect()
        except TimeoutError as exc:
            return failed("timeout", exc)
        except OSError as exc:
            return failed("connect", exc)
        try:
            conn.request("POST", spec.target, body=spec.body, headers=spec.headers)
        except TimeoutError as exc:
            return failed("timeout", exc)
        except OSError as exc:
            return failed("send", exc)
        try:
            response = conn.getresponse()
            data = response.read()
        except TimeoutError as exc:
            return failed("timeout", exc)
        except (OSError, http.client.HTTPException) as exc:
            return failed("receive", exc)
    finally:
        conn.close()

    headers = _lower_headers(response.getheaders())
    text = data[:BODY_LIMIT].decode("utf-8", errors="replace")
    parsed: Any = None
    stream: Any = None
    if headers.get("content-type", "").startswith("text/event-stream"):
        stream = parse_sse(data)
    else:
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
    return 200, {
        "ok": True,
        "request": spec.describe(),
        "status": response.status,
        "reason": response.reason,
        "headers": headers,
        "body": text,
        "json": parsed,
        "stream": stream,
        "elapsed_ms": elapsed(),
    }


def run_bench(request: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """``count`` sequential calls on one kept-alive connection, timed one by one."""
    count = request.get("count", 100)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_BENCH_COUNT:
        raise InputError(f"count must be an integer from 1 to {MAX_BENCH_COUNT}")
    spec = build_call({k: v for k, v in request.items() if k != "count"}, settings)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors = 0
    conn: http.client.HTTPConnection | None = None
    for _ in range(count):
        if conn is None:
            conn = http.client.HTTPConnection(spec.host, spec.port, timeout=spec.timeout)
        started = time.perf_counter()
        try:
            conn.request("POST", spec.target, body=spec.body, headers=spec.headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = None
            continue
        latencies.append(round((time.perf_counter() - started) * 1000, 3))
        statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
        if response.will_close:
            conn.close()
            conn = None
    if conn is not None:
        conn.close()
    return {"ok": errors == 0, "count": count, "statuses": statuses, "errors": errors, "latencies_ms": latencies}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "probe-agent/1"
    settings = Settings()

    def _reply(self, status: int, payload: Mapping[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_json(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError as exc:
            raise InputError("invalid Content-Length") from exc
        if not 0 <= length <= MAX_REQUEST_BYTES:
            raise InputError("request body too large")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise InputError(f"the request body is not JSON: {exc}") from exc

    def do_GET(self) -> None:
        route = self.path.split("?", 1)[0]
        if route == "/readyz" and self.settings.authorization_file is not None:
            try:  # not ready until its credential can be read (a Secret or a token not mounted yet)
                self.settings.default_authorization()
            except CredentialError as exc:
                self._reply(503, {"status": "unready", "error": str(exc)})
                return
        if route in ("/readyz", "/healthz"):
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"ok": False, "error": {"stage": "input", "message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            request = self._read_json()
            if path == "/call":
                status, payload = perform_call(build_call(request, self.settings))
            elif path == "/bench":
                if not isinstance(request, Mapping):
                    raise InputError("the request must be a JSON object")
                status, payload = 200, run_bench(request, self.settings)
            else:
                self._reply(404, {"ok": False, "error": {"stage": "input", "message": f"no route {path}"}})
                return
        except InputError as exc:
            self._reply(400, {"ok": False, "error": {"stage": "input", "type": "InputError", "message": str(exc)}})
            return
        except CredentialError as exc:
            self._reply(
                500, {"ok": False, "error": {"stage": "credential", "type": "CredentialError", "message": str(exc)}}
            )
            return
        self._reply(status, payload)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"probe-agent {self.address_string()} {format % args}\n")


def make_server(settings: Settings) -> ThreadingHTTPServer:
    handler = type("ConfiguredHandler", (Handler,), {"settings": settings})
    server = ThreadingHTTPServer((settings.bind, settings.port), handler)
    server.daemon_threads = True
    return server


def main() -> None:
    settings = Settings.from_env(os.environ)
    server = make_server(settings)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    host, port = server.server_address[:2]
    sys.stderr.write(f"probe-agent listening on {host}:{port} upstream={settings.upstream}\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

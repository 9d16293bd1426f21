"""Talking to the probe agents through Substrate's ingress, and reading what they report."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.plain import dig

from .httpcall import HttpReply, http_request


@dataclass(frozen=True)
class Call:
    """One model call as the probe agent saw it (or why it saw nothing)."""

    status: int | None = None  # the model endpoint's HTTP status; None when no answer came
    reason: str = ""
    total_tokens: int | None = None
    remaining: str | None = None  # x-ratelimit-remaining: the bucket before this call is charged
    credential: str | None = None  # what the model got in Authorization: provider-key|jwt|other|absent
    upstream_actor_id: str | None = None  # the x-actor-id the model saw
    upstream_x_api_key: str | None = None  # what the model got in x-api-key: provider-key|jwt|other|absent
    # The names (lowercase, never values) of the headers the model received, as the mock lists them in
    # x-mock-header-names (MOCK_ECHO_HEADER_NAMES on its Deployment); None when the answer does not say.
    upstream_header_names: tuple[str, ...] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = ""
    error_stage: str | None = None  # dns|connect|send|receive|timeout|ingress|probe-input
    error_type: str | None = None
    error: str | None = None
    stream_events: int | None = None
    stream_done: bool = False
    stream_usage_total: int | None = None
    sent_stream_options: bool = False
    elapsed_ms: float | None = None

    def summary(self) -> dict[str, Any]:
        """The write-up's per-call evidence: status, total_tokens, remaining."""
        return {"status": self.status, "total_tokens": self.total_tokens, "remaining": self.remaining}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def parse_probe_reply(http_status: int, text: str) -> Call:
    """Turns the probe's /call answer into a Call. Anything that is not the probe's JSON means the
    request never reached the probe (atenet-router answered for it)."""
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, Mapping) or "ok" not in payload:
        return Call(error_stage="ingress", error=f"atenet-router answered {http_status}: {text.strip()[:200]}")
    if not payload.get("ok"):
        error = payload.get("error") or {}
        stage = error.get("stage") or "unknown"
        return Call(
            error_stage="probe-input" if stage == "input" else stage,
            error_type=error.get("type"),
            error=error.get("message"),
            elapsed_ms=payload.get("elapsed_ms"),
        )
    headers = {str(k).lower(): str(v) for k, v in (payload.get("headers") or {}).items()}
    body_json = payload.get("json")
    stream = payload.get("stream") if isinstance(payload.get("stream"), Mapping) else None
    mock = dig(body_json, "mock_received") or (stream or {}).get("mock_received")
    total = _int(dig(body_json, "usage", "total_tokens"))
    stream_total = _int(dig(stream, "usage", "total_tokens")) if stream else None
    sent_body = dig(payload, "request", "body")
    names = headers.get("x-mock-header-names")
    return Call(
        status=_int(payload.get("status")),
        reason=str(payload.get("reason") or ""),
        total_tokens=total if total is not None else stream_total,
        remaining=headers.get("x-ratelimit-remaining"),
        credential=dig(mock, "credential", "authorization") or headers.get("x-mock-authorization"),
        upstream_actor_id=dig(mock, "x_actor_id") or headers.get("x-mock-x-actor-id"),
        upstream_x_api_key=dig(mock, "credential", "x_api_key") or headers.get("x-mock-x-api-key"),
        upstream_header_names=None if names is None else tuple(name for name in names.split(",") if name),
        headers=headers,
        body=str(payload.get("body") or ""),
        stream_events=_int(stream.get("events")) if stream else None,
        stream_done=bool(stream.get("done")) if stream else False,
        stream_usage_total=stream_total,
        sent_stream_options=isinstance(sent_body, Mapping) and "stream_options" in sent_body,
        elapsed_ms=payload.get("elapsed_ms"),
    )


Requester = Callable[..., HttpReply]


class ProbeClient:
    """A probe agent behind a port-forward: atenet-router (target header per actor) or a plain pod."""

    def __init__(
        self,
        port: int | Callable[[], int],
        target_for: Callable[[str], str] | None = None,
        request: Requester = http_request,
    ) -> None:
        self._port = port
        self.target_for = target_for
        self.request = request

    @property
    def port(self) -> int:
        """The local port (a callable source lets a dead port-forward restart on a new port)."""
        return self._port() if callable(self._port) else self._port

    def _headers(self, actor: str | None) -> dict[str, str]:
        if self.target_for is None or actor is None:
            return {}
        return {"ate-target-actor": self.target_for(actor)}

    def call(self, actor: str | None, *, http_timeout: float | None = None, **spec: Any) -> Call:
        """Asks the probe for one model call; spec is the probe's /call body (its ``timeout`` is the
        probe's own upstream timeout, so the request to the probe waits a little longer)."""
        wait = http_timeout if http_timeout is not None else float(spec.get("timeout", 30)) + 30.0
        reply = self.request(self.port, "POST", "/call", headers=self._headers(actor), body=spec, timeout=wait)
        if reply.status is None:
            return Call(error_stage="ingress", error=f"no answer from the port-forward: {reply.error}")
        return parse_probe_reply(reply.status, reply.body)

    def ready(self, actor: str | None) -> tuple[bool, str]:
        reply = self.request(self.port, "GET", "/readyz", headers=self._headers(actor), timeout=30.0)
        if reply.status == 200:
            return True, "ready"
        return False, reply.error or f"HTTP {reply.status}: {reply.body.strip()[:120]}"

    def wait_ready(
        self,
        actor: str | None,
        timeout: float = 60.0,
        interval: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Until the probe answers `/readyz` (a pod without a readiness probe is Ready before its server listens;
        a request then finds the port-forward's connection refused); the attempts it took. RuntimeError after
        `timeout` seconds of refusals."""
        attempts = int(timeout / interval) + 1
        last = ""
        for attempt in range(1, attempts + 1):
            ok, last = self.ready(actor)
            if ok:
                return attempt
            sleep(interval)
        raise RuntimeError(f"the probe did not answer /readyz within {timeout:.0f} s: {last}")

    def bench(self, actor: str | None, count: int, *, http_timeout: float = 600.0, **spec: Any) -> dict[str, Any]:
        reply = self.request(
            self.port,
            "POST",
            "/bench",
            headers=self._headers(actor),
            body={"count": count, **spec},
            timeout=http_timeout,
        )
        data = reply.json() if reply.status == 200 else None
        if not isinstance(data, dict) or "latencies_ms" not in data:
            raise RuntimeError(f"bench request failed: {reply.error or reply.status} {reply.body.strip()[:200]}")
        return data

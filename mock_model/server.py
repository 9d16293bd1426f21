"""OpenAI-compatible mock model for the dev stack: fixed token usage, streamed or not.

Standard library only and self-contained: the file is shipped in a ConfigMap and run with
``python /app/server.py``. It reports every call's usage as ``MOCK_TOTAL_TOKENS`` so a token budget
charges an exact, known amount, and it tells the caller which credential and ``x-actor-id`` it
received (as classifications, never the secret values) and, in a non-streamed answer's
``mock_received.output_limits``, the body's ``max_tokens``, ``max_completion_tokens`` and ``n`` as it read them
(what a route's ceiling let through). With MOCK_ECHO_HEADER_NAMES on, it also lists the names (never the values)
of every request header that reached it in ``x-mock-header-names``, so a check can see that no header carrying an
agent's credential got past the gateway.

Environment: PORT (8080), MOCK_TOTAL_TOKENS (200), MOCK_MODEL_NAME (mock-model),
MOCK_EXPECTED_API_KEY (optional provider key the gateway is expected to inject),
MOCK_ECHO_HEADER_NAMES (``true``/``1`` to send ``x-mock-header-names``; off when unset, empty, ``false`` or ``0``).
"""

from __future__ import annotations

import hmac
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"
HEALTH_PATHS = ("/health", "/healthz")
CONTENT = "Hello from the mock model. This reply has a fixed token count."
MAX_BODY_BYTES = 10 * 1024 * 1024
Extra = Mapping[str, str] | None  # additional response headers
CLOSE = {"Connection": "close"}  # send_header() then closes the connection after the response
_JWS = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
HEADER_NAMES = "x-mock-header-names"
_SWITCH = {"": False, "0": False, "false": False, "1": True, "true": True}


@dataclass(frozen=True)
class Settings:
    port: int = 8080
    total_tokens: int = 200
    model_name: str = "mock-model"
    expected_api_key: str = ""
    echo_header_names: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        port, total = int(env.get("PORT", "8080")), int(env.get("MOCK_TOTAL_TOKENS", "200"))
        if not 0 <= port <= 65535 or total < 0:
            raise ValueError("PORT must be 0-65535 and MOCK_TOTAL_TOKENS must be >= 0")
        model = env.get("MOCK_MODEL_NAME") or "mock-model"
        echo = _SWITCH.get(env.get("MOCK_ECHO_HEADER_NAMES", "").strip().lower())
        if echo is None:
            raise ValueError("MOCK_ECHO_HEADER_NAMES must be true, false, 1, 0 or empty")
        return cls(port, total, model, env.get("MOCK_EXPECTED_API_KEY", ""), echo)

    def usage(self) -> dict[str, int]:
        prompt = self.total_tokens // 4
        completion = self.total_tokens - prompt
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": self.total_tokens}


def classify(value: str | None, expected: str, *, bearer: bool) -> str:
    """provider-key, jwt, other or absent; compares in constant time and never returns the value."""
    if value is None:
        return "absent"
    wanted = f"Bearer {expected}" if bearer else expected
    if expected and hmac.compare_digest(value.strip().encode(), wanted.encode()):
        return "provider-key"
    token = value.strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    return "jwt" if _JWS.match(token) else "other"


def received(headers: Mapping[str, str], settings: Settings) -> dict[str, Any]:
    auth, api_key = headers.get("authorization"), headers.get("x-api-key")
    present = {(True, True): "both", (True, False): "authorization", (False, True): "x-api-key"}
    return {
        "credential": {
            "header": present.get((auth is not None, api_key is not None), "none"),
            "authorization": classify(auth, settings.expected_api_key, bearer=True),
            "x_api_key": classify(api_key, settings.expected_api_key, bearer=False),
        },
        "x_actor_id": headers.get("x-actor-id"),
    }


def header_names(names: Iterable[str]) -> str:
    """The request's header names, lowercased, each once, sorted and comma-separated: names only, never values."""
    return ",".join(sorted({name.strip().lower() for name in names if name.strip()}))


def error_body(message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def stream_events(request: dict[str, Any], model: str, settings: Settings, seen: dict[str, Any]) -> bytes:
    """Whole SSE body: role chunk, content deltas, stop chunk, optional usage chunk, [DONE]."""
    base = {
        "id": f"chatcmpl-mock-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    chunks: list[dict[str, Any]] = [
        {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            "mock_received": seen,
        }
    ]
    for i, word in enumerate(CONTENT.split(" ")):
        delta = {"content": word if i == 0 else " " + word}
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        chunks.append({**base, "choices": [], "usage": settings.usage()})
    lines = [f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n" for chunk in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "n")
"""The body fields that bound a call's output, as the route's ceiling sets or removes them (core/ceilings.py)."""


def output_limits(request: Mapping[str, Any]) -> dict[str, Any]:
    """The output-bounding fields the request carried (as this parser reads them: the last copy of a key), so a check
    can see what the gateway's ceiling let through."""
    return {name: request[name] for name in OUTPUT_LIMIT_FIELDS if name in request}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mock-model/1"
    settings = Settings()
    seen: dict[str, Any] = received({}, settings)  # replaced per request; read by log_request
    names = ""  # the request's header names, replaced per request
    stream = False

    def _send(self, status: int, body: bytes, content_type: str, extra: Extra = None) -> None:
        self.send_response(status)
        cred = self.seen["credential"]
        headers = {
            "Content-Type": content_type,
            "Content-Length": str(len(body)),
            "x-mock-credential": cred["header"],
            "x-mock-authorization": cred["authorization"],
            "x-mock-x-api-key": cred["x_api_key"],
            **(extra or {}),
        }
        if self.seen["x_actor_id"] is not None:
            headers["x-mock-x-actor-id"] = self.seen["x_actor_id"]
        if self.settings.echo_header_names:
            headers[HEADER_NAMES] = self.names
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Mapping[str, Any], extra: Extra = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", extra)

    def _error(self, status: int, message: str, code: str, extra: Extra = None) -> None:
        self._json(status, {**error_body(message, code), "mock_received": self.seen}, extra)

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering an error (and closing the connection)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self._error(411, "chunked bodies are unsupported; send Content-Length", "length_required", CLOSE)
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._error(400, "invalid Content-Length", "invalid_content_length", CLOSE)
            return None
        return self.rfile.read(length)

    def _dispatch(self) -> None:
        self.seen = received({k.lower(): v for k, v in self.headers.items()}, self.settings)
        self.names = header_names(self.headers.keys())
        self.stream = False
        body = self._read_body()
        if body is None:
            return
        path = self.path.split("?", 1)[0]
        allowed = "GET" if path in HEALTH_PATHS else "POST" if path == CHAT_PATH else None
        if allowed is None:
            self._error(404, f"Invalid URL ({self.command} {path})", "unknown_url")
        elif self.command != allowed:
            self._error(405, f"Method {self.command} not allowed on {path}", "method_not_allowed", {"Allow": allowed})
        elif allowed == "GET":
            self._json(200, {"status": "ok"})
        else:
            self._chat(body)

    def _chat(self, body: bytes) -> None:
        try:
            request = json.loads(body)
        except (ValueError, RecursionError) as exc:
            self._error(400, f"We could not parse the JSON body of your request: {exc}", "invalid_json")
            return
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            self._error(400, "The request body must be a JSON object with a 'messages' list.", "invalid_body")
            return
        model = request.get("model")
        model = model if isinstance(model, str) and model else self.settings.model_name
        if request.get("stream") is True:
            self.stream = True
            events = stream_events(request, model, self.settings, self.seen)
            self._send(200, events, "text/event-stream", {"Cache-Control": "no-cache"})
            return
        self._json(
            200,
            {
                "id": f"chatcmpl-mock-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": CONTENT}, "finish_reason": "stop"}
                ],
                "usage": self.settings.usage(),
                "mock_received": {**self.seen, "output_limits": output_limits(request)},
            },
        )

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch  # noqa: N815

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        cred, path = self.seen["credential"], getattr(self, "path", "-").split("?", 1)[0]
        sys.stderr.write(
            f"{self.log_date_time_string()} {self.command or '-'} {path} {code}"
            f" stream={str(self.stream).lower()} credential={cred['header']}"
            f" authorization={cred['authorization']} x-api-key={cred['x_api_key']}"
            f" x-actor-id={self.seen['x_actor_id'] or '-'}\n"
        )


def make_server(host: str, port: int, settings: Settings) -> ThreadingHTTPServer:
    handler = type("ConfiguredHandler", (Handler,), {"settings": settings})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main() -> None:
    settings = Settings.from_env(os.environ)
    server = make_server("0.0.0.0", settings.port, settings)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    usage = settings.usage()
    sys.stderr.write(
        f"mock-model listening on {server.server_address[0]}:{server.server_address[1]}"
        f" total_tokens={usage['total_tokens']} prompt_tokens={usage['prompt_tokens']}"
        f" completion_tokens={usage['completion_tokens']}"
        f" provider_key={'set' if settings.expected_api_key else 'unset'}"
        f" header_names={'on' if settings.echo_header_names else 'off'}\n"
    )
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.stderr.write("mock-model stopped\n")


if __name__ == "__main__":
    main()

"""Unit tests for the dev stack's mock model (mock_model/server.py), over real HTTP."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

SERVER_FILE = Path(__file__).resolve().parents[1] / "mock_model" / "server.py"
_spec = importlib.util.spec_from_file_location("mock_model_server", SERVER_FILE)
mms = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("mock_model_server", mms)  # dataclasses look the module up while loading
_spec.loader.exec_module(mms)

PROVIDER_KEY = "sk-test-provider-key-123"
TOTAL = 200
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhY3Rvci9hZ2VudHMvYWN0b3ItYSJ9.c2lnbmF0dXJlLWJ5dGVz"
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def port():
    settings = mms.Settings(total_tokens=TOTAL, expected_api_key=PROVIDER_KEY)
    server = mms.make_server("127.0.0.1", 0, settings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def call(port, method, path, body=None, headers=None, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload


def gateway_usage(stream: bytes):
    """What Agent Router charges: last non-null usage over complete `data:` lines (ending in \\n)."""
    usage = None
    for line in stream.split(b"\n")[:-1]:  # the last piece is incomplete (no trailing \n)
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            continue
        chunk = json.loads(data)
        assert chunk["object"] == "chat.completion.chunk"
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
    return usage


def events(stream: bytes):
    assert stream.endswith(b"\n\n")
    blocks = stream.decode().split("\n\n")[:-1]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks)
    return [b[len("data: ") :] for b in blocks]


def test_non_streamed_usage_and_shape(port):
    status, headers, body = call(port, "POST", "/v1/chat/completions", CHAT)
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["object"] == "chat.completion" and doc["model"] == "gpt-test"
    choice = doc["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    usage = doc["usage"]
    assert usage["total_tokens"] == TOTAL
    assert usage["prompt_tokens"] + usage["completion_tokens"] == TOTAL
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def test_the_output_limits_it_read_are_reported_with_the_last_copy_of_a_repeated_key(port):
    """What a check of the route's ceiling reads: the fields as the mock's parser (Python's json, the last copy of a
    key) saw them, and none that the body lacked."""
    raw = b'{"messages": [], "max_completion_tokens": 256, "n": 1, "max_completion_tokens": 100000}'
    status, _, body = call(port, "POST", "/v1/chat/completions", raw=raw)
    assert status == 200
    assert json.loads(body)["mock_received"]["output_limits"] == {"max_completion_tokens": 100000, "n": 1}
    _, _, plain = call(port, "POST", "/v1/chat/completions", {"messages": [], "max_tokens": 7})
    assert json.loads(plain)["mock_received"]["output_limits"] == {"max_tokens": 7}
    _, _, none = call(port, "POST", "/v1/chat/completions", CHAT)
    assert json.loads(none)["mock_received"]["output_limits"] == {}


def test_model_defaults_when_request_has_none(port):
    status, _, body = call(port, "POST", "/v1/chat/completions", {"messages": []})
    assert status == 200 and json.loads(body)["model"] == "mock-model"


@pytest.mark.parametrize("options", [{}, {"stream_options": {"include_usage": False}}])
def test_stream_without_include_usage_has_no_usage(port, options):
    req = {**CHAT, "stream": True, **options}
    status, headers, body = call(port, "POST", "/v1/chat/completions", req)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert all(line.endswith("\n") for line in body.decode().splitlines(keepends=True))
    evs = events(body)
    assert evs[-1] == "[DONE]"
    chunks = [json.loads(e) for e in evs[:-1]]
    assert len(chunks) >= 3 and all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == mms.CONTENT
    assert gateway_usage(body) is None  # the gateway would charge 0


def test_stream_with_include_usage(port):
    req = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    status, _, body = call(port, "POST", "/v1/chat/completions", req)
    assert status == 200
    evs = events(body)
    assert evs[-1] == "[DONE]"
    chunks = [json.loads(e) for e in evs[:-1]]
    with_usage = [c for c in chunks if "usage" in c]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    assert with_usage[0]["choices"] == []
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    usage = with_usage[0]["usage"]
    assert usage["total_tokens"] == TOTAL and usage["prompt_tokens"] + usage["completion_tokens"] == TOTAL
    assert gateway_usage(body)["total_tokens"] == TOTAL  # the charge would be the configured total


@pytest.mark.parametrize(
    ("raw", "needle"),
    [(b"{not json", "parse"), (b"[1, 2]", "messages"), (b'{"messages": "hi"}', "messages"), (b"", "parse")],
)
def test_bad_body_is_400(port, raw, needle):
    status, _, body = call(port, "POST", "/v1/chat/completions", raw=raw)
    assert status == 400
    err = json.loads(body)["error"]
    assert err["type"] == "invalid_request_error" and needle in err["message"]


def test_unknown_path_404_wrong_method_405_health_200(port):
    status, _, body = call(port, "POST", "/v1/embeddings", CHAT)
    assert status == 404 and "/v1/embeddings" in json.loads(body)["error"]["message"]
    status, headers, body = call(port, "GET", "/v1/chat/completions")
    assert status == 405 and headers["allow"] == "POST" and json.loads(body)["error"]["code"]
    assert call(port, "POST", "/health", CHAT)[0] == 405
    for path in ("/health", "/healthz"):
        status, _, body = call(port, "GET", path)
        assert status == 200 and json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize(
    ("headers", "which", "auth", "api_key"),
    [
        ({"Authorization": f"Bearer {PROVIDER_KEY}"}, "authorization", "provider-key", "absent"),
        ({"x-api-key": PROVIDER_KEY}, "x-api-key", "absent", "provider-key"),
        ({"Authorization": f"Bearer {JWT}"}, "authorization", "jwt", "absent"),
        ({"Authorization": JWT}, "authorization", "jwt", "absent"),
        ({"Authorization": "Bearer placeholder"}, "authorization", "other", "absent"),
        ({"Authorization": f"Bearer {JWT}", "x-api-key": PROVIDER_KEY}, "both", "jwt", "provider-key"),
        ({"Authorization": PROVIDER_KEY, "x-api-key": f"Bearer {PROVIDER_KEY}"}, "both", "other", "other"),
        ({}, "none", "absent", "absent"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_credential_classification(port, headers, which, auth, api_key, stream):
    req = {**CHAT, "stream": stream}
    status, resp_headers, body = call(port, "POST", "/v1/chat/completions", req, headers)
    assert status == 200
    expected = {"header": which, "authorization": auth, "x_api_key": api_key}
    assert resp_headers["x-mock-credential"] == which
    assert resp_headers["x-mock-authorization"] == auth and resp_headers["x-mock-x-api-key"] == api_key
    first = json.loads(events(body)[0]) if stream else json.loads(body)
    received = {"credential": expected, "x_actor_id": None}
    assert first["mock_received"] == (received if stream else {**received, "output_limits": {}})
    assert "x-mock-x-actor-id" not in resp_headers
    assert PROVIDER_KEY not in body.decode() and PROVIDER_KEY not in json.dumps(resp_headers)
    assert JWT not in body.decode()


def test_actor_id_echoed_in_body_and_headers(port):
    actor = "actor/agents/actor-a"
    status, headers, body = call(port, "POST", "/v1/chat/completions", CHAT, {"x-actor-id": actor})
    assert status == 200 and headers["x-mock-x-actor-id"] == actor
    assert json.loads(body)["mock_received"]["x_actor_id"] == actor
    status, headers, body = call(port, "POST", "/v1/nope", CHAT, {"x-actor-id": actor})
    assert status == 404 and headers["x-mock-x-actor-id"] == actor
    assert json.loads(body)["mock_received"]["x_actor_id"] == actor


def test_keep_alive_connection_serves_several_requests(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for path, body in (("/v1/nope", b'{"x": 1}'), ("/v1/chat/completions", json.dumps(CHAT).encode())):
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        resp.read()
    assert resp.status == 200
    conn.close()


@pytest.mark.parametrize(
    ("framing", "status"),
    [
        ("Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411),
        ("Content-Length: abc\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ],
)
def test_unsupported_body_framing_answers_once_and_closes(port, framing, status):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{framing}".encode())
        data = b""
        while chunk := sock.recv(65536):  # EOF: the server closed the connection
            data += chunk
    assert data.startswith(f"HTTP/1.1 {status} ".encode()) and data.count(b"HTTP/1.1 ") == 1
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "invalid_request_error"


def test_settings_from_env():
    s = mms.Settings.from_env({"PORT": "9000", "MOCK_TOTAL_TOKENS": "7", "MOCK_MODEL_NAME": "m"})
    assert (s.port, s.total_tokens, s.model_name, s.expected_api_key) == (9000, 7, "m", "")
    assert s.usage() == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}
    assert mms.Settings.from_env({}) == mms.Settings(8080, 200, "mock-model", "")
    with pytest.raises(ValueError):
        mms.Settings.from_env({"MOCK_TOTAL_TOKENS": "-1"})


def test_header_names_are_reported_only_when_asked_and_never_with_values(port):
    """The response lists every request header name once, lowercased and sorted (a key header that got past the
    gateway shows up by name); the values, keys included, never appear. The module's server has the echo off."""
    sent = {"Authorization": f"Bearer {PROVIDER_KEY}", "X-Api-Key": "agent-key-123", "X-Team-Key": "team-key-456"}
    _, quiet, _ = call(port, "POST", "/v1/chat/completions", CHAT, sent)
    assert "x-mock-header-names" not in quiet
    echo = mms.make_server("127.0.0.1", 0, mms.Settings(expected_api_key=PROVIDER_KEY, echo_header_names=True))
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    try:
        cases = [  # http.client adds accept-encoding and host, and content-length only with a body
            ("POST", "/v1/chat/completions", CHAT, "accept-encoding,authorization,content-length,content-type,"),
            ("GET", "/nowhere", None, "accept-encoding,authorization,content-type,"),
        ]
        for method, path, body, first in cases:
            _, headers, payload = call(echo.server_address[1], method, path, body, {**sent, "x-api-KEY": "again"})
            names = headers["x-mock-header-names"]
            assert names == first + "host,x-api-key,x-team-key"
            assert not any(value in names or value in payload.decode() for value in ("agent-key-123", "team-key-456"))
    finally:
        echo.shutdown()
        echo.server_close()
    assert mms.header_names(["B", "a", "A ", ""]) == "a,b"


@pytest.mark.parametrize(("value", "echo"), [("", False), ("0", False), ("False", False), ("1", True), ("true", True)])
def test_the_header_name_echo_is_switched_by_the_environment(value, echo):
    assert mms.Settings.from_env({"MOCK_ECHO_HEADER_NAMES": value}).echo_header_names is echo
    with pytest.raises(ValueError, match="MOCK_ECHO_HEADER_NAMES must be true, false, 1, 0 or empty"):
        mms.Settings.from_env({"MOCK_ECHO_HEADER_NAMES": "yes please"})


def test_main_in_subprocess_uses_env_and_stops_on_sigterm():
    env = {
        **os.environ,
        "PORT": "0",
        "MOCK_TOTAL_TOKENS": "321",
        "MOCK_MODEL_NAME": "sub-model",
        "MOCK_EXPECTED_API_KEY": PROVIDER_KEY,
    }
    proc = subprocess.Popen([sys.executable, str(SERVER_FILE)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stderr.readline()
        match = re.search(r"listening on [\d.]+:(\d+) total_tokens=321 ", banner)
        assert match, banner
        port = int(match.group(1))
        status, headers, body = call(
            port,
            "POST",
            "/v1/chat/completions",
            {"messages": []},
            {"Authorization": f"Bearer {PROVIDER_KEY}", "x-actor-id": "a1"},
        )
        doc = json.loads(body)
        assert status == 200 and doc["model"] == "sub-model" and doc["usage"]["total_tokens"] == 321
        assert headers["x-mock-authorization"] == "provider-key"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        log = proc.stderr.read()
        assert "POST /v1/chat/completions 200" in log and "authorization=provider-key" in log
        assert "x-actor-id=a1" in log and "mock-model stopped" in log
        assert PROVIDER_KEY not in banner + log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

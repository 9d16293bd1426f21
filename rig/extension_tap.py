"""A pass-through gRPC server between Envoy Gateway and Agent Router's extension server, run by
`rig/extension_message.py` inside the node's network namespace, that records every call's exact message sizes.

Envoy Gateway's extension client speaks plaintext gRPC when its `extensionManager.service` has no `tls` (v1.9.0
internal/extension/grpc.go `GenerateGRPCOptions`) and makes only unary calls (proto/extension/service.proto), so
a generic handler that forwards the request's bytes unchanged and returns the upstream's bytes unchanged is
transparent: the sizes it records are the wire messages', without the 5-byte gRPC frame prefix. The status code
and details of a failed upstream call are passed back as they came (the client's retry policy sees them).

Each call is one JSON line in `--record`; each PostTranslateModify's request and response are also written whole
(`<n>.request.bin`, `<n>.response.bin` beside it) for the check to decode.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from rig.processes import enter_network_namespace

UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
"""Neither side of the tap may refuse what the real ends accept: their caps are the subject of the measurement."""
KEPT_WHOLE = "PostTranslateModify"
NO_DEADLINE = 86_400.0
"""A remaining time past a day is no deadline at all."""


class Recorder:
    """Appends one JSON line per call, and keeps PostTranslateModify's messages whole."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.lock = threading.Lock()
        self.count = 0

    def add(self, method: str, request: bytes, response: bytes | None, code: str, details: str, began: float) -> None:
        with self.lock:
            self.count += 1
            entry: dict[str, Any] = {
                "n": self.count,
                "at": time.time(),
                "method": method,
                "request_bytes": len(request),
                "response_bytes": None if response is None else len(response),
                "code": code,
                "details": details,
                "seconds": round(time.monotonic() - began, 4),
            }
            if method.endswith(f"/{KEPT_WHOLE}"):
                stem = self.record.parent / str(self.count)
                stem.with_suffix(".request.bin").write_bytes(request)
                if response is not None:
                    stem.with_suffix(".response.bin").write_bytes(response)
                entry["kept"] = stem.name
            with self.record.open("a") as out:
                out.write(json.dumps(entry) + "\n")


class Forward(grpc.GenericRpcHandler):
    """Every method, unary-unary, bytes in and bytes out (no serializers), to the same method upstream."""

    def __init__(self, channel: grpc.Channel, recorder: Recorder) -> None:
        self.channel = channel
        self.recorder = recorder

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        upstream = self.channel.unary_unary(method)

        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            began = time.monotonic()
            try:
                response = upstream(request, timeout=_timeout(context))
            except grpc.RpcError as error:
                code, details = error.code(), error.details() or ""
                self.recorder.add(method, request, None, code.name, details, began)
                context.abort(code, details)
            self.recorder.add(method, request, response, "OK", "", began)
            return response

        return grpc.unary_unary_rpc_method_handler(call)


def _timeout(context: grpc.ServicerContext) -> float | None:
    """The caller's deadline for the upstream call: grpcio reports a call without one as a remaining time of years
    (an infinite deadline), which a channel cannot take as a timeout."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > NO_DEADLINE else remaining


def start_tap(listen: str, upstream: str, record: Path) -> tuple[grpc.Server, int]:
    """The tap started, and the port it listens on (`listen` may ask for port 0)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    channel = grpc.insecure_channel(upstream, options=UNLIMITED)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=UNLIMITED)
    server.add_generic_rpc_handlers([Forward(channel, Recorder(record))])
    port = server.add_insecure_port(listen)
    if port == 0:
        raise SystemExit(f"extension tap: cannot listen on {listen}")
    server.start()
    return server, port


def serve(listen: str, upstream: str, record: Path, netns: Path | None = None) -> None:
    """Until SIGTERM; in `netns` first when given (its threads start after the move, so they are there too)."""
    if netns is not None:
        enter_network_namespace(netns)
    server, _ = start_tap(listen, upstream, record)
    print(f"listening on {listen}, forwarding to {upstream}", flush=True)
    server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--netns", type=Path, help="a network namespace to enter first (a /run/netns path)")
    parser.add_argument("--listen", required=True, help="address:port to listen on (the node's address)")
    parser.add_argument("--upstream", required=True, help="Agent Router's extension server, pod-address:port")
    parser.add_argument("--record", type=Path, required=True, help="the JSON-lines file to append calls to")
    arguments = parser.parse_args()
    serve(arguments.listen, arguments.upstream, arguments.record, arguments.netns)


if __name__ == "__main__":
    main()

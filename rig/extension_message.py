"""Envoy Gateway's message to Agent Router's extension server, measured on the rig against `core/xds_size.py`.

The program refuses a configuration whose PostTranslateModify message would not fit under
`platform.extensionMessageLimit` (docs/message-size.md): `core/xds_size.py` computes the rate-limit and security
terms byte for byte and adds fixed allowances for everything else. Nothing in Envoy Gateway or Agent Router logs or
exports the message's size, so this check puts a pass-through gRPC server (`rig/extension_tap.py`) between them
for one translation:

1. the tap listens on the node's address; a DNAT rule in the node's `nat` PREROUTING chain, placed before
   kube-proxy's, sends pods' connections to Agent Router's extension Service to it, and it forwards to the
   controller pod itself (the tap's own connection leaves through OUTPUT, which the rule does not touch);
2. Envoy Gateway is restarted, so it connects anew (through the tap) and translates everything once;
3. the rule is removed and the tap stopped: Envoy Gateway's connection breaks and its client reconnects straight
   to the Service (its retry policy retries UNAVAILABLE, v1.9.0 internal/extension/grpc.go `buildServiceConfig`).

The last PostTranslateModify's request and Agent Router's response are decoded with the real protos (the message
types of envoyproxy/gateway v1.9.0 proto/extension/service.proto, whose fields are Envoy's own messages) and judged
against the model: the counts of listeners and routes, each route's rate-limit and security entries byte for byte,
each route's remaining bytes within `ROUTE_ALLOWANCE`, everything outside the routes within the base and provider
allowances, and both whole messages within the estimate (Envoy Gateway caps the request it sends and the response
it receives alike: `grpc.MaxCallSendMsgSize` and `grpc.MaxCallRecvMsgSize`, internal/extension/grpc.go).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envoy.config.route.v3 import route_components_pb2, route_pb2
from google.protobuf.internal import decoder

from core.platform_values import AGENT_ROUTER_CONTROLLER, AGENT_ROUTER_NAMESPACE, EXTENSION_SERVER_PORT
from core.validation import settings_message_estimate
from core.xds_size import (
    API_KEY_AUTH_FILTER,
    BASE_ALLOWANCE,
    PROVIDER_ALLOWANCE,
    RATE_LIMIT_FILTER,
    RBAC_FILTER,
    ROUTE_ALLOWANCE,
    MessageEstimate,
    format_bytes,
    rate_limit_domains,
)
from rig.engine import Engine
from rig.live_stack import budget_policy
from rig.node import Node
from rig.processes import StepError, stop, wait_until
from rig.program import GATEWAY_NAMESPACE

ENVOY_GATEWAY_PODS = "control-plane=envoy-gateway"
TAP_PORT = 18063
TAP_COMMENT = "agent-budgets rig: extension message tap"
METHOD = "/envoygateway.extension.EnvoyGatewayExtension/PostTranslateModify"
QUIET_SECONDS = 5.0
"""After the restart, how long no new PostTranslateModify must arrive before the last one is the one judged
(Envoy Gateway translates again as its watches fill)."""

REQUEST_FIELDS = {1: "context", 2: "clusters", 3: "secrets", 4: "listeners", 5: "routes"}
RESPONSE_FIELDS = {1: "clusters", 2: "secrets", 3: "listeners", 4: "routes"}
"""PostTranslateModifyRequest and PostTranslateModifyResponse field numbers (v1.9.0 proto/extension/service.proto)."""
SECURITY_FILTERS = (RBAC_FILTER, API_KEY_AUTH_FILTER)


# --- decoding -----------------------------------------------------------------------------------------------------


def top_level_fields(data: bytes) -> list[tuple[int, bytes, int]]:
    """(field number, payload, bytes on the wire including tag and length) of every field of a message whose
    fields are all length-delimited (messages and repeated messages), in order."""
    fields: list[tuple[int, bytes, int]] = []
    position = 0
    while position < len(data):
        start = position
        tag, position = decoder._DecodeVarint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type != 2:
            raise StepError(f"field {number} at byte {start} has wire type {wire_type}, not a message")
        length, position = decoder._DecodeVarint(data, position)
        fields.append((number, data[position : position + length], position + length - start))
        position += length
    if position != len(data):
        raise StepError(f"the message ends inside a field ({position} of {len(data)} bytes)")
    return fields


def entry_bytes(route: route_components_pb2.Route, key: str) -> int:
    """The bytes of one `typed_per_filter_config` entry of a route (the map entry with its tag and length), 0 when
    the route has none: how `core/xds_size.py` counts every per-route term."""
    if key not in route.typed_per_filter_config:
        return 0
    return route_components_pb2.Route(typed_per_filter_config={key: route.typed_per_filter_config[key]}).ByteSize()


@dataclass(frozen=True)
class RouteBytes:
    config: str
    name: str
    model_route: bool
    """A route with a route action (one per model name); the others are Agent Router's direct-response catch-alls."""
    total: int
    rate_limit: int
    security: int
    api_key_listener: bool

    @property
    def rest(self) -> int:
        """What `ROUTE_ALLOWANCE` must cover: the route without its rate-limit and security entries."""
        return self.total - self.rate_limit - self.security


@dataclass
class MessageParts:
    total: int
    parts: dict[str, int] = field(default_factory=dict)
    """Field name -> its bytes on the wire (tags and lengths included), so the parts add up to the total."""
    counts: dict[str, int] = field(default_factory=dict)
    routes: list[RouteBytes] = field(default_factory=list)
    route_configs: list[str] = field(default_factory=list)


def message_parts(data: bytes, names: Mapping[int, str], rate_limit_key: str) -> MessageParts:
    """Split a PostTranslateModify request or response into its fields, and each Envoy route into the terms of
    `core/xds_size.py` (`rate_limit_key`: the budget policy's `typed_per_filter_config` key)."""
    parts = MessageParts(total=len(data))
    for number, payload, wire in top_level_fields(data):
        name = names.get(number)
        if name is None:
            raise StepError(f"field {number} is not one of {sorted(names)}: not a PostTranslateModify message")
        parts.parts[name] = parts.parts.get(name, 0) + wire
        parts.counts[name] = parts.counts.get(name, 0) + 1
        if name != "routes":
            continue
        config = route_pb2.RouteConfiguration.FromString(payload)
        parts.route_configs.append(config.name)
        for host in config.virtual_hosts:
            for route in host.routes:
                security = sum(entry_bytes(route, key) for key in SECURITY_FILTERS)
                parts.routes.append(
                    RouteBytes(
                        config=config.name,
                        name=route.name,
                        model_route=route.WhichOneof("action") == "route",
                        total=route.ByteSize(),
                        rate_limit=entry_bytes(route, rate_limit_key),
                        security=security,
                        api_key_listener=API_KEY_AUTH_FILTER in route.typed_per_filter_config,
                    )
                )
    return parts


# --- judging ------------------------------------------------------------------------------------------------------


def judge_message(parts: MessageParts, estimate: MessageEstimate) -> tuple[dict[str, Any], list[str]]:
    """The evidence for one message against the model, and every way it disagrees (empty when it agrees)."""
    problems: list[str] = []
    layout = estimate.layout
    configs = sorted({route.config for route in parts.routes})
    if len(configs) != estimate.listeners:
        problems.append(f"routes on {len(configs)} listener(s) {configs}; the model has {estimate.listeners}")
    for config in configs:
        routes = [route for route in parts.routes if route.config == config]
        model_routes = sum(route.model_route for route in routes)
        catch_alls = len(routes) - model_routes
        if (model_routes, catch_alls) != (layout.model_routes, layout.catch_all_routes):
            problems.append(
                f"{config}: {model_routes} model route(s) and {catch_alls} catch-all(s); the model has "
                f"{layout.model_routes} and {layout.catch_all_routes}"
            )
    for route in parts.routes:
        where = f"{route.config} {route.name}"
        rate_limit = estimate.rate_limit_bytes_per_route if route.model_route else 0
        if route.rate_limit != rate_limit:
            problems.append(f"{where}: rate limits {route.rate_limit} bytes, the model {rate_limit}")
        security = (
            estimate.api_key_bytes_per_route if route.api_key_listener else estimate.authorization_bytes_per_route
        )
        if route.security != security:
            problems.append(f"{where}: security entries {route.security} bytes, the model {security}")
        if route.rest > ROUTE_ALLOWANCE:
            problems.append(f"{where}: {route.rest} bytes besides its rate limits and security, over {ROUTE_ALLOWANCE}")
    outside = parts.total - parts.parts.get("routes", 0)
    outside_allowance = BASE_ALLOWANCE + layout.providers * PROVIDER_ALLOWANCE
    if outside > outside_allowance:
        problems.append(f"{outside} bytes outside the routes, over the allowances' {outside_allowance}")
    if parts.total > estimate.total_bytes:
        problems.append(f"the message is {parts.total} bytes, over the model's estimate of {estimate.total_bytes}")
    largest_rest = max((route.rest for route in parts.routes), default=0)
    evidence = {
        "bytes": parts.total,
        "of_estimate": round(parts.total / estimate.total_bytes, 3),
        "parts": parts.parts,
        "counts": parts.counts,
        "routes": len(parts.routes),
        "route_configs": parts.route_configs,
        "largest_route_rest": largest_rest,
        "of_route_allowance": round(largest_rest / ROUTE_ALLOWANCE, 3),
        "outside_routes": outside,
        "of_outside_allowance": round(outside / outside_allowance, 3),
    }
    return evidence, problems


def estimate_evidence(estimate: MessageEstimate) -> dict[str, Any]:
    return {
        "bytes": estimate.total_bytes,
        "describe": estimate.describe(),
        "rate_limit_bytes_per_route": estimate.rate_limit_bytes_per_route,
        "authorization_bytes_per_route": estimate.authorization_bytes_per_route,
        "api_key_bytes_per_route": estimate.api_key_bytes_per_route,
        "listeners": estimate.listeners,
        "model_routes": estimate.layout.model_routes,
        "catch_all_routes": estimate.layout.catch_all_routes,
        "providers": estimate.layout.providers,
    }


# --- the tap on the node ------------------------------------------------------------------------------------------


def read_calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def _iptables(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", "-t", "nat", *argv], capture_output=True, text=True, check=False)


def dnat_rule(service_ip: str, node_ip: str) -> list[str]:
    return [
        "PREROUTING", "-d", f"{service_ip}/32", "-p", "tcp", "--dport", str(EXTENSION_SERVER_PORT),
        "-m", "comment", "--comment", TAP_COMMENT, "-j", "DNAT", "--to-destination", f"{node_ip}:{TAP_PORT}",
    ]  # fmt: skip


def extension_server(node: Node) -> tuple[str, str]:
    """Agent Router's extension Service address and its one ready controller pod's address."""
    service = json.loads(
        node.kubectl("get", "service", AGENT_ROUTER_CONTROLLER, "-n", AGENT_ROUTER_NAMESPACE, "-o", "json")
    )
    slices = json.loads(
        node.kubectl(
            "get", "endpointslices", "-n", AGENT_ROUTER_NAMESPACE, "-l",
            f"kubernetes.io/service-name={AGENT_ROUTER_CONTROLLER}", "-o", "json",
        )
    )["items"]  # fmt: skip
    ready = [
        address
        for item in slices
        for endpoint in item.get("endpoints", [])
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint.get("addresses", [])
    ]
    if len(set(ready)) != 1:
        raise StepError(f"{AGENT_ROUTER_CONTROLLER} has ready endpoints {sorted(set(ready))}, not one")
    return service["spec"]["clusterIP"], ready[0]


def envoy_gateway_pods(node: Node) -> list[dict[str, Any]]:
    return json.loads(node.kubectl("get", "pods", "-n", GATEWAY_NAMESPACE, "-l", ENVOY_GATEWAY_PODS, "-o", "json"))[
        "items"
    ]


def envoy_gateway_ready(node: Node, old: set[str]) -> str | None:
    """The new Envoy Gateway pod once it is ready and none of the old ones is left."""
    pods = envoy_gateway_pods(node)
    names = {pod["metadata"]["name"] for pod in pods}
    ready = [
        pod["metadata"]["name"]
        for pod in pods
        if pod["metadata"]["name"] not in old
        and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
    ]
    return ready[0] if ready and not names & old else None


def capture_translation(node: Node, directory: Path) -> tuple[dict[str, Any], bytes, bytes]:
    """Run one translation through the tap; the last PostTranslateModify's record, request and response."""
    service_ip, pod_ip = extension_server(node)
    node_ip = str(node.layout.ranges.node_ip)
    record = directory / "calls.jsonl"
    tap = node.start(
        "extension-tap",
        [
            sys.executable, "-m", "rig.extension_tap", "--listen", f"{node_ip}:{TAP_PORT}",
            "--upstream", f"{pod_ip}:{EXTENSION_SERVER_PORT}", "--record", str(record),
        ],
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    rule = dnat_rule(service_ip, node_ip)
    try:
        wait_until("the extension tap listening", lambda: "listening" in tap.log.read_text() or None, 30, tap)
        inserted = _iptables("-I", rule[0], "1", *rule[1:])
        if inserted.returncode != 0:
            raise StepError(f"iptables -t nat -I {' '.join(rule)}: {inserted.stderr.strip()}")
        old = {pod["metadata"]["name"] for pod in envoy_gateway_pods(node)}
        restarted_at = time.time()
        node.kubectl("delete", "pods", "-n", GATEWAY_NAMESPACE, "-l", ENVOY_GATEWAY_PODS, "--wait=false")
        wait_until("the restarted Envoy Gateway ready", lambda: envoy_gateway_ready(node, old), 180, tap)

        def settled() -> str | None:
            calls = [c for c in read_calls(record) if c["method"] == METHOD and c["at"] > restarted_at]
            if not calls or time.time() - calls[-1]["at"] < QUIET_SECONDS:
                return None
            return json.dumps(calls[-1])

        last = json.loads(wait_until("a translation through the tap", settled, 180, tap))
    finally:
        removed = _iptables("-D", *rule)
        stop([tap.pid], grace=10)
    if removed.returncode != 0:
        raise StepError(f"the tap's DNAT rule could not be removed: {removed.stderr.strip()}")
    left = _iptables("-S", "PREROUTING").stdout
    if TAP_COMMENT in left:
        raise StepError("the tap's DNAT rule is still in PREROUTING")
    if last["code"] != "OK":
        raise StepError(f"Agent Router answered the captured translation with {last['code']}: {last['details']}")
    stem = directory / last["kept"]
    last["calls"] = {
        method: sum(1 for c in read_calls(record) if c["method"] == method)
        for method in sorted({c["method"] for c in read_calls(record)})
    }
    return last, stem.with_suffix(".request.bin").read_bytes(), stem.with_suffix(".response.bin").read_bytes()


def extension_message_check(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    settings = engine.stack_settings(stack)
    estimate = settings_message_estimate(settings)
    # The domain (and so the rate-limit entry's key) is the live policy's, as check 5 reads it.
    policy = budget_policy(node, settings.gateway.namespace)
    namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    [domain] = rate_limit_domains(namespace, name, policy["spec"]["rateLimit"]["global"]["rules"])
    directory = node.run / "extension-message" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory.mkdir(parents=True, exist_ok=True)
    call, request, response = capture_translation(node, directory)
    key = f"{RATE_LIMIT_FILTER}/{domain}"
    request_evidence, request_problems = judge_message(message_parts(request, REQUEST_FIELDS, key), estimate)
    response_evidence, response_problems = judge_message(message_parts(response, RESPONSE_FIELDS, key), estimate)
    problems = [f"request: {p}" for p in request_problems] + [f"response: {p}" for p in response_problems]
    if problems:
        raise StepError("; ".join(problems[:8]) + (f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""))
    return {
        "estimate": estimate_evidence(estimate),
        "request": request_evidence,
        "response": response_evidence,
        "call": {key: call[key] for key in ("method", "request_bytes", "response_bytes", "seconds", "calls")},
        "summary": (
            f"request {format_bytes(request_evidence['bytes'])}, response {format_bytes(response_evidence['bytes'])}"
            f" of the model's {format_bytes(estimate.total_bytes)}"
        ),
        "kept": str(directory),
    }

"""Differential checks on the deployed stack (`python -m rig diff`): what runs against the models the unit suite
trusts, each read live from the rig's cluster. A model that disagrees is wrong (the tool is right).

1. Envoy's HTTP filter chain (its admin `/config_dump`, the Gateway's listeners) against `core/filter_chain.py`
   `listener_chain` of the same filters with the EnvoyProxy's own `spec.filterOrder`, and no identity filter after
   Agent Router's processor (`identity_filters_after_agent_router`);
2. the `envoy-ratelimit` Deployment Envoy Gateway made against `core/ratelimit_deployment.py`
   `render_ratelimit_pod` of the configuration Envoy Gateway reads (its ConfigMap `envoy-gateway-config`): env,
   volumes, mounts and ports;
3. the HTTPRoutes and HTTPRouteFilters Agent Router's controller generated against
   `tests/support/agent_router_routes.py` `envoy_gateway_objects` of the live AIGatewayRoutes and AIServiceBackends
   (every field the model writes, with the value it writes; the API server's defaults beside them are allowed);
4. after one call by every active actor of the stack, every Redis key the rate-limit service wrote against
   `core/ratelimit_model.py` `rules_for_actor` of the live BackendTrafficPolicy (each key one the model predicts for
   a listed actor, each called actor's predicted keys all there), and `python -m tools.spend --json` (what `make
   spend` prints) holding the same keys with the same values;
5. each Envoy route's rate-limit configuration (its `typed_per_filter_config` entry for the budget policy's
   domain, serialized with the real protos from what `/config_dump` shows) against `core/xds_size.py`
   `rate_limit_domains` of the live policy, byte for byte;
6. Envoy Gateway's whole message to Agent Router's extension server (one translation, through a pass-through tap,
   rig/extension_message.py) against `core/xds_size.py`'s estimate: its exact terms byte for byte on every route,
   its allowances as bounds, the request and Agent Router's response each within the estimate.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2  # noqa: F401 - registers the Any's type
from google.protobuf import any_pb2, json_format

from core.filter_chain import (
    AGENT_ROUTER_FILTER,
    HEADER_TO_METADATA,
    identity_filters_after_agent_router,
    listener_chain,
)
from core.identity import API_KEYS, actor_source
from core.manifests import api_key_client_id, api_key_secret_name
from core.ratelimit_deployment import RATELIMIT_CONTAINER_NAME, render_ratelimit_pod
from core.xds_size import RATE_LIMIT_FILTER, rate_limit_domains
from rig import program
from rig.engine import Engine
from rig.extension_message import extension_message_check
from rig.live_stack import actor_rules, budget_policy, caller_token, fresh_counters, redis_counters
from rig.node import Node
from rig.processes import StepError
from rig.program import GATEWAY_NAMESPACE, STACK_NAMESPACE
from tests.support.agent_router_routes import envoy_gateway_objects

ENVOY_ADMIN_PORT = 19000
"""Envoy Gateway's bootstrap binds the admin to 127.0.0.1:19000 in the Envoy pod (v1.9.0
internal/xds/bootstrap/bootstrap.go `EnvoyAdminPort`): a port-forward reaches it."""
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


def missing_or_different(model: Any, live: Any, path: str = "") -> list[str]:
    """Where `live` lacks what `model` says or holds another value: every key of a model mapping must be in the live
    one with the same value (recursively; extra live keys are the API server's defaults), a list item by item."""
    if isinstance(model, Mapping):
        if not isinstance(live, Mapping):
            return [f"{path or '.'}: the model has an object, live has {json.dumps(live)[:80]}"]
        found: list[str] = []
        for key, value in model.items():
            if key not in live:
                found.append(f"{path}.{key}: missing live (the model has {json.dumps(value)[:80]})")
            else:
                found += missing_or_different(value, live[key], f"{path}.{key}")
        return found
    if isinstance(model, list):
        if not isinstance(live, list) or len(live) != len(model):
            return [f"{path}: the model has {len(model)} item(s), live {json.dumps(live)[:120]}"]
        return [
            problem
            for i, (m, v) in enumerate(zip(model, live, strict=True))
            for problem in missing_or_different(m, v, f"{path}[{i}]")
        ]
    return [] if model == live else [f"{path}: the model has {json.dumps(model)}, live {json.dumps(live)}"]


def listener_filters(config_dump: Mapping[str, Any]) -> dict[str, list[str]]:
    """Listener name -> its HTTP filter names in order, from an Envoy admin `/config_dump`."""
    chains: dict[str, list[str]] = {}
    for config in config_dump.get("configs", []):
        for entry in config.get("dynamic_listeners", []):
            listener = (entry.get("active_state") or {}).get("listener") or {}
            for chain in listener.get("filter_chains", []) + (
                [listener["default_filter_chain"]] if listener.get("default_filter_chain") else []
            ):
                for network_filter in chain.get("filters", []):
                    typed = network_filter.get("typed_config") or {}
                    if typed.get("@type") == HCM_TYPE:
                        chains[listener.get("name", "?")] = [f["name"] for f in typed.get("http_filters", [])]
    return chains


def judge_filter_chains(chains: Mapping[str, list[str]], filter_order: list[dict[str, Any]]) -> dict[str, Any]:
    """Each Gateway listener's chain (Envoy Gateway names them `<namespace>/<gateway>/<listener>`; its own
    readiness and stats listeners are not the Gateway's, and Agent Router leaves them alone) against the model."""
    chains = {name: chain for name, chain in chains.items() if name.startswith(f"{STACK_NAMESPACE}/")}
    if not chains:
        raise StepError("Envoy's config_dump has no HTTP listener of the Gateway")
    evidence: dict[str, Any] = {}
    for name, live in chains.items():
        # Envoy Gateway's own filters in, Agent Router's two (its processor, its header_to_metadata) left to the model.
        model = listener_chain([f for f in live if f not in (AGENT_ROUTER_FILTER, HEADER_TO_METADATA)], filter_order)
        if model != live:
            raise StepError(f"listener {name}: Envoy runs {live}, core/filter_chain.py says {model}")
        late = identity_filters_after_agent_router(live)
        if late:
            raise StepError(f"listener {name}: {late} run after Agent Router's processor")
        evidence[name] = live
    return evidence


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def envoy_config_dump(node: Node) -> dict[str, Any]:
    """The admin `/config_dump` of the Gateway's first Envoy pod, through a port-forward."""
    running = [p["metadata"]["name"] for p in program.envoy_pods(node) if p["status"].get("phase") == "Running"]
    if not running:
        raise StepError(f"no running Envoy pod in {GATEWAY_NAMESPACE}")
    port = _free_port()
    forward = subprocess.Popen(
        [
            str(node.binaries["kubectl"]), "--kubeconfig", str(node.layout.kubeconfig("admin")), "-n",
            GATEWAY_NAMESPACE, "port-forward", f"pod/{running[0]}", f"{port}:{ENVOY_ADMIN_PORT}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/config_dump", timeout=10) as response:
                    return json.loads(response.read())
            except OSError:
                if time.monotonic() > deadline:
                    raise StepError(f"no answer from {running[0]}'s admin through a port-forward") from None
                time.sleep(0.5)
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def filter_chain_check(node: Node) -> dict[str, Any]:
    proxies = json.loads(node.kubectl("get", "envoyproxies", "-A", "-o", "json"))["items"]
    filter_order = [entry for proxy in proxies for entry in (proxy["spec"].get("filterOrder") or [])]
    evidence = judge_filter_chains(listener_filters(envoy_config_dump(node)), filter_order)
    return {"filterOrder": filter_order, "listeners": evidence}


def ratelimit_check(node: Node) -> dict[str, Any]:
    config_map = json.loads(
        node.kubectl("get", "configmap", "envoy-gateway-config", "-n", GATEWAY_NAMESPACE, "-o", "json")
    )
    config = yaml.safe_load(config_map["data"]["envoy-gateway.yaml"])
    model = render_ratelimit_pod(config, GATEWAY_NAMESPACE)
    deployment = json.loads(
        node.kubectl("get", "deployment", RATELIMIT_CONTAINER_NAME, "-n", GATEWAY_NAMESPACE, "-o", "json")
    )
    pod = deployment["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == RATELIMIT_CONTAINER_NAME]
    problems = (
        missing_or_different(list(model.env), container.get("env", []), "env")
        + missing_or_different(list(model.volumes), pod.get("volumes", []), "volumes")
        + missing_or_different(list(model.volume_mounts), container.get("volumeMounts", []), "volumeMounts")
        + missing_or_different(list(model.container_ports), container.get("ports", []), "ports")
    )
    if problems:
        raise StepError(f"envoy-ratelimit differs from core/ratelimit_deployment.py: {problems[:8]}")
    return {
        "env": [item["name"] for item in container.get("env", [])],
        "volumes": [item["name"] for item in pod.get("volumes", [])],
        "ports": [item["containerPort"] for item in container.get("ports", [])],
    }


def agent_router_routes_check(node: Node) -> dict[str, Any]:
    live_sources = []
    for kind in ("aigatewayroutes", "aiservicebackends"):
        live_sources += json.loads(node.kubectl("get", kind, "-n", STACK_NAMESPACE, "-o", "json"))["items"]
    generated = {
        (item["kind"], item["metadata"]["name"]): item
        for kind in ("httproutes", "httproutefilters")
        for item in json.loads(node.kubectl("get", kind, "-n", STACK_NAMESPACE, "-o", "json"))["items"]
    }
    compared = []
    for made in envoy_gateway_objects(live_sources):
        key = (made["kind"], made["metadata"]["name"])
        live = generated.get(key)
        if live is None:
            raise StepError(f"Agent Router made no {key[0]} {key[1]} (tests/support/agent_router_routes.py expects it)")
        problems = missing_or_different(made["spec"], live["spec"], "spec") + missing_or_different(
            made["metadata"].get("annotations", {}),
            live["metadata"].get("annotations") or {},
            "metadata.annotations",
        )
        if problems:
            raise StepError(f"{key[0]} {key[1]} differs from tests/support/agent_router_routes.py: {problems[:6]}")
        compared.append(f"{key[0]}/{key[1]}")
    return {"compared": sorted(compared)}


def predicted_keys(settings: Any, policy: Mapping[str, Any], now: int) -> dict[str, list[str]]:
    """Each listed actor's counter keys at `now`, as core/ratelimit_model.py reads the live policy."""
    return {actor: sorted(rule.counter_key(now) for rule in actor_rules(policy, actor)) for actor in settings.actors}


def window_free(counter_key: str) -> str:
    """A counter's key without its window start (envoyproxy/ratelimit src/limiter/cache_key.go ends it `_<start>`)."""
    return counter_key.rsplit("_", 1)[0]


def judge_redis_keys(predicted: Mapping[str, list[str]], called: list[str], live: Mapping[str, int]) -> dict[str, Any]:
    """Every live key one the model predicts for some actor (in any window: a key of an earlier window lives on until
    it expires), and every key predicted for a called actor in the current window live."""
    anyone = {window_free(key) for keys in predicted.values() for key in keys}
    unexplained = sorted(key for key in live if window_free(key) not in anyone)
    if unexplained:
        raise StepError(f"Redis holds keys core/ratelimit_model.py predicts for no actor: {unexplained[:6]}")
    missing = {actor: sorted(set(predicted[actor]) - set(live)) for actor in called}
    missing = {actor: keys for actor, keys in missing.items() if keys}
    if missing:
        raise StepError(f"keys the model predicts for actors that called are not in Redis: {missing}")
    return {"keys": len(live), "per_actor": {actor: len(predicted[actor]) for actor in called}}


def judge_spend_report(
    report: Mapping[str, Any], live: Mapping[str, int], current: set[str] | None = None
) -> dict[str, Any]:
    """Each row's counter as Redis holds it (0 where no key exists yet), and every live key of the current windows
    (`current`; all of `live` when None) in some row: the report reads the current windows only."""
    rows = {row["counter_key"]: row["counter_value"] for row in report["rows"]}
    wrong = {key: (value, live.get(key, 0)) for key, value in rows.items() if value != live.get(key, 0)}
    if wrong:
        raise StepError(f"make spend --json differs from Redis (report, Redis): {dict(list(wrong.items())[:6])}")
    unreported = sorted(key for key in set(live) - set(rows) if current is None or key in current)
    if unreported:
        raise StepError(f"Redis keys make spend --json has no row for: {unreported[:6]}")
    return {"rows": len(rows), "rows_with_a_counter": sum(1 for key in rows if key in live)}


def one_call_each(node: Node, engine: Engine, stack: str, settings: Any) -> dict[str, int]:
    """A call by every active actor, with the credential of its source: (actor -> status)."""
    outputs = engine.outputs(stack)
    suspended = set(settings.suspended)
    statuses: dict[str, int] = {}
    for actor in settings.actors:
        if actor in suspended:
            continue
        source = actor_source(actor)
        if source == API_KEYS:
            url, host = program.gateway_address(node, outputs, "apiKeyGatewayUrl")
            secret = json.loads(
                node.kubectl(
                    "get", "secret", api_key_secret_name(actor), "-n", settings.gateway.namespace, "-o", "json"
                )
            )
            key = base64.b64decode(secret["data"][api_key_client_id(actor)]).decode()
            status, _, _ = program.call(url, host, None, headers={"x-api-key": key})
        else:
            url, host = program.gateway_address(node, outputs)
            status, _, _ = program.call(url, host, caller_token(node, engine, settings, actor))
        statuses[actor] = status
    return statuses


def redis_keys_check(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    settings = engine.stack_settings(stack)
    policy = budget_policy(node, settings.gateway.namespace)
    began = int(time.time())
    deleted = fresh_counters(node, settings.gateway.namespace, list(settings.actors))
    statuses = one_call_each(node, engine, stack, settings)
    called = [actor for actor, status in statuses.items() if status == 200]
    if len(called) != len(statuses):
        raise StepError(f"not every active actor's call was admitted: {statuses}")
    time.sleep(2)  # the response-time charges are made when each stream ends
    now = int(time.time())
    live = redis_counters(node)
    if now // 3600 != began // 3600:
        raise StepError("an hour's window turned during the calls: run the check again")
    evidence = {
        "fresh_counters_deleted": deleted,
        "calls": statuses,
        **judge_redis_keys(predicted_keys(settings, policy, now), called, live),
    }
    spend = subprocess.run(
        [str(engine.project_root / "venv" / "bin" / "python"), "-m", "tools.spend", "--stack", stack, "--json",
         "--kubectl", str(node.binaries["kubectl"])],
        cwd=engine.project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if spend.returncode != 0:
        raise StepError(f"python -m tools.spend --json exited {spend.returncode}: {spend.stderr[-600:]}")
    current = {key for keys in predicted_keys(settings, policy, int(time.time())).values() for key in keys}
    evidence["spend_report"] = judge_spend_report(json.loads(spend.stdout), redis_counters(node), current)
    return evidence


def route_rate_limit_bytes(config_dump: Mapping[str, Any], filter_key: str) -> dict[str, int]:
    """Envoy route name -> the bytes of its `typed_per_filter_config` entry `filter_key`, serialized with the real
    protos (xds-protos) from what Envoy holds: a `Route` holding only that entry is exactly that field's bytes."""
    sizes: dict[str, int] = {}
    for config in config_dump.get("configs", []):
        for entry in config.get("dynamic_route_configs", []):
            for host in (entry.get("route_config") or {}).get("virtual_hosts", []):
                for route in host.get("routes", []):
                    value = (route.get("typed_per_filter_config") or {}).get(filter_key)
                    if value is None:
                        continue
                    packed = any_pb2.Any()
                    json_format.ParseDict(value, packed)
                    one = route_components_pb2.Route(typed_per_filter_config={filter_key: packed})
                    sizes[route.get("name", "?")] = one.ByteSize()
    return sizes


def xds_size_check(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    settings = engine.stack_settings(stack)
    policy = budget_policy(node, settings.gateway.namespace)
    namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    [(domain, model)] = rate_limit_domains(namespace, name, policy["spec"]["rateLimit"]["global"]["rules"]).items()
    live = route_rate_limit_bytes(envoy_config_dump(node), f"{RATE_LIMIT_FILTER}/{domain}")
    if not live:
        raise StepError(f"no Envoy route carries the rate limits of domain {domain}")
    wrong = {route: size for route, size in live.items() if size != model}
    if wrong:
        raise StepError(f"core/xds_size.py says {model} bytes a route; Envoy's routes hold {wrong}")
    return {"domain": domain, "bytes_per_route": model, "routes": sorted(live)}


CHECKS: list[tuple[str, Callable[[Node, Engine, str], dict[str, Any]]]] = [
    ("Envoy's HTTP filter order is core/filter_chain.py's", lambda node, engine, stack: filter_chain_check(node)),
    (
        "the envoy-ratelimit Deployment is core/ratelimit_deployment.py's",
        lambda node, engine, stack: ratelimit_check(node),
    ),
    (
        "Agent Router's HTTPRoutes and filters are tests/support/agent_router_routes.py's",
        lambda node, engine, stack: agent_router_routes_check(node),
    ),
    ("every Redis key is core/ratelimit_model.py's, and make spend --json reads the same", redis_keys_check),
    ("each route's rate-limit configuration is core/xds_size.py's, byte for byte", xds_size_check),
    (
        "Envoy Gateway's message to Agent Router is within core/xds_size.py's estimate, its exact terms exact",
        extension_message_check,
    ),
]

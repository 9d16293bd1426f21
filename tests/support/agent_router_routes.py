"""What Agent Router's controller makes of an AIGatewayRoute for Envoy Gateway: one HTTPRoute and two HTTPRouteFilters.

A stand-in for `aigw translate`, which cannot be built here: the Go module proxy serves no version of
`github.com/envoyproxy/ai-gateway` nor of its fork `github.com/theagentrouter/agent-router` (rig/versions.toml says
so). It follows envoyproxy/ai-gateway v1.1.0 `internal/controller/ai_gateway_route.go`, field for field:

* `generateHTTPRouteFilters`: `ai-eg-host-rewrite-<route>` (a URL rewrite of the hostname to the backend's) and
  `ai-eg-route-not-found-response-<route>` (a direct 404 with a fixed body);
* `newHTTPRoute`: the HTTPRoute has the AIGatewayRoute's name, namespace, parentRefs and hostnames; one rule per
  AIGatewayRoute rule, with its name, its header matches on the root prefix `/` (the controller's `-rootPrefix`
  default, `cmd/controller/main.go`), the host-rewrite filter, the rule's timeouts with a 60 s request timeout
  when none is given (`api/v1alpha1/ai_gateway_route_helper.go` `GetTimeoutsOrDefault`), and as backendRefs each
  AIServiceBackend's own `backendRef` (the Envoy Gateway Backend) with the rule's weight; then the rule
  `route-not-found` on the root prefix with the 404 filter; and the annotations `gateway.envoyproxy.io/
  backend-ref-priority` (`buildPriorityAnnotation`) and `gateway.envoyproxy.io/ai-gateway-generated: "true"`.

Everything the controller adds beyond Gateway API objects (the external processor, its filter configuration
Secrets, the per-backend upstream filters) comes through Envoy Gateway's extension hooks, which `egctl x translate`
does not run: the rig covers those. The path match type is written out as `PathPrefix`, the default the API server
gives the Gateway API field (`egctl` applies no CRD defaults).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"
HOST_REWRITE_PREFIX = "ai-eg-host-rewrite-"
ROUTE_NOT_FOUND_PREFIX = "ai-eg-route-not-found-response-"
ROUTE_NOT_FOUND_BODY = (
    "No matching route found. It is likely because the model specified in your request is not configured in the "
    "Gateway."
)
ROOT_PREFIX = "/"
DEFAULT_REQUEST_TIMEOUT = "60s"


def _root_path() -> dict[str, Any]:
    return {"type": "PathPrefix", "value": ROOT_PREFIX}


def _filter_ref(name: str) -> dict[str, Any]:
    return {
        "type": "ExtensionRef",
        "extensionRef": {"group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": name},
    }


def route_filters(route: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The two HTTPRouteFilters of one AIGatewayRoute (`generateHTTPRouteFilters`)."""
    metadata = route["metadata"]
    namespace = metadata.get("namespace", "default")
    return [
        {
            "apiVersion": ENVOY_GATEWAY_API,
            "kind": "HTTPRouteFilter",
            "metadata": {"name": HOST_REWRITE_PREFIX + metadata["name"], "namespace": namespace},
            "spec": {"urlRewrite": {"hostname": {"type": "Backend"}}},
        },
        {
            "apiVersion": ENVOY_GATEWAY_API,
            "kind": "HTTPRouteFilter",
            "metadata": {"name": ROUTE_NOT_FOUND_PREFIX + metadata["name"], "namespace": namespace},
            "spec": {"directResponse": {"statusCode": 404, "body": {"type": "Inline", "inline": ROUTE_NOT_FOUND_BODY}}},
        },
    ]


def _timeouts(rule: Mapping[str, Any]) -> dict[str, Any]:
    timeouts = dict(rule.get("timeouts") or {})
    timeouts.setdefault("request", DEFAULT_REQUEST_TIMEOUT)
    return timeouts


def _priority_annotation(rules: Iterable[Mapping[str, Any]]) -> str:
    return ",".join(
        f"{index}:{ref['name']}:{int(ref.get('priority') or 0)}"
        for index, rule in enumerate(rules)
        for ref in rule.get("backendRefs") or []
    )


def http_route(
    route: Mapping[str, Any], service_backends: Mapping[tuple[str, str], Mapping[str, Any]]
) -> dict[str, Any]:
    """The HTTPRoute of one AIGatewayRoute (`newHTTPRoute`); `service_backends` maps (namespace, name) of each
    AIServiceBackend to the object."""
    metadata = route["metadata"]
    namespace = metadata.get("namespace", "default")
    spec = route["spec"]
    rules: list[dict[str, Any]] = []
    for rule in spec.get("rules") or []:
        backend_refs = []
        for ref in rule.get("backendRefs") or []:
            backend_namespace = ref.get("namespace", namespace)
            backend = service_backends[(backend_namespace, ref["name"])]
            target = dict(backend["spec"]["backendRef"])
            if "namespace" not in target and backend_namespace != namespace:
                target["namespace"] = backend_namespace
            if ref.get("weight") is not None:
                target["weight"] = ref["weight"]
            backend_refs.append(target)
        translated: dict[str, Any] = {
            "backendRefs": backend_refs,
            "matches": [{"headers": match.get("headers"), "path": _root_path()} for match in rule.get("matches") or []],
            "filters": [_filter_ref(HOST_REWRITE_PREFIX + metadata["name"])],
            "timeouts": _timeouts(rule),
        }
        if rule.get("name"):
            translated["name"] = rule["name"]
        for match in translated["matches"]:
            if match["headers"] is None:
                del match["headers"]
        rules.append(translated)
    rules.append(
        {
            "name": "route-not-found",
            "matches": [{"path": _root_path()}],
            "filters": [_filter_ref(ROUTE_NOT_FOUND_PREFIX + metadata["name"])],
        }
    )
    annotations = {
        **(metadata.get("annotations") or {}),
        "gateway.envoyproxy.io/backend-ref-priority": _priority_annotation(spec.get("rules") or []),
        "gateway.envoyproxy.io/ai-gateway-generated": "true",
    }
    out_spec: dict[str, Any] = {"parentRefs": spec.get("parentRefs") or [], "rules": rules}
    if spec.get("hostnames"):
        out_spec["hostnames"] = spec["hostnames"]
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": {
            "name": metadata["name"],
            "namespace": namespace,
            "labels": dict(metadata.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": out_spec,
    }


def envoy_gateway_objects(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each AIGatewayRoute of `objects` as the HTTPRoute and HTTPRouteFilters the controller creates for it."""
    objects = list(objects)
    backends = {
        (o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") == "AIServiceBackend"
    }
    made: list[dict[str, Any]] = []
    for route in (o for o in objects if o.get("kind") == "AIGatewayRoute"):
        made += [http_route(route, backends), *route_filters(route)]
    return made

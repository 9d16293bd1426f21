"""The order of the gateway listener's HTTP filters, and where Agent Router inserts its own.

Pure functions over filter names. Facts, each checked in upstream source:

* Envoy Gateway sorts the listener's filters by a fixed order per filter type, ties by name (envoyproxy/gateway
  v1.9.0 internal/xds/translator/httpfilters.go `newOrderedHTTPFilter`; `ORDER` below, the switch order kept:
  the first type whose name is a prefix of the filter's name decides, `isFilterType`). Lua, ext_proc, Wasm and
  dynamic-module filters add the number their name ends with to their base. Then it applies the EnvoyProxy's
  `spec.filterOrder` entries in turn (`sortHTTPFilters`): `before: X` moves every filter of the entry's type
  right before the first filter of type X, `after: X` right after the last one; an entry whose anchor is not
  in the chain moves nothing. The router stays last.
* Agent Router's extension server then inserts its router-level external processor,
  `envoy.filters.http.ext_proc/aigateway`, right before the first filter whose name starts with ext_proc, wasm,
  lua, rbac, local_ratelimit, ratelimit, custom_response, credential_injector, compressor or router; or right
  after the last buffer filter when one sits at or after that point (envoyproxy/ai-gateway v1.1.0
  internal/extensionserver/post_translate_modify.go `insertAIGatewayExtProcFilter`; the same in
  theagentrouter/agent-router @b6cbdf77).
* Agent Router's extension server also inserts `envoy.filters.http.header_to_metadata` right before the router (an
  existing one is merged, not moved), for the request headers its controller maps to access-log attributes:
  `--logRequestHeaderAttributes`, which is `agent-session-id:session.id` when unset (envoyproxy/ai-gateway v1.1.0
  cmd/controller/main.go; the chart leaves it unset; internal/extensionserver/header_to_metadata.go
  `insertHeaderToMetadataFilter`, called after the processor's insertion in post_translate_modify.go). Seen in
  the rig's Envoy: after ratelimit, where it touches no budget.
* Since Envoy Gateway v1.7 (commit 2951185b) custom_response has order 0, so that it sees the local replies
  of every filter after it. A listener with any `responseOverride` (the program always has one, for the
  suspension's 403: core/suspension.py) therefore gets Agent Router's processor at index 0, **before**
  jwt_authn (and api_key_auth). Its router processor then snapshots the request headers before `x-actor-id`
  exists, and on a retry the upstream processor's header mutator removes every header that is not in that
  snapshot (ai-gateway v1.1.0 internal/headermutator/header_mutator.go `Mutate`, onRetry; the snapshot is
  `rp.requestHeaders`, processor_impl.go `SetBackend`). Upstream filters work on the downstream request
  header map (envoy source/common/router/upstream_request.cc), and the rate-limit filter rebuilds its
  stream-done descriptors from that map when the stream ends (envoy
  source/extensions/filters/http/ratelimit/ratelimit.cc `onDestroy`): with `x-actor-id` gone the Distinct
  match yields no descriptor, and a retried call is charged nothing. Every request body would also be
  buffered and parsed by Agent Router before its token is checked.
* So the program's EnvoyProxy moves custom_response right after the identity filters
  (`IDENTITY_BEFORE_AGENT_ROUTER`): Agent Router's processor lands after them, and custom_response still
  comes before rbac and ratelimit, whose local replies (the suspension's 403, a budget's 429) it rewrites.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CUSTOM_RESPONSE = "envoy.filters.http.custom_response"
API_KEY_AUTH = "envoy.filters.http.api_key_auth"
JWT_AUTHN = "envoy.filters.http.jwt_authn"
BUFFER = "envoy.filters.http.buffer"
ROUTER = "envoy.filters.http.router"
AGENT_ROUTER_FILTER = "envoy.filters.http.ext_proc/aigateway"
"""The name of Agent Router's router-level external processor (ai-gateway v1.1.0 `aiGatewayExtProcName`)."""
HEADER_TO_METADATA = "envoy.filters.http.header_to_metadata"
"""The filter Agent Router adds before the router for its access-log attributes (`headerToMetadataFilterName`)."""

IDENTITY_FILTERS = (API_KEY_AUTH, JWT_AUTHN)
"""The filters that establish `x-actor-id`, in Envoy Gateway's order (api_key_auth 7, jwt_authn 10)."""

ORDER: tuple[tuple[str, int], ...] = (
    (CUSTOM_RESPONSE, 0),
    ("envoy.filters.http.health_check", 1),
    ("envoy.filters.http.fault", 2),
    ("envoy.filters.http.cors", 3),
    ("envoy.filters.http.csrf", 4),
    ("envoy.filters.http.header_mutation", 5),
    ("envoy.filters.http.ext_authz", 6),
    (API_KEY_AUTH, 7),
    ("envoy.filters.http.basic_auth", 8),
    ("envoy.filters.http.oauth2", 9),
    (JWT_AUTHN, 10),
    ("envoy.filters.http.stateful_session", 11),
    (BUFFER, 12),
    ("envoy.filters.http.lua", 13),
    ("envoy.filters.http.ext_proc", 100),
    ("envoy.filters.http.wasm", 200),
    ("envoy.filters.http.dynamic_modules", 250),
    ("envoy.filters.http.geoip", 300),
    ("envoy.filters.http.rbac", 301),
    ("envoy.filters.http.local_ratelimit", 302),
    ("envoy.filters.http.ratelimit", 303),
    ("envoy.filters.http.bandwidth_limit", 304),
    ("envoy.filters.http.grpc_web", 305),
    ("envoy.filters.http.grpc_stats", 306),
    ("envoy.filters.http.credential_injector", 307),
    ("envoy.filters.http.compressor", 308),
    ("envoy.filters.http.dynamic_forward_proxy", 309),
    (ROUTER, 310),
)
"""Envoy Gateway v1.9.0's order of each filter type, in the order its switch tests them."""
DEFAULT_ORDER = 50
_INDEXED = frozenset(
    {
        "envoy.filters.http.lua",
        "envoy.filters.http.ext_proc",
        "envoy.filters.http.wasm",
        "envoy.filters.http.dynamic_modules",
    }
)
"""Types whose filters add their name's trailing number to the base order (`mustGetFilterIndex`)."""

AGENT_ROUTER_ANCHORS = (
    "envoy.filters.http.ext_proc",
    "envoy.filters.http.wasm",
    "envoy.filters.http.lua",
    "envoy.filters.http.rbac",
    "envoy.filters.http.local_ratelimit",
    "envoy.filters.http.ratelimit",
    CUSTOM_RESPONSE,
    "envoy.filters.http.credential_injector",
    "envoy.filters.http.compressor",
    ROUTER,
)
"""Agent Router inserts its processor before the first filter named with one of these (`afterExtProcFilterPrefixes`)."""

IDENTITY_BEFORE_AGENT_ROUTER: tuple[dict[str, str], ...] = tuple(
    {"name": CUSTOM_RESPONSE, "after": identity} for identity in IDENTITY_FILTERS
)
"""The program's EnvoyProxy `spec.filterOrder`: custom_response after the last identity filter present, so
Agent Router's processor (inserted before custom_response) sees the verified `x-actor-id`."""


def _order(name: str) -> int:
    for filter_type, order in ORDER:
        if name.startswith(filter_type):
            return order + int(name.rsplit("/", 1)[-1]) if filter_type in _INDEXED else order
    return DEFAULT_ORDER


def _is_type(name: str, filter_type: str) -> bool:
    return name.startswith(filter_type)


def sort_http_filters(names: Iterable[str], filter_order: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The listener's filters as Envoy Gateway orders them, then moved by EnvoyProxy `spec.filterOrder`."""
    chain = sorted(names, key=lambda name: (_order(name), name))
    for position in filter_order:
        moving = [name for name in chain if _is_type(name, str(position["name"]))]
        if not moving:
            continue
        if position.get("before") is not None:
            anchor = next((name for name in chain if _is_type(name, str(position["before"]))), None)
            rest = [name for name in chain if name not in moving]
            if anchor in rest:
                at = rest.index(anchor)
                chain = [*rest[:at], *moving, *rest[at:]]
        elif position.get("after") is not None:
            anchors = [name for name in chain if _is_type(name, str(position["after"]))]
            if not anchors:
                continue
            rest = [name for name in chain if name not in moving]
            if anchors[-1] in rest:  # a type moved after itself stays where it is
                at = rest.index(anchors[-1]) + 1
                chain = [*rest[:at], *moving, *rest[at:]]
    return chain


def insert_agent_router(chain: Sequence[str], log_header_attributes: bool = True) -> list[str]:
    """The chain with Agent Router's router-level processor where its extension server puts it, and (with
    `log_header_attributes`, the controller's default) its header_to_metadata filter right before the router."""
    if AGENT_ROUTER_FILTER in chain:
        return list(chain)
    with_processor = _insert_processor(chain)
    if not log_header_attributes or HEADER_TO_METADATA in with_processor:
        return with_processor
    at = with_processor.index(ROUTER)
    return [*with_processor[:at], HEADER_TO_METADATA, *with_processor[at:]]


def _insert_processor(chain: Sequence[str]) -> list[str]:
    at = next(
        (i for i, name in enumerate(chain) if any(name.startswith(prefix) for prefix in AGENT_ROUTER_ANCHORS)), None
    )
    if at is None:
        raise ValueError("Agent Router finds no insertion point in this chain (it needs at least the router)")
    buffers = [i for i, name in enumerate(chain) if name.startswith(BUFFER)]
    if buffers and buffers[-1] >= at:
        at = buffers[-1] + 1
    return [*chain[:at], AGENT_ROUTER_FILTER, *chain[at:]]


def listener_chain(filters: Iterable[str], filter_order: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The listener's HTTP filters in the order Envoy runs them: Envoy Gateway's (plus its router), then Agent
    Router's processor inserted."""
    names = set(filters) | {ROUTER}
    return insert_agent_router(sort_http_filters(names, filter_order))


def identity_filters_after_agent_router(chain: Sequence[str]) -> list[str]:
    """The identity filters that run after Agent Router's processor in `chain` (empty when it sees the
    verified `x-actor-id`)."""
    position = chain.index(AGENT_ROUTER_FILTER)
    return [name for name in chain[position + 1 :] if any(name.startswith(kind) for kind in IDENTITY_FILTERS)]

"""How big the message is that Envoy Gateway sends Agent Router's extension server, for a budget policy.

Why this matters: Envoy Gateway copies every global rate-limit rule of a Gateway-wide
BackendTrafficPolicy into the `typed_per_filter_config` of *each* Envoy route it builds, and its
post-translate hook sends all routes (with clusters, listeners and secrets) to the extension server in
one gRPC message. Both ends cap that message (Envoy Gateway `extensionManager.maxMessageSize`, Agent
Router `controller.maxRecvMsgSize`, 4 MiB by default). A message over the cap fails the hook, and Envoy
Gateway then keeps the last good configuration: no later budget change reaches Envoy.

Facts this model follows (envoyproxy/gateway tag v1.9.0 unless named):

* `internal/xds/translator/ratelimit.go`: `patchRouteWithRateLimit` adds one `RateLimitPerRoute`
  (domain + rate limits) per domain to every route that has a route action, keyed
  `envoy.filters.http.ratelimit/<domain>` for shared rules; `buildRouteRateLimits` writes, per rule, a
  `RateLimit` with a generic key `<ns>/<name>/rule/<i>` and one action per header match
  (`request_headers` for Distinct, `header_value_match` with `expect_match` otherwise), the request
  cost as `hits_addend`, and a second `RateLimit` with `apply_on_stream_done` for the response cost.
  `limit.fromMetadata` adds a dynamic-metadata `limit` override to both.
* `internal/gatewayapi/backendtrafficpolicy.go` `translateRateLimitCost`: a Metadata cost is the format
  string `%DYNAMIC_METADATA(<namespace>:<key>)%`; a Number cost is a `UInt64Value`.
* `internal/xds/translator/route.go`: a direct-response route has no route action, so it carries no
  rate limits (Agent Router's `route-not-found` catch-all per AIGatewayRoute is one of those:
  envoyproxy/ai-gateway v1.1.0 `internal/controller/ai_gateway_route.go`).
* `internal/gatewayapi/route.go` `irRouteName`: one Envoy route per HTTPRoute rule *match*; an
  AIGatewayRoute rule gets one match per model name (core/manifests.py `route_manifest`).
* `internal/xds/translator/extension.go` + `proto/extension/service.proto`: `PostTranslateModifyRequest`
  carries every cluster, secret, listener and route configuration at once.
* `internal/extension/grpc.go`: `maxMessageSize` sets both the send and the receive cap of Envoy
  Gateway's client; unset, gRPC's 4 MiB receive default applies to the extension server's reply.
* envoyproxy/ai-gateway v1.1.0 `cmd/controller/main.go`: `maxRecvMsgSize` default `4*1024*1024`.

The rate-limit part is computed byte for byte with the protobuf wire format (field numbers from the
Envoy API: envoy/config/route/v3/route_components.proto, envoy/extensions/filters/http/ratelimit/v3/
rate_limit.proto, envoy/type/matcher/v3/{string,regex}.proto, envoy/type/metadata/v3/metadata.proto);
tests/test_xds_size.py serializes the same messages with the real protos (`xds-protos`) and compares.
Everything else in the message (route names and matches, other filters' per-route config, clusters,
listeners, secrets) is covered by fixed allowances, stated below; they are generous, not measured on a
live Envoy Gateway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.ratelimit_model import descriptor_key, header_matches, shared_domain, shared_rule_key
from core.settings import MAX_MODELS_PER_ROUTE, MIB
from core.suspension import ONE_ACTOR_ID_CEL

GRPC_DEFAULT_MAX_MESSAGE = 4 * MIB
RATE_LIMIT_FILTER = "envoy.filters.http.ratelimit"
RATE_LIMIT_PER_ROUTE_TYPE_URL = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"

# Allowances for what the model does not compute byte for byte.
ROUTE_ALLOWANCE = 4 * 1024
"""Per Envoy route, beyond its rate limits: name, match, action, the JWT and Agent Router per-route
config and the nesting of routes in virtual hosts (a representative route is well under 1 KiB:
tests/test_xds_size.py measures one)."""
PROVIDER_ALLOWANCE = 32 * 1024
"""Per model provider: its cluster(s), TLS context and any CA bundle secret."""
BASE_ALLOWANCE = 256 * 1024
"""Once per message: listeners (HTTP connection manager, JWT provider, ext_proc and rate-limit
filters), the JWKS and rate-limit clusters, the extension context."""
HEADROOM = 1.25
"""The configured limit must be at least this many times the computed size: the allowances are
estimates, and the extension server's reply (its own additions included) is capped by the same number."""


# --- protobuf wire sizes -------------------------------------------------------------------------------


def varint_size(value: int) -> int:
    """Bytes of a base-128 varint."""
    if value < 0:
        raise ValueError("negative varints are not used here")
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _tag(field_number: int) -> int:
    # Wire types 0 and 2 both fit in the low three bits: the tag is a varint of (number << 3 | type).
    return varint_size(field_number << 3)


def length_delimited(field_number: int, payload: int) -> int:
    """A string, bytes or embedded-message field: tag, length, payload."""
    return _tag(field_number) + varint_size(payload) + payload


def string_field(field_number: int, text: str, *, in_oneof: bool = False) -> int:
    """A proto3 string field; an empty value outside a oneof is not written at all."""
    encoded = len(text.encode("utf-8"))
    if encoded == 0 and not in_oneof:
        return 0
    return length_delimited(field_number, encoded)


def bool_field(field_number: int, value: bool) -> int:
    """A proto3 bool: written only when true."""
    return _tag(field_number) + 1 if value else 0


def _bool_value(value: bool) -> int:
    """google.protobuf.BoolValue payload."""
    return bool_field(1, value)


def _uint64_value(value: int) -> int:
    """google.protobuf.UInt64Value payload."""
    return _tag(1) + varint_size(value) if value else 0


# --- Envoy messages (payload sizes) ----------------------------------------------------------------------


def _string_matcher(kind: str, value: str) -> int:
    """envoy.type.matcher.v3.StringMatcher: exact=1 or safe_regex=5 (RegexMatcher.regex=2)."""
    if kind == "Exact":
        return string_field(1, value, in_oneof=True)
    if kind == "RegularExpression":
        return length_delimited(5, string_field(2, value))
    raise ValueError(f"no string matcher for match type {kind!r}")


def _header_matcher(name: str, kind: str, value: str) -> int:
    """envoy.config.route.v3.HeaderMatcher: name=1, string_match=13."""
    return string_field(1, name) + length_delimited(13, _string_matcher(kind, value))


def _generic_key_action(key: str) -> int:
    """Action.generic_key=5 → GenericKey{descriptor_value=1, descriptor_key=2}, both the same text."""
    return length_delimited(5, string_field(1, key) + string_field(2, key))


def _request_headers_action(header: str, descriptor_key: str) -> int:
    """Action.request_headers=3 → RequestHeaders{header_name=1, descriptor_key=2}."""
    return length_delimited(3, string_field(1, header) + string_field(2, descriptor_key))


def _header_value_match_action(descriptor: str, name: str, kind: str, value: str, expect_match: bool) -> int:
    """Action.header_value_match=6 → {descriptor_value=1, expect_match=2, headers=3, descriptor_key=4}."""
    payload = (
        string_field(1, descriptor)
        + length_delimited(2, _bool_value(expect_match))
        + length_delimited(3, _header_matcher(name, kind, value))
        + string_field(4, descriptor)
    )
    return length_delimited(6, payload)


def _hits_addend(cost: Mapping[str, Any]) -> int:
    """RateLimit.HitsAddend: number=1 (UInt64Value) or format=2 (the dynamic-metadata format string)."""
    source = cost.get("from")
    if source == "Number":
        return length_delimited(1, _uint64_value(int(cost.get("number") or 0)))
    if source == "Metadata":
        metadata = cost.get("metadata") or {}
        return string_field(2, f"%DYNAMIC_METADATA({metadata.get('namespace')}:{metadata.get('key')})%")
    raise ValueError(f"a cost with from={source!r} (Number or Metadata)")


def _limit_override(from_metadata: Mapping[str, Any]) -> int:
    """RateLimit.Override{dynamic_metadata=1 → {metadata_key=1 → MetadataKey{key=1, path=2 → {key=1}}}}."""
    path = length_delimited(2, string_field(1, str(from_metadata.get("key", ""))))
    metadata_key = string_field(1, str(from_metadata.get("namespace", ""))) + path
    return length_delimited(1, length_delimited(1, metadata_key))


def _rule_actions(rule: Mapping[str, Any], generic_key: str, domain_rule_index: int) -> int:
    """The actions of one rule (shared by its request and response RateLimit): generic key, then one
    action per header match of every selector, in order."""
    for selector in rule.get("clientSelectors") or []:
        unsupported = sorted(set(selector) - {"headers"})
        if unsupported:
            raise ValueError(
                f"client selector fields {unsupported} are not in the size model (it covers header matches, "
                "which is all agent-budgets writes)"
            )
    actions = length_delimited(3, _generic_key_action(generic_key))
    headers = header_matches(rule)
    for position, match in enumerate(headers):
        descriptor = descriptor_key(domain_rule_index, position)
        kind = match.get("type") or "Exact"
        if kind == "Distinct":
            action = _request_headers_action(str(match["name"]), descriptor)
        else:
            value, expect = str(match.get("value", "")), not match.get("invert", False)
            action = _header_value_match_action(descriptor, str(match["name"]), kind, value, expect)
        actions += length_delimited(3, action)
    if not headers:
        # No match at all: Envoy Gateway adds a generic key rule-<i>-match--1 so the rule applies to all traffic.
        actions += length_delimited(3, _generic_key_action(descriptor_key(domain_rule_index, -1)))
    return actions


def _rule_rate_limits(rule: Mapping[str, Any], generic_key: str, domain_rule_index: int) -> int:
    """The RateLimit entries (field 3 of RateLimitPerRoute) one rule adds to a route."""
    actions = _rule_actions(rule, generic_key, domain_rule_index)
    limit = rule.get("limit") or {}
    override = length_delimited(4, _limit_override(limit["fromMetadata"])) if limit.get("fromMetadata") else 0
    cost = rule.get("cost") or {}
    request = actions + override
    if cost.get("request") is not None:
        request += length_delimited(5, _hits_addend(cost["request"]))
    size = length_delimited(3, request)
    if cost.get("response") is not None:
        response = actions + override + length_delimited(5, _hits_addend(cost["response"])) + bool_field(6, True)
        size += length_delimited(3, response)
    return size


# --- the whole message ------------------------------------------------------------------------------------


def rate_limit_domains(
    policy_namespace: str, policy_name: str, rule_specs: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """Per rate-limit domain, the bytes of its `typed_per_filter_config` entry on one Envoy route.

    Raises ValueError for what the model does not cover: non-shared rules (their descriptors name each
    Envoy route, so their size differs per route) and selectors other than header matches.
    """
    domain = shared_domain(policy_namespace, policy_name)
    rate_limits = 0
    for index, rule in enumerate(rule_specs):
        if rule.get("shared") is not True:
            raise ValueError(
                f"rule {index} is not shared: the size model covers shared rules only (agent-budgets writes "
                "only shared rules)"
            )
        # Every rule is shared, so its index among the shared rules (getDomainRuleIndex) is its index.
        rate_limits += _rule_rate_limits(rule, shared_rule_key(policy_namespace, policy_name, index), index)
    if not rule_specs:
        return {}
    per_route = rate_limits + string_field(4, domain)
    any_payload = string_field(1, RATE_LIMIT_PER_ROUTE_TYPE_URL) + length_delimited(2, per_route)
    entry = string_field(1, f"{RATE_LIMIT_FILTER}/{domain}") + length_delimited(2, any_payload)
    return {domain: length_delimited(13, entry)}


# --- the suspension's RBAC per-route config (core/suspension.py) ------------------------------------------

RBAC_FILTER = "envoy.filters.http.rbac"
RBAC_PER_ROUTE_TYPE_URL = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
RBAC_ACTION_TYPE_URL = "type.googleapis.com/envoy.config.rbac.v3.Action"
DYNAMIC_METADATA_INPUT_TYPE_URL = (
    "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput"
)
METADATA_MATCHER_TYPE_URL = "type.googleapis.com/envoy.extensions.matching.input_matchers.metadata.v3.Metadata"
JWT_AUTHN_FILTER = "envoy.filters.http.jwt_authn"


def _any(type_url: str, payload: int) -> int:
    """google.protobuf.Any payload: type_url=1, value=2."""
    return string_field(1, type_url) + (length_delimited(2, payload) if payload else 0)


def _typed_extension(name: str, type_url: str, payload: int) -> int:
    """xds.core.v3.TypedExtensionConfig payload: name=1, typed_config=2 (Any)."""
    return string_field(1, name) + length_delimited(2, _any(type_url, payload))


def _rbac_action(allow: bool) -> int:
    """envoy.config.rbac.v3.Action payload: name=1 (ALLOW / DENY), action=2 (enum; ALLOW is 0, not written)."""
    return string_field(1, "ALLOW" if allow else "DENY") + (0 if allow else _tag(2) + 1)


def _on_match_action(name: str, allow: bool) -> int:
    """xds.type.matcher.v3.Matcher.OnMatch payload: action=2 (TypedExtensionConfig)."""
    return length_delimited(2, _typed_extension(name, RBAC_ACTION_TYPE_URL, _rbac_action(allow)))


def _claim_predicate(provider: str, claim_path: Sequence[str], value: str) -> int:
    """Predicate payload: single_predicate=1 {input=1 `claim` DynamicMetadataInput{filter=1, path=2
    {key=1}}, custom_match=3 `claim_matcher` Metadata{value=1 ValueMatcher{string_match=3 {exact=1}}}}."""
    path = sum(length_delimited(2, string_field(1, key)) for key in (provider, *claim_path))
    metadata_input = string_field(1, JWT_AUTHN_FILTER) + path
    matcher = length_delimited(1, length_delimited(3, string_field(1, value, in_oneof=True)))
    single = length_delimited(1, _typed_extension("claim", DYNAMIC_METADATA_INPUT_TYPE_URL, metadata_input))
    single += length_delimited(3, _typed_extension("claim_matcher", METADATA_MATCHER_TYPE_URL, matcher))
    return length_delimited(1, single)


HTTP_HEADER_INPUT_TYPE_URL = "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput"


def _header_predicate(header: str, value: str) -> int:
    """Predicate payload: single_predicate=1 {input=1 `http_header` HttpRequestHeaderMatchInput{header_name=1},
    value_match=2 StringMatcher{exact=1}} (authorization.go `buildHTTPHeaderSinglePredicate`)."""
    header_input = _typed_extension("http_header", HTTP_HEADER_INPUT_TYPE_URL, string_field(1, header))
    single = length_delimited(1, header_input) + length_delimited(2, string_field(1, value, in_oneof=True))
    return length_delimited(1, single)


def _principal_predicate(principal: Mapping[str, Any]) -> int:
    """The predicate payload of a rule's principal: one JWT claim, or one request header, of String values (several
    values are ORed; one value is a single predicate)."""
    if set(principal) == {"jwt"}:
        jwt = principal["jwt"]
        claims = jwt.get("claims") or []
        if len(claims) != 1 or jwt.get("scopes") or claims[0].get("valueType", "String") != "String":
            raise ValueError("the size model covers one String claim per authorization rule")
        claim = claims[0]
        path = str(claim["name"]).split(".")
        values = [_claim_predicate(str(jwt["provider"]), path, str(value)) for value in claim["values"]]
    elif set(principal) == {"headers"} and len(principal["headers"]) == 1:
        [header] = principal["headers"]
        values = [_header_predicate(str(header["name"]), str(value)) for value in header["values"]]
    else:
        raise ValueError("the size model covers authorization rules on one JWT claim or one header only")
    return values[0] if len(values) == 1 else length_delimited(2, sum(length_delimited(1, v) for v in values))


CEL_INPUT_TYPE_URL = "type.googleapis.com/xds.type.matcher.v3.HttpAttributesCelMatchInput"
CEL_MATCHER_TYPE_URL = "type.googleapis.com/xds.type.matcher.v3.CelMatcher"
PARSED_CEL_BYTES: dict[str, int] = {ONE_ACTOR_ID_CEL: 254}
"""The serialized `cel.expr.ParsedExpr` of each CEL expression the program writes, as Envoy Gateway v1.9.0 builds it
(cel-go `Parse`, then `AstToParsedExpr`: the expression tree and its source positions). Measured from the route
configuration `egctl x translate` v1.9.0 writes (tests/fixtures/one-actor-id.parsed-expr.json, which
tests/test_real_translators.py holds to egctl's output); the program writes one fixed expression, so a table, not a
CEL parser."""


def _cel_predicate(expression: str) -> int:
    """Predicate payload: single_predicate=1 {input=1 `cel` HttpAttributesCelMatchInput{}, custom_match=3
    `cel_matcher` CelMatcher{expr_match=1 CelExpression{cel_expr_parsed=3}}} (authorization.go
    `buildCELPredicate`; cncf/xds xds/type/matcher/v3/cel.proto, xds/type/v3/cel.proto)."""
    if expression not in PARSED_CEL_BYTES:
        raise ValueError(f"the size model knows the parsed size of the program's CEL expressions only: {expression}")
    cel_expression = length_delimited(3, PARSED_CEL_BYTES[expression])
    matcher = length_delimited(1, cel_expression)
    single = length_delimited(1, _typed_extension("cel", CEL_INPUT_TYPE_URL, 0))
    single += length_delimited(3, _typed_extension("cel_matcher", CEL_MATCHER_TYPE_URL, matcher))
    return length_delimited(1, single)


def authorization_route_bytes(authorization: Mapping[str, Any] | None) -> int:
    """The bytes of the `envoy.filters.http.rbac` entry a SecurityPolicy `authorization` adds to every
    Envoy route it covers (0 without one).

    Follows Envoy Gateway v1.9.0 `internal/xds/translator/authorization.go` (`buildRBACPerRoute`,
    `buildJWTPredicate`, `buildHeadersPredicate`, `buildCELPredicate`) for what agent-budgets writes: Deny/Allow
    rules whose principal is one JWT claim or one request header of String values, the `one-actor-id` CEL rule,
    and a default action.
    """
    if not authorization:
        return 0
    matchers = 0
    for rule in authorization.get("rules") or []:
        if rule.get("operation") or (rule.get("cel") and rule.get("principal")):
            raise ValueError("the size model covers authorization rules on a principal or a CEL expression only")
        cel = rule.get("cel")
        predicate = _cel_predicate(str(cel)) if cel else _principal_predicate(rule.get("principal") or {})
        field_matcher = length_delimited(1, predicate) + length_delimited(
            2, _on_match_action(str(rule.get("name", "")), rule.get("action") == "Allow")
        )
        matchers += length_delimited(1, field_matcher)
    matcher = length_delimited(1, matchers) if matchers else 0
    matcher += length_delimited(3, _on_match_action("default", authorization.get("defaultAction") == "Allow"))
    rbac = length_delimited(4, matcher)  # RBAC.matcher=4
    per_route = length_delimited(2, rbac)  # RBACPerRoute.rbac=2
    entry = string_field(1, RBAC_FILTER) + length_delimited(2, _any(RBAC_PER_ROUTE_TYPE_URL, per_route))
    return length_delimited(13, entry)  # Route.typed_per_filter_config=13


API_KEY_AUTH_FILTER = "envoy.filters.http.api_key_auth"
API_KEY_AUTH_PER_ROUTE_TYPE_URL = "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute"


def api_key_auth_route_bytes(
    credentials: Sequence[tuple[str, int]], headers: Sequence[str], forward_header: str, sanitize: bool
) -> int:
    """The bytes of the `envoy.filters.http.api_key_auth` entry an `apiKeyAuth` adds to every Envoy route it covers:
    every credential (client id, key length) of every referenced Secret, inlined in each route.

    Follows Envoy Gateway v1.9.0 `internal/xds/translator/api_key_auth.go` (`buildAPIKeyAuthFilterPerRouteConfig`:
    credentials, one key source per header, forwarding when a header or sanitize is set) and envoy
    api/envoy/extensions/filters/http/api_key_auth/v3/api_key_auth.proto: ApiKeyAuthPerRoute{credentials=1
    Credential{key=1, client=2}, key_sources=2 KeySource{header=1}, forwarding=4 Forwarding{header=1,
    hide_credentials=2}}.
    """
    payload = sum(
        length_delimited(1, length_delimited(1, key) + string_field(2, client)) for client, key in credentials
    )
    payload += sum(length_delimited(2, string_field(1, header)) for header in headers)
    if forward_header or sanitize:
        payload += length_delimited(4, string_field(1, forward_header) + bool_field(2, sanitize))
    entry = string_field(1, API_KEY_AUTH_FILTER) + length_delimited(2, _any(API_KEY_AUTH_PER_ROUTE_TYPE_URL, payload))
    return length_delimited(13, entry)


@dataclass(frozen=True)
class RouteLayout:
    """How many Envoy routes the model routes become."""

    model_routes: int
    """Envoy routes with a route action: one per model name of every AIGatewayRoute."""
    catch_all_routes: int
    """Agent Router's direct-response `route-not-found` route, one per AIGatewayRoute."""
    providers: int


def route_layout(routes: Iterable[Any], providers: int) -> RouteLayout:
    """The layout of configured routes (objects with a `models` list, e.g. core.settings.Route)."""
    routes = list(routes)
    return RouteLayout(
        model_routes=sum(len(route.models) for route in routes),
        catch_all_routes=len(routes),
        providers=providers,
    )


@dataclass(frozen=True)
class MessageEstimate:
    """The extension-server message for one configuration, and how it was made up."""

    total_bytes: int
    rate_limit_bytes_per_route: int
    layout: RouteLayout
    authorization_bytes_per_route: int = 0
    """The JWT policy's RBAC config (suspensions, the service-account allowlist), on every Envoy route of the JWT
    listener (model routes and catch-alls)."""
    api_key_bytes_per_route: int | None = None
    """The API-key policy's config (every key, its RBAC), on every Envoy route of the API-key listener; None when
    the Gateway has no such listener."""
    jwt_listener: bool = True
    """Whether the Gateway has the JWT listener (a stack of API keys alone has only the API-key listener)."""

    @property
    def listeners(self) -> int:
        """Gateway listeners: every model route is built once on each (internal/gatewayapi route attachment)."""
        return int(self.jwt_listener) + int(self.api_key_bytes_per_route is not None)

    @property
    def rate_limit_bytes(self) -> int:
        return self.rate_limit_bytes_per_route * self.layout.model_routes * self.listeners

    def required_limit(self, headroom: float = HEADROOM) -> int:
        """The smallest message limit that keeps the headroom."""
        return int(self.total_bytes * headroom + 0.999999)

    def describe(self) -> str:
        """One line naming every term, for messages and docs."""
        layout = self.layout
        routes = layout.model_routes + layout.catch_all_routes
        suspension = (
            f", {routes} route(s) x {format_bytes(self.authorization_bytes_per_route)} of suspension rules"
            if self.authorization_bytes_per_route and self.jwt_listener
            else ""
        )
        api_keys = (
            f", {routes} API-key route(s) x {format_bytes(self.api_key_bytes_per_route)} of API keys and their rules"
            if self.api_key_bytes_per_route is not None
            else ""
        )
        per_listener = f" on each of {self.listeners} listeners" if self.listeners > 1 else ""
        return (
            f"{format_bytes(self.total_bytes)}: {layout.model_routes} model route(s){per_listener} x "
            f"{format_bytes(self.rate_limit_bytes_per_route)} of rate-limit rules{suspension}{api_keys}, plus "
            f"allowances for {routes * self.listeners} Envoy route(s), {layout.providers} provider(s) and the listeners"
        )


def estimate_message(
    policy_namespace: str,
    policy_name: str,
    rule_specs: Sequence[Mapping[str, Any]],
    layout: RouteLayout,
    authorization: Mapping[str, Any] | None = None,
    api_key_bytes_per_route: int | None = None,
    jwt_listener: bool = True,
) -> MessageEstimate:
    """The size of Envoy Gateway's PostTranslateModifyRequest for this policy on this route layout, with
    the Gateway-wide SecurityPolicy `authorization` (the suspensions) when there is one, and the API-key listener's
    per-route bytes (`api_key_auth_route_bytes` plus its own authorization) when the Gateway has that listener."""
    per_route = sum(rate_limit_domains(policy_namespace, policy_name, rule_specs).values())
    suspension = authorization_route_bytes(authorization)
    estimate = MessageEstimate(0, per_route, layout, suspension, api_key_bytes_per_route, jwt_listener)
    return dataclasses.replace(estimate, total_bytes=_message_bytes(estimate))


def _message_bytes(estimate: MessageEstimate) -> int:
    """The message: the allowances, then per listener its security config on every Envoy route and the rate limits
    on every model route (the rate-limit rules are the same on both listeners: the policy targets the Gateway)."""
    layout = estimate.layout
    routes = layout.model_routes + layout.catch_all_routes
    per_listener: list[int] = []
    if estimate.jwt_listener:
        per_listener.append(estimate.authorization_bytes_per_route)
    if estimate.api_key_bytes_per_route is not None:
        per_listener.append(estimate.api_key_bytes_per_route)
    return (
        BASE_ALLOWANCE
        + layout.providers * PROVIDER_ALLOWANCE
        + sum(routes * (ROUTE_ALLOWANCE + security) for security in per_listener)
        + len(per_listener) * layout.model_routes * estimate.rate_limit_bytes_per_route
    )


def model_names_that_fit(rate_limit_bytes_per_route: int, limit: int, providers: int) -> int:
    """How many model names a configuration with these rate-limit bytes per model route can serve under the
    message `limit` (with the headroom), in as few routes as hold them, from `providers` providers."""

    def fits(models: int) -> bool:
        routes = -(-models // MAX_MODELS_PER_ROUTE)
        layout = RouteLayout(model_routes=models, catch_all_routes=routes, providers=providers)
        estimate = MessageEstimate(0, rate_limit_bytes_per_route, layout)
        return dataclasses.replace(estimate, total_bytes=_message_bytes(estimate)).required_limit() <= limit

    low, high = 0, 1
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:  # fits(low) and not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def format_bytes(size: int) -> str:
    """1536 → '1.5 KiB'; exact byte counts stay readable in messages."""
    if size >= MIB:
        return f"{size / MIB:.2f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} B"

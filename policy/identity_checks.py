"""Checks of who a call is charged to: the SecurityPolicies that write `x-actor-id` (JWT and API-key), one value per
admitted call, the suspension rules, and the listener's filter order around Agent Router's processor."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.budget_rules import (
    ACTOR_HEADER,
)
from core.filter_chain import (
    API_KEY_AUTH,
    CUSTOM_RESPONSE,
    IDENTITY_BEFORE_AGENT_ROUTER,
    JWT_AUTHN,
    identity_filters_after_agent_router,
    listener_chain,
)
from core.identity import API_KEYS, SourceName, actor_header_value, parse_header_value
from core.plain import dig
from core.settings import PROJECT
from core.suspension import ONE_ACTOR_ID_CEL, ONE_ACTOR_ID_RULE
from policy.resources import (
    GATEWAY_AUDIENCE,
    UNKNOWN,
    Resource,
    as_dict,
    as_list,
    copies_sub_to_actor_header,
    dotted,
    has_unknown,
    is_budget_policy,
    lower,
    walk,
)

# Keys under which a header modifier changes the *response*: x-actor-id there is harmless.
_RESPONSE_KEYS = re.compile(r"response", re.IGNORECASE)


def _names_api_key_actor(resource: Resource, path: tuple[str, ...]) -> bool:
    """`spec.apiKeyAuth` of a SecurityPolicy without `jwt`: where a verified API key's client id may name the actor.

    Envoy's api_key_auth filter (order 7) writes the client id with `setCopy`, replacing a client-sent value
    (envoy api_key_auth.cc @03503b34); jwt_authn (order 10) would remove it again if the same routes had a JWT
    requirement (envoyproxy/gateway v1.9.0 internal/xds/translator/httpfilters.go, envoy jwt_authn extractor
    `sanitizeHeaders`).
    """
    return (
        resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy")
        and path == ("spec", "apiKeyAuth")
        and "jwt" not in resource.spec
    )


def check_actor_header_untouched(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Nothing but a verified identity sets `x-actor-id` (the JWT filter's claim copy, or the API-key filter's client
    id in a SecurityPolicy without jwt), and nothing removes it on the way to the provider.

    The only allowed touch is the ClientTrafficPolicy's `earlyRequestHeaders.remove`, which drops a
    client-sent value before any filter runs.
    """
    del config
    if not resource.is_kubernetes or resource.kind in ("Secret", "ConfigMap"):
        return []
    problems: list[str] = []
    who = resource.describe()
    scope = {key: value for key, value in resource.props.items() if key not in ("metadata", "apiVersion", "kind")}
    for path, node in walk(scope):
        if not isinstance(node, dict) or any(_RESPONSE_KEYS.search(part) for part in path):
            continue
        where = dotted(path) or "spec"
        early = bool(path) and path[-1] == "earlyRequestHeaders"
        if not early and any(lower(h) == ACTOR_HEADER for h in as_list(node.get("remove"))):
            problems.append(
                f"{who}: {where}.remove drops {ACTOR_HEADER} before the request is done: the rate limit reads "
                f"it again to charge the response, so nothing would be charged. Remove {ACTOR_HEADER} from "
                "that list (only ClientTrafficPolicy earlyRequestHeaders may drop it, before the JWT filter)"
            )
        for verb in ("set", "add"):
            for entry in as_list(node.get(verb)):
                if isinstance(entry, dict) and lower(entry.get("name")) == ACTOR_HEADER:
                    problems.append(
                        f"{who}: {where}.{verb} writes {ACTOR_HEADER}: only the verified JWT subject may set it, "
                        "or a request could spend another actor's budget. Remove that entry"
                    )
        if lower(node.get("forwardClientIDHeader")) == ACTOR_HEADER and not _names_api_key_actor(resource, path):
            problems.append(
                f"{who}: {where}.forwardClientIDHeader writes {ACTOR_HEADER}: only a verified identity may set it, "
                "and an API key's client id does so only from the apiKeyAuth of a SecurityPolicy without jwt (with "
                f"jwt, the JWT filter erases {ACTOR_HEADER} after the API-key filter wrote it). Forward the client ID "
                "in another header, or move apiKeyAuth to a SecurityPolicy of its own"
            )
        if any(lower(h) == ACTOR_HEADER for h in as_list(node.get("headersToBackend"))):
            problems.append(
                f"{who}: {where}.headersToBackend lets an external authorizer write {ACTOR_HEADER}: only the "
                "verified JWT subject may set it. Remove it from that list"
            )
        for entry in as_list(node.get("claimToHeaders")):
            if (
                isinstance(entry, dict)
                and lower(entry.get("header")) == ACTOR_HEADER
                and entry.get("claim") not in ("sub", UNKNOWN)
            ):
                problems.append(
                    f"{who}: {where}.claimToHeaders copies claim {entry.get('claim')!r} into {ACTOR_HEADER}: the "
                    "budget key must be the JWT subject (actor/<atespace>/<name>). Use claim: sub"
                )
    return problems


def check_suspension_keeps_the_listener(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The JWT and API-key SecurityPolicies always have an `authorization` and the budget policy always has its
    response overrides, so that suspending or lifting an actor changes route configuration only
    (core/suspension.py)."""
    del config
    who = resource.describe()
    names_by_key = lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER
    if resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy") and (
        isinstance(resource.spec.get("jwt"), dict) or names_by_key
    ):
        authorization = resource.spec.get("authorization")
        if authorization is None:
            return [
                f"{who} has no authorization: the first suspension would add Envoy's RBAC filter to the listener, "
                "which drains every connection and cuts streams after 60 s. Keep `authorization: {defaultAction: "
                "Allow}` even when nobody is suspended"
            ]
    overrides = resource.spec.get("responseOverride")
    if is_budget_policy(resource) and not has_unknown(overrides) and not as_list(overrides):
        return [
            f"{who} has no responseOverride: the first suspension would add a custom_response filter to the "
            "listener, which drains every connection and cuts streams after 60 s. Keep the suspension's 403 "
            "overrides even when nobody is suspended"
        ]
    return []


# The filters of each listener the program can have (core/suspension.py): the budget policy's custom_response, the
# identity filter (the JWT filter, or on the API-key listener the API-key filter), RBAC (the kill switch) and the
# shared rate limit.
_PROGRAM_LISTENERS = tuple(
    (
        f"{CUSTOM_RESPONSE}/backendtrafficpolicy/budget",
        identity,
        "envoy.filters.http.rbac",
        "envoy.filters.http.ratelimit/budget",
    )
    for identity in (JWT_AUTHN, API_KEY_AUTH)
)


def check_agent_router_after_identity(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """An EnvoyProxy orders custom_response after the identity filters (the JWT filter, and on the API-key listener
    the API-key filter), so that Agent Router's processor (inserted before custom_response) runs after the filter
    that sets `x-actor-id` on every listener (core/filter_chain.py)."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "EnvoyProxy"):
        return []
    filter_order = resource.spec.get("filterOrder")
    if has_unknown(filter_order):
        return []
    # Entries Envoy Gateway could not apply (no name, or anchors that are not filter names) move nothing.
    positions = [
        position
        for position in map(as_dict, as_list(filter_order))
        if isinstance(position.get("name"), str)
        and all(isinstance(position.get(anchor), str | None) for anchor in ("before", "after"))
    ]
    late = sorted(
        {
            name
            for filters in _PROGRAM_LISTENERS
            for name in identity_filters_after_agent_router(listener_chain(filters, positions))
        }
    )
    if not late:
        return []
    return [
        f"{resource.describe()}: Agent Router's processor would run before {', '.join(late)} (Envoy Gateway puts "
        "custom_response first, and Agent Router inserts itself before it), so it would miss x-actor-id and strip "
        "it from a retried call, which is then charged nothing. Keep spec.filterOrder "
        f"{[dict(p) for p in IDENTITY_BEFORE_AGENT_ROUTER]}"
    ]


def _api_key_problems(resource: Resource, who: str) -> list[str]:
    """An API-key SecurityPolicy that names the actor: the agent's key removed before the request goes upstream,
    and the suspension rules."""
    api_key_auth = as_dict(resource.spec.get("apiKeyAuth"))
    problems: list[str] = []
    sanitize = api_key_auth.get("sanitize")
    if sanitize is not True and not has_unknown(sanitize):
        problems.append(
            f"{who}: apiKeyAuth.sanitize is not true: the agent's API key would travel upstream to the model provider "
            "(only authorization is removed by the AIServiceBackends). Set apiKeyAuth.sanitize: true"
        )
    return problems + _authorization_problems(resource, who, [])


def check_jwt_names_the_actor(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A JWT SecurityPolicy: a valid token required (neither `optional` nor `failOpen`), audiences on every
    provider, and `sub` → `x-actor-id`. An API-key SecurityPolicy naming the actor: the key removed upstream."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return []
    jwt = resource.spec.get("jwt")
    if not isinstance(jwt, dict):
        if lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER:
            return _api_key_problems(resource, resource.describe())
        return []
    who = resource.describe()
    problems: list[str] = []
    if jwt.get("optional") is True:
        problems.append(
            f"{who}: jwt.optional is true: a request without a token would pass with no {ACTOR_HEADER} and "
            "so with no budget. Remove optional (or set it to false)"
        )
    if jwt.get("failOpen") is True:
        problems.append(
            f"{who}: jwt.failOpen is true: a request with a missing or invalid token would pass with no "
            f"{ACTOR_HEADER} and so with no budget. Remove failOpen (or set it to false)"
        )
    providers = [p for p in as_list(jwt.get("providers")) if isinstance(p, dict)]
    if not providers:
        problems.append(f"{who}: jwt has no providers: add the Substrate IdP provider")
    for position, provider in enumerate(providers):
        label = f"JWT provider {provider.get('name', position)!r}"
        audiences = provider.get("audiences")
        if not has_unknown(audiences) and not any(isinstance(a, str) and a for a in as_list(audiences)):
            problems.append(
                f"{who}: {label} has no audiences: any token the issuer signs, for any service, would be "
                f"accepted here. Set audiences to the one the egress policies request ({GATEWAY_AUDIENCE})"
            )
        claims = provider.get("claimToHeaders")
        if not has_unknown(claims) and not copies_sub_to_actor_header(provider):
            problems.append(
                f"{who}: {label} does not copy claim sub into {ACTOR_HEADER}: requests it admits carry no "
                f"actor id, so no budget rule applies to them. Add claimToHeaders: "
                f"[{{header: {ACTOR_HEADER}, claim: sub}}]"
            )
    problems.extend(_authorization_problems(resource, who, providers))
    return problems


def _token_locations(provider: Mapping[str, Any]) -> list[str] | None:
    """Where Envoy looks for a provider's token (`header <name>`, `query <name>`, `cookie <name>`), or None when
    `extractFrom` is left out: then Envoy's defaults, the `Authorization` header *and* the `access_token` query
    parameter (envoy source/extensions/filters/http/jwt_authn/extractor.cc; envoyproxy/gateway v1.9.0
    internal/xds/translator/jwt.go renders `extractFrom` as `from_headers`/`from_params`/`from_cookies`)."""
    extract_from = provider.get("extractFrom")
    if extract_from is None:
        return None
    found = [f"header {lower(as_dict(h).get('name'))}" for h in as_list(as_dict(extract_from).get("headers"))]
    found += [f"query {p}" for p in as_list(as_dict(extract_from).get("params"))]
    return found + [f"cookie {c}" for c in as_list(as_dict(extract_from).get("cookies"))]


def _one_actor_id_rule_first(authorization: Any) -> bool:
    """Whether an `authorization` starts by denying a request without exactly one `x-actor-id` (core.suspension)."""
    rules = as_list(as_dict(authorization).get("rules"))
    first = rules[0] if rules and isinstance(rules[0], dict) else {}
    return first.get("action") == "Deny" and first.get("cel") == ONE_ACTOR_ID_CEL and not first.get("principal")


def check_one_actor_id_per_call(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A SecurityPolicy that names the actor yields exactly one `x-actor-id` per admitted call, or refuses the call:

    * each JWT provider reads its token from one place only. Envoy verifies every token it extracts and adds the
      claim header once per token (envoy jwt_authn authenticator.cc `addJWTClaimToHeader`): a token in the header
      and another in the query gave two values, the class rule's pattern matched one while its `Distinct` entry
      counted the other (review 2026-12b);
    * its authorization starts with the `one-actor-id` Deny rule: a verified token without `sub` writes no header,
      and no budget rule charges such a call;
    * an API-key policy has credentials: with `credentialRefs: []` every call on its listener fails.
    """
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return []
    who = resource.describe()
    spec = resource.spec
    jwt = spec.get("jwt")
    api_key = as_dict(spec.get("apiKeyAuth"))
    names_actor = isinstance(jwt, dict) or lower(api_key.get("forwardClientIDHeader")) == ACTOR_HEADER
    if not names_actor or has_unknown(spec):
        return []
    problems: list[str] = []
    for position, provider in enumerate(p for p in as_list(as_dict(jwt).get("providers")) if isinstance(p, dict)):
        label = f"JWT provider {provider.get('name', position)!r}"
        locations = _token_locations(provider)
        if locations is None:
            problems.append(
                f"{who}: {label} has no extractFrom, so Envoy also takes a token from the access_token query "
                f"parameter: a second admitted token there gives the call a second {ACTOR_HEADER} value, and a class "
                "or pool limit can be escaped. Set extractFrom: {headers: [{name: Authorization, valuePrefix: "
                '"Bearer "}]}'
            )
        elif len(locations) != 1:
            problems.append(
                f"{who}: {label} reads tokens from {len(locations)} places ({', '.join(locations) or 'none'}): "
                f"each admitted token adds an {ACTOR_HEADER} value, so a call can carry two. Read the Authorization "
                'header alone: extractFrom: {headers: [{name: Authorization, valuePrefix: "Bearer "}]}'
            )
    if "apiKeyAuth" in spec and not as_list(api_key.get("credentialRefs")):
        problems.append(
            f"{who}: apiKeyAuth has no credentialRefs: no key can pass, so every call on its listener gets 401. "
            "Reference the API-key Secrets, or remove the API-key listener (drop apiKeys from identity.sources)"
        )
    if not _one_actor_id_rule_first(spec.get("authorization")):
        problems.append(
            f"{who}: authorization does not start with the {ONE_ACTOR_ID_RULE} rule: a verified token without sub "
            f"writes no {ACTOR_HEADER}, and no budget rule charges a call without one. Put first: "
            f"{{name: {ONE_ACTOR_ID_RULE}, action: Deny, cel: {ONE_ACTOR_ID_CEL!r}}}"
        )
    return problems


def _source_of(value: Any) -> SourceName | None:
    """The identity source whose verified callers carry `x-actor-id: value`, or None when none gives that value."""
    caller = parse_header_value(value) if isinstance(value, str) else None
    return caller.source if caller is not None else None


def _authorization_problems(resource: Resource, who: str, providers: list[dict[str, Any]]) -> list[str]:
    """The kill switch on a SecurityPolicy: Deny rules on the verified `sub` (JWT policy) or on the `x-actor-id` the
    API-key filter wrote (API-key policy), Allow for everyone else.

    Envoy Gateway v1.9.0 (api/v1alpha1/authorization_types.go): rules are first-match, `defaultAction` is
    Deny when left out, a JWT principal reads claims of a provider of the same policy, and a String claim (or a
    header) must equal one of the values exactly.
    """
    authorization = resource.spec.get("authorization")
    if not isinstance(authorization, dict):
        return []
    problems: list[str] = []
    default_action = authorization.get("defaultAction")
    if default_action is None:
        problems.append(
            f"{who}: authorization has no defaultAction, and Envoy Gateway's default is Deny: every actor the rules "
            "do not name would be refused with 403. Set authorization.defaultAction: Allow (the suspension rules "
            "deny the suspended actors)"
        )
    elif default_action == "Deny":
        problems.append(
            f"{who}: authorization.defaultAction is Deny: every actor no Allow rule names is refused with 403. "
            "Set it to Allow and deny only suspended actors"
        )
    # Only a string names a provider: a malformed name (a list, a number) must give a message, never a TypeError.
    names = {name for p in providers if isinstance(name := p.get("name"), str)}
    allowed_before: list[int] = []
    for index, rule in enumerate(as_list(authorization.get("rules"))):
        if not isinstance(rule, dict) or has_unknown(rule):
            continue
        where = f"{who}: authorization rule {index} ({rule.get('name', 'unnamed')})"
        if rule.get("action") == "Allow":
            allowed_before.append(index)
            continue
        jwt = as_dict(dig(rule, "principal", "jwt"))
        sub_claims = [c for c in as_list(jwt.get("claims")) if isinstance(c, dict) and c.get("name") == "sub"]
        header_values = [
            value
            for match in as_list(dig(rule, "principal", "headers"))
            if isinstance(match, dict) and lower(match.get("name")) == ACTOR_HEADER
            for value in as_list(match.get("values"))
        ]
        if header_values:
            strays = [v for v in header_values if _source_of(v) != API_KEYS]
            if strays:
                problems.append(
                    f"{where} denies {ACTOR_HEADER} values {strays[:3]} that no API key's client id carries (an API "
                    f"key names its actor {actor_header_value('apikey:ci-bot')!r}), so nobody is suspended. Write "
                    f"e.g. {actor_header_value('apikey:ci-bot')!r} ({PROJECT}:suspended lists apikey:ci-bot)"
                )
        if not sub_claims:
            if header_values and allowed_before:
                problems.append(
                    f"{where} comes after Allow rule(s) {allowed_before}: rules are first-match, so an actor an "
                    "earlier Allow rule admits is never suspended. Put the suspension rules first"
                )
            continue
        provider = jwt.get("provider")
        if not isinstance(provider, str) or provider not in names:
            problems.append(
                f"{where} reads claims of JWT provider {provider!r}, which this policy does not define "
                f"(have {sorted(names)}): the rule never matches, so nobody is "
                "suspended. Name the policy's provider"
            )
        for claim in sub_claims:
            if claim.get("valueType", "String") != "String":
                problems.append(
                    f"{where} matches sub as {claim.get('valueType')}: the subject is one string. Use valueType String"
                )
            strays = [v for v in as_list(claim.get("values")) if _source_of(v) in (None, API_KEYS)]
            if strays:
                problems.append(
                    f"{where} denies subjects {strays[:3]} that no verified token carries: a Substrate actor's subject "
                    f"is {actor_header_value('agents/actor-c')!r}, a service account's "
                    f"{actor_header_value('serviceaccount:agents/bot')!r}, so these actors are not suspended. Write "
                    f"e.g. {actor_header_value('agents/actor-c')!r} ({PROJECT}:suspended lists agents/actor-c)"
                )
        if allowed_before:
            problems.append(
                f"{where} comes after Allow rule(s) {allowed_before}: rules are first-match, so an actor an earlier "
                "Allow rule admits is never suspended. Put the suspension rules first"
            )
    return problems

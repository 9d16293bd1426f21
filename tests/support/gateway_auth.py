"""What the gateway answers a model call before any budget applies, from the program's own manifests: which status a
caller gets on each listener, and which `x-actor-id` the rate limit then sees.

A model of the HTTP filters Envoy Gateway v1.9.0 puts in front of the budget rules, in their order
(internal/xds/translator/httpfilters.go: api_key_auth 7, jwt_authn 10, rbac 301, ratelimit 303), each following
the upstream source named below. Tokens are modelled, not signed: a `Token` says who signed it, and a provider
accepts the signature when its keys are that signer's (what a JWKS check decides).

* ClientTrafficPolicy `headers.earlyRequestHeaders.remove` drops headers before any filter runs
  (api/v1alpha1/clienttrafficpolicy_types.go).
* jwt_authn (envoy source/extensions/filters/http/jwt_authn: extractor.cc, authenticator.cc, verifier.cc;
  research of issue 17 §1): the token comes from `Authorization: Bearer`; every provider first removes its
  `claim_to_headers` headers (`sanitizeHeaders`); a provider with an `issuer` fails a token of another issuer
  with JwtUnknownIssuer; an audience it does not allow is JwtAudienceNotAllowed; a bad signature
  JwtVerificationFail; a value that is not `header.payload.signature` JwtBadFormat. Several providers are
  `requires_any`: the first that verifies wins and copies its claims; otherwise the final status prefers an error
  that is neither JwtMissed nor JwtUnknownIssuer, then JwtUnknownIssuer. The local reply is 403 for
  JwtAudienceNotAllowed, 401 otherwise, with `WWW-Authenticate`.
* api_key_auth (envoy source/extensions/filters/http/api_key_auth/api_key_auth.cc @03503b34): the key sources are
  tried in order, the first header present wins and a leading `Bearer ` is stripped; no key or an unknown key is
  401 "Client authentication failed." without `WWW-Authenticate`; a known key sets the forwarding header to its
  client id (`setCopy`) and, with hide_credentials (`sanitize`), removes every key header.
* rbac (internal/xds/translator/authorization.go): rules in order, the first match decides; a `jwt` principal
  matches only a token its provider verified, on exact String claims; a `headers` principal matches the request
  header exactly; a `cel` rule matches when its expression is true over the request headers; no match takes
  `defaultAction`. A Deny is 403 with no `WWW-Authenticate`.
* Agent Router's upstream processor (`provider_request`, envoyproxy/ai-gateway v1.1.0): the AIServiceBackend's
  `headerMutation.remove`, lowercased by the controller (internal/controller/gateway.go
  `headerMutationToFilterAPI`), removes each listed header the request has, except Agent Router's own
  (`x-ai-eg-*`, `x-envoy-original-path`) and pseudo-headers (internal/headermutator/header_mutator.go); the
  BackendSecurityPolicy's handler then sets the provider key (internal/backendauth/api_key.go `Authorization:
  Bearer <key>`, anthropicapikey.go `x-api-key: <key>`) in the same mutation (internal/extproc/processor_impl.go),
  and Envoy's ext_proc applies every removal before any set (envoy
  source/extensions/filters/http/ext_proc/mutation_utils.cc `applyHeaderMutations`).
* custom_response (BackendTrafficPolicy `responseOverride`, internal/xds/translator/custom_response.go): the first
  rule whose status (and, when given, present response headers) match rewrites a local reply's body, whichever
  filter sent it and wherever custom_response sits in the chain: Envoy encodes a local reply through every
  encoder filter of the stream (envoy source/common/http/filter_manager.cc `sendLocalReplyViaFilterChain`). Seen
  with Envoy 1.39 on Envoy Gateway's own translation of the program (tests/test_real_envoy.py): with
  custom_response after jwt_authn, the JWT filter's 403 for a wrong audience is rewritten. (Until 2026-12-02 this
  model let custom_response rewrite only the replies of the filters after it; the real Envoy disagreed.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes

from core.filter_chain import API_KEY_AUTH, CUSTOM_RESPONSE, JWT_AUTHN
from tests.support.program import plain

RBAC = "envoy.filters.http.rbac"

JWT_MISSED = "Jwt is missing"
JWT_UNKNOWN_ISSUER = "Jwt issuer is not configured"
JWT_BAD_FORMAT = "Jwt is not in the form of Header.Payload.Signature"
JWT_AUDIENCE = "Audiences in Jwt are not allowed"
JWT_VERIFICATION = "Jwt verification fails"
API_KEY_REFUSED = "Client authentication failed."
RBAC_DENIED = "RBAC: access denied"


@dataclass(frozen=True)
class Token:
    """A JWT as the model sees it: its claims and who signed it (a JWKS's owner)."""

    issuer: str
    subject: str | None
    """None: a token without `sub` (jwt_authn's `claim_to_headers` then writes no header)."""
    audiences: tuple[str, ...]
    signed_by: str

    def encode(self) -> str:
        """`header.payload.signature`, so the model tells a JWT from an API key the way Envoy does (three parts)."""
        claims = {"iss": self.issuer, "sub": self.subject, "aud": list(self.audiences)}
        payload = json.dumps({name: value for name, value in claims.items() if value is not None})
        return f"model.{payload.encode().hex()}.{self.signed_by}"


def _decode(text: str) -> Token | None:
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != "model":
        return None
    claims = json.loads(bytes.fromhex(parts[1]))
    return Token(claims["iss"], claims.get("sub"), tuple(claims["aud"]), parts[2])


@dataclass(frozen=True)
class Outcome:
    """What the caller gets before the model is called: a refusal, or admission with the `x-actor-id` the rate
    limit keys on (None: no header, so no budget rule applies)."""

    status: int  # 200 when admitted (the call goes on to the budget check and the model)
    body: str = ""
    actor_id: str | None = None
    www_authenticate: bool = False
    upstream_headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Listener:
    """One Gateway listener with the SecurityPolicy that applies there and the stack's other gateway policies."""

    security: Mapping[str, Any]
    early_removed: tuple[str, ...]
    response_overrides: Sequence[Mapping[str, Any]] = ()
    signers: Mapping[str, str] = field(default_factory=dict)
    """JWT provider name → whose keys its JWKS holds (the signer it accepts)."""
    credentials: Mapping[str, str] = field(default_factory=dict)
    """API key → client id, as Envoy Gateway reads them from the referenced Secrets."""
    chain: Sequence[str] = ()
    """The listener's HTTP filters in the order Envoy runs them (core.filter_chain.listener_chain)."""


def _rewrites(listener: Listener) -> bool:
    """Whether the listener has a custom_response filter: it sees every local reply (module docstring)."""
    return any(name.startswith(CUSTOM_RESPONSE) for name in listener.chain)


def _override(listener: Listener, status: int, headers: Mapping[str, str], body: str, sender: str) -> str:
    del sender  # every filter's local reply passes custom_response
    if not _rewrites(listener):
        return body
    for rule in listener.response_overrides:
        match = rule.get("match") or {}
        codes = [code.get("value") for code in match.get("statusCodes") or []]
        if codes and status not in codes:
            continue
        wanted = [h["name"].lower() for h in match.get("responseHeaders") or []]
        if any(name not in headers for name in wanted):
            continue
        return str(rule["response"]["body"]["inline"])
    return body


def _reply(listener: Listener, sender: str, status: int, body: str, www_authenticate: bool = False) -> Outcome:
    headers = {"www-authenticate": "Bearer"} if www_authenticate else {}
    return Outcome(status, _override(listener, status, headers, body, sender), None, www_authenticate)


def _jwt(listener: Listener, jwt: Mapping[str, Any], headers: dict[str, str]) -> tuple[Outcome | None, str | None]:
    """jwt_authn: (a refusal, None) or (None, the provider that verified the token)."""
    providers = [p for p in jwt.get("providers") or []]
    for provider in providers:  # every provider's extractor sanitizes its claim headers before verifying
        for claim in provider.get("claimToHeaders") or []:
            headers.pop(claim["header"].lower(), None)
    authorization = headers.get("authorization", "")
    if not authorization.startswith("Bearer "):
        return _reply(listener, JWT_AUTHN, 401, JWT_MISSED, www_authenticate=True), None
    token = _decode(authorization.removeprefix("Bearer "))
    errors: list[str] = []
    for provider in providers:
        if token is None:
            errors.append(JWT_BAD_FORMAT)
        elif provider.get("issuer") and token.issuer != provider["issuer"]:
            errors.append(JWT_UNKNOWN_ISSUER)
        elif provider.get("audiences") and not set(token.audiences) & set(provider["audiences"]):
            errors.append(JWT_AUDIENCE)
        elif listener.signers.get(provider["name"]) != token.signed_by:
            errors.append(JWT_VERIFICATION)
        else:
            for claim in provider.get("claimToHeaders") or []:  # a missing claim writes nothing
                value = getattr(token, {"sub": "subject", "iss": "issuer"}[claim["claim"]])
                if value is not None:
                    headers[claim["header"].lower()] = value
            return None, provider["name"]
    ranked = [e for e in errors if e not in (JWT_MISSED, JWT_UNKNOWN_ISSUER)] or errors
    status = 403 if ranked[0] == JWT_AUDIENCE else 401
    return _reply(listener, JWT_AUTHN, status, ranked[0], www_authenticate=True), None


def _api_key(listener: Listener, api_key_auth: Mapping[str, Any], headers: dict[str, str]) -> Outcome | None:
    """api_key_auth: a refusal, or None with the client id written into the forwarding header."""
    sources = [h.lower() for entry in api_key_auth.get("extractFrom") or [] for h in entry.get("headers") or []]
    key = ""
    for source in sources:
        if source in headers:
            key = headers[source].removeprefix("Bearer ")
            if key:
                break
    if not key or key not in listener.credentials:
        return _reply(listener, API_KEY_AUTH, 401, API_KEY_REFUSED)
    forward = (api_key_auth.get("forwardClientIDHeader") or "").lower()
    if forward:
        headers[forward] = listener.credentials[key]
    if api_key_auth.get("sanitize"):
        for source in sources:
            headers.pop(source, None)
    return None


def _cel_matches(expression: str, headers: Mapping[str, str]) -> bool:
    """A rule's `cel` over the request headers as RBAC sees them, evaluated by a real CEL implementation (cel-python):
    only a boolean true matches; false, another type and an evaluation error do not (Envoy Gateway v1.9.0
    api/v1alpha1/authorization_types.go `CEL`; Envoy joins a repeated header's values with `,`)."""
    environment = celpy.Environment()
    try:
        result = environment.program(environment.compile(expression)).evaluate(
            {"request": celpy.json_to_cel({"headers": dict(headers)})}
        )
    except celpy.CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def _rbac(
    listener: Listener, authorization: Mapping[str, Any], headers: Mapping[str, str], verified: tuple[str, Token] | None
) -> Outcome | None:
    for rule in authorization.get("rules") or []:
        principal = rule.get("principal") or {}
        matched = _cel_matches(rule["cel"], headers) if "cel" in rule else True
        if "jwt" in principal:
            jwt = principal["jwt"]
            if verified is None or verified[0] != jwt["provider"]:
                matched = False
            else:
                claims = {"sub": verified[1].subject, "iss": verified[1].issuer}
                matched = all(claims.get(c["name"]) in c["values"] for c in jwt.get("claims") or [])
        for header in principal.get("headers") or []:
            matched = matched and headers.get(header["name"].lower()) in header["values"]
        if matched:
            return _reply(listener, RBAC, 403, RBAC_DENIED) if rule["action"] == "Deny" else None
    if authorization.get("defaultAction", "Deny") == "Deny":
        return _reply(listener, RBAC, 403, RBAC_DENIED)
    return None


def answer(listener: Listener, request_headers: Mapping[str, str]) -> Outcome:
    """The outcome of one model call on `listener` with these request headers."""
    headers = {name.lower(): value for name, value in request_headers.items()}
    for name in listener.early_removed:
        headers.pop(name.lower(), None)
    security = listener.security
    verified: tuple[str, Token] | None = None
    if security.get("apiKeyAuth"):
        refused = _api_key(listener, security["apiKeyAuth"], headers)
        if refused is not None:
            return refused
    if security.get("jwt"):
        token_text = headers.get("authorization", "").removeprefix("Bearer ")
        refused, provider = _jwt(listener, security["jwt"], headers)
        if refused is not None:
            return refused
        token = _decode(token_text)
        assert provider is not None and token is not None
        verified = (provider, token)
    if security.get("authorization") is not None:
        refused = _rbac(listener, security["authorization"], headers, verified)
        if refused is not None:
            return refused
    return Outcome(200, "", headers.get("x-actor-id"), False, headers)


AGENT_ROUTER_HEADER_PREFIX = "x-ai-eg-"
AGENT_ROUTER_KEPT_HEADERS = frozenset({"x-envoy-original-path"})
PROVIDER_KEY_HEADERS = {"APIKey": ("authorization", "Bearer {key}"), "AnthropicAPIKey": ("x-api-key", "{key}")}
"""BackendSecurityPolicy type → the header its handler sets and how it writes the provider's key."""


def provider_request(
    admitted: Outcome, service_backend: Mapping[str, Any], security: Mapping[str, Any], provider_key: str
) -> dict[str, str]:
    """The request headers the provider receives for an admitted call: the headers after the gateway's filters
    (`admitted.upstream_headers`) through Agent Router's upstream processor for this AIServiceBackend and its
    BackendSecurityPolicy (both specs as the program registers them)."""
    assert admitted.status == 200, admitted
    headers = {name.lower(): value for name, value in admitted.upstream_headers.items()}
    mutation = service_backend.get("headerMutation") or {}
    removed = [
        name.lower()
        for name in mutation.get("remove") or []
        if not name.startswith((":", AGENT_ROUTER_HEADER_PREFIX)) and name.lower() not in AGENT_ROUTER_KEPT_HEADERS
    ]
    sets = [(str(h["name"]).lower(), str(h["value"])) for h in mutation.get("set") or []]
    header, template = PROVIDER_KEY_HEADERS[security["type"]]
    sets.append((header, template.format(key=provider_key)))
    for name in removed:  # Envoy: every removal first
        headers.pop(name, None)
    for name, value in sets:  # then every set, overwriting
        headers[name] = value
    return headers


def refusal_message(body: str) -> str:
    """The message of a JSON error body (an override), or the body itself (Envoy's own local reply)."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body


def secret_string_data(inputs: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's `stringData` as the program registered it: the values inside Pulumi's secret wrapper."""
    return dict(plain(inputs["stringData"]))

"""Who is refused before any model is called: actors in `agent-budgets:suspended` (the kill switch), and Kubernetes
service accounts that are not in `agent-budgets:actors` (any pod of the cluster can ask for a token with the
gateway's audience, so the JWT policy admits only the listed ones). Both get 403.

Pure builders over plain data. Facts from Envoy Gateway v1.9.0, each checked in source:

* SecurityPolicy `authorization` (api/v1alpha1/authorization_types.go): rules are evaluated in order and
  the first match wins; `defaultAction` applies when no rule matches and is **Deny** when left out, so
  it must be set to Allow here or every actor would be refused. A rule's `principal.jwt` matches claims
  of the token the same SecurityPolicy's JWT provider verified: `claims[{name: sub, valueType: String,
  values}]`, at most 128 values a claim (the values are ORed), and the rule names that provider. Envoy
  reads the claim from the jwt_authn filter's metadata (golden test
  internal/xds/translator/testdata/out/xds-ir/authorization-jwt-claim.routes.yaml).
* The RBAC filter that enforces it runs after jwt_authn and Agent Router's ext_proc and **before** the
  rate-limit filter (internal/xds/translator/httpfilters.go: rbac 301, ratelimit 303, router 310): a
  refused request never reaches a model, and no rate-limit descriptor is sent for it, so its counters
  are neither checked nor charged. Its local reply is 403 with the body `RBAC: access denied`.
* A rule may hold a `cel` expression instead of a principal (authorization_types.go `AuthorizationRule`, the
  CRD's rule `has(self.principal) || has(self.cel)`): Envoy Gateway parses it with cel-go and hands Envoy the
  parsed AST as a `CelMatcher` over `HttpAttributesCelMatchInput` (authorization.go `buildCELPredicate`), so it
  sees the request headers as they are when RBAC runs; a false result, a non-boolean and an evaluation error are
  all "no match". Every authorization here starts with `one-actor-id`, which refuses a request whose
  `x-actor-id` is missing or holds more than one value (Envoy joins repeated values with `,` for CEL; no actor's
  value holds one, core.identity). Each identity filter is meant to write exactly one value (core.manifests:
  the JWT providers read only the `Authorization` header; api_key_auth replaces the header), but a verified
  token without `sub` writes none (jwt_authn `claim_to_headers` skips a missing claim), and no budget rule
  charges a request without the header: the rule makes that a 403 instead of an unmetered call, whatever the
  identity source, and keeps a second value from ever reaching the rate limit.
* A BackendTrafficPolicy `responseOverride` rewrites responses through Envoy's custom_response filter,
  which EG puts first in the chain (order 0) and the program's EnvoyProxy moves right after jwt_authn
  (core/filter_chain.py), still before rbac, so it sees RBAC's local reply; `source: Local` limits a rule
  to Envoy-generated responses (internal/xds/translator/custom_response.go, `buildLocalReplyPredicate`),
  rules are tried in order, and a `responseHeaders` match needs the header to be present. It can match
  the status code and response headers only, not the reason for the reply.
* A rule's `principal.headers` matches a request header exactly, one of up to 256 values
  (authorization_types.go `AuthorizationHeaderMatch`; authorization.go `buildHeadersPredicate`). The RBAC filter
  reads the request as it is when it runs, after api_key_auth (order 7) wrote the verified client id into
  `x-actor-id`, replacing any client value (envoy api_key_auth.cc @03503b34 `setCopy`). So the API-key policy
  suspends on the header: what it holds there is what the API-key filter verified. A `jwt` principal would need
  a JWT provider in the same policy (the SecurityPolicy's CEL rule), and that policy has none.
* The only other local 403 on these routes is jwt_authn's audience mismatch, and jwt_authn sets
  `WWW-Authenticate` on every reply it refuses (envoy source/extensions/filters/http/jwt_authn/filter.cc
  `onComplete`; envoy issue 16200) while RBAC sets no header. So the first override keeps an honest
  message for a token with the wrong audience, and the second one says "suspended" for the RBAC denial.
* Which HTTP filters the listener has depends on which features the policies use, not on their contents
  per route: EG adds the RBAC filter only while some route has an `authorization`
  (internal/xds/translator/authorization.go `listenerContainsRBAC`; an `authorization` without rules still
  counts, and its per-route config then only holds the default action) and a custom_response filter per
  `responseOverride`, whose rules it carries (custom_response.go `patchHCM`). A change to the listener makes
  Envoy drain its connections and cut streams after the drain time (60 s, EG
  internal/infrastructure/common/proxy_args.go `--drain-time-s`). So both are emitted whether or not anyone
  is suspended: suspending or lifting an actor changes only the RBAC rules inside each route's config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.budget_rules import ACTOR_HEADER
from core.identity import (
    API_KEYS,
    JWT_PROVIDER_NAMES,
    KUBERNETES,
    SUBSTRATE,
    SourceName,
    actor_header_value,
    actors_of_source,
)

SUSPENSION_RULE_PREFIX = "suspended-actors"
"""The Deny rules of suspended Substrate actors (the name every earlier version gave them)."""
SUSPENDED_SERVICE_ACCOUNTS_PREFIX = "suspended-service-accounts"
LISTED_SERVICE_ACCOUNTS_PREFIX = "listed-service-accounts"
UNLISTED_SERVICE_ACCOUNTS_RULE = "unlisted-service-accounts"
SUSPENDED_API_KEYS_PREFIX = "suspended-api-keys"
MAX_CLAIM_VALUES = 128
"""Envoy Gateway v1.9.0 `JWTClaim.values` MaxItems: more suspended actors take more rules."""
MAX_HEADER_VALUES = 256
"""Envoy Gateway v1.9.0 `AuthorizationHeaderMatch.values` MaxItems."""

ONE_ACTOR_ID_RULE = "one-actor-id"
ONE_ACTOR_ID_CEL = f"!('{ACTOR_HEADER}' in request.headers) || request.headers['{ACTOR_HEADER}'].contains(',')"
"""True for a request the RBAC filter sees without exactly one `x-actor-id` value (see the module docstring)."""

SUSPENDED_ERROR_TYPE = "actor_suspended"
SUSPENDED_BODY = json.dumps(
    {
        "error": {
            "message": (
                "This actor is suspended: the model gateway refuses its calls until an operator lifts the "
                "suspension. Its spent budget is kept. (Also the answer to a credential that names no single actor: a "
                "token without a subject.)"
            ),
            "type": SUSPENDED_ERROR_TYPE,
            "code": SUSPENDED_ERROR_TYPE,
        }
    },
    separators=(",", ":"),
)
REFUSED_BODY = json.dumps(
    {
        "error": {
            "message": (
                "The gateway refuses this caller: it is suspended (an operator lifts the suspension; its spent "
                "budget is kept), or it is a Kubernetes service account that is not in agent-budgets:actors, or its "
                "credential names no single actor (a token without a subject)."
            ),
            "type": SUSPENDED_ERROR_TYPE,
            "code": SUSPENDED_ERROR_TYPE,
        }
    },
    separators=(",", ":"),
)
"""The 403 body of a stack with Kubernetes service accounts, where RBAC also refuses unlisted ones (the RBAC
filter's reply carries nothing that tells the two rules apart)."""


def _token_refused_body(audience_hint: str) -> str:
    return json.dumps(
        {
            "error": {
                "message": (
                    f"The actor token was refused (wrong audience for this gateway): %RESPONSE_CODE_DETAILS%. Check "
                    f"{audience_hint}."
                ),
                "type": "invalid_token",
                "code": "invalid_token",
            }
        },
        separators=(",", ":"),
    )


TOKEN_REFUSED_BODY = _token_refused_body("the audience the egress policy requests")
SERVICE_ACCOUNT_TOKEN_REFUSED_BODY = _token_refused_body(
    "the audience the caller's token was issued for: the egress policy's for a Substrate actor, the projected "
    "volume's `audience` for a service account"
)


def suspended_subjects(actors: Sequence[str]) -> list[str]:
    """The `x-actor-id` values of suspended actors, sorted (so reordering the list changes nothing)."""
    return sorted({actor_header_value(actor) for actor in actors})


def _claim_rules(prefix: str, action: str, provider: str, claim: str, values: Sequence[str]) -> list[dict[str, Any]]:
    """One rule per 128 values of one claim of one provider's tokens (`<prefix>-<n>`)."""
    return [
        {
            "name": f"{prefix}-{position}",
            "action": action,
            "principal": {
                "jwt": {
                    "provider": provider,
                    "claims": [
                        {"name": claim, "valueType": "String", "values": list(values[start : start + MAX_CLAIM_VALUES])}
                    ],
                }
            },
        }
        for position, start in enumerate(range(0, len(values), MAX_CLAIM_VALUES))
    ]


def one_actor_id_rule() -> dict[str, Any]:
    """Deny a request without exactly one `x-actor-id` value: the first rule of every authorization."""
    return {"name": ONE_ACTOR_ID_RULE, "action": "Deny", "cel": ONE_ACTOR_ID_CEL}


def _authorization(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """`one-actor-id` first, then the rules; Allow by default. The same rule set shape with or without suspended
    actors, so the listener keeps its RBAC filter."""
    return {"defaultAction": "Allow", "rules": [one_actor_id_rule(), *rules]}


def suspension_authorization(actors: Sequence[str], jwt_provider: str) -> dict[str, Any]:
    """The SecurityPolicy `authorization` refusing these actors' tokens of `jwt_provider`: one Deny rule per 128
    subjects, then Allow for everyone else (only Allow when nobody is suspended)."""
    return _authorization(_claim_rules(SUSPENSION_RULE_PREFIX, "Deny", jwt_provider, "sub", suspended_subjects(actors)))


def jwt_authorization(
    sources: Sequence[SourceName], actors: Sequence[str], suspended: Sequence[str], kubernetes_issuer: str
) -> dict[str, Any]:
    """The JWT SecurityPolicy's `authorization`, first match wins:

    0. Deny a request without exactly one `x-actor-id` value (`one-actor-id`: a verified token without `sub`);
    1. Deny suspended Substrate actors (`suspended-actors-<n>`, as in every earlier version);
    2. Deny suspended service accounts (`suspended-service-accounts-<n>`);
    3. Allow the service accounts in `actors` (`listed-service-accounts-<n>`);
    4. Deny every other token of the Kubernetes provider (`unlisted-service-accounts`, on its issuer claim);
    then Allow: a verified Substrate actor is admitted by its egress policy already.
    """
    rules: list[dict[str, Any]] = []
    if SUBSTRATE in sources:
        subjects = suspended_subjects(actors_of_source(suspended, SUBSTRATE))
        rules += _claim_rules(SUSPENSION_RULE_PREFIX, "Deny", JWT_PROVIDER_NAMES[SUBSTRATE], "sub", subjects)
    if KUBERNETES in sources:
        provider = JWT_PROVIDER_NAMES[KUBERNETES]
        subjects = suspended_subjects(actors_of_source(suspended, KUBERNETES))
        rules += _claim_rules(SUSPENDED_SERVICE_ACCOUNTS_PREFIX, "Deny", provider, "sub", subjects)
        listed = sorted({actor_header_value(actor) for actor in actors_of_source(actors, KUBERNETES)})
        rules += _claim_rules(LISTED_SERVICE_ACCOUNTS_PREFIX, "Allow", provider, "sub", listed)
        rules.append(
            {
                "name": UNLISTED_SERVICE_ACCOUNTS_RULE,
                "action": "Deny",
                "principal": {
                    "jwt": {
                        "provider": provider,
                        "claims": [{"name": "iss", "valueType": "String", "values": [kubernetes_issuer]}],
                    }
                },
            }
        )
    return _authorization(rules)


def api_key_authorization(suspended: Sequence[str]) -> dict[str, Any]:
    """The API-key SecurityPolicy's `authorization`: `one-actor-id` first, then Deny suspended API-key actors on the
    `x-actor-id` the API-key filter wrote (`suspended-api-keys-<n>`, 256 values a rule), Allow everyone else.
    Always present, so that suspending a key changes route configuration only."""
    values = suspended_subjects(actors_of_source(suspended, API_KEYS))
    rules = [
        {
            "name": f"{SUSPENDED_API_KEYS_PREFIX}-{position}",
            "action": "Deny",
            "principal": {"headers": [{"name": ACTOR_HEADER, "values": values[start : start + MAX_HEADER_VALUES]}]},
        }
        for position, start in enumerate(range(0, len(values), MAX_HEADER_VALUES))
    ]
    return _authorization(rules)


def _json_reply(body: str) -> dict[str, Any]:
    return {"contentType": "application/json", "body": {"type": "Inline", "inline": body}}


BUDGET_SPENT_ERROR_TYPE = "budget_exceeded"
RATE_LIMIT_RESET = "%RESP(x-ratelimit-reset)%"
RATE_LIMIT_LIMIT = "%RESP(x-ratelimit-limit)%"
BUDGET_SPENT_BODY = json.dumps(
    {
        "error": {
            "message": (
                f"A budget of this caller is spent: the gateway refuses its calls until the limit resets, in "
                f"{RATE_LIMIT_RESET} s. Its limits (count;w=window in seconds): {RATE_LIMIT_LIMIT}. Retrying sooner is "
                "refused too, and a refused call still counts against a calls limit."
            ),
            "type": BUDGET_SPENT_ERROR_TYPE,
            "code": BUDGET_SPENT_ERROR_TYPE,
            "reset_seconds": RATE_LIMIT_RESET,
        }
    },
    separators=(",", ":"),
)
"""The body of a budget's 429. Envoy's rate-limit filter answers with an empty body and `x-ratelimit-limit`,
`-remaining` and `-reset` headers (Envoy Gateway v1.9.0 sets `enable_x_ratelimit_headers: DRAFT_VERSION_03`,
internal/xds/translator/ratelimit.go); a custom response replaces the reply's headers, so the body carries the
limit and the reset, read from the original reply by `%RESP(...)%` (Envoy's substitution formatter evaluates a
body format against it; the same operator in a header to add evaluates against the new reply and comes out empty,
so no `Retry-After` can be derived: seen with Envoy 1.39, tests/test_real_envoy.py)."""


NO_RETRY_HEADER = "x-should-retry"
"""The OpenAI and Anthropic Python SDKs obey it before anything else: `false` and they raise at once instead of
retrying a 429 twice with backoff (openai 3.57.0 and anthropic 2.15.0 `_base_client.py` `_should_retry`;
`DEFAULT_MAX_RETRIES = 2` in `_constants.py`). A retry of a spent budget is refused again until the window resets,
and counts against a calls limit: it only spends."""


def budget_spent_response_override() -> dict[str, Any]:
    """The `responseOverride` rule for Envoy's own 429 (a spent budget): a JSON body saying when the limit resets,
    `x-should-retry: false`, and `x-ratelimit-remaining: 0` kept (every budget 429 has nothing remaining: the
    refused limit is over)."""
    return {
        "match": {"statusCodes": [{"type": "Value", "value": 429}]},
        "source": "Local",
        "response": {
            **_json_reply(BUDGET_SPENT_BODY),
            "header": {
                "set": [{"name": "x-ratelimit-remaining", "value": "0"}, {"name": NO_RETRY_HEADER, "value": "false"}]
            },
        },
    }


def suspension_response_overrides(sources: Sequence[SourceName] = (SUBSTRATE,)) -> list[dict[str, Any]]:
    """BackendTrafficPolicy `responseOverride` rules giving the RBAC 403 a body that says why (suspended, or an
    unlisted service account when that source is on), and keeping an honest one for a token's wrong audience."""
    forbidden = [{"type": "Value", "value": 403}]
    any_value = {"type": "RegularExpression", "value": ".*"}
    with_kubernetes = KUBERNETES in sources
    return [
        {
            "match": {
                "statusCodes": forbidden,
                "responseHeaders": [{"name": "www-authenticate", "value": any_value}],
            },
            "source": "Local",
            "response": _json_reply(SERVICE_ACCOUNT_TOKEN_REFUSED_BODY if with_kubernetes else TOKEN_REFUSED_BODY),
        },
        {
            "match": {"statusCodes": forbidden},
            "source": "Local",
            "response": _json_reply(REFUSED_BODY if with_kubernetes else SUSPENDED_BODY),
        },
    ]


# Envoy Gateway v1.9.0 filter names (api/v1alpha1/envoyproxy_types.go `EnvoyFilter`).
JWT_AUTHN_FILTER = "envoy.filters.http.jwt_authn"
RBAC_FILTER = "envoy.filters.http.rbac"
CUSTOM_RESPONSE_FILTER = "envoy.filters.http.custom_response"
RATE_LIMIT_FILTER = "envoy.filters.http.ratelimit"
API_KEY_AUTH_FILTER = "envoy.filters.http.api_key_auth"


def _listener_config(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def listener_http_filters(
    security_policy: Mapping[str, Any],
    traffic_policy: Mapping[str, Any],
    api_key_credentials: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The HTTP filters Envoy Gateway v1.9.0 puts in the listener for the program's two Gateway-wide policies,
    each with what its listener-level configuration is built from (JSON). The per-route parts (RBAC rules,
    rate-limit descriptors) are left out: changing them changes route configuration only.

    Each policy is a manifest (`kind`, `namespace`, `name`, `spec`). Follows internal/xds/translator:
    jwt.go (one jwt_authn filter holding every provider), authorization.go (an empty RBAC filter while any
    route has an authorization), custom_response.go (one filter per response override, named after its
    policy, holding its rules), ratelimit.go (one filter per shared-rule domain, `<ns>/<name>`, and one for the
    listener's own domain, always: `buildRateLimitFilter` inserts it whether or not a rule is non-shared, as
    `egctl x translate` shows), api_key_auth.go (one api_key_auth filter, built from the first route's API-key
    settings with every credential of its Secrets: `api_key_credentials`, key → client id, so a key change is a
    listener change).
    """
    filters: dict[str, str] = {}
    security, traffic = security_policy["spec"], traffic_policy["spec"]
    if security.get("jwt"):
        filters[JWT_AUTHN_FILTER] = _listener_config(security["jwt"].get("providers"))
    if security.get("apiKeyAuth"):
        settings = {key: value for key, value in security["apiKeyAuth"].items() if key != "credentialRefs"}
        filters[API_KEY_AUTH_FILTER] = _listener_config({**settings, "credentials": dict(api_key_credentials or {})})
    if security.get("authorization") is not None:
        filters[RBAC_FILTER] = _listener_config({})
    if traffic.get("responseOverride"):
        owner = f"backendtrafficpolicy/{traffic_policy['namespace']}/{traffic_policy['name']}"
        filters[f"{CUSTOM_RESPONSE_FILTER}/{owner}"] = _listener_config(traffic["responseOverride"])
    rules = ((traffic.get("rateLimit") or {}).get("global") or {}).get("rules") or []
    if any(rule.get("shared") for rule in rules):
        filters[f"{RATE_LIMIT_FILTER}/{traffic_policy['namespace']}/{traffic_policy['name']}"] = _listener_config({})
    if rules:  # the listener's own domain always gets a filter, shared rules or not (ratelimit.go
        filters[RATE_LIMIT_FILTER] = _listener_config({})  # `buildRateLimitFilter`: domains.Insert(listener))
    return filters

"""The kill switch: actors in `agent-budgets:suspended` are refused with 403 before any model is called.

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
* A BackendTrafficPolicy `responseOverride` rewrites responses through Envoy's custom_response filter,
  which EG puts first in the chain (order 0) and the program's EnvoyProxy moves right after jwt_authn
  (core/filter_chain.py), still before rbac, so it sees RBAC's local reply; `source: Local` limits a rule
  to Envoy-generated responses (internal/xds/translator/custom_response.go, `buildLocalReplyPredicate`),
  rules are tried in order, and a `responseHeaders` match needs the header to be present. It can match
  the status code and response headers only, not the reason for the reply.
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

from core.budget_rules import actor_subject

SUSPENSION_RULE_PREFIX = "suspended-actors"
MAX_CLAIM_VALUES = 128
"""Envoy Gateway v1.9.0 `JWTClaim.values` MaxItems: more suspended actors take more rules."""

SUSPENDED_ERROR_TYPE = "actor_suspended"
SUSPENDED_BODY = json.dumps(
    {
        "error": {
            "message": (
                "This actor is suspended: the model gateway refuses its calls until an operator lifts the "
                "suspension. Its spent budget is kept."
            ),
            "type": SUSPENDED_ERROR_TYPE,
            "code": SUSPENDED_ERROR_TYPE,
        }
    },
    separators=(",", ":"),
)
TOKEN_REFUSED_BODY = json.dumps(
    {
        "error": {
            "message": (
                "The actor token was refused (wrong audience for this gateway): %RESPONSE_CODE_DETAILS%. Check "
                "the audience the egress policy requests."
            ),
            "type": "invalid_token",
            "code": "invalid_token",
        }
    },
    separators=(",", ":"),
)


def suspended_subjects(actors: Sequence[str]) -> list[str]:
    """The JWT subjects of suspended actors, sorted (so reordering the list changes nothing)."""
    return sorted({actor_subject(actor) for actor in actors})


def suspension_authorization(actors: Sequence[str], jwt_provider: str) -> dict[str, Any]:
    """The SecurityPolicy `authorization` refusing these actors: one Deny rule per 128 subjects, then Allow for
    everyone else (only Allow when nobody is suspended, so the listener keeps its RBAC filter)."""
    subjects = suspended_subjects(actors)
    rules = [
        {
            "name": f"{SUSPENSION_RULE_PREFIX}-{position}",
            "action": "Deny",
            "principal": {
                "jwt": {
                    "provider": jwt_provider,
                    "claims": [
                        {
                            "name": "sub",
                            "valueType": "String",
                            "values": subjects[start : start + MAX_CLAIM_VALUES],
                        }
                    ],
                }
            },
        }
        for position, start in enumerate(range(0, len(subjects), MAX_CLAIM_VALUES))
    ]
    return {"defaultAction": "Allow", **({"rules": rules} if rules else {})}


def _json_reply(body: str) -> dict[str, Any]:
    return {"contentType": "application/json", "body": {"type": "Inline", "inline": body}}


def suspension_response_overrides() -> list[dict[str, Any]]:
    """BackendTrafficPolicy `responseOverride` rules giving the suspension's 403 a body that says so."""
    forbidden = [{"type": "Value", "value": 403}]
    any_value = {"type": "RegularExpression", "value": ".*"}
    return [
        {
            "match": {
                "statusCodes": forbidden,
                "responseHeaders": [{"name": "www-authenticate", "value": any_value}],
            },
            "source": "Local",
            "response": _json_reply(TOKEN_REFUSED_BODY),
        },
        {
            "match": {"statusCodes": forbidden},
            "source": "Local",
            "response": _json_reply(SUSPENDED_BODY),
        },
    ]


# Envoy Gateway v1.9.0 filter names (api/v1alpha1/envoyproxy_types.go `EnvoyFilter`).
JWT_AUTHN_FILTER = "envoy.filters.http.jwt_authn"
RBAC_FILTER = "envoy.filters.http.rbac"
CUSTOM_RESPONSE_FILTER = "envoy.filters.http.custom_response"
RATE_LIMIT_FILTER = "envoy.filters.http.ratelimit"


def _listener_config(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def listener_http_filters(security_policy: Mapping[str, Any], traffic_policy: Mapping[str, Any]) -> dict[str, str]:
    """The HTTP filters Envoy Gateway v1.9.0 puts in the listener for the program's two Gateway-wide policies,
    each with what its listener-level configuration is built from (JSON). The per-route parts (RBAC rules,
    rate-limit descriptors) are left out: changing them changes route configuration only.

    Each policy is a manifest (`kind`, `namespace`, `name`, `spec`). Follows internal/xds/translator:
    jwt.go (one jwt_authn filter holding every provider), authorization.go (an empty RBAC filter while any
    route has an authorization), custom_response.go (one filter per response override, named after its
    policy, holding its rules), ratelimit.go (one filter per shared-rule domain, `<ns>/<name>`, and one for the
    non-shared rules).
    """
    filters: dict[str, str] = {}
    security, traffic = security_policy["spec"], traffic_policy["spec"]
    if security.get("jwt"):
        filters[JWT_AUTHN_FILTER] = _listener_config(security["jwt"].get("providers"))
    if security.get("authorization") is not None:
        filters[RBAC_FILTER] = _listener_config({})
    if traffic.get("responseOverride"):
        owner = f"backendtrafficpolicy/{traffic_policy['namespace']}/{traffic_policy['name']}"
        filters[f"{CUSTOM_RESPONSE_FILTER}/{owner}"] = _listener_config(traffic["responseOverride"])
    rules = ((traffic.get("rateLimit") or {}).get("global") or {}).get("rules") or []
    if any(rule.get("shared") for rule in rules):
        filters[f"{RATE_LIMIT_FILTER}/{traffic_policy['namespace']}/{traffic_policy['name']}"] = _listener_config({})
    if any(not rule.get("shared") for rule in rules):
        filters[RATE_LIMIT_FILTER] = _listener_config({})
    return filters

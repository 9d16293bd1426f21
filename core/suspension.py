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
  which EG puts first in the chain (order 0), so it sees local replies too; `source: Local` limits a rule
  to Envoy-generated responses (internal/xds/translator/custom_response.go, `buildLocalReplyPredicate`),
  rules are tried in order, and a `responseHeaders` match needs the header to be present. It can match
  the status code and response headers only, not the reason for the reply.
* The only other local 403 on these routes is jwt_authn's audience mismatch, and jwt_authn sets
  `WWW-Authenticate` on every reply it refuses (envoy source/extensions/filters/http/jwt_authn/filter.cc
  `onComplete`; envoy issue 16200) while RBAC sets no header. So the first override keeps an honest
  message for a token with the wrong audience, and the second one says "suspended" for the RBAC denial.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def suspension_authorization(actors: Sequence[str], jwt_provider: str) -> dict[str, Any] | None:
    """The SecurityPolicy `authorization` refusing these actors (None when nobody is suspended).

    One Deny rule per 128 subjects, then Allow for everyone else.
    """
    subjects = suspended_subjects(actors)
    if not subjects:
        return None
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
    return {"defaultAction": "Allow", "rules": rules}


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

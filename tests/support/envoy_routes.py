"""Envoy routes as Envoy Gateway v1.9.0 builds them, with the generated Envoy API classes of `xds-protos`: the
reference the size model (core/xds_size.py) and the rig's message checks (rig/extension_message.py) are held to.

The rate limits follow envoyproxy/gateway v1.9.0 `internal/xds/translator/ratelimit.go` (`buildRouteRateLimits`,
`buildHeaderMatchRateLimitActions`, `rateLimitCostToHitsAddend`, `buildRateLimitOverride`,
`patchRouteWithRateLimitOnTypedFilterConfig`); the RBAC per-route config `internal/xds/translator/authorization.go`.
"""

from __future__ import annotations

import json
from pathlib import Path

from envoy.config.route.v3 import route_components_pb2 as route_pb
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.metadata.v3 import metadata_pb2
from google.protobuf import any_pb2, json_format, wrappers_pb2

from core.suspension import ONE_ACTOR_ID_CEL

PARSED_EXPR_FIXTURE = Path(__file__).parent.parent / "fixtures" / "one-actor-id.parsed-expr.json"
"""The `one-actor-id` expression as Envoy Gateway v1.9.0 hands it to Envoy (cel-go's parse: tree and source
positions), taken from `egctl x translate`; tests/test_real_translators.py holds it to egctl's output."""

NS, NAME = "agent-budgets", "agent-budgets"


def _string_matcher(match):
    kind = match.get("type") or "Exact"
    if kind == "Exact":
        return string_pb2.StringMatcher(exact=match["value"])
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=match["value"]))


def _actions(rule, generic_key, domain_index):
    Action = route_pb.RateLimit.Action  # noqa: N806
    actions = [
        Action(generic_key=Action.GenericKey(descriptor_key=generic_key, descriptor_value=generic_key)),
    ]
    headers = [h for selector in rule.get("clientSelectors") or [] for h in selector.get("headers") or []]
    for position, match in enumerate(headers):
        key = f"rule-{domain_index}-match-{position}"
        if match.get("type") == "Distinct":
            actions.append(Action(request_headers=Action.RequestHeaders(header_name=match["name"], descriptor_key=key)))
        else:
            actions.append(
                Action(
                    header_value_match=Action.HeaderValueMatch(
                        descriptor_key=key,
                        descriptor_value=key,
                        expect_match=wrappers_pb2.BoolValue(value=not match.get("invert", False)),
                        headers=[route_pb.HeaderMatcher(name=match["name"], string_match=_string_matcher(match))],
                    )
                )
            )
    if not headers:
        key = f"rule-{domain_index}-match--1"
        actions.append(Action(generic_key=Action.GenericKey(descriptor_key=key, descriptor_value=key)))
    return actions


def _hits(cost):
    if cost["from"] == "Number":
        return route_pb.RateLimit.HitsAddend(number=wrappers_pb2.UInt64Value(value=cost.get("number", 0)))
    meta = cost["metadata"]
    return route_pb.RateLimit.HitsAddend(format=f"%DYNAMIC_METADATA({meta['namespace']}:{meta['key']})%")


def _override(from_metadata):
    key = metadata_pb2.MetadataKey(
        key=from_metadata["namespace"],
        path=[metadata_pb2.MetadataKey.PathSegment(key=from_metadata["key"])],
    )
    return route_pb.RateLimit.Override(dynamic_metadata=route_pb.RateLimit.Override.DynamicMetadata(metadata_key=key))


def reference_route(rules, route_name="httproute/agent-budgets/mock/rule/0/match/0/*"):
    """An Envoy route carrying the policy's rate limits exactly as Envoy Gateway v1.9.0 builds them."""
    domain = f"{NS}/{NAME}"
    rate_limits = []
    for index, rule in enumerate(rules):
        actions = _actions(rule, f"{domain}/rule/{index}", index)
        limit = rule.get("limit") or {}
        override = _override(limit["fromMetadata"]) if limit.get("fromMetadata") else None
        request = route_pb.RateLimit(actions=actions)
        if override is not None:
            request.limit.CopyFrom(override)
        cost = rule.get("cost") or {}
        if "request" in cost:
            request.hits_addend.CopyFrom(_hits(cost["request"]))
        rate_limits.append(request)
        if "response" in cost:
            response = route_pb.RateLimit(actions=actions, apply_on_stream_done=True)
            response.hits_addend.CopyFrom(_hits(cost["response"]))
            if override is not None:
                response.limit.CopyFrom(override)
            rate_limits.append(response)
    per_route = any_pb2.Any()
    per_route.Pack(rate_limit_pb2.RateLimitPerRoute(domain=domain, rate_limits=rate_limits))
    route = route_pb.Route(name=route_name)
    route.typed_per_filter_config[f"envoy.filters.http.ratelimit/{domain}"].CopyFrom(per_route)
    return route


COST = {
    "request": {"from": "Number", "number": 0},
    "response": {"from": "Metadata", "metadata": {"namespace": "io.envoy.ai_gateway", "key": "llm_total_token"}},
}


def budget_rule(headers, **extra):
    """A shared global rate-limit rule matching `headers`, charging the response's total tokens."""
    return {
        "clientSelectors": [{"headers": headers}],
        "limit": {"requests": 500, "unit": "Day"},
        "shared": True,
        "cost": COST,
        **extra,
    }


# --- the suspension's RBAC per-route config ------------------------------------------------------------


def _cel_predicate(expression, predicate_class, extension_pb2, any_of):
    """The predicate of a `cel` rule: `HttpAttributesCelMatchInput` in, a `CelMatcher` holding the parsed expression
    (xds.type.v3.CelExpression.cel_expr_parsed = 3, a cel.expr.ParsedExpr, wire-compatible with
    google.api.expr.v1alpha1.ParsedExpr, as authorization.go `parseCELToProto` says). The xds-protos release here
    predates field 3, so the CelExpression is written by hand on the wire."""
    from google.api.expr.v1alpha1 import syntax_pb2
    from google.protobuf.internal.encoder import _VarintBytes
    from xds.type.matcher.v3 import http_inputs_pb2 as xds_http_inputs

    assert expression == ONE_ACTOR_ID_CEL, "the fixture holds the program's one expression"
    parsed = json_format.ParseDict(json.loads(PARSED_EXPR_FIXTURE.read_text()), syntax_pb2.ParsedExpr())
    parsed_bytes = parsed.SerializeToString()
    cel_expression = b"\x1a" + _VarintBytes(len(parsed_bytes)) + parsed_bytes
    cel_matcher = b"\x0a" + _VarintBytes(len(cel_expression)) + cel_expression
    matcher_any = any_pb2.Any(type_url="type.googleapis.com/xds.type.matcher.v3.CelMatcher", value=cel_matcher)
    return predicate_class(
        single_predicate=predicate_class.SinglePredicate(
            input=extension_pb2.TypedExtensionConfig(
                name="cel", typed_config=any_of(xds_http_inputs.HttpAttributesCelMatchInput())
            ),
            custom_match=extension_pb2.TypedExtensionConfig(name="cel_matcher", typed_config=matcher_any),
        )
    )


def rbac_per_route(authorization):
    """RBACPerRoute as Envoy Gateway v1.9.0 builds it (internal/xds/translator/authorization.go
    `buildRBACPerRoute`, `buildJWTPredicate`, `buildHeadersPredicate`), for rules whose principal is one String JWT
    claim or one request header."""
    from envoy.config.rbac.v3 import rbac_pb2 as rbac_config
    from envoy.extensions.filters.http.rbac.v3 import rbac_pb2
    from envoy.extensions.matching.common_inputs.network.v3 import network_inputs_pb2
    from envoy.extensions.matching.input_matchers.metadata.v3 import metadata_pb2 as metadata_matcher
    from envoy.type.matcher.v3 import http_inputs_pb2, value_pb2
    from xds.core.v3 import extension_pb2
    from xds.type.matcher.v3 import matcher_pb2
    from xds.type.matcher.v3 import string_pb2 as xds_string_pb2

    def any_of(message):
        packed = any_pb2.Any()
        packed.Pack(message)
        return packed

    def action(allow, name):
        verdict = rbac_config.Action(name="ALLOW" if allow else "DENY", action=0 if allow else 1)
        return matcher_pb2.Matcher.OnMatch(
            action=extension_pb2.TypedExtensionConfig(name=name, typed_config=any_of(verdict))
        )

    Predicate = matcher_pb2.Matcher.MatcherList.Predicate  # noqa: N806
    field_matchers = []
    for rule in authorization.get("rules", []):
        if "cel" in rule:  # buildCELPredicate: the expression as cel-go parses it (egctl's output, a fixture)
            singles = [_cel_predicate(rule["cel"], Predicate, extension_pb2, any_of)]
        elif "headers" in rule["principal"]:  # buildHeadersPredicate: one exact value match per value, ORed
            [header] = rule["principal"]["headers"]
            header_input = http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=header["name"])
            singles = [
                Predicate(
                    single_predicate=Predicate.SinglePredicate(
                        input=extension_pb2.TypedExtensionConfig(name="http_header", typed_config=any_of(header_input)),
                        value_match=xds_string_pb2.StringMatcher(exact=value),
                    )
                )
                for value in header["values"]
            ]
        else:
            jwt = rule["principal"]["jwt"]
            [claim] = jwt["claims"]
            path = [
                network_inputs_pb2.DynamicMetadataInput.PathSegment(key=key)
                for key in (jwt["provider"], *claim["name"].split("."))
            ]
            metadata_input = network_inputs_pb2.DynamicMetadataInput(filter="envoy.filters.http.jwt_authn", path=path)
            singles = [
                Predicate(
                    single_predicate=Predicate.SinglePredicate(
                        input=extension_pb2.TypedExtensionConfig(name="claim", typed_config=any_of(metadata_input)),
                        custom_match=extension_pb2.TypedExtensionConfig(
                            name="claim_matcher",
                            typed_config=any_of(
                                metadata_matcher.Metadata(
                                    value=value_pb2.ValueMatcher(string_match=string_pb2.StringMatcher(exact=value))
                                )
                            ),
                        ),
                    )
                )
                for value in claim["values"]
            ]
        predicate = (
            singles[0] if len(singles) == 1 else Predicate(or_matcher=Predicate.PredicateList(predicate=singles))
        )
        field_matchers.append(
            matcher_pb2.Matcher.MatcherList.FieldMatcher(
                predicate=predicate, on_match=action(rule["action"] == "Allow", rule["name"])
            )
        )
    matcher = matcher_pb2.Matcher(on_no_match=action(authorization["defaultAction"] == "Allow", "default"))
    if field_matchers:  # without rules EG leaves the matcher type unset (proto validation refuses an empty list)
        matcher.matcher_list.CopyFrom(matcher_pb2.Matcher.MatcherList(matchers=field_matchers))
    return rbac_pb2.RBACPerRoute(rbac=rbac_pb2.RBAC(matcher=matcher))

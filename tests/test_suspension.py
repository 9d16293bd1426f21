"""Suspending an actor never touches the gateway listener (core/suspension.py).

Envoy Gateway v1.9.0 decides the listener's HTTP filters from which features the policies use: the RBAC
filter while any route has an `authorization` (internal/xds/translator/authorization.go
`listenerContainsRBAC`), a custom_response filter per `responseOverride`, holding its rules
(custom_response.go `patchHCM`). A listener change drains every connection. So the program emits both
always, and suspending 0, 1 or 500 actors leaves the listener's filters, and their listener-level
configuration, exactly the same: only the RBAC rules inside each route's configuration change.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.manifests import Manifest, budget_policy_manifest, jwt_policy_manifest
from core.suspension import (
    CUSTOM_RESPONSE_FILTER,
    JWT_AUTHN_FILTER,
    RATE_LIMIT_FILTER,
    RBAC_FILTER,
    listener_http_filters,
    one_actor_id_rule,
)
from core.validation import validate_stack

ACTORS = [f"agents/actor-{i:03d}" for i in range(500)]


def policies(suspended: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SecurityPolicy and the BackendTrafficPolicy of a stack with the first `suspended` actors suspended."""
    stack = validate_stack(
        {
            "actors": ACTORS,
            "budgets": {"default": {"tokens": 500, "per": "Day"}},
            "suspended": ACTORS[:suspended],
            "substrate": {"egress": {"enabled": False}},
        },
        lambda key: (True, True),
    )

    def plain(manifest: Manifest) -> dict[str, Any]:
        return {"kind": manifest.kind, "namespace": manifest.namespace, "name": manifest.name, "spec": manifest.spec}

    return plain(jwt_policy_manifest(stack.settings)), plain(budget_policy_manifest(stack.settings, stack.rules))


@pytest.fixture(scope="module")
def by_count() -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    return {count: policies(count) for count in (0, 1, 500)}


def test_the_listener_s_filters_are_the_same_with_0_1_and_500_suspended_actors(by_count):
    filters = {count: listener_http_filters(*pair) for count, pair in by_count.items()}
    assert filters[0] == filters[1] == filters[500]
    names = set(filters[0])
    assert {JWT_AUTHN_FILTER, RBAC_FILTER} <= names
    assert f"{CUSTOM_RESPONSE_FILTER}/backendtrafficpolicy/agent-budgets/agent-budgets" in names
    assert f"{RATE_LIMIT_FILTER}/agent-budgets/agent-budgets" in names


def test_with_nobody_suspended_everyone_is_allowed_and_the_403_overrides_stay(by_count):
    security, traffic = by_count[0]
    assert security["spec"]["authorization"] == {"defaultAction": "Allow", "rules": [one_actor_id_rule()]}
    assert [rule["source"] for rule in traffic["spec"]["responseOverride"]] == ["Local", "Local", "Local"]


def test_suspending_changes_only_the_authorization_rules(by_count):
    (security_0, traffic_0), (security_500, traffic_500) = by_count[0], by_count[500]
    assert traffic_0 == traffic_500, "the budget policy does not move: counter keys are positional"
    rest = {key: value for key, value in security_500["spec"].items() if key != "authorization"}
    assert rest == {key: value for key, value in security_0["spec"].items() if key != "authorization"}
    authorization = security_500["spec"]["authorization"]
    assert authorization["defaultAction"] == "Allow"
    assert authorization["rules"][0] == one_actor_id_rule()
    assert [len(rule["principal"]["jwt"]["claims"][0]["values"]) for rule in authorization["rules"][1:]] == [
        128,
        128,
        128,
        116,
    ]


def test_the_model_sees_a_change_of_features():
    """Without the always-present authorization, the first suspension would add the RBAC filter: the model of
    the listener must tell the two apart, or the test above proves nothing."""
    security, traffic = policies(0)
    without = {**security, "spec": {k: v for k, v in security["spec"].items() if k != "authorization"}}
    assert RBAC_FILTER not in listener_http_filters(without, traffic)
    no_overrides = {**traffic, "spec": {k: v for k, v in traffic["spec"].items() if k != "responseOverride"}}
    assert not any(name.startswith(CUSTOM_RESPONSE_FILTER) for name in listener_http_filters(security, no_overrides))
    other_body = [dict(rule) for rule in traffic["spec"]["responseOverride"]]
    other_body[1] = {
        **other_body[1],
        "response": {"contentType": "text/plain", "body": {"type": "Inline", "inline": "x"}},
    }
    changed = {**traffic, "spec": {**traffic["spec"], "responseOverride": other_body}}
    assert listener_http_filters(security, changed) != listener_http_filters(security, traffic), (
        "the custom_response filter holds its rules in the listener"
    )

"""The CrossGuard policy pack (policy/): every rule passes on what the program declares for each stack file,
and fails, with its own message naming the resource, on a copy broken in exactly one way.

The resources are the real `__main__.py` run under mocks (tests/support/program.py); the engine's view is
imitated: numbers as floats (protobuf Struct), props behind pulumi_policy's unknown-checking proxy, and a
URN carrying the stack name. Validators are called directly (`policy.validate`), never through a pack.
"""

from __future__ import annotations

import copy
import functools
import json
import runpy
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pulumi_policy
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import (
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from core.budget_rules import MATCHES_NOTHING
from core.egress import PolicyInputs, build_rules
from core.ratelimit_model import rules_for_actor, translation_errors
from policy import rules
from tests.support.program import run_program, stack_config
from tests.support.wire import engine_value

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "agent-budgets"
# A capture is a stack file, or a stack file with changes (its URNs name the stack it derives from).
# Every identity source at once: a Substrate actor, a service account and an API key in one class, in one pool
# and suspended.
IDENTITIES: dict[str, Any] = {
    "identity": {"sources": ["substrate", "kubernetes", "apiKeys"]},
    "actors": ["agents/actor-a", "agents/actor-b", "serviceaccount:agents/probe-sa", "apikey:probe-key"],
    "budgets": {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [
            {
                "name": "wide",
                "tokens": 5000,
                "per": "Day",
                "actors": ["agents/actor-b", "serviceaccount:agents/probe-sa", "apikey:probe-key"],
            }
        ],
        "pools": [
            {
                "name": "shared",
                "tokens": 9000,
                "per": "Day",
                "members": ["serviceaccount:agents/probe-sa", "apikey:probe-key"],
                "atespaces": ["agents"],
            }
        ],
    },
    "budgetPolicy": {"classSlots": 1},
    "suspended": ["agents/actor-b", "serviceaccount:agents/probe-sa", "apikey:probe-key"],
}
DERIVED: dict[str, tuple[str, dict[str, Any]]] = {
    "dev-suspended": ("dev", {"suspended": ["agents/actor-b"]}),
    # A pool of a whole atespace, a per-model limit and a limit on output tokens (docs/budgets.md).
    "dev-pools": (
        "dev",
        {
            "budgets": {
                "default": {
                    "limits": [
                        {"tokens": 500, "per": "Day"},
                        {"tokens": 300, "per": "Hour", "count": "output"},
                        {"tokens": 200, "per": "Day", "models": ["mock-large"]},
                    ]
                },
                "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}],
                "pools": [
                    {
                        "name": "team",
                        "atespaces": ["agents"],
                        "limits": [
                            {"tokens": 900, "per": "Day"},
                            {"calls": 30, "per": "Hour", "models": ["mock-large"]},
                        ],
                    }
                ],
            },
            "budgetPolicy": {"limitSlots": 3, "classSlots": 2},
        },
    ),
    "dev-identities": ("dev", IDENTITIES),
    "dev-api-keys-only": ("dev", {"identity": {"sources": ["apiKeys"]}, "actors": ["apikey:probe-key"]}),
}
STACKS = ("dev", "prod", "dev-kubernetes", "dev-suspended", "dev-pools", "dev-identities", "dev-api-keys-only")
# Stack files whose providers need keys: fake values, shaped like real ones (so a leak would be caught).
STACK_SECRETS: dict[str, dict[str, str]] = {
    "prod": {
        "openaiApiKey": "sk-proj-policytest0123456789abcdefghij",
        "anthropicApiKey": "sk-ant-api03-policytest0123456789abcdef",
        "redisPassword": "policy-test-redis-password",
    },
}


@dataclass
class Captured:
    """One custom resource the program registered: what the engine would hand the analyzer."""

    type: str
    name: str
    inputs: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]

    @property
    def object_name(self) -> str | None:
        return (self.inputs.get("metadata") or {}).get("name")


@functools.cache
def _capture(stack: str) -> tuple[tuple[str, str, str], ...]:
    base, changes = DERIVED.get(stack, (stack, {}))
    if not (ROOT / f"Pulumi.{base}.yaml").exists():
        pytest.skip(f"Pulumi.{base}.yaml is not in the repository")
    run = run_program({**stack_config(base), **changes}, secrets=STACK_SECRETS.get(base), stack=base)
    return tuple((r.type, r.name, json.dumps(r.inputs)) for r in run.resources if r.custom)


def captured(stack: str) -> list[Captured]:
    """A fresh, mutable copy of the stack's custom resources."""
    return [Captured(t, n, json.loads(inputs)) for t, n, inputs in _capture(stack)]


def find(resources: list[Captured], kind: str, object_name: str | None = None) -> Captured:
    found = [r for r in resources if r.kind == kind and (object_name is None or r.object_name == object_name)]
    assert len(found) == 1, f"expected one {kind} {object_name or ''}, found {[r.name for r in found]}"
    return found[0]


def find_named(resources: list[Captured], pulumi_name: str) -> Captured:
    [found] = [r for r in resources if r.name == pulumi_name]
    return found


def urn(stack: str, resource: Captured) -> str:
    base = DERIVED.get(stack, (stack, {}))[0]
    return f"urn:pulumi:{base}::{PROJECT}::{resource.type}::{resource.name}"


def options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def validate(policy: Policy, stack: str, resources: list[Captured], config: dict[str, Any] | None = None) -> list[str]:
    """Every violation `policy` reports over the stack's resources (as `message @ urn` for stack policies)."""
    out: list[str] = []
    if isinstance(policy, ResourceValidationPolicy):
        for resource in resources:
            args = ResourceValidationArgs(
                resource.type,
                unknown_checking_proxy(engine_value(resource.inputs)),
                urn(stack, resource),
                resource.name,
                options(),
                None,
                config,
            )
            result = policy.validate(args, lambda message, _urn=None: out.append(message))
            assert result is None, "rules are synchronous"
        return out
    assert isinstance(policy, StackValidationPolicy)
    stack_resources = [
        PolicyResource(
            r.type,
            unknown_checking_proxy(engine_value(r.inputs)),
            urn(stack, r),
            r.name,
            options(),
            None,
            None,
            [],
            {},
        )
        for r in resources
    ]
    result = policy.validate(
        StackValidationArgs(stack_resources, config),
        lambda message, blamed=None: out.append(f"{message} @ {blamed or ''}"),
    )
    assert result is None, "rules are synchronous"
    return out


# ---------------------------------------------------------------------------------------------------------
# The pack itself


def test_the_pack_builds_every_rule_with_the_issue_s_enforcement_levels():
    built: dict[str, Any] = {}

    def fake_pack(**kwargs: Any) -> None:
        built.update(kwargs)

    with mock.patch.object(pulumi_policy, "PolicyPack", fake_pack):
        runpy.run_path(str(ROOT / "policy" / "__main__.py"), run_name="__main__")
    assert built["name"] == "agent-budgets"
    assert built["policies"] == rules.POLICIES
    names = [p.name for p in rules.POLICIES]
    assert len(set(names)) == len(names)
    mandatory = {p.name for p in rules.POLICIES if p.enforcement_level == pulumi_policy.EnforcementLevel.MANDATORY}
    advisory = {p.name for p in rules.POLICIES if p.enforcement_level == pulumi_policy.EnforcementLevel.ADVISORY}
    assert mandatory == {
        "ai-service-backend-removes-authorization",
        "ai-service-backends-remove-api-key-headers",
        "budget-rules-charge-llm-tokens",
        "actor-header-untouched",
        "jwt-names-the-actor",
        "one-actor-id-per-call",
        "egress-reaches-only-the-gateway",
        "budget-rules-cover-each-actor-once",
        "budget-costs-reported-by-every-route",
        "route-policies-merge-with-the-budget",
        "provider-keys-only-in-secrets",
        "body-mutations-keep-usage",
        "agent-router-after-identity",
        "budget-models-served-by-a-route",
    }
    assert advisory == {
        "rate-limit-fails-closed-outside-dev",
        "redis-persists-counters",
        "idp-trust-verifies-certificates",
        "suspension-keeps-the-listener",
    }


def test_pack_files_name_the_runtime_and_the_rule_dependencies():
    assert "runtime:" in (ROOT / "policy" / "PulumiPolicy.yaml").read_text(encoding="utf-8")
    requirements = (ROOT / "policy" / "requirements.txt").read_text(encoding="utf-8")
    for package in ("pulumi-policy>=1.21", "pydantic", "google-re2"):
        assert package in requirements


def test_stack_name_comes_from_the_urn():
    assert rules.stack_of_urn("urn:pulumi:prod::agent-budgets::kubernetes:helm.sh/v3:Release::eg") == "prod"
    assert rules.stack_of_urn("not-a-urn") == ""


# ---------------------------------------------------------------------------------------------------------
# Every rule passes on the program's own resources


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("policy", rules.POLICIES, ids=lambda p: p.name)
def test_every_rule_passes_on_the_program_s_resources(policy, stack):
    assert validate(policy, stack, captured(stack)) == []


def test_the_captures_hold_what_the_rules_inspect():
    """Guard against vacuous passes: each rule's subject is really among the captured resources."""
    dev, prod = captured("dev"), captured("prod")
    for resources in (dev, prod):
        kinds = {r.kind for r in resources}
        assert {"AIServiceBackend", "BackendTrafficPolicy", "SecurityPolicy", "ClientTrafficPolicy"} <= kinds
        assert any(r.type == rules.EGRESS_SHARD_TYPE for r in resources)
        assert any(r.type == rules.HELM_RELEASE_TYPE and "gateway-helm" in r.inputs["chart"] for r in resources)
    assert find(dev, "StatefulSet", "redis")
    assert any(r.kind == "BackendSecurityPolicy" and r.inputs["spec"]["type"] == "AnthropicAPIKey" for r in prod)


# ---------------------------------------------------------------------------------------------------------
# Every rule fails, with its own message, on a copy broken in exactly one way


def _spec(resources: list[Captured], kind: str, name: str | None = None) -> dict[str, Any]:
    return find(resources, kind, name).inputs["spec"]


def _budget_rules(resources: list[Captured]) -> list[dict[str, Any]]:
    return _spec(resources, "BackendTrafficPolicy")["rateLimit"]["global"]["rules"]


PASSTHROUGH_PYPI = {"tlsPassthrough": {"hostnames": ["pypi.org"], "ports": {"numbers": [443]}}}


def _every_limit(resources: list[Captured], first: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to every limit of the budget whose block starts at rule `first` (its rules admit the same
    actors, so a change to what one admits is made to all of them)."""
    slots = int(
        find(resources, "BackendTrafficPolicy").inputs["metadata"]["annotations"]["agent-budgets.dev/limit-slots"]
    )
    budget = _budget_rules(resources)[first : first + slots]
    for rule in budget:
        if rule.get("shadowMode") is not True:  # a reserved slot admits nobody
            change(rule)


def _after_distinct(rule: dict[str, Any], offset: int = 1) -> dict[str, Any]:
    """The header match `offset` places after the rule's Distinct one (a per-model limit's rule starts with its
    model match, so the Distinct match is not always first)."""
    headers = rule["clientSelectors"][0]["headers"]
    distinct = next(i for i, match in enumerate(headers) if match["type"] == "Distinct")
    return headers[distinct + offset]


def _nothing_rule() -> dict[str, Any]:
    """A well-formed budget rule that admits no actor (a retired class)."""
    return {
        "clientSelectors": [
            {
                "headers": [
                    {"name": "x-actor-id", "type": "Distinct"},
                    {"name": "x-actor-id", "type": "RegularExpression", "value": MATCHES_NOTHING},
                ]
            }
        ],
        "limit": {"requests": 1, "unit": "Day"},
        "shared": True,
        "cost": {
            "request": {"from": "Number", "number": 0},
            "response": {
                "from": "Metadata",
                "metadata": {"namespace": "io.envoy.ai_gateway", "key": "llm_total_token"},
            },
        },
    }


def _egress(resources: list[Captured], actor: str) -> dict[str, Any]:
    """The inputs of the egress-policy shard that holds ``actor``."""
    [found] = [r for r in resources if r.type == rules.EGRESS_SHARD_TYPE and actor in r.inputs["actors"]]
    return found.inputs


def _with_rules(resources: list[Captured], actor: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Give an egress policy explicit `rules` (as its outputs carry them), changed by `change`."""
    props = _egress(resources, actor)
    document = build_rules(PolicyInputs.from_props(props))
    change(document)
    props["rules"] = document


def _jwt_header(document: list[dict[str, Any]]) -> dict[str, Any]:
    return document[0]["http"]["effects"]["replaceHeaders"][0]


def _env(resources: list[Captured], deployment: str, name: str) -> dict[str, Any]:
    containers = find(resources, "Deployment", deployment).inputs["spec"]["template"]["spec"]["containers"]
    [entry] = [e for e in containers[0]["env"] if e["name"] == name]
    return entry


def _eg_release(resources: list[Captured]) -> dict[str, Any]:
    [release] = [r for r in resources if r.type == rules.HELM_RELEASE_TYPE and r.inputs["name"] == "eg"]
    return release.inputs


def _eg_values(resources: list[Captured]) -> dict[str, Any]:
    return _eg_release(resources)["values"]["config"]["envoyGateway"]


def _second_budget_policy(resources: list[Captured]) -> None:
    original = find(resources, "BackendTrafficPolicy")
    twin = Captured(original.type, "backendtrafficpolicy-more-budgets", copy.deepcopy(original.inputs))
    twin.inputs["metadata"]["name"] = "more-budgets"
    resources.append(twin)


def _route_policy(
    resources: list[Captured], kind: str = "HTTPRoute", route: str = "mock-small", **spec: Any
) -> Captured:
    """A BackendTrafficPolicy on one route (e.g. the HTTPRoute an AIGatewayRoute generates, same name)."""
    original = find(resources, "BackendTrafficPolicy")
    policy = Captured(
        original.type,
        f"backendtrafficpolicy-{route}-retries",
        {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "BackendTrafficPolicy",
            "metadata": {"name": f"{route}-retries", "namespace": original.inputs["metadata"]["namespace"]},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": kind, "name": route}],
                "retry": {"numRetries": 2},
                **spec,
            },
        },
    )
    resources.append(policy)
    return policy


def _suspension_claim(resources: list[Captured]) -> dict[str, Any]:
    authorization = _spec(resources, "SecurityPolicy")["authorization"]
    return authorization["rules"][1]["principal"]["jwt"]["claims"][0]


def _drop(resources: list[Captured], kind: str) -> None:
    resources.remove(find(resources, kind))


def _api_key_policy(resources: list[Captured]) -> dict[str, Any]:
    return _spec(resources, "SecurityPolicy", "agent-budgets-api-keys")


def _api_key_auth_beside_jwt(resources: list[Captured]) -> None:
    _spec(resources, "SecurityPolicy", "agent-budgets-jwt")["apiKeyAuth"] = copy.deepcopy(
        _api_key_policy(resources)["apiKeyAuth"]
    )


def _default_excludes_nobody(resources: list[Captured]) -> None:
    for match in _budget_rules(resources)[0]["clientSelectors"][0]["headers"][1:]:
        match.update(value=MATCHES_NOTHING)


def _redis_config(resources: list[Captured], text: str) -> None:
    config_map = find(resources, "ConfigMap", "redis-config")
    [key] = config_map.inputs["data"]
    config_map.inputs["data"][key] = text


def _redis_as_deployment(resources: list[Captured]) -> None:
    stateful_set = find(resources, "StatefulSet", "redis")
    stateful_set.type = "kubernetes:apps/v1:Deployment"
    stateful_set.inputs["spec"].pop("volumeClaimTemplates")


@dataclass(frozen=True)
class Broken:
    """One way to break one rule: the change, the message it must produce, and the resource it names."""

    id: str
    policy: Policy
    stack: str
    breaks: Callable[[list[Captured]], None]
    expected: str
    blame: str
    count: int = 1
    config: dict[str, Any] | None = field(default=None)


BROKEN: list[Broken] = [
    # -- every AIServiceBackend removes authorization
    Broken(
        "backend-without-header-mutation",
        rules.ai_service_backend_removes_authorization,
        "dev",
        lambda rs: _spec(rs, "AIServiceBackend").pop("headerMutation"),
        "does not remove the authorization header",
        "AIServiceBackend agent-budgets/mock",
    ),
    Broken(
        "anthropic-backend-removes-another-header",
        rules.ai_service_backend_removes_authorization,
        "prod",
        lambda rs: _spec(rs, "AIServiceBackend", "anthropic")["headerMutation"].update(remove=["x-api-key"]),
        "does not remove the authorization header",
        "AIServiceBackend agent-budgets/anthropic",
    ),
    # -- every budget rule: shared, Distinct, free request, response in total tokens
    Broken(
        "rule-not-shared",
        rules.budget_rules_charge_llm_tokens,
        "dev",
        lambda rs: _budget_rules(rs)[0].update(shared=False),
        "budget rule 0 is not `shared: true`",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "request-charged",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[3]["cost"]["request"].update(number=1),
        "budget rule 3 charges the request",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "response-charged-reasoning-tokens",
        rules.budget_rules_charge_llm_tokens,
        "dev",
        lambda rs: _budget_rules(rs)[0]["cost"]["response"]["metadata"].update(key="llm_reasoning_token"),
        "budget rule 0 does not charge the response's token count or price",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    # -- pools, per-model limits and token kinds
    Broken(
        "pool-block-not-annotated",
        rules.budget_rules_charge_llm_tokens,
        "dev-pools",
        lambda rs: (
            find(rs, "BackendTrafficPolicy").inputs["metadata"]["annotations"].pop("agent-budgets.dev/class-slots")
        ),
        "has no Distinct match on x-actor-id: every actor it admits would share one bucket",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=2,  # the pool's two limits
    ),
    Broken(
        "pool-counted-as-a-budget",
        rules.budget_rules_cover_each_actor_once,
        "dev-pools",
        lambda rs: (
            find(rs, "BackendTrafficPolicy").inputs["metadata"]["annotations"].pop("agent-budgets.dev/class-slots")
        ),
        "falls in the rules of 2 budgets (",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=2,  # actor-a and actor-b, both in atespace agents (the unlisted probe is in another one)
    ),
    Broken(
        "per-model-rule-in-another-budget",
        rules.budget_rules_cover_each_actor_once,
        "dev-pools",
        lambda rs: _budget_rules(rs)[2]["clientSelectors"][0]["headers"][2].update(invert=False),
        "falls in the rules of 2 budgets",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "model-limit-names-an-unserved-model",
        rules.budget_models_served_by_a_route,
        "dev-pools",
        lambda rs: _budget_rules(rs)[2]["clientSelectors"][0]["headers"][0].update(value="mock-huge"),
        "budget rule 2's x-ai-eg-model match 'mock-huge' matches no model any AIGatewayRoute on the Gateway serves",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "model-limit-names-only-an-override",
        rules.budget_models_served_by_a_route,
        "dev-pools",
        lambda rs: (
            find(rs, "AIGatewayRoute", "mock-large")
            .inputs["spec"]["rules"][0]["backendRefs"][0]
            .update(modelNameOverride="mock-xl"),
            _budget_rules(rs)[2]["clientSelectors"][0]["headers"][0].update(value="mock-xl"),
        ),
        "matches 'mock-xl', which only a modelNameOverride sends upstream",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "output-tokens-not-reported",
        rules.budget_costs_reported_by_every_route,
        "dev-pools",
        lambda rs: find(rs, "AIGatewayRoute", "mock-small").inputs["spec"]["llmRequestCosts"].pop(1),
        "reports no llm_output_token in llmRequestCosts, but budget rule(s) [1] charge it",
        "AIGatewayRoute agent-budgets/mock-small",
    ),
    Broken(
        "output-tokens-computed-as-input",
        rules.budget_costs_reported_by_every_route,
        "dev-pools",
        lambda rs: (
            find(rs, "AIGatewayRoute", "mock-small").inputs["spec"]["llmRequestCosts"][1].update(type="InputToken")
        ),
        "computes llm_output_token as InputToken, but budget rule(s) [1] read it as the output tokens: use type "
        "OutputToken",
        "AIGatewayRoute agent-budgets/mock-small",
    ),
    Broken(
        "usd-limit-charges-a-key-no-route-reports",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[10]["cost"]["response"]["metadata"].update(key="llm_cost_usd"),
        "budget rule 10 does not charge the response's token count or price",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "response-cost-missing",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[6]["cost"].pop("response"),
        "budget rule 6 does not charge the response's token count or price",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "class-without-distinct",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[3]["clientSelectors"][0]["headers"].pop(0),
        "budget rule 3 has no Distinct match on x-actor-id",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "local-budget",
        rules.budget_rules_charge_llm_tokens,
        "dev",
        lambda rs: _spec(rs, "BackendTrafficPolicy")["rateLimit"].update(
            local={"rules": [copy.deepcopy(_budget_rules(rs)[0])]}
        ),
        "local rate-limit rule 0 is keyed on x-actor-id",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "distinct-inverted",
        rules.budget_rules_charge_llm_tokens,
        "dev",
        lambda rs: _budget_rules(rs)[0]["clientSelectors"][0]["headers"][0].update(invert=True),
        "global rate-limit rule 0 header match 0 (x-actor-id) is a Distinct match with invert: true",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "distinct-with-a-value",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[3]["clientSelectors"][0]["headers"][0].update(value="actor/agents/coder-1"),
        "global rate-limit rule 3 header match 0 (x-actor-id) is a Distinct match with a value",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "class-regex-without-a-value",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[6]["clientSelectors"][0]["headers"][1].pop("value"),
        "global rate-limit rule 6 header match 1 (x-actor-id) is a RegularExpression match without a value",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "non-budget-rule-exact-without-a-value",
        rules.budget_rules_charge_llm_tokens,
        "dev",
        lambda rs: _budget_rules(rs).append(
            {**_nothing_rule(), "clientSelectors": [{"headers": [{"name": "x-tenant", "type": "Exact"}]}]}
        ),
        "global rate-limit rule 1 header match 0 (x-tenant) is an Exact match without a value",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    # -- nothing removes or sets x-actor-id on the way to the provider
    Broken(
        "backend-removes-actor-header",
        rules.actor_header_untouched,
        "dev",
        lambda rs: _spec(rs, "AIServiceBackend")["headerMutation"]["remove"].append("X-Actor-Id"),
        "spec.headerMutation.remove drops x-actor-id",
        "AIServiceBackend agent-budgets/mock",
    ),
    Broken(
        "backend-sets-actor-header",
        rules.actor_header_untouched,
        "prod",
        lambda rs: _spec(rs, "AIServiceBackend", "openai")["headerMutation"].update(
            set=[{"name": "x-actor-id", "value": "actor/agents/someone-else"}]
        ),
        "spec.headerMutation.set writes x-actor-id",
        "AIServiceBackend agent-budgets/openai",
    ),
    Broken(
        "route-backend-ref-removes-actor-header",
        rules.actor_header_untouched,
        "prod",
        lambda rs: _spec(rs, "AIGatewayRoute", "claude")["rules"][0]["backendRefs"][0].update(
            headerMutation={"remove": ["x-actor-id"]}
        ),
        "spec.rules[0].backendRefs[0].headerMutation.remove drops x-actor-id",
        "AIGatewayRoute agent-budgets/claude",
    ),
    Broken(
        "client-policy-sets-actor-header-early",
        rules.actor_header_untouched,
        "dev",
        lambda rs: _spec(rs, "ClientTrafficPolicy")["headers"]["earlyRequestHeaders"].update(
            set=[{"name": "x-actor-id", "value": "actor/agents/actor-b"}]
        ),
        "spec.headers.earlyRequestHeaders.set writes x-actor-id",
        "ClientTrafficPolicy agent-budgets/agent-router",
    ),
    Broken(
        "client-policy-removes-actor-header-late",
        rules.actor_header_untouched,
        "dev",
        lambda rs: _spec(rs, "ClientTrafficPolicy")["headers"].update(lateRequestHeaders={"remove": ["x-actor-id"]}),
        "spec.headers.lateRequestHeaders.remove drops x-actor-id",
        "ClientTrafficPolicy agent-budgets/agent-router",
    ),
    Broken(
        "jwt-copies-email-into-actor-header",
        rules.actor_header_untouched,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"]["providers"][0]["claimToHeaders"][0].update(claim="email"),
        "claimToHeaders copies claim 'email' into x-actor-id",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    # -- the SecurityPolicy has audiences and copies sub into x-actor-id
    Broken(
        "jwt-without-audiences",
        rules.jwt_names_the_actor,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"]["providers"][0].pop("audiences"),
        "JWT provider 'agent-substrate' has no audiences",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "jwt-without-claim-to-headers",
        rules.jwt_names_the_actor,
        "prod",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"]["providers"][0].pop("claimToHeaders"),
        "JWT provider 'agent-substrate' does not copy claim sub into x-actor-id",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "jwt-optional",
        rules.jwt_names_the_actor,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"].update(optional=True),
        "jwt.optional is true",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "jwt-fail-open",
        rules.jwt_names_the_actor,
        "prod",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"].update(failOpen=True),
        "jwt.failOpen is true",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    # -- every egress policy: only the gateway, actorJwt replacing Authorization, 300-3600 s
    Broken(
        "jwt-lifetime-too-short",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _egress(rs, "agents/actor-a").update(expiration_seconds=120),
        "actorJwt.expirationSeconds is 120",
        "egress policies of agents/actor-a",
    ),
    Broken(
        "jwt-lifetime-too-long",
        rules.egress_reaches_only_the_gateway,
        "prod",
        lambda rs: _egress(rs, "agents/coder-1").update(expiration_seconds=7200),
        "actorJwt.expirationSeconds is 7200",
        "egress policies of agents/coder-1",
    ),
    Broken(
        "jwt-sent-to-another-host",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _egress(rs, "agents/actor-b").update(gateway_hostname="agent-router.example.com"),
        "sends the actor JWT to ['agent-router.example.com']",
        "egress policies of agents/actor-b",
    ),
    Broken(
        "extra-hostname-by-default",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _egress(rs, "agents/actor-b").update(extra_hostnames=["pypi.org"]),
        "egress rule 2 (tlsPassthrough) for ['pypi.org'] is not the gateway rule",
        "egress policies of agents/actor-b",
    ),
    Broken(
        "extra-hostname-when-explicitly-refused",
        rules.egress_reaches_only_the_gateway,
        "prod",
        lambda rs: _egress(rs, "agents/support-2").update(extra_hostnames=["pypi.org", "files.pythonhosted.org"]),
        "is not the gateway rule",
        "egress policies of agents/support-2",
        count=2,  # one tlsPassthrough rule per extra hostname
        config={"allowExtraHostnames": False},
    ),
    Broken(
        "extra-hostname-is-a-provider",
        rules.egress_reaches_only_the_gateway,
        "prod",
        lambda rs: _egress(rs, "agents/support-1").update(extra_hostnames=["api.openai.com"]),
        "lets the actor reach model provider host 'api.openai.com'",
        "egress policies of agents/support-1",
        config={"allowExtraHostnames": True},
    ),
    Broken(
        "extra-wildcard-covers-a-provider",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _egress(rs, "agents/actor-a").update(extra_hostnames=["*.anthropic.com"]),
        "lets the actor reach model provider host 'api.anthropic.com'",
        "egress policies of agents/actor-a",
        config={"allowExtraHostnames": True},
    ),
    Broken(
        "stored-credential-instead-of-actor-jwt",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _with_rules(
            rs,
            "agents/actor-a",
            lambda doc: _jwt_header(doc).update(
                credentialUri="ate-secret://k8s.io/default/agents/openai/key", actorJwt=None
            ),
        ),
        "injects a stored credential (credentialUri)",
        "egress policies of agents/actor-a",
    ),
    Broken(
        "jwt-prefix-missing",
        rules.egress_reaches_only_the_gateway,
        "prod",
        lambda rs: _with_rules(rs, "agents/coder-2", lambda doc: _jwt_header(doc).update(prefix="")),
        "uses prefix ''",
        "egress policies of agents/coder-2",
    ),
    Broken(
        "jwt-replaces-another-header",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _with_rules(rs, "agents/actor-b", lambda doc: _jwt_header(doc).update(header="X-Api-Key")),
        "replaces headers ['X-Api-Key']",
        "egress policies of agents/actor-b",
    ),
    Broken(
        "extra-https-rule",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _with_rules(rs, "agents/actor-a", lambda doc: doc.append({"https": {"hostnames": ["example.com"]}})),
        "egress rule 2 (https) for ['example.com'] has no actor-JWT effect",
        "egress policies of agents/actor-a",
        config={"allowExtraHostnames": True},
    ),
    Broken(
        "no-gateway-rule",
        rules.egress_reaches_only_the_gateway,
        "dev",
        lambda rs: _with_rules(
            rs,
            "agents/actor-a",
            lambda doc: doc.__setitem__(0, PASSTHROUGH_PYPI),
        ),
        "has no http rule for agent-router.envoy-gateway-system.svc.cluster.local",
        "egress policies of agents/actor-a",
        config={"allowExtraHostnames": True},
    ),
    # -- every actor falls in exactly one budget rule; caps; one budget policy; the JWT sets the header
    Broken(
        "class-member-not-excluded-from-default",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _budget_rules(rs).append(
            {
                **_nothing_rule(),
                "clientSelectors": [
                    {
                        "headers": [
                            {"name": "x-actor-id", "type": "Distinct"},
                            {"name": "x-actor-id", "type": "Exact", "value": "actor/agents/actor-b"},
                        ]
                    }
                ],
            }
        ),
        "actor agents/actor-b falls in the rules of 2 budgets (0, 1)",
        "urn:pulumi:dev::agent-budgets::kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy",
    ),
    Broken(
        "default-rule-excludes-nobody",
        rules.budget_rules_cover_each_actor_once,
        "prod",
        lambda rs: _every_limit(rs, 0, lambda rule: _after_distinct(rule).update(value=MATCHES_NOTHING)),
        "falls in the rules of 2 budgets (0, 1, 2, ",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=4,  # coder-1, coder-2, nightly-batch and research-1
    ),
    Broken(
        "research-member-left-in-the-default",
        rules.budget_rules_cover_each_actor_once,
        "prod",
        lambda rs: _every_limit(
            rs,
            0,
            lambda rule: _after_distinct(rule).update(value="^actor/(?:agents/(?:coder-1|coder-2|nightly-batch))$"),
        ),
        "actor agents/research-1 falls in the rules of 2 budgets (0, 1, 2, 9, 10, 11)",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "default-rule-admits-nobody",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _budget_rules(rs)[0]["clientSelectors"][0]["headers"][1].update(value=".*"),
        "falls in no budget rule",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=3,  # actor-a, actor-b and the unlisted probe
    ),
    Broken(
        "too-many-rules",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _budget_rules(rs).extend(_nothing_rule() for _ in range(256)),
        "has 257 rate-limit rules, over Envoy Gateway's 256",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "too-many-selectors",
        rules.budget_rules_cover_each_actor_once,
        "prod",
        lambda rs: _every_limit(
            rs,
            3,
            lambda rule: rule["clientSelectors"].extend(
                {"headers": [{"name": "x-actor-id", "type": "RegularExpression", "value": ".*"}]} for _ in range(8)
            ),
        ),
        "has 9 client selectors, over Envoy Gateway's 8",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=2,  # the large class's tokens and calls rules
    ),
    Broken(
        "too-many-header-matches",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _budget_rules(rs)[0]["clientSelectors"][0]["headers"].extend(
            [{"name": "x-actor-id", "type": "RegularExpression", "value": MATCHES_NOTHING, "invert": True}]
            * (129 - len(_budget_rules(rs)[0]["clientSelectors"][0]["headers"]))
        ),
        "rule 0 selector 0 has 129 header matches, over Envoy Gateway's 128",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "match-value-too-long",
        rules.budget_rules_cover_each_actor_once,
        "prod",
        lambda rs: _every_limit(
            rs, 0, lambda rule: rule["clientSelectors"][0]["headers"][-1].update(value="^actor/(?:" + "a" * 1100 + ")$")
        ),
        "match 127 is 1112 characters, over Envoy Gateway's 1024",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=3,  # the default budget's tokens, calls and per-model usd rules
    ),
    Broken(
        "invalid-regex",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _budget_rules(rs)[0]["clientSelectors"][0]["headers"][-1].update(value="^actor/(agents"),
        "rule 0 match 32 is not a valid RE2 pattern",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "two-budget-policies-on-one-gateway",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        _second_budget_policy,
        "both hold budget rules for Gateway agent-budgets/agent-router",
        "BackendTrafficPolicy agent-budgets/more-budgets",
    ),
    Broken(
        "no-jwt-security-policy",
        rules.budget_rules_cover_each_actor_once,
        "prod",
        lambda rs: _drop(rs, "SecurityPolicy"),
        "no SecurityPolicy there sets x-actor-id from a verified identity",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    Broken(
        "no-budget-policy",
        rules.budget_rules_cover_each_actor_once,
        "dev",
        lambda rs: _drop(rs, "BackendTrafficPolicy"),
        "no BackendTrafficPolicy has a global rate-limit rule keyed on x-actor-id",
        "no agent has a token budget",
    ),
    # -- every route reports what the budget rules charge
    Broken(
        "route-without-the-usd-cost",
        rules.budget_costs_reported_by_every_route,
        "prod",
        lambda rs: _spec(rs, "AIGatewayRoute", "gpt")["llmRequestCosts"].pop(1),
        "reports no agent_budgets_usd_mills in llmRequestCosts, but budget rule(s) [2, 10, 11]",
        "urn:pulumi:prod::agent-budgets::kubernetes:aigateway.envoyproxy.io/v1beta1:AIGatewayRoute::aigatewayroute-gpt",
    ),
    Broken(
        "route-computes-the-price-as-total-tokens",
        rules.budget_costs_reported_by_every_route,
        "prod",
        lambda rs: _spec(rs, "AIGatewayRoute", "claude")["llmRequestCosts"][1].update(type="TotalToken"),
        "computes agent_budgets_usd_mills as TotalToken",
        "AIGatewayRoute agent-budgets/claude",
    ),
    Broken(
        "route-without-the-token-cost",
        rules.budget_costs_reported_by_every_route,
        "dev",
        lambda rs: _spec(rs, "AIGatewayRoute", "mock-large").update(llmRequestCosts=[]),
        "reports no llm_total_token in llmRequestCosts, but budget rule(s) [0]",
        "AIGatewayRoute agent-budgets/mock-large",
    ),
    Broken(
        "calls-rule-also-charges-the-response",
        rules.budget_rules_charge_llm_tokens,
        "prod",
        lambda rs: _budget_rules(rs)[1]["cost"].update(response=_budget_rules(rs)[0]["cost"]["response"]),
        "budget rule 1 charges the request",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    # -- body mutations leave the fields that make a stream report its usage
    Broken(
        "route-ceiling-also-removes-stream-options",
        rules.body_mutations_keep_usage,
        "prod",
        lambda rs: _spec(rs, "AIGatewayRoute", "gpt")["rules"][0]["backendRefs"][0]["bodyMutation"]["remove"].append(
            "stream_options"
        ),
        "spec.rules[0].backendRefs[0].bodyMutation changes 'stream_options'",
        "AIGatewayRoute agent-budgets/gpt",
    ),
    Broken(
        "backend-turns-streaming-off",
        rules.body_mutations_keep_usage,
        "dev",
        lambda rs: _spec(rs, "AIServiceBackend").update(bodyMutation={"set": [{"path": "stream", "value": "false"}]}),
        "spec.bodyMutation changes 'stream'",
        "AIServiceBackend agent-budgets/mock",
    ),
    # -- Agent Router's processor runs after the JWT filter
    Broken(
        "envoy-proxy-without-filter-order",
        rules.agent_router_after_identity,
        "dev",
        lambda rs: _spec(rs, "EnvoyProxy").pop("filterOrder"),
        "Agent Router's processor would run before envoy.filters.http.api_key_auth, envoy.filters.http.jwt_authn",
        "EnvoyProxy agent-budgets/agent-router",
    ),
    Broken(
        "custom-response-moved-before-the-jwt-filter",
        rules.agent_router_after_identity,
        "prod",
        lambda rs: _spec(rs, "EnvoyProxy").update(
            filterOrder=[{"name": "envoy.filters.http.custom_response", "before": "envoy.filters.http.jwt_authn"}]
        ),
        "Agent Router's processor would run before envoy.filters.http.api_key_auth, envoy.filters.http.jwt_authn",
        "EnvoyProxy agent-budgets/agent-router",
    ),
    Broken(
        "custom-response-after-the-jwt-filter-only",
        rules.agent_router_after_identity,
        "dev-identities",
        lambda rs: _spec(rs, "EnvoyProxy").update(
            filterOrder=[{"name": "envoy.filters.http.custom_response", "after": "envoy.filters.http.jwt_authn"}]
        ),
        "Agent Router's processor would run before envoy.filters.http.api_key_auth (Envoy Gateway",
        "EnvoyProxy agent-budgets/agent-router",
    ),
    # -- suspending an actor never changes the listener
    Broken(
        "no-authorization-while-nobody-is-suspended",
        rules.suspension_keeps_the_listener,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy").pop("authorization"),
        "has no authorization: the first suspension would add Envoy's RBAC filter to the listener",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "no-response-override-while-nobody-is-suspended",
        rules.suspension_keeps_the_listener,
        "prod",
        lambda rs: _spec(rs, "BackendTrafficPolicy").pop("responseOverride"),
        "has no responseOverride: the first suspension would add a custom_response filter to the listener",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
    # -- the kill switch on the JWT SecurityPolicy
    Broken(
        "suspension-without-default-action",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"].pop("defaultAction"),
        "authorization has no defaultAction, and Envoy Gateway's default is Deny",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "suspension-default-deny",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"].update(defaultAction="Deny"),
        "authorization.defaultAction is Deny",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "suspension-of-bare-actor-ids",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _suspension_claim(rs).update(values=["agents/actor-b"]),
        "denies subjects ['agents/actor-b'] that no verified token carries",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "suspension-reads-another-provider",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"]["rules"][1]["principal"]["jwt"].update(
            provider="someone-else"
        ),
        "reads claims of JWT provider 'someone-else', which this policy does not define",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(  # a malformed provider name (found by tests/test_policy_properties.py) gives a message, not a TypeError
        "suspension-provider-named-by-a-list",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"]["providers"][0].update(name=["agent-substrate"]),
        "reads claims of JWT provider 'agent-substrate', which this policy does not define (have [])",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "suspension-reads-a-provider-given-as-a-list",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"]["rules"][1]["principal"]["jwt"].update(
            provider=["agent-substrate"]
        ),
        "reads claims of JWT provider ['agent-substrate'], which this policy does not define",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "suspension-after-an-allow-rule",
        rules.jwt_names_the_actor,
        "dev-suspended",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"]["rules"].insert(
            0, {"name": "office", "action": "Allow", "principal": {"clientCIDRs": ["10.0.0.0/8"]}}
        ),
        "comes after Allow rule(s) [0]",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    # -- a route-level BackendTrafficPolicy merges into the Gateway's budget policy
    Broken(
        "http-route-policy-without-merge-type",
        rules.route_policies_merge_with_the_budget,
        "dev",
        lambda rs: _route_policy(rs),
        "targets HTTPRoute without mergeType",
        "BackendTrafficPolicy agent-budgets/mock-small-retries",
    ),
    Broken(
        "grpc-route-policy-without-merge-type",
        rules.route_policies_merge_with_the_budget,
        "prod",
        lambda rs: _route_policy(rs, kind="GRPCRoute", route="claude"),
        "targets GRPCRoute without mergeType",
        "BackendTrafficPolicy agent-budgets/claude-retries",
    ),
    Broken(
        "route-policy-by-label-without-merge-type",
        rules.route_policies_merge_with_the_budget,
        "prod",
        lambda rs: _spec([_route_policy(rs, route="gpt")], "BackendTrafficPolicy").update(
            targetRefs=None, targetSelectors=[{"kind": "HTTPRoute", "matchLabels": {"team": "gpt"}}]
        ),
        "targets HTTPRoute without mergeType: on those routes it replaces BackendTrafficPolicy "
        "agent-budgets/agent-budgets",
        "urn:pulumi:prod::agent-budgets::kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy::"
        "backendtrafficpolicy-gpt-retries",
    ),
    # -- provider keys reach the cluster only through Secrets
    Broken(
        "literal-key-in-env",
        rules.provider_keys_only_in_secrets,
        "dev",
        lambda rs: _env(rs, "mock-model", "MOCK_EXPECTED_API_KEY").update(value="not-from-a-secret", valueFrom=None),
        "sets MOCK_EXPECTED_API_KEY to a literal value",
        "Deployment agent-budgets/mock-model",
    ),
    Broken(
        "provider-key-in-config-map",
        rules.provider_keys_only_in_secrets,
        "dev",
        lambda rs: (
            find(rs, "ConfigMap", "mock-model")
            .inputs["data"]
            .update({"settings.py": "OPENAI_API_KEY = 'sk-proj-abcdefghijklmnopqrstuvwx0123'\n"})
        ),
        "data.settings.py holds a literal that looks like a model-provider API key",
        "ConfigMap agent-budgets/mock-model",
    ),
    Broken(
        "redis-password-in-helm-values",
        rules.provider_keys_only_in_secrets,
        "prod",
        lambda rs: _eg_values(rs)["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"][0].update(
            value="hunter2", valueFrom=None
        ),
        "sets REDIS_AUTH to a literal value",
        "Helm release envoy-gateway-system/eg",
    ),
    Broken(
        "inline-key-in-backend-security-policy",
        rules.provider_keys_only_in_secrets,
        "prod",
        lambda rs: _spec(rs, "BackendSecurityPolicy", "anthropic-key")["anthropicAPIKey"].update(inline="redacted"),
        "spec.anthropicAPIKey carries ['inline'] besides secretRef",
        "BackendSecurityPolicy agent-budgets/anthropic-key",
    ),
    Broken(
        "backend-security-policy-without-secret-ref",
        rules.provider_keys_only_in_secrets,
        "prod",
        lambda rs: _spec(rs, "BackendSecurityPolicy", "openai-key")["apiKey"].pop("secretRef"),
        "spec.apiKey has no secretRef.name",
        "BackendSecurityPolicy agent-budgets/openai-key",
    ),
    # -- advisory: a non-dev stack that fails open
    Broken(
        "prod-fails-open",
        rules.rate_limit_fails_closed_outside_dev,
        "prod",
        lambda rs: _eg_values(rs)["rateLimit"].update(failClosed=False),
        "stack 'prod' fails open",
        "Helm release envoy-gateway-system/eg",
    ),
    Broken(
        "prod-fail-closed-unset",
        rules.rate_limit_fails_closed_outside_dev,
        "prod",
        lambda rs: _eg_values(rs)["rateLimit"].pop("failClosed"),
        "stack 'prod' fails open",
        "Helm release envoy-gateway-system/eg",
    ),
    Broken(  # platform.charts: Envoy Gateway's chart from a local .tgz is still recognised (broken once: missed)
        "prod-fails-open-with-a-local-chart",
        rules.rate_limit_fails_closed_outside_dev,
        "prod",
        lambda rs: (
            _eg_values(rs)["rateLimit"].update(failClosed=False),
            _eg_release(rs).update(chart="vendor/charts/gateway-helm-v1.9.3.tgz"),
        ),
        "stack 'prod' fails open",
        "Helm release envoy-gateway-system/eg",
    ),
    Broken(
        "dev-not-listed-as-dev",
        rules.rate_limit_fails_closed_outside_dev,
        "dev",
        lambda rs: None,
        "stack 'dev' fails open",
        "Helm release envoy-gateway-system/eg",
        config={"devStacks": ["kind"]},
    ),
    # -- advisory: a Redis without persistence
    Broken(
        "redis-without-volume-claim",
        rules.redis_persists_counters,
        "dev",
        lambda rs: _spec(rs, "StatefulSet", "redis").pop("volumeClaimTemplates"),
        "mounts no volumeClaimTemplate",
        "StatefulSet agent-budgets-redis/redis",
    ),
    Broken(
        "redis-without-appendonly",
        rules.redis_persists_counters,
        "dev",
        lambda rs: _redis_config(rs, "port 6379\n# appendonly yes\nsave 60 1\n"),
        "does not turn on appendonly",
        "StatefulSet agent-budgets-redis/redis",
    ),
    Broken(
        "redis-appendonly-turned-off-on-the-command-line",
        rules.redis_persists_counters,
        "dev",
        lambda rs: _spec(rs, "StatefulSet", "redis")["template"]["spec"]["containers"][0].update(
            args=["--appendonly", "no"]
        ),
        "does not turn on appendonly",
        "StatefulSet agent-budgets-redis/redis",
    ),
    Broken(
        "redis-as-deployment",
        rules.redis_persists_counters,
        "dev",
        _redis_as_deployment,
        "is a Deployment: its counters live in the pod",
        "Deployment agent-budgets-redis/redis",
    ),
    # -- advisory: a Substrate IdP trust that skips verification
    Broken(
        "idp-trust-skips-verification",
        rules.idp_trust_verifies_certificates,
        "prod",
        lambda rs: _spec(rs, "Backend", "substrate-idp").update(tls={"insecureSkipVerify": True}),
        "skips TLS verification",
        "Backend agent-budgets/substrate-idp",
    ),
    # -- every identity source: API keys, service accounts
    Broken(
        "api-key-policy-keeps-the-key-upstream",
        rules.jwt_names_the_actor,
        "dev-identities",
        lambda rs: _api_key_policy(rs)["apiKeyAuth"].update(sanitize=False),
        "apiKeyAuth.sanitize is not true",
        "SecurityPolicy agent-budgets/agent-budgets-api-keys",
    ),
    Broken(
        "api-key-suspension-of-actor-ids",
        rules.jwt_names_the_actor,
        "dev-identities",
        lambda rs: _api_key_policy(rs)["authorization"]["rules"][1]["principal"]["headers"][0].update(
            values=["apikey:probe-key"]
        ),
        "that no API key's client id carries",
        "SecurityPolicy agent-budgets/agent-budgets-api-keys",
    ),
    # -- one x-actor-id per admitted call (review 2026-12b, found 1, 3 and 4)
    Broken(
        "jwt-provider-with-envoy-s-default-token-locations",
        rules.one_actor_id_per_call,
        "dev-identities",
        lambda rs: _spec(rs, "SecurityPolicy", "agent-budgets-jwt")["jwt"]["providers"][1].pop("extractFrom"),
        "has no extractFrom, so Envoy also takes a token from the access_token query parameter",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "jwt-provider-reading-the-query-too",
        rules.one_actor_id_per_call,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy")["jwt"]["providers"][0]["extractFrom"].update(params=["access_token"]),
        "reads tokens from 2 places (header authorization, query access_token)",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "jwt-policy-admitting-a-token-without-sub",
        rules.one_actor_id_per_call,
        "dev",
        lambda rs: _spec(rs, "SecurityPolicy")["authorization"]["rules"].pop(0),
        "authorization does not start with the one-actor-id rule",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "api-key-policy-without-credentials",
        rules.one_actor_id_per_call,
        "dev-identities",
        lambda rs: _api_key_policy(rs)["apiKeyAuth"].update(credentialRefs=[]),
        "apiKeyAuth has no credentialRefs: no key can pass",
        "SecurityPolicy agent-budgets/agent-budgets-api-keys",
    ),
    Broken(
        "api-key-auth-beside-jwt",
        rules.actor_header_untouched,
        "dev-identities",
        _api_key_auth_beside_jwt,
        "only from the apiKeyAuth of a SecurityPolicy without jwt",
        "SecurityPolicy agent-budgets/agent-budgets-jwt",
    ),
    Broken(
        "class-members-of-every-source-in-the-default-too",
        rules.budget_rules_cover_each_actor_once,
        "dev-identities",
        _default_excludes_nobody,
        "falls in the rules of 2 budgets (0, 1)",  # the default, and the class (the pool comes after it)
        "BackendTrafficPolicy agent-budgets/agent-budgets",
        count=3,  # agents/actor-b, serviceaccount:agents/probe-sa and apikey:probe-key
    ),
    # -- API keys: no key header reaches a provider, from either listener
    Broken(
        "backend-keeps-the-api-key-header",
        rules.ai_service_backends_remove_api_key_headers,
        "dev-identities",
        lambda rs: _spec(rs, "AIServiceBackend")["headerMutation"].update(remove=["Authorization"]),
        "does not remove x-api-key although SecurityPolicy agent-budgets/agent-budgets-api-keys reads API keys",
        "AIServiceBackend agent-budgets/mock",
    ),
    Broken(
        "backend-misses-a-key-header-added-to-the-policy",
        rules.ai_service_backends_remove_api_key_headers,
        "dev-api-keys-only",
        lambda rs: _api_key_policy(rs)["apiKeyAuth"]["extractFrom"].append({"headers": ["X-Team-Key", "x-api-key"]}),
        "does not remove x-team-key although",
        "AIServiceBackend agent-budgets/mock",
    ),
    Broken(
        "no-api-key-security-policy",
        rules.budget_rules_cover_each_actor_once,
        "dev-api-keys-only",
        lambda rs: _drop(rs, "SecurityPolicy"),
        "sets x-actor-id from a verified identity (a JWT provider copying sub, or an apiKeyAuth",
        "BackendTrafficPolicy agent-budgets/agent-budgets",
    ),
]


def test_every_rule_has_a_broken_variant():
    assert {case.policy.name for case in BROKEN} == {p.name for p in rules.POLICIES}


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: f"{c.policy.name}:{c.id}")
def test_each_rule_fails_with_its_own_message_on_a_variant_broken_in_one_way(case: Broken):
    resources = captured(case.stack)
    case.breaks(resources)
    violations = validate(case.policy, case.stack, resources, case.config)
    assert len(violations) == case.count, violations
    for violation in violations:
        assert case.expected in violation
        assert case.blame in violation


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: f"{c.policy.name}:{c.id}")
def test_no_other_rule_s_message_is_the_same(case: Broken):
    """Each expected message belongs to one rule: no other case of another rule expects it."""
    others = [c.expected for c in BROKEN if c.policy is not case.policy]
    assert not any(case.expected in other or other in case.expected for other in others)


def test_api_key_headers_removed_on_the_route_s_backend_ref_or_in_another_case_pass():
    """Agent Router merges a backendRef's removals with its AIServiceBackend's (envoyproxy/ai-gateway v1.1.0
    internal/controller/gateway.go `mergeHeaderMutations`) and lowercases header names (`headerMutationToFilterAPI`),
    so either place, in any case, keeps the key from the provider; without an apiKeyAuth nothing is required."""
    policy = rules.ai_service_backends_remove_api_key_headers
    resources = captured("dev-identities")
    _spec(resources, "AIServiceBackend")["headerMutation"].update(remove=["AUTHORIZATION"])
    assert len(validate(policy, "dev-identities", resources)) == 1
    refs = [
        ref
        for r in resources
        if r.kind == "AIGatewayRoute"
        for rule in r.inputs["spec"]["rules"]
        for ref in rule["backendRefs"]
    ]
    assert refs
    for ref in refs:
        ref["headerMutation"] = {"remove": ["X-Api-Key"]}
    assert validate(policy, "dev-identities", resources) == []
    dev = captured("dev")
    _spec(dev, "AIServiceBackend")["headerMutation"].update(remove=["authorization"])
    assert validate(policy, "dev", dev) == []
    _api_key_policy(resources)["apiKeyAuth"]["extractFrom"] = [{"headers": UNKNOWN_STRING_VALUE}]
    for ref in refs:
        ref.pop("headerMutation")
    assert validate(policy, "dev-identities", resources) == []  # the key headers are unknown during preview


def test_a_malformed_filter_order_is_reported_like_a_missing_one():
    """Entries Envoy Gateway could not apply move nothing, so Agent Router would still precede the identity filters."""
    resources = captured("dev")
    _spec(resources, "EnvoyProxy")["filterOrder"] = [{"after": 3}, "x", {"name": 5}, {"name": "a", "before": [1]}]
    [violation] = validate(rules.agent_router_after_identity, "dev", resources)
    expected = "Agent Router's processor would run before envoy.filters.http.api_key_auth, envoy.filters.http.jwt_authn"
    assert expected in violation


# ---------------------------------------------------------------------------------------------------------
# What the rules allow, and preview-time unknowns


def test_an_effect_free_passthrough_to_a_non_provider_host_is_allowed_only_with_allow_extra_hostnames():
    resources = captured("dev")
    _egress(resources, "agents/actor-a").update(extra_hostnames=["pypi.org", "*.githubusercontent.com"])
    allowed = {"allowExtraHostnames": True}
    assert validate(rules.egress_reaches_only_the_gateway, "dev", resources, allowed) == []
    strict = validate(rules.egress_reaches_only_the_gateway, "dev", resources)
    assert strict == validate(rules.egress_reaches_only_the_gateway, "dev", resources, {"allowExtraHostnames": False})
    assert len(strict) == 2, strict  # one per extra rule (pypi.org, *.githubusercontent.com)
    assert all("is not the gateway rule" in message for message in strict)


@pytest.mark.parametrize("stack", STACKS)
def test_the_program_s_egress_policies_pass_either_setting(stack):
    resources = captured(stack)
    for allow in (False, True):
        assert validate(rules.egress_reaches_only_the_gateway, stack, resources, {"allowExtraHostnames": allow}) == []


def test_the_egress_rule_documents_allow_extra_hostnames():
    policy = rules.egress_reaches_only_the_gateway
    assert "allowExtraHostnames (default false)" in policy.description
    assert policy.config_schema.properties["allowExtraHostnames"] == {"type": "boolean", "default": False}


@pytest.mark.parametrize("merge_type", ["StrategicMerge", "JSONMerge"])
def test_a_route_policy_that_merges_is_allowed(merge_type):
    resources = captured("dev")
    _route_policy(resources, mergeType=merge_type)
    assert validate(rules.route_policies_merge_with_the_budget, "dev", resources) == []


def test_route_policies_matter_only_beside_a_gateway_level_budget_policy():
    resources = captured("dev")
    budget = find(resources, "BackendTrafficPolicy")
    _route_policy(resources)
    resources.remove(budget)
    assert validate(rules.route_policies_merge_with_the_budget, "dev", resources) == []
    # A policy on the Gateway itself, or on a TCPRoute (no HTTP rate limit to replace), is no route override.
    resources = captured("dev")
    _route_policy(resources, kind="TCPRoute")
    assert validate(rules.route_policies_merge_with_the_budget, "dev", resources) == []


def test_a_policy_envoy_gateway_would_reject_is_reported_once_not_modelled():
    """Distinct + invert used to be modelled as "rule does not apply"; Envoy Gateway rejects the policy."""
    resources = captured("dev")
    _budget_rules(resources)[0]["clientSelectors"][0]["headers"][0]["invert"] = True
    [violation] = validate(rules.budget_rules_charge_llm_tokens, "dev", resources)
    assert "the whole policy fails, its routes answer 500" in violation
    # The coverage rule does not guess which rules apply to a policy that is rejected as a whole.
    assert validate(rules.budget_rules_cover_each_actor_once, "dev", resources) == []


def test_a_non_shared_budget_rule_is_reported_and_still_counted_by_the_coverage_rule():
    """The translation model refuses to invent a non-shared rule's counter key (issue 10, defect 12); the
    coverage rule names a route and listener for it, so it still counts which rules apply."""
    resources = captured("dev")
    _budget_rules(resources).append({**_nothing_rule(), "shared": False})
    [violation] = validate(rules.budget_rules_charge_llm_tokens, "dev", resources)
    assert "budget rule 1 is not `shared: true`" in violation
    assert validate(rules.budget_rules_cover_each_actor_once, "dev", resources) == []
    _budget_rules(resources)[-1]["clientSelectors"] = [{"headers": [dict(_DISTINCT)]}]
    covered_twice = validate(rules.budget_rules_cover_each_actor_once, "dev", resources)
    assert covered_twice and all("falls in the rules of 2 budgets (0, 1)" in line for line in covered_twice)


def test_a_rejected_header_match_whose_value_is_unknown_during_preview_is_skipped():
    resources = captured("dev")
    _budget_rules(resources)[0]["clientSelectors"][0]["headers"][0]["invert"] = UNKNOWN_STRING_VALUE
    assert validate(rules.budget_rules_charge_llm_tokens, "dev", resources) == []


def test_a_route_policy_whose_merge_type_is_unknown_during_preview_is_skipped():
    resources = captured("dev")
    _route_policy(resources, mergeType=UNKNOWN_STRING_VALUE)
    assert validate(rules.route_policies_merge_with_the_budget, "dev", resources) == []


def test_a_credential_env_var_from_a_secret_and_a_token_count_are_allowed():
    resources = captured("dev")
    env = find(resources, "Deployment", "mock-model").inputs["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MOCK_TOTAL_TOKENS", "value": "200"} in env
    assert validate(rules.provider_keys_only_in_secrets, "dev", resources) == []


def test_a_dev_stack_may_fail_open_and_the_dev_list_is_configurable():
    dev = captured("dev")
    assert _eg_values(dev)["rateLimit"]["failClosed"] is False
    assert validate(rules.rate_limit_fails_closed_outside_dev, "dev", dev) == []
    prod = captured("prod")
    _eg_values(prod)["rateLimit"]["failClosed"] = False
    assert validate(rules.rate_limit_fails_closed_outside_dev, "prod", prod, {"devStacks": ["dev", "prod"]}) == []


def _with_unknown(resources: list[Captured], kind: str, path: list[str | int]) -> Any:
    target: Any = find(resources, kind).inputs
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = UNKNOWN_STRING_VALUE
    return target


def test_an_unknown_value_skips_only_the_check_that_needs_it():
    resources = captured("dev")
    # Unknown during preview: the AIServiceBackend's removal list and the SecurityPolicy's audiences.
    _with_unknown(resources, "AIServiceBackend", ["spec", "headerMutation", "remove"])
    _with_unknown(resources, "SecurityPolicy", ["spec", "jwt", "providers", 0, "audiences"])
    _with_unknown(resources, "BackendTrafficPolicy", ["spec", "rateLimit", "global", "rules", 0, "cost"])
    assert validate(rules.ai_service_backend_removes_authorization, "dev", resources) == []
    assert validate(rules.jwt_names_the_actor, "dev", resources) == []
    assert validate(rules.budget_rules_charge_llm_tokens, "dev", resources) == []
    assert validate(rules.budget_rules_cover_each_actor_once, "dev", resources) == []
    # The other checks of the same resource still run.
    _spec(resources, "SecurityPolicy")["jwt"]["providers"][0].pop("claimToHeaders")
    [violation] = validate(rules.jwt_names_the_actor, "dev", resources)
    assert "does not copy claim sub" in violation


def test_a_literal_credential_is_refused_even_when_its_value_is_unknown():
    resources = captured("dev")
    entry = _env(resources, "mock-model", "MOCK_EXPECTED_API_KEY")
    entry.pop("valueFrom")
    entry["value"] = UNKNOWN_STRING_VALUE
    [violation] = validate(rules.provider_keys_only_in_secrets, "dev", resources)
    assert "sets MOCK_EXPECTED_API_KEY to a literal value" in violation


def test_plain_turns_engine_props_into_plain_data():
    proxied = unknown_checking_proxy({"a": [1.0, {"b": UNKNOWN_STRING_VALUE}], "c": 2.5, "d": True})
    assert rules.plain(proxied) == {"a": [1, {"b": rules.UNKNOWN}], "c": 2.5, "d": True}


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("OPENAI_API_KEY", True),
        ("OPENAIAPIKEY", True),
        ("ANTHROPIC_TOKEN", True),
        ("REDIS_AUTH", True),
        ("db-password", True),
        ("CLIENT_SECRET", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GITHUB_TOKEN", True),
        ("MOCK_TOTAL_TOKENS", False),
        ("TOKEN_TTL", False),
        ("API_KEY_FILE", False),
        ("AUTH_URL", False),
        ("API_URL", False),
        ("KEYCLOAK_REALM", False),
    ],
)
def test_which_env_var_names_count_as_credentials(name, credential):
    resources = captured("dev")
    env = find(resources, "Deployment", "mock-model").inputs["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": name, "value": "literal"})
    violations = validate(rules.provider_keys_only_in_secrets, "dev", resources)
    assert len(violations) == (1 if credential else 0), violations


def test_egress_rules_as_printed_by_kubectl_ate_are_read_like_the_inputs():
    """Outputs carry the live rules; protojson prints int64 as a string ("900")."""
    resources = captured("dev")
    _with_rules(
        resources,
        "agents/actor-a",
        lambda doc: _jwt_header(doc)["actorJwt"].update(expirationSeconds="900"),
    )
    assert validate(rules.egress_reaches_only_the_gateway, "dev", resources) == []


# ---------------------------------------------------------------------------------------------------------
# Malformed resources the property-based tests found (tests/test_policy_properties.py): messages, not tracebacks


def test_a_null_header_match_in_a_budget_rule_does_not_break_the_coverage_rule():
    """A `null` in a budget rule's headers reached the translation model (AttributeError: 'NoneType' object
    has no attribute 'get'): such a policy fails its CRD schema, so the coverage rule does not model it."""
    resources = captured("dev")
    _budget_rules(resources)[0]["clientSelectors"][0]["headers"].append(None)
    assert validate(rules.budget_rules_cover_each_actor_once, "dev", resources) == []
    charged = validate(rules.budget_rules_charge_llm_tokens, "dev", resources)
    assert charged == []  # the match that is there is still a Distinct one on x-actor-id


def test_egress_settings_that_are_no_list_are_a_violation():
    """`provider_hosts: false` on a shard raised TypeError ('bool' object is not iterable) in the rule."""
    resources = captured("dev")
    _egress(resources, "agents/actor-a")["provider_hosts"] = False
    [message] = validate(rules.egress_reaches_only_the_gateway, "dev", resources)
    assert "provider_hosts must each be a list of host names or audiences, got False" in message
    assert "the egress-policy provider cannot build the actors' rules from them" in message


def test_written_rules_of_another_shape_compare_unequal_instead_of_failing():
    """`hostnames: true` in a shard's written rules raised TypeError while they were normalised."""
    resources = captured("dev")
    _with_rules(resources, "agents/actor-a", lambda doc: doc[0]["http"].update(hostnames=True))
    [message] = validate(rules.egress_reaches_only_the_gateway, "dev", resources)
    assert "egress rule 1 (http) sends the actor JWT to []: the rule with the actorJwt effect must name only" in message


# ---------------------------------------------------------------------------------------------------------
# The translation model the pack relies on (core/ratelimit_model.py): policies Envoy Gateway rejects

_DISTINCT = {"name": "x-actor-id", "type": "Distinct"}


@pytest.mark.parametrize(
    ("match", "reason"),
    [
        ({**_DISTINCT, "invert": True}, "Distinct match with invert: true"),
        ({**_DISTINCT, "value": "actor/agents/actor-a"}, "Distinct match with a value"),
        ({**_DISTINCT, "value": ""}, "Distinct match with a value"),
        ({"name": "x-actor-id", "type": "Exact"}, "an Exact match without a value"),
        ({"name": "x-actor-id"}, "an Exact match without a value"),  # the type defaults to Exact
        ({"name": "x-actor-id", "type": "RegularExpression", "invert": True}, "a RegularExpression match without"),
    ],
)
def test_the_model_raises_for_a_match_envoy_gateway_rejects(match, reason):
    rule = {**_nothing_rule(), "clientSelectors": [{"headers": [dict(_DISTINCT), match]}]}
    with pytest.raises(ValueError, match="Envoy Gateway rejects") as raised:
        rules_for_actor("agent-budgets", "budgets", [_nothing_rule(), rule], "actor/agents/actor-a")
    message = str(raised.value)
    assert "BackendTrafficPolicy agent-budgets/budgets" in message
    assert "the whole policy fails" in message
    assert "rule 1 match 1 (x-actor-id) is " in message
    assert reason in message


def test_the_model_accepts_what_envoy_gateway_translates():
    rule = {
        **_nothing_rule(),
        "clientSelectors": [
            {
                "headers": [
                    dict(_DISTINCT),
                    {"name": "x-actor-id", "type": "Exact", "value": "actor/agents/actor-b", "invert": True},
                    {"name": "x-actor-id", "type": "RegularExpression", "value": "^actor/agents/.*$"},
                ]
            }
        ],
    }
    assert translation_errors([rule]) == []
    [applied] = rules_for_actor("agent-budgets", "budgets", [rule], "actor/agents/actor-a")
    assert applied.entries[1] == ("rule-0-match-0", "actor/agents/actor-a")
    assert rules_for_actor("agent-budgets", "budgets", [rule], "actor/agents/actor-b") == []


# ---------------------------------------------------------------------------------------------------------
# The pack as the CLI runs it: `python -u -m pulumi.policy <engine> .` in policy/, over the analyzer protocol


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."],
        cwd=ROOT / "policy",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = proc.stdout.readline().strip()  # PolicyPack prints its port, then serves until killed
        assert port.isdigit(), f"the pack did not start: {port!r} {proc.stderr.read() if proc.poll() else ''}"
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    json_format.ParseDict(value, message)
    return message


def test_the_pack_serves_every_rule_over_the_analyzer_protocol(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=10)
    assert info.name == "agent-budgets"
    assert [p.name for p in info.policies] == [p.name for p in rules.POLICIES]


def test_the_pack_reports_a_broken_resource_over_the_analyzer_protocol(analyzer):
    backend = find(captured("prod"), "AIServiceBackend", "openai")
    backend.inputs["spec"]["headerMutation"] = {"remove": ["x-actor-id"]}
    response = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type=backend.type,
            properties=_struct(backend.inputs),
            urn=urn("prod", backend),
            name=backend.name,
        ),
        timeout=10,
    )
    found = {d.policyName: d.message for d in response.diagnostics}
    assert set(found) == {"ai-service-backend-removes-authorization", "actor-header-untouched"}
    assert "does not remove the authorization header" in found["ai-service-backend-removes-authorization"]
    assert "spec.headerMutation.remove drops x-actor-id" in found["actor-header-untouched"]


def test_the_pack_checks_the_whole_stack_over_the_analyzer_protocol(analyzer):
    resources = captured("dev")

    def analyze_stack() -> list[str]:
        request = analyzer_pb2.AnalyzeStackRequest(
            resources=[
                analyzer_pb2.AnalyzerResource(type=r.type, properties=_struct(r.inputs), urn=urn("dev", r), name=r.name)
                for r in resources
            ]
        )
        return [d.policyName for d in analyzer.AnalyzeStack(request, timeout=30).diagnostics]

    assert analyze_stack() == []
    _drop(resources, "SecurityPolicy")
    assert analyze_stack() == ["budget-rules-cover-each-actor-once"]


def test_the_limit_slots_annotation_groups_a_budget_s_rules_and_its_absence_is_read_strictly():
    """prod's research class has three limits (rules 9-11, limitSlots 3): one budget; every other budget has
    a tokens and a calls limit. Without the policy's limit-slots annotation each rule is read as a budget of
    its own, so every actor (and the probe actor in no class) counts as covered several times; an unreadable
    annotation is read the same strict way."""
    resources = captured("prod")
    assert validate(rules.budget_rules_cover_each_actor_once, "prod", resources) == []
    annotations = find(resources, "BackendTrafficPolicy").inputs["metadata"]["annotations"]
    assert annotations == {"agent-budgets.dev/limit-slots": "3"}
    for value in (None, "three", "0", "99"):
        if value is None:
            annotations.pop("agent-budgets.dev/limit-slots", None)
        else:
            annotations["agent-budgets.dev/limit-slots"] = value
        violations = validate(rules.budget_rules_cover_each_actor_once, "prod", resources)
        assert len(violations) == 7, violations  # six actors and the probe actor
        assert any("actor agents/research-1 falls in the rules of 3 budgets (9, 10, 11)" in v for v in violations)
        assert any("actor agents/support-1 falls in the rules of 3 budgets (0, 1, 2)" in v for v in violations)

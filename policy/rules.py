"""The agent-budgets CrossGuard rules: the policy objects that report the checks, and the pack's lists of them.

The checks live beside this file, one module per concern: `identity_checks` (who a call is charged to),
`budget_checks` (what the budget rules charge and cover), `credential_checks` (no key leaks), `egress_checks`
(Substrate egress policies), `platform_checks` (failure mode, IdP trust, Redis), over `resources` (the plain data
every check reads). Everything is importable without starting the pack (`policy/__main__.py` builds the
`PolicyPack`, which blocks forever). Each check is a pure function over a `Resource` (type, name, URN and plain
props) returning one message per problem; each message names the resource and what to fix. The
`ResourceValidationPolicy` / `StackValidationPolicy` objects here only adapt these checks to
the engine: they turn the engine's props (read-only proxies that raise on values unknown during
preview) into plain data first, so an unknown value skips the check that needs it instead of
silencing the whole policy.

Resource validations see a resource's *inputs* (camelCase for Kubernetes objects, snake_case for the
egress-policy shards, the dynamic resources that each hold the policies of a group of actors); the stack
validations see *outputs* (for these objects the same shape, plus what the cluster adds).

The rules reuse the program's facts rather than restating them: Envoy Gateway's caps and the cost
metadata from `core/budget_rules.py`, the rule-translation model in
`core/ratelimit_model.py`, the gateway hostname, provider hosts and actor-JWT lifetime from
`core/egress/` (whose `build_rules` is exactly what the dynamic provider sends), the chart and
Redis names from `core/platform_values.py`. These are pure modules: importing them starts no Pulumi
program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)

from core.egress import (
    GATEWAY_HOSTNAME,
    MAX_EXPIRATION_SECONDS,
    MIN_EXPIRATION_SECONDS,
)
from policy.budget_checks import (
    check_body_mutations_keep_usage,
    check_budget_costs_reported,
    check_budget_coverage,
    check_budget_models_served,
    check_budget_rules_charge_tokens,
    check_route_policies_merge,
)
from policy.credential_checks import (
    check_backend_removes_authorization,
    check_backends_remove_api_key_headers,
    check_provider_keys_in_secrets,
)
from policy.egress_checks import check_egress_reaches_only_the_gateway
from policy.identity_checks import (
    check_actor_header_untouched,
    check_agent_router_after_identity,
    check_jwt_names_the_actor,
    check_one_actor_id_per_call,
    check_suspension_keeps_the_listener,
)
from policy.platform_checks import check_fails_closed_outside_dev, check_idp_trust_verifies, check_redis_persistence
from policy.resources import (
    DEFAULT_DEV_STACKS,
    as_dict,
)

# Names the tests and tools read through this module (explicit re-exports).
from policy.resources import EGRESS_SHARD_TYPE as EGRESS_SHARD_TYPE
from policy.resources import HELM_RELEASE_TYPE as HELM_RELEASE_TYPE
from policy.resources import PACK_NAME as PACK_NAME
from policy.resources import UNKNOWN as UNKNOWN
from policy.resources import Resource as Resource
from policy.resources import StackProblem as StackProblem
from policy.resources import plain as plain
from policy.resources import stack_of_urn as stack_of_urn

ResourceCheck = Callable[[Resource, Mapping[str, Any]], list[str]]
StackCheck = Callable[[Sequence[Resource], Mapping[str, Any]], list[StackProblem]]


def _resource_validation(check: ResourceCheck) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = Resource(args.resource_type, args.name, as_dict(plain(args.props)), args.urn)
        for message in check(resource, args.get_config() or {}):
            report_violation(message, None)

    validate.__name__ = check.__name__
    return validate


def _stack_validation(check: StackCheck) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [Resource(r.resource_type, r.name, as_dict(plain(r.props)), r.urn) for r in args.resources]
        for problem in check(resources, args.get_config() or {}):
            report_violation(problem.message, problem.urn or None)

    validate.__name__ = check.__name__
    return validate


ai_service_backend_removes_authorization = ResourceValidationPolicy(
    name="ai-service-backend-removes-authorization",
    description="Every AIServiceBackend removes the authorization header, so the actor JWT never reaches a provider.",
    validate=_resource_validation(check_backend_removes_authorization),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

budget_rules_charge_llm_tokens = ResourceValidationPolicy(
    name="budget-rules-charge-llm-tokens",
    description=(
        "Every rate-limit rule keyed on x-actor-id is global, shared, Distinct per actor (outside the pools' "
        "blocks), free on the request and charged the response's io.envoy.ai_gateway/llm_total_token (or "
        "llm_input_token, llm_output_token, llm_cached_input_token, or agent_budgets_usd_mills for a budget in "
        "dollars), or, for a calls limit, charged one call on the request and nothing on the response; no "
        "header match of the budget policy "
        "is one Envoy Gateway rejects at translation (Distinct with invert or a value, Exact or "
        "RegularExpression without a value)."
    ),
    validate=_resource_validation(check_budget_rules_charge_tokens),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

actor_header_untouched = ResourceValidationPolicy(
    name="actor-header-untouched",
    description=(
        "Only a verified identity sets x-actor-id (a JWT subject, or an API key's client id from a SecurityPolicy "
        "without jwt), and nothing removes it on the way to the provider."
    ),
    validate=_resource_validation(check_actor_header_untouched),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

jwt_names_the_actor = ResourceValidationPolicy(
    name="jwt-names-the-actor",
    description=(
        "The JWT SecurityPolicy requires a valid token (neither optional nor failOpen), checks its audiences "
        "and copies its sub into x-actor-id; its suspension rules deny actor subjects of its own provider, and "
        "its authorization allows everyone else. An API-key SecurityPolicy that writes x-actor-id removes the key "
        "before the request goes upstream (sanitize) and suspends on API-key client ids only."
    ),
    validate=_resource_validation(check_jwt_names_the_actor),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

one_actor_id_per_call = ResourceValidationPolicy(
    name="one-actor-id-per-call",
    description=(
        "A SecurityPolicy that names the actor gives every admitted call exactly one x-actor-id: each JWT provider "
        "reads its token from the Authorization header alone (extractFrom; Envoy's default also reads the "
        "access_token query parameter), its authorization starts by denying a call without exactly one x-actor-id "
        "(a token without sub), and an API-key policy references at least one credential."
    ),
    validate=_resource_validation(check_one_actor_id_per_call),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

egress_reaches_only_the_gateway = ResourceValidationPolicy(
    name="egress-reaches-only-the-gateway",
    description=(
        f"Each actor's egress policy holds only the http rule for the gateway, swapping Authorization for a "
        f"{MIN_EXPIRATION_SECONDS}-{MAX_EXPIRATION_SECONDS} s actor JWT; any other rule is a violation. Config "
        "allowExtraHostnames (default false) set to true also admits effect-free tlsPassthrough rules toward "
        "hosts that are neither model providers nor the gateway."
    ),
    validate=_resource_validation(check_egress_reaches_only_the_gateway),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
    config_schema=PolicyConfigSchema(
        properties={
            "gatewayHostname": {"type": "string", "default": GATEWAY_HOSTNAME},
            "allowExtraHostnames": {"type": "boolean", "default": False},
        },
    ),
)

provider_keys_only_in_secrets = ResourceValidationPolicy(
    name="provider-keys-only-in-secrets",
    description="Provider keys reach the cluster only through Secrets: secretRef credentials, no literal keys.",
    validate=_resource_validation(check_provider_keys_in_secrets),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

budget_rules_cover_each_actor_once = StackValidationPolicy(
    name="budget-rules-cover-each-actor-once",
    description=(
        "Every actor falls in the rules of exactly one budget (one rule per limit, whatever model it calls; pools "
        "come on top) of one budget policy, set by a JWT SecurityPolicy, within Envoy Gateway's caps."
    ),
    validate=_stack_validation(check_budget_coverage),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

budget_costs_reported_by_every_route = StackValidationPolicy(
    name="budget-costs-reported-by-every-route",
    description=(
        "Every AIGatewayRoute on the budget's Gateway reports each metadata key a budget rule charges: "
        "llm_total_token as TotalToken, llm_input_token as InputToken, llm_output_token as OutputToken, "
        "llm_cached_input_token as CachedInputToken, agent_budgets_usd_mills (a call's price in mills) as a CEL cost."
    ),
    validate=_stack_validation(check_budget_costs_reported),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

ai_service_backends_remove_api_key_headers = StackValidationPolicy(
    name="ai-service-backends-remove-api-key-headers",
    description=(
        "While a SecurityPolicy has an apiKeyAuth, every AIServiceBackend its Gateway's routes use removes "
        "authorization and each header the apiKeyAuth reads keys from, so no agent's key reaches a provider."
    ),
    validate=_stack_validation(check_backends_remove_api_key_headers),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

budget_models_served_by_a_route = StackValidationPolicy(
    name="budget-models-served-by-a-route",
    description=(
        "Every per-model budget rule's x-ai-eg-model match names models an AIGatewayRoute on the budget's Gateway "
        "serves, as agents send them (not only a modelNameOverride), so the limit can count a call."
    ),
    validate=_stack_validation(check_budget_models_served),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

route_policies_merge_with_the_budget = StackValidationPolicy(
    name="route-policies-merge-with-the-budget",
    description=(
        "While a budget policy targets the Gateway, every BackendTrafficPolicy on an HTTPRoute or GRPCRoute "
        "(such as the HTTPRoute an AIGatewayRoute generates) sets mergeType, so it does not replace the budget."
    ),
    validate=_stack_validation(check_route_policies_merge),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

body_mutations_keep_usage = ResourceValidationPolicy(
    name="body-mutations-keep-usage",
    description=(
        "No request body mutation changes stream or stream_options, which decide whether a stream reports usage."
    ),
    validate=_resource_validation(check_body_mutations_keep_usage),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

agent_router_after_identity = ResourceValidationPolicy(
    name="agent-router-after-identity",
    description=(
        "The EnvoyProxy orders custom_response after jwt_authn, so Agent Router's processor runs after the filter "
        "that sets x-actor-id and a retried call is still charged."
    ),
    validate=_resource_validation(check_agent_router_after_identity),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

suspension_keeps_the_listener = ResourceValidationPolicy(
    name="suspension-keeps-the-listener",
    description=(
        "The JWT SecurityPolicy always has an authorization and the budget policy its 403 response overrides, so "
        "suspending an actor never changes the listener (which would drain connections)."
    ),
    validate=_resource_validation(check_suspension_keeps_the_listener),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

rate_limit_fails_closed_outside_dev = ResourceValidationPolicy(
    name="rate-limit-fails-closed-outside-dev",
    description="Outside dev stacks, Envoy Gateway refuses calls rather than lifting every budget when Redis is down.",
    validate=_resource_validation(check_fails_closed_outside_dev),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
    config_schema=PolicyConfigSchema(
        properties={
            "devStacks": {"type": "array", "items": {"type": "string"}, "default": list(DEFAULT_DEV_STACKS)},
        },
    ),
)

redis_persists_counters = StackValidationPolicy(
    name="redis-persists-counters",
    description="The in-cluster Redis keeps spent budgets across restarts (a mounted volume claim, appendonly yes).",
    validate=_stack_validation(check_redis_persistence),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

idp_trust_verifies_certificates = ResourceValidationPolicy(
    name="idp-trust-verifies-certificates",
    description="Envoy Gateway verifies the Substrate IdP's certificate when it fetches the actor JWKS.",
    validate=_resource_validation(check_idp_trust_verifies),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

MANDATORY_POLICIES: list[Policy] = [
    ai_service_backend_removes_authorization,
    ai_service_backends_remove_api_key_headers,
    budget_rules_charge_llm_tokens,
    actor_header_untouched,
    jwt_names_the_actor,
    one_actor_id_per_call,
    egress_reaches_only_the_gateway,
    budget_rules_cover_each_actor_once,
    budget_costs_reported_by_every_route,
    budget_models_served_by_a_route,
    route_policies_merge_with_the_budget,
    provider_keys_only_in_secrets,
    body_mutations_keep_usage,
    agent_router_after_identity,
]
ADVISORY_POLICIES: list[Policy] = [
    rate_limit_fails_closed_outside_dev,
    redis_persists_counters,
    idp_trust_verifies_certificates,
    suspension_keeps_the_listener,
]
POLICIES: list[Policy] = [*MANDATORY_POLICIES, *ADVISORY_POLICIES]

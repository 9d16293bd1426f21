"""Wire the components together in dependency order. Everything here was validated by core.validation."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.actor_egress import ActorEgressPolicies
from components.api_keys import ApiKeys
from components.budgets import Budgets
from components.dashboard import Dashboard
from components.gateway import ModelGateway
from components.idp_trust import SubstrateIdpTrust
from components.mock_model import MockModel
from components.models import Models
from components.monitoring import Monitoring
from components.platform_releases import Platform
from components.service_account_trust import ServiceAccountTrust
from core.budget_rules import BudgetRules
from core.egress import EgressPolicySettings
from core.identity import SUBSTRATE
from core.kubeconfig import is_contents as kubeconfig_is_contents
from core.settings import PROJECT, StackSettings
from core.worst_case import stack_worst_cases


def kubernetes_provider(settings: StackSettings) -> k8s.Provider:
    """The one explicit Kubernetes provider: the kube context comes from config, never the ambient one.

    Kubeconfig contents hold credentials: they reach the provider (and so the state) only as a secret.
    """
    kubeconfig: str | pulumi.Output[str] | None = settings.kubernetes.kubeconfig
    if kubeconfig and kubeconfig_is_contents(kubeconfig):
        kubeconfig = pulumi.Output.secret(kubeconfig)
    return k8s.Provider(
        "kubernetes",
        context=settings.kubernetes.context,
        kubeconfig=kubeconfig,
        enable_server_side_apply=True,
    )


def secret_config(key: str) -> pulumi.Output[str]:
    """A secret config value, kept secret (core.validation has already checked it is set)."""
    value = pulumi.Config(PROJECT).get_secret(key)
    if value is None:  # pragma: no cover - validation refuses a missing secret first
        raise pulumi.RunError(f"{PROJECT}:{key} is not set")
    return value


def provider_keys(settings: StackSettings) -> dict[str, pulumi.Output[str]]:
    """Each remote provider's key, from secret config (core.validation has checked they are set)."""
    return {
        provider.name: secret_config(provider.api_key_config_key)
        for provider in settings.providers
        if provider.needs_api_key
    }


def build_stack(
    settings: StackSettings, rules: BudgetRules, egress: EgressPolicySettings | None = None
) -> dict[str, Any]:
    """Declare every resource; return the stack outputs (nothing secret but `apiKeys`, a Pulumi secret). ``egress``:
    the egress-policy settings core.validation checked (None when the stack holds no egress policy)."""
    cluster = kubernetes_provider(settings)
    with_cluster = pulumi.ResourceOptions(providers={"kubernetes": cluster})

    platform = Platform("platform", settings, opts=with_cluster)
    deps = platform.deps
    gateway = ModelGateway(
        "gateway",
        settings,
        crds=deps.envoy_gateway,
        controller=deps.agent_router_controller,
        opts=with_cluster,
    )
    namespace = [gateway.namespace]
    trust_dependencies = [*deps.envoy_gateway, *namespace]
    jwks_sources: list[pulumi.Resource] = []
    if settings.identity.uses(SUBSTRATE):
        idp = SubstrateIdpTrust("substrate-idp", settings, depends_on=trust_dependencies, opts=with_cluster)
        jwks_sources.extend(idp.jwks_dependencies)
    if settings.identity.kubernetes_enabled:
        service_accounts = ServiceAccountTrust(
            "service-account-trust", settings, depends_on=trust_dependencies, opts=with_cluster
        )
        jwks_sources.extend(service_accounts.jwks_dependencies)
    keys = provider_keys(settings)
    models = Models(
        "models",
        settings,
        keys,
        gateway_crds=deps.envoy_gateway,
        ai_crds=deps.agent_router_crds,
        namespace=namespace,
        opts=with_cluster,
    )
    mock = settings.mock_provider
    if mock is not None:
        MockModel(
            "mock-model",
            settings,
            mock,
            key_secret=[models.key_secrets[mock.name]],
            gateway_crds=deps.envoy_gateway,
            namespace=namespace,
            opts=with_cluster,
        )
    Budgets(
        "budgets",
        settings,
        rules,
        crds=[*deps.envoy_gateway, *namespace],
        jwks_sources=jwks_sources,
        rate_limit_store=deps.rate_limit_store,
        opts=with_cluster,
    )
    api_keys: ApiKeys | None = None
    if settings.identity.api_keys_enabled:
        api_keys = ApiKeys("api-keys", settings, crds=deps.envoy_gateway, namespace=namespace, opts=with_cluster)
    if settings.monitoring.prometheus_rules:
        Monitoring("monitoring", settings, rules, namespace=namespace, opts=with_cluster)
    if settings.monitoring.dashboard:
        Dashboard("dashboard", settings, rules, namespace=namespace, opts=with_cluster)
    if egress is not None:
        ActorEgressPolicies("actor-egress", egress)

    outputs: dict[str, Any] = {}
    if settings.identity.jwt_sources:
        outputs["gatewayUrl"] = f"http://{gateway.hostname}:{settings.gateway.port}"
    outputs.update(
        {
            "actors": len(settings.actors),
            # One entry per limit: its budget, unit (tokens, usd or calls), amount, window (per) and rule index.
            "budgetRules": rules.summary(),
            # One entry per tokens or usd limit: the most an actor can have been charged by the end of a window
            # (or what to set for there to be a most). Known at preview, so a change shows in its outputs diff.
            "worstCase": [case.to_output() for case in stack_worst_cases(settings, rules)],
            "suspended": sorted(settings.suspended),
            "routes": {route.name: route.models for route in settings.routes},
            "redisMode": settings.redis.mode,
            "failClosed": settings.rate_limit.fail_closed,
            "identitySources": list(settings.identity.sources),
        }
    )
    if api_keys is not None:
        outputs["apiKeyGatewayUrl"] = f"http://{gateway.hostname}:{settings.identity.api_keys.port}"
        # Each API-key actor's key, only ever as a Pulumi secret (encrypted in state, masked unless --show-secrets).
        outputs["apiKeys"] = pulumi.Output.secret(pulumi.Output.all(**api_keys.keys))
    if not settings.platform.install:
        # Whoever installs Envoy Gateway and Agent Router must give them these values (they hold no secret:
        # only references). Both ends of the extension-server message need platform.extensionMessageLimit.
        outputs["envoyGatewayValues"] = platform.envoy_gateway_values
        outputs["agentRouterValues"] = platform.agent_router_values
    return outputs

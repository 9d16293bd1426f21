"""Wire the components together in dependency order. Everything here was validated by core.validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from core.settings import StackSettings
from core.worst_case import stack_worst_cases


@dataclass(frozen=True)
class StackSecrets:
    """The secrets the stack needs, each kept a Pulumi secret wherever it goes (core.validation has checked that
    every one the configuration needs is here)."""

    provider_api_keys: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    """Each remote provider's API key, by provider name."""
    redis_password: pulumi.Input[str] | None = None
    """The external Redis's password."""
    redis_sentinel_password: pulumi.Input[str] | None = None
    """The Redis Sentinels' password."""
    kubeconfig: pulumi.Input[str] | None = None
    """A kubeconfig known only at deployment time (an Output): it goes to the Kubernetes provider alone."""


@dataclass(frozen=True)
class Placement:
    """Where the stack's top-level resources go: under `parent`, and with `aliases_from_root` an alias each to the
    stack root, where the program registered them before `AgentBudgets` (their children follow them: the engine
    carries a parent's alias to its children), so an existing stack's `pulumi up` replaces nothing."""

    parent: pulumi.Resource | None = None
    aliases_from_root: bool = False

    def options(self, **options: Any) -> pulumi.ResourceOptions:
        aliases = [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)] if self.aliases_from_root else None
        return pulumi.ResourceOptions(parent=self.parent, aliases=aliases, **options)


def kubernetes_provider(
    settings: StackSettings, placement: Placement, kubeconfig: pulumi.Input[str] | None = None
) -> k8s.Provider:
    """The one explicit Kubernetes provider: the kube context comes from config, never the ambient one.

    Kubeconfig contents hold credentials: they reach the provider (and so the state) only as a secret.
    """
    if kubeconfig is None:
        kubeconfig = settings.kubernetes.kubeconfig
        if kubeconfig and kubeconfig_is_contents(kubeconfig):
            kubeconfig = pulumi.Output.secret(kubeconfig)
    else:
        kubeconfig = pulumi.Output.secret(kubeconfig)
    return k8s.Provider(
        "kubernetes",
        context=settings.kubernetes.context,
        kubeconfig=kubeconfig,
        enable_server_side_apply=True,
        opts=placement.options(),
    )


def build_stack(
    settings: StackSettings,
    rules: BudgetRules,
    secrets: StackSecrets,
    egress: EgressPolicySettings | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """Declare every resource; return the stack outputs (nothing secret but `apiKeys`, a Pulumi secret). ``egress``:
    the egress-policy settings core.validation checked (None when the stack holds no egress policy)."""
    placement = placement or Placement()
    cluster = kubernetes_provider(settings, placement, secrets.kubeconfig)
    with_cluster = placement.options(providers={"kubernetes": cluster})

    platform = Platform(
        "platform",
        settings,
        redis_password=secrets.redis_password,
        redis_sentinel_password=secrets.redis_sentinel_password,
        opts=with_cluster,
    )
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
    budgets = Budgets(
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
    # No route is served before the policies that name its callers and count their spend exist: a route without
    # them would answer anyone, and with no verified x-actor-id no budget rule would charge the call. Should a policy
    # fail to create, the routes are not created either (closed, not open).
    route_dependencies: list[pulumi.Resource] = [
        *([budgets.jwt_policy] if budgets.jwt_policy is not None else []),
        *([api_keys.policy] if api_keys is not None else []),
        budgets.budget_policy,
    ]
    keys = {name: pulumi.Output.secret(key) for name, key in secrets.provider_api_keys.items()}
    models = Models(
        "models",
        settings,
        keys,
        gateway_crds=deps.envoy_gateway,
        # Agent Router's kinds carry its controller's finalizer: they must go before the controller on destroy.
        ai_crds=[*deps.agent_router_crds, *deps.agent_router_controller],
        namespace=namespace,
        route_dependencies=route_dependencies,
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
    if settings.monitoring.prometheus_rules:
        Monitoring("monitoring", settings, rules, namespace=namespace, opts=with_cluster)
    if settings.monitoring.dashboard:
        Dashboard("dashboard", settings, rules, namespace=namespace, opts=with_cluster)
    if egress is not None:
        ActorEgressPolicies("actor-egress", egress, opts=placement.options())

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

"""The platform layer: Envoy Gateway and Agent Router as Helm releases, in order, plus the rate-limit store.

Three `helm.v3.Release`s (a real Helm install: Envoy Gateway's chart runs its certgen Job as an install
hook, which Chart v4 would drop):

1. `eg` (gateway-helm) into `envoy-gateway-system`: Gateway API and Envoy Gateway CRDs, the controller,
   Agent Router's extension manager, `enableBackend`, and global rate limiting on the Redis store. It
   waits for the Secret that carries the Redis password into `envoy-ratelimit`.
2. `aieg-crd` (ai-gateway-crds-helm) into `envoy-ai-gateway-system`.
3. `aieg` (ai-gateway-helm), after both: the controller watches Gateway API and Agent Router kinds, and
   its webhook must be up before any Envoy pod is created (the caller's Gateway waits for it).

Release options, the same for all three:

* `atomic` (implies wait): a failed install is removed and a failed upgrade rolled back, so the cluster
  keeps the last working platform instead of a half-upgraded one; `cleanup_on_fail` removes what a failed
  upgrade created.
* waiting (`skip_await` left false) plus `wait_for_jobs`: the release is done only when its Deployments
  are ready, which is what "depends on the controller" has to mean for the webhook.
* `timeout`: 600 s for the two controllers (a cold node pulls their images), 300 s for the CRD chart.
* `max_history`: 10 Helm revisions, enough to roll back by hand.
* No `controller.mcp.sessionEncryption.seed`: this project has no MCPRoute, and a Release renders in the
  cluster, so the chart's own seed handling (a generated seed kept in a Secret in v1.2) is left alone. An
  explicit seed would be one more secret in Helm values and state for a feature we don't use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.core.v1 import Namespace
from pulumi_kubernetes.helm.v3 import Release, ReleaseArgs, RepositoryOptsArgs

from components.rate_limit_store import RateLimitStore, read_external_password
from core.manifests import common_labels
from core.platform_values import AGENT_ROUTER_NAMESPACE, ReleaseSpec, release_specs
from core.settings import ENVOY_GATEWAY_NAMESPACE, StackSettings

HELM_MAX_HISTORY = 10


@dataclass(frozen=True)
class PlatformDeps:
    """What the rest of the stack waits for (each tuple is empty when the platform is installed elsewhere)."""

    envoy_gateway: tuple[pulumi.Resource, ...]
    """Installs the Gateway API and Envoy Gateway CRDs (GatewayClass, Gateway, EnvoyProxy,
    ClientTrafficPolicy, Backend, BackendTrafficPolicy, SecurityPolicy, BackendTLSPolicy)."""
    agent_router_crds: tuple[pulumi.Resource, ...]
    """Installs AIGatewayRoute, AIServiceBackend, BackendSecurityPolicy."""
    agent_router_controller: tuple[pulumi.Resource, ...]
    """The Gateway waits for it: its webhook blocks Envoy pods until it is up."""
    rate_limit_store: tuple[pulumi.Resource, ...]
    """The budget policy waits for it (never empty)."""


class Platform(pulumi.ComponentResource):
    """Envoy Gateway, Agent Router and the rate-limit store, at the versions pinned in stack config."""

    deps: PlatformDeps
    store: RateLimitStore
    envoy_gateway_release: Release | None
    agent_router_crds_release: Release | None
    agent_router_release: Release | None
    envoy_gateway_namespace: Namespace | None
    agent_router_namespace: Namespace | None
    envoy_gateway_values: dict[str, Any]
    """The `eg` values; still computed when `platform.install` is false, for whoever installs it."""
    agent_router_values: dict[str, Any]
    """The `aieg` values, likewise: the extension server's receive cap must match Envoy Gateway's send cap."""

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        redis_password: pulumi.Input[str] | None = None,
        redis_sentinel_password: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`redis_password` and `redis_sentinel_password`: the external Redis's secrets (read from secret config
        when not given)."""
        # A missing or plain-text external Redis password stops the run before anything is registered.
        external_password = redis_password
        if external_password is None and settings.redis.mode == "external":
            external_password = read_external_password(settings.redis)
        super().__init__("agent-budgets:platform:Platform", name, None, opts)
        envoy_gateway, crds, controller = release_specs(settings)
        self.envoy_gateway_values = envoy_gateway.values
        self.agent_router_values = controller.values
        install = settings.platform.install

        self.envoy_gateway_namespace = self.agent_router_namespace = None
        client_namespace: pulumi.Input[str] = ENVOY_GATEWAY_NAMESPACE
        if install:
            # Our own Namespace, not Helm's create_namespace: the Redis Secret must exist in it before the
            # release, and `pulumi destroy` removes it again.
            self.envoy_gateway_namespace = self._namespace(f"{name}-envoy-gateway-namespace", ENVOY_GATEWAY_NAMESPACE)
            self.agent_router_namespace = self._namespace(f"{name}-agent-router-namespace", AGENT_ROUTER_NAMESPACE)
            client_namespace = self.envoy_gateway_namespace.metadata.name

        self.store = RateLimitStore(
            f"{name}-rate-limit-store",
            settings.redis,
            client_namespace=client_namespace,
            external_password=external_password,
            sentinel_password=redis_sentinel_password,
            image_registry=settings.platform.images.registry,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.envoy_gateway_release = self.agent_router_crds_release = self.agent_router_release = None
        if install:
            assert self.envoy_gateway_namespace is not None and self.agent_router_namespace is not None
            self.envoy_gateway_release = self._release(
                name, envoy_gateway, self.envoy_gateway_namespace, depends_on=[self.store.client_secret]
            )
            self.agent_router_crds_release = self._release(name, crds, self.agent_router_namespace)
            self.agent_router_release = self._release(
                name,
                controller,
                self.agent_router_namespace,
                depends_on=[self.envoy_gateway_release, self.agent_router_crds_release],
            )

        self.deps = PlatformDeps(
            envoy_gateway=_present(self.envoy_gateway_release),
            agent_router_crds=_present(self.agent_router_crds_release),
            agent_router_controller=_present(self.agent_router_release),
            rate_limit_store=self.store.ready,
        )
        self.register_outputs(
            {
                "installed": install,
                "envoyGatewayVersion": settings.platform.envoy_gateway_version,
                "agentRouterVersion": settings.platform.agent_router_version,
                "redisMode": settings.redis.mode,
                "redisUrl": self.store.url,
                "failClosed": settings.rate_limit.fail_closed,
            }
        )

    def _namespace(self, resource_name: str, namespace: str) -> Namespace:
        return Namespace(
            resource_name,
            metadata={"name": namespace, "labels": common_labels()},
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _release(
        self,
        name: str,
        spec: ReleaseSpec,
        namespace: Namespace,
        depends_on: list[pulumi.Resource] | None = None,
    ) -> Release:
        return Release(
            f"{name}-{spec.resource_suffix}",
            ReleaseArgs(
                name=spec.release_name,  # fixed: an auto-named release would be a second install
                chart=spec.chart,
                version=spec.version,
                repository_opts=RepositoryOptsArgs(repo=spec.repository) if spec.repository else None,
                namespace=namespace.metadata.name,
                create_namespace=False,
                values=spec.values,
                atomic=True,
                cleanup_on_fail=True,
                wait_for_jobs=True,
                timeout=spec.timeout_seconds,
                max_history=HELM_MAX_HISTORY,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or []),
        )


def _present(release: Release | None) -> tuple[pulumi.Resource, ...]:
    return () if release is None else (release,)

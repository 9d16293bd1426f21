"""Models: provider backends, their credentials, and the routes that report token usage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_random as random
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core.v1 import Secret

from components.k8s import custom_resource
from core.manifests import API_KEY_SECRET_FIELD, common_labels, model_manifests, provider_secret_name
from core.settings import StackSettings


class Models(pulumi.ComponentResource):
    """AIGatewayRoutes, and per provider: Backend, AIServiceBackend, key Secret, BackendSecurityPolicy."""

    resources: dict[str, CustomResource]
    key_secrets: dict[str, Secret]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        provider_keys: Mapping[str, pulumi.Output[str]],  # remote providers' keys, from secret config
        gateway_crds: Sequence[pulumi.Resource] = (),
        ai_crds: Sequence[pulumi.Resource] = (),
        namespace: Sequence[pulumi.Resource] = (),
        route_dependencies: Sequence[pulumi.Resource] = (),  # what must exist before a route is served
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:models:Models", name, None, opts)
        self.key_secrets = {}
        for provider in settings.providers:
            if provider.needs_api_key:
                key = provider_keys[provider.name]
            else:  # the in-cluster mock checks that the gateway sends this generated key
                generated = random.RandomPassword(
                    f"{name}-{provider.name}-generated-key",
                    length=40,
                    special=False,
                    opts=pulumi.ResourceOptions(parent=self),
                )
                key = generated.result
            # The key only ever lives here, as a secret, next to the gateway: never in a sandbox.
            self.key_secrets[provider.name] = Secret(
                f"{name}-{provider.name}-key",
                metadata={
                    "name": provider_secret_name(provider),
                    "namespace": settings.gateway.namespace,
                    "labels": common_labels(),
                },
                type="Opaque",
                string_data={API_KEY_SECRET_FIELD: pulumi.Output.secret(key)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(namespace)),
            )
        self.resources = {}
        for manifest in model_manifests(settings):
            is_ai_kind = manifest.api_version.startswith("aigateway.envoyproxy.io/")
            depends = [*(ai_crds if is_ai_kind else gateway_crds), *namespace]
            if manifest.kind == "BackendSecurityPolicy":
                provider_name = manifest.name.removesuffix("-key")
                depends.append(self.key_secrets[provider_name])
            if manifest.kind == "AIGatewayRoute":
                depends.extend(route_dependencies)
            self.resources[f"{manifest.kind}/{manifest.name}"] = custom_resource(manifest, self, depends)
        self.register_outputs(
            {
                "routes": [route.name for route in settings.routes],
                "providers": [provider.name for provider in settings.providers],
            }
        )

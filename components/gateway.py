"""The model gateway: the namespace, GatewayClass, EnvoyProxy, Gateway and ClientTrafficPolicy."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core.v1 import Namespace

from components.k8s import custom_resource
from core.manifests import common_labels, gateway_manifests
from core.settings import GATEWAY_HOSTNAME, StackSettings


class ModelGateway(pulumi.ComponentResource):
    """The Envoy Gateway data plane every agent calls, under one fixed in-cluster name."""

    namespace: Namespace
    resources: dict[str, CustomResource]
    hostname: str

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        crds: Sequence[pulumi.Resource] = (),
        controller: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:gateway:ModelGateway", name, None, opts)
        self.namespace = Namespace(
            f"{name}-namespace",
            metadata={"name": settings.gateway.namespace, "labels": common_labels()},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.resources = {}
        for manifest in gateway_manifests(settings):
            depends: list[pulumi.Resource] = [*crds]
            if manifest.namespace:
                depends.append(self.namespace)
            if manifest.kind == "Gateway":
                # Agent Router's webhook must be up before Envoy pods are created for this Gateway.
                depends.extend(controller)
            self.resources[manifest.kind] = custom_resource(manifest, self, depends)
        self.hostname = GATEWAY_HOSTNAME
        self.register_outputs({"hostname": self.hostname, "namespace": settings.gateway.namespace})

    @property
    def gateway(self) -> CustomResource:
        """The Gateway object itself."""
        return self.resources["Gateway"]

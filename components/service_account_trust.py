"""Trust in the cluster's service-account issuer, for `identity.kubernetes.jwks: apiServer`: the Backend Envoy
Gateway fetches the signing keys through, its TLS verification, and the anonymous discovery binding that fetch
needs (the other JWKS modes need no object: core.manifests.service_account_jwks)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.rbac.v1 import ClusterRoleBinding

from components.k8s import custom_resource
from core.manifests import DISCOVERY_BINDING_NAME, discovery_binding, service_account_trust_manifests
from core.settings import StackSettings


class ServiceAccountTrust(pulumi.ComponentResource):
    """Backend `kubernetes-api`, its BackendTLSPolicy, and ClusterRoleBinding
    `agent-budgets-service-account-issuer-discovery` (mode `apiServer`); nothing in the other modes."""

    resources: dict[str, CustomResource]
    binding: ClusterRoleBinding | None

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:identity:ServiceAccountTrust", name, None, opts)
        kubernetes = settings.identity.kubernetes
        self.resources = {
            manifest.kind: custom_resource(manifest, self, depends_on)
            for manifest in service_account_trust_manifests(settings)
        }
        self.binding = None
        binding = discovery_binding(settings)
        if binding is not None:
            pulumi.log.warn(
                f"agent-budgets:identity.kubernetes.jwks is apiServer: ClusterRoleBinding {DISCOVERY_BINDING_NAME} "
                "lets unauthenticated clients read the service-account issuer's discovery document and public keys "
                "(a cluster-wide RBAC change; docs/identity.md). Use jwks: configMap to avoid it.",
                resource=self,
            )
            self.binding = ClusterRoleBinding(
                f"{name}-discovery",
                metadata=binding["metadata"],
                role_ref=binding["roleRef"],
                subjects=binding["subjects"],
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"jwks": kubernetes.jwks, "issuer": kubernetes.issuer})

    @property
    def jwks_dependencies(self) -> list[pulumi.Resource]:
        """What the SecurityPolicy's service-account provider needs first: the Backend and its binding, if any."""
        found: list[pulumi.Resource] = list(self.resources.values())
        if self.binding is not None:
            found.append(self.binding)
        return found

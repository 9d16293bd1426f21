"""Trust in Agent Substrate's IdP: the Backend Envoy Gateway fetches the actor JWKS through."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.k8s import custom_resource
from core.manifests import idp_trust_manifests
from core.settings import StackSettings


class SubstrateIdpTrust(pulumi.ComponentResource):
    """Backend `substrate-idp` plus the TLS validation of the IdP's certificate."""

    resources: dict[str, CustomResource]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:substrate:IdpTrust", name, None, opts)
        if settings.substrate.trust.mode == "insecureSkipVerify":
            pulumi.log.warn(
                "agent-budgets:substrate.trust.mode is insecureSkipVerify: Envoy Gateway will fetch the "
                "actor JWKS WITHOUT verifying the IdP's certificate. Use this on a throwaway dev cluster only.",
                resource=self,
            )
        self.resources = {
            manifest.kind: custom_resource(manifest, self, depends_on) for manifest in idp_trust_manifests(settings)
        }
        self.register_outputs({"trustMode": settings.substrate.trust.mode})

    @property
    def backend(self) -> CustomResource:
        """The Backend the SecurityPolicy's remoteJWKS refers to."""
        return self.resources["Backend"]

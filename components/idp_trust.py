"""Trust in Agent Substrate's IdP: the Backend Envoy Gateway fetches the actor JWKS through, or nothing."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.k8s import custom_resource
from core.manifests import idp_trust_manifests
from core.settings import StackSettings


class SubstrateIdpTrust(pulumi.ComponentResource):
    """Backend `substrate-idp` plus the TLS validation of the IdP's certificate (none in mode `localJwks`)."""

    resources: dict[str, CustomResource]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:substrate:IdpTrust", name, None, opts)
        trust = settings.substrate.trust
        if trust.mode == "insecureSkipVerify":
            pulumi.log.warn(
                "agent-budgets:substrate.trust.mode is insecureSkipVerify: Envoy Gateway will fetch the "
                "actor JWKS WITHOUT verifying the IdP's certificate. Use this on a throwaway dev cluster only.",
                resource=self,
            )
        elif trust.mode == "localJwks":
            pulumi.log.warn(
                f"agent-budgets:substrate.trust.mode is localJwks: Envoy Gateway verifies actor JWTs with the keys "
                f"copied into ConfigMap {settings.gateway.namespace}/{trust.jwks_config_map} (key jwks), never "
                "with the IdP's. When Substrate rotates its signing keys, tokens fail with 401 until the copy is "
                "refreshed (on the dev stack: bash scripts/up.sh jwks-sync).",
                resource=self,
            )
        self.resources = {
            manifest.kind: custom_resource(manifest, self, depends_on) for manifest in idp_trust_manifests(settings)
        }
        self.register_outputs({"trustMode": trust.mode})

    @property
    def jwks_dependencies(self) -> list[CustomResource]:
        """What the SecurityPolicy's JWKS source needs first: the Backend its remoteJWKS refers to, if any."""
        return [self.resources["Backend"]] if "Backend" in self.resources else []

"""`agent-budgets:substrate`: who signs actor JWTs, how Envoy Gateway trusts the IdP, the egress policies."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from core import egress
from core.settings.base import DNS_SUBDOMAIN, GATEWAY_HOSTNAME, Audience, ConfigModel, check_command_argument

TrustMode = Literal["clusterTrustBundle", "configMap", "insecureSkipVerify", "localJwks"]
# The modes in which Envoy Gateway fetches the actor keys from the IdP at request time (remoteJWKS).
REMOTE_TRUST_MODES: tuple[TrustMode, ...] = ("clusterTrustBundle", "configMap", "insecureSkipVerify")


def _config_map_name(value: str) -> str:
    if len(value) > 253 or not DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f"{value!r} is not a ConfigMap name: use lowercase letters, digits, '-' and '.', at most 253 characters"
        )
    return value


ConfigMapName = Annotated[str, AfterValidator(_config_map_name)]


class IdpTrust(ConfigModel):
    """How Envoy Gateway gets the actor keys: from the IdP over verified TLS, or from a local copy."""

    mode: TrustMode = Field(
        default="clusterTrustBundle",
        description=(
            "How Envoy Gateway gets the actor keys: fetched from the IdP, its certificate verified with "
            "`clusterTrustBundle` or `configMap` (or not at all: `insecureSkipVerify`, throwaway clusters only), "
            "or `localJwks`: read from the ConfigMap `jwksConfigMap`, never fetched."
        ),
    )
    cluster_trust_bundle: str = Field(
        default="servicedns.podcert.ate.dev:identity:primary-bundle",
        description="The ClusterTrustBundle holding Substrate's service-DNS CA (mode `clusterTrustBundle`).",
    )
    # A ConfigMap in the gateway namespace holding the IdP's CA under key ca.crt.
    config_map: ConfigMapName = Field(
        default="substrate-idp-ca",
        description="A ConfigMap in the gateway namespace with the IdP's CA under `ca.crt` (mode `configMap`).",
    )
    jwks_config_map: ConfigMapName = Field(
        default="substrate-actor-jwks",
        description=(
            "A ConfigMap in the gateway namespace holding the actor JWKS under `jwks` (mode `localJwks`; "
            "`make up` fills it on the dev stack)."
        ),
    )

    @property
    def fetches_remote_jwks(self) -> bool:
        """Whether Envoy Gateway fetches the keys from the IdP (a Backend and its TLS trust are needed)."""
        return self.mode in REMOTE_TRUST_MODES


def _extra_hostname(value: str) -> str:
    problem = egress.hostname_problem(value)
    if problem:
        raise ValueError(problem)
    if value == GATEWAY_HOSTNAME:
        raise ValueError(f"{value!r} is the gateway itself, which already has its own rule: remove it")
    return value


class EgressConfig(ConfigModel):
    """The per-actor Substrate egress policy: one http rule toward the gateway (on `gateway.port`)."""

    enabled: bool = Field(default=True, description="Manage one Substrate egress policy per actor (in 64 shards).")
    expiration_seconds: int = Field(
        default=900,
        ge=300,
        le=3600,
        description="Lifetime of the actor JWT Substrate mints (Substrate allows 300-3600).",
    )
    extra_hostnames: list[Annotated[str, AfterValidator(_extra_hostname)]] = Field(
        default_factory=list,
        max_length=255,
        description=(
            "Other hosts actors may reach (TLS passthrough on 443, no credentials); model providers are refused."
        ),
    )
    kubectl: str = Field(default="kubectl", description="The kubectl that runs the `kubectl ate` plugin.")
    timeout_seconds: int = Field(default=30, ge=1, le=600, description="Bound on every `kubectl ate` call.")
    concurrency: int = Field(
        default=egress.DEFAULT_CONCURRENCY,
        ge=1,
        le=egress.MAX_CONCURRENCY,
        description=(
            "`kubectl ate` calls in flight per egress-policy shard; Pulumi runs four shards at once, so at most "
            "four times this many processes."
        ),
    )

    @field_validator("kubectl")
    @classmethod
    def _kubectl(cls, value: str) -> str:
        return check_command_argument(value, "kubectl", "kubectl or /usr/local/bin/kubectl")


class SubstrateSettings(ConfigModel):
    """Agent Substrate: who signs actor JWTs, where its keys are, how actors reach the gateway."""

    ref: str = Field(
        default="v1.0.0-rc.1", description="The Substrate version `kubectl ate` must be built from (named in errors)."
    )
    issuer: str = Field(default="https://idp.ate-system.svc", description="JWT issuer (exact match), an https URL.")
    jwks_uri: str = Field(
        default="https://idp.ate-system.svc/openid/v1/jwks",
        description="Where Envoy Gateway fetches the actor keys, an https URL (every mode but `localJwks`).",
    )
    idp_hostname: str = Field(default="idp.ate-system.svc", description="Host of the Backend `substrate-idp`.")
    idp_port: int = Field(default=443, ge=1, le=65535, description="Port of the Backend `substrate-idp`.")
    audience: Audience = Field(
        default="agent-router",
        description="JWT audience: the SecurityPolicy requires it, every egress policy mints it.",
    )
    trust: IdpTrust = Field(
        default_factory=IdpTrust, description="Where Envoy Gateway gets the actor keys, and how it trusts the IdP."
    )
    egress: EgressConfig = Field(default_factory=EgressConfig, description="The per-actor egress policies.")

    @field_validator("issuer", "jwks_uri")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://") or len(value) > 253:
            raise ValueError(f"{value!r} must be an https:// URL of at most 253 characters")
        return value

    @field_validator("idp_hostname")
    @classmethod
    def _host(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(f"idpHostname {value!r} is not a lowercase DNS name")
        return value

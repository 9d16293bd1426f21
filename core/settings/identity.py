"""`agent-budgets:identity`: which identity sources the gateway accepts (Substrate actor JWTs, Kubernetes
service-account tokens, API keys) and how it verifies each. The actors themselves are named in
`agent-budgets:actors` (core.identity says how each source is written)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from core.config_text import lone_surrogate_problem
from core.identity import API_KEYS, JWT_SOURCES, KUBERNETES, SOURCES, SUBSTRATE, SourceName
from core.problems import short
from core.settings.base import ActorId, Audience, ConfigModel
from core.settings.substrate import ConfigMapName

KubernetesJwksMode = Literal["configMap", "apiServer", "publicUrl"]
KUBERNETES_API_HOST = "kubernetes.default.svc"
"""The API server's in-cluster name, which its serving certificate holds (kubeadm
cmd/kubeadm/app/util/pkiutil/pki_helpers.go `GetAPIServerAltNames`)."""
KUBERNETES_API_JWKS_URI = f"https://{KUBERNETES_API_HOST}/openid/v1/jwks"
"""Where the API server serves the service-account signing keys (kube-apiserver's ServiceAccountIssuerDiscovery)."""
DEFAULT_KUBERNETES_ISSUER = "https://kubernetes.default.svc.cluster.local"
"""kubeadm's `--service-account-issuer` (`https://kubernetes.default.svc.<dnsDomain>`, cmd/kubeadm/app/phases/
controlplane/manifests.go @ad7cb45b `getAPIServerCommand`), which kind uses unchanged."""
DEFAULT_API_KEY_PORT = 8081
# RFC 7230 token, lowercased: how Envoy looks a header up (api_key_auth.cc lowercases the configured name).
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9a-z]+$")
RESERVED_HEADERS = frozenset({"x-actor-id", "x-ai-eg-model", "host", ":authority", ":path"})
AGENT_ROUTER_HEADER_PREFIX = "x-ai-eg-"
UNREMOVABLE_HEADERS = frozenset({"x-envoy-original-path"})
"""With the `x-ai-eg-` prefix: headers Agent Router's header mutation leaves alone (envoyproxy/ai-gateway v1.1.0
internal/headermutator/header_mutator.go `shouldIgnoreHeader`), so a key sent in one would reach the provider."""


def _https_url(value: str) -> str:
    _no_lone_surrogate(value)
    if not value.startswith("https://") or len(value) > 253 or any(ch.isspace() for ch in value):
        raise ValueError(f"{short(value)} must be an https:// URL of at most 253 characters")
    return value


HttpsUrl = Annotated[str, AfterValidator(_https_url)]


class KubernetesIdentity(ConfigModel):
    """Kubernetes service-account tokens: the cluster's issuer, the audience, and where the signing keys come from."""

    issuer: HttpsUrl = Field(
        default=DEFAULT_KUBERNETES_ISSUER,
        description=(
            "The cluster's service-account issuer, exactly as its tokens carry it in `iss` (`kubectl get --raw "
            "/.well-known/openid-configuration`); kubeadm and kind use the default."
        ),
    )
    audience: Audience = Field(
        default="agent-router",
        description="The audience agents request for their projected token; the SecurityPolicy requires it.",
    )
    jwks: KubernetesJwksMode = Field(
        default="configMap",
        description=(
            "Where Envoy Gateway gets the service-account signing keys: `configMap` (a copy you keep in "
            "`jwksConfigMap`; no RBAC change, stale when the keys rotate), `apiServer` (fetched from the API "
            "server; binds `system:service-account-issuer-discovery` to `system:unauthenticated` cluster-wide) or "
            "`publicUrl` (`jwksUri`, a managed cluster's public issuer). See docs/identity.md."
        ),
    )
    jwks_config_map: ConfigMapName = Field(
        default="kubernetes-service-account-jwks",
        description="The ConfigMap in the gateway namespace holding the keys under `jwks` (mode `configMap`).",
    )
    jwks_uri: HttpsUrl | None = Field(
        default=None,
        description="The public JWKS URL of the cluster's issuer, served with a publicly trusted certificate "
        "(mode `publicUrl`).",
    )


def _listed_once(values: list[Any], what: str) -> list[Any]:
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(repeated)} more than once: list each {what} once")
    return values


def _no_lone_surrogate(value: str) -> None:
    """Say a lone surrogate in this field's words of the text check, so the report holds one line for it."""
    problem = lone_surrogate_problem(value)
    if problem:
        raise ValueError(problem)


def _header(value: Any) -> Any:
    if isinstance(value, str):
        _no_lone_surrogate(value)
        if not _HEADER_NAME.match(value):
            raise ValueError(f"{short(value)} is not a lowercase HTTP header name: e.g. authorization or x-api-key")
        if value in RESERVED_HEADERS:
            raise ValueError(f"{short(value)} is a header the gateway itself sets or routes by: name another header")
        if value.startswith(AGENT_ROUTER_HEADER_PREFIX) or value in UNREMOVABLE_HEADERS:
            raise ValueError(
                f"{short(value)} is a header Agent Router never removes, so the key would reach the provider: name "
                "another header"
            )
    return value


class ApiKeySettings(ConfigModel):
    """API keys: one per `apikey:<name>` actor, generated by the program, on a listener of their own."""

    port: int = Field(
        default=DEFAULT_API_KEY_PORT,
        ge=1,
        le=65535,
        description=(
            "The Gateway listener API-key callers use (a port of its own: a request there passes the API-key filter "
            "and no JWT filter)."
        ),
    )
    headers: list[Annotated[str, AfterValidator(_header)]] = Field(
        default_factory=lambda: ["authorization", "x-api-key"],
        min_length=1,
        max_length=8,
        description=(
            "Where a key is looked for, in order (`Authorization: Bearer <key>` as OpenAI SDKs send it, `x-api-key` "
            "as Anthropic's do); every one is removed before the request goes upstream."
        ),
    )
    rotations: dict[ActorId, Annotated[int, Field(strict=True, ge=0)]] = Field(
        default_factory=dict,
        json_schema_extra={"mapKey": "actor"},
        description=(
            "A counter per API-key actor (`apikey:<name>: 1`): raising it replaces that actor's key at the next "
            "`pulumi up`, and the old key stops working at once."
        ),
    )

    @field_validator("headers")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        return _listed_once(value, "header")


class IdentitySettings(ConfigModel):
    """Which identity sources the gateway accepts; each turns a verified caller into an `x-actor-id`."""

    sources: list[SourceName] = Field(
        default_factory=lambda: [SUBSTRATE],
        min_length=1,
        max_length=len(SOURCES),
        description=(
            "Any of `substrate`, `kubernetes`, `apiKeys`; every actor in `actors` must be of a listed source. The "
            "default keeps an existing stack exactly as it was."
        ),
    )
    kubernetes: KubernetesIdentity = Field(
        default_factory=KubernetesIdentity, description="Kubernetes service-account tokens (source `kubernetes`)."
    )
    api_keys: ApiKeySettings = Field(default_factory=ApiKeySettings, description="API keys (source `apiKeys`).")

    @field_validator("sources")
    @classmethod
    def _once_each(cls, value: list[SourceName]) -> list[SourceName]:
        return _listed_once(value, "source")

    def uses(self, source: SourceName) -> bool:
        """Whether the stack accepts callers of `source`."""
        return source in self.sources

    @property
    def jwt_sources(self) -> list[SourceName]:
        """The enabled sources whose callers present a JWT, in the order their providers are tried."""
        return [source for source in JWT_SOURCES if source in self.sources]

    @property
    def api_keys_enabled(self) -> bool:
        """Whether the API-key listener and its policy exist."""
        return API_KEYS in self.sources

    @property
    def kubernetes_enabled(self) -> bool:
        """Whether the Kubernetes service-account provider exists."""
        return KUBERNETES in self.sources

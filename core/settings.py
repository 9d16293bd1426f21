"""The stack-configuration contract of agent-budgets, validated with pydantic before any resource exists.

Everything here is pure: it turns the raw `agent-budgets:*` configuration map into typed, checked
settings, or raises `ConfigError` with a message that names the key, the bad value and the fix.
Only `agent-budgets:actors` and `agent-budgets:budgets` are fixed by the design; every other key has a
default so that `Pulumi.dev.yaml` stays short.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from core import egress

PROJECT = "agent-budgets"

# Envoy Gateway v1.9 RateLimitValue.requests is a uint32 (api/v1alpha1/ratelimit_types.go).
MAX_TOKENS = 4_294_967_295
RATE_LIMIT_UNITS = ("Second", "Minute", "Hour", "Day", "Week", "Month", "Year")
# The fixed Service the EnvoyProxy gives the data plane: every egress policy names this host.
GATEWAY_SERVICE_NAME = "agent-router"
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
# The controller name Envoy Gateway registers for GatewayClasses (its Helm values and our GatewayClass).
GATEWAY_CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_HOSTNAME = egress.GATEWAY_HOSTNAME
if f"{GATEWAY_SERVICE_NAME}.{ENVOY_GATEWAY_NAMESPACE}.svc.cluster.local" != GATEWAY_HOSTNAME:  # pragma: no cover
    raise ImportError("the gateway's fixed Service name and the egress hostname disagree")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_CONFIG_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class ConfigError(ValueError):
    """A stack configuration that agent-budgets refuses, with a message a user can act on."""


def is_dns_label(value: str) -> bool:
    """True for an RFC 1123 label of at most 63 characters (Kubernetes and Substrate names)."""
    return len(value) <= 63 and bool(_DNS_LABEL.match(value))


def _check_dns_label(value: str, what: str) -> str:
    if not is_dns_label(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS label: use 1-63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return value


class _Model(BaseModel):
    """Base for every section: camelCase keys as in Pulumi.<stack>.yaml, unknown keys refused."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=False,
    )


TokenCount = Annotated[int, Field(strict=True)]


class Limit(_Model):
    """A token budget: `tokens` per fixed, UTC-aligned `per` window."""

    tokens: TokenCount
    per: str

    @field_validator("tokens", mode="before")
    @classmethod
    def _whole_tokens(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ValueError(
                    f"tokens must be a whole number of tokens, got {value!r}: write it without quotes, e.g. tokens: 500"
                )
        if value < 1:
            raise ValueError(f"tokens must be at least 1, got {value}: a budget of 0 would block every call")
        if value > MAX_TOKENS:
            raise ValueError(
                f"tokens {value} is above Envoy Gateway's maximum of {MAX_TOKENS} (a uint32): "
                "use a longer window (per) instead"
            )
        return value

    @field_validator("per")
    @classmethod
    def _known_unit(cls, value: str) -> str:
        if value not in RATE_LIMIT_UNITS:
            raise ValueError(
                f"per {value!r} is not an Envoy Gateway rate-limit unit: use one of {', '.join(RATE_LIMIT_UNITS)}"
            )
        return value


class BudgetClass(Limit):
    """Actors sharing one budget size (each still has its own bucket); one rate-limit rule."""

    name: str
    # Empty retires the class while keeping every later class (and its counters) in place.
    actors: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        return _check_dns_label(value, "class name")


class BudgetsConfig(_Model):
    """`agent-budgets:budgets`: the default budget and the ordered, append-only classes."""

    default: Limit
    classes: list[BudgetClass] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_class_names(self) -> BudgetsConfig:
        seen: set[str] = set()
        for index, budget_class in enumerate(self.classes):
            if budget_class.name in seen:
                raise ValueError(
                    f"classes[{index}].name {budget_class.name!r} is used twice: class names must be unique"
                )
            seen.add(budget_class.name)
        return self


class KubernetesSettings(_Model):
    """The cluster the program targets: an explicit context, never the ambient one."""

    context: str = "kind-agent-budgets"
    kubeconfig: str | None = None

    @field_validator("context")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("context is empty: name the kube context, e.g. kind-agent-budgets")
        return value


class GatewaySettings(_Model):
    """The model gateway: where our objects live and how requests are buffered."""

    namespace: str = "agent-budgets"
    port: int = Field(default=80, ge=1, le=65535)
    request_buffer_limit: str = "50Mi"
    # kind nodes are small: drop the proxy's default resource requests there.
    small_cluster: bool = False

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _check_dns_label(value, "namespace")

    @field_validator("request_buffer_limit")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError(f"requestBufferLimit {value!r} is not a Kubernetes quantity such as 50Mi")
        return value


ProviderKind = Literal["mock", "openai", "anthropic"]
_PROVIDER_DEFAULT_HOSTS: dict[str, str] = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
}


class Provider(_Model):
    """A model provider behind the gateway; its key lives only in a Secret next to the gateway."""

    name: str
    kind: ProviderKind
    hostname: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    # The Pulumi secret config key holding this provider's API key (default: "<name>ApiKey").
    api_key_config: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_dns_label(value, "provider name")

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"hostname {value!r} is not a lowercase DNS name such as api.openai.com")
        return value

    @field_validator("api_key_config")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not _CONFIG_KEY.match(value):
            raise ValueError(f"apiKeyConfig {value!r} is not a config key name such as openaiApiKey")
        return value

    @model_validator(mode="after")
    def _mock_has_no_remote(self) -> Provider:
        if self.kind == "mock" and (self.hostname or self.port or self.api_key_config):
            raise ValueError(
                f"provider {self.name!r} is kind mock: it runs in the cluster, so hostname, port and "
                "apiKeyConfig do not apply (remove them)"
            )
        return self

    @property
    def needs_api_key(self) -> bool:
        """Remote providers need a key from secret config; the mock gets a generated one."""
        return self.kind != "mock"

    @property
    def api_key_config_key(self) -> str:
        """The config key (without the project prefix) that must hold this provider's key."""
        return self.api_key_config or f"{self.name}ApiKey"

    @property
    def effective_hostname(self) -> str | None:
        """The upstream host: configured, or the kind's public API host."""
        return self.hostname or _PROVIDER_DEFAULT_HOSTS.get(self.kind)

    @property
    def effective_port(self) -> int:
        """The upstream port: 443 for the public APIs, 8080 for the in-cluster mock."""
        if self.port is not None:
            return self.port
        return 8080 if self.kind == "mock" else 443

    @property
    def uses_tls(self) -> bool:
        """Remote providers are reached over TLS, validated against the system trust store."""
        return self.kind != "mock"


class Route(_Model):
    """A model route: requests naming one of `models` go to `provider`. All routes share budgets."""

    name: str
    models: list[str] = Field(min_length=1, max_length=128)
    provider: str
    model_name_override: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_dns_label(value, "route name")

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str]) -> list[str]:
        for model in value:
            if not model or len(model) > 4096 or model != model.strip():
                raise ValueError(f"model name {model!r} must be a non-empty string without surrounding spaces")
        if len(set(value)) != len(value):
            raise ValueError(f"models {value} lists a model twice")
        return value


class MockModelSettings(_Model):
    """The in-cluster OpenAI-compatible mock used by the dev stack."""

    total_tokens: int = Field(default=200, ge=1, le=1_000_000_000)
    image: str = "python:3.12-alpine"
    replicas: int = Field(default=1, ge=1, le=10)


TrustMode = Literal["clusterTrustBundle", "configMap", "insecureSkipVerify"]


class IdpTrust(_Model):
    """How Envoy Gateway trusts the TLS certificate of Substrate's IdP when it fetches the JWKS."""

    mode: TrustMode = "clusterTrustBundle"
    cluster_trust_bundle: str = "servicedns.podcert.ate.dev:identity:primary-bundle"
    # A ConfigMap in the gateway namespace holding the IdP's CA under key ca.crt.
    config_map: str = "substrate-idp-ca"


class EgressConfig(_Model):
    """The per-actor Substrate egress policy: one http rule toward the gateway (on `gateway.port`)."""

    enabled: bool = True
    expiration_seconds: int = Field(default=900, ge=300, le=3600)
    extra_hostnames: list[str] = Field(default_factory=list, max_length=255)
    kubectl: str = "kubectl"
    timeout_seconds: int = Field(default=30, ge=1, le=600)


class SubstrateSettings(_Model):
    """Agent Substrate: who signs actor JWTs, where its keys are, how actors reach the gateway."""

    ref: str = "v1.0.0-rc.1"
    issuer: str = "https://idp.ate-system.svc"
    jwks_uri: str = "https://idp.ate-system.svc/openid/v1/jwks"
    idp_hostname: str = "idp.ate-system.svc"
    idp_port: int = Field(default=443, ge=1, le=65535)
    audience: str = Field(default="agent-router", min_length=1, max_length=512)
    trust: IdpTrust = Field(default_factory=IdpTrust)
    egress: EgressConfig = Field(default_factory=EgressConfig)

    @field_validator("issuer", "jwks_uri")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://") or len(value) > 253:
            raise ValueError(f"{value!r} must be an https:// URL of at most 253 characters")
        return value

    @field_validator("idp_hostname")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"idpHostname {value!r} is not a lowercase DNS name")
        return value


class BudgetPolicySettings(_Model):
    """Layout of the budget policy. Changing it moves counter keys: every default bucket restarts."""

    # Fixed number of inverted-regex matches that exclude class members from the default rule.
    exclusion_slots: int = Field(default=127, ge=1, le=1023)


class RateLimitSettings(_Model):
    """Envoy's behaviour toward the rate-limit service, and how many `envoy-ratelimit` pods serve it."""

    fail_closed: bool = False
    timeout: str = "100ms"
    # Fail-closed turns a lone rate-limit pod into a single point of failure: run two or more.
    replicas: int = Field(default=1, ge=1, le=16)

    @field_validator("timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not _DURATION.match(value) or all(ch == "0" for ch in re.sub(r"[a-z]", "", value)):
            raise ValueError(f"timeout {value!r} must be a positive duration such as 100ms or 1s")
        return value


class PlatformSettings(_Model):
    """Helm releases that install Envoy Gateway and Agent Router."""

    install: bool = True
    envoy_gateway_version: str = "v1.9.3"
    agent_router_version: str = "v1.2.1"

    @field_validator("envoy_gateway_version", "agent_router_version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"version {value!r} is not a release version such as v1.9.3")
        return value

    @model_validator(mode="after")
    def _compatible(self) -> PlatformSettings:
        router = version_tuple(self.agent_router_version)
        gateway = version_tuple(self.envoy_gateway_version)
        if router >= (1, 2, 0) and gateway < (1, 9, 2):
            raise ValueError(
                f"Agent Router {self.agent_router_version} needs Envoy Gateway v1.9.2 or newer, "
                f"got {self.envoy_gateway_version}: raise envoyGatewayVersion"
            )
        if gateway < (1, 9, 0):
            raise ValueError(
                f"Envoy Gateway {self.envoy_gateway_version} is too old: shared rules with a response cost "
                "and 128 header matches need v1.9.0 or newer"
            )
        return self


RedisMode = Literal["in-cluster", "external"]
RedisType = Literal["single", "sentinel", "cluster"]


class RedisSettings(_Model):
    """Where rate-limit counters live. In-cluster persists to a volume; external for real environments."""

    mode: RedisMode = "in-cluster"
    namespace: str = "agent-budgets-redis"
    image: str = "redis:8.2.4-alpine3.22"
    storage_size: str = "1Gi"
    storage_class: str | None = None
    # In-cluster only: Pulumi `protect` on the Redis namespace and StatefulSet, so neither a replacement
    # nor `pulumi destroy` can delete the volume that holds spent budgets.
    protect: bool = False
    url: str | None = None
    type: RedisType = "single"
    tls: bool = False
    password_config: str = "redisPassword"

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _check_dns_label(value, "namespace")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value or any(ch.isspace() for ch in value):
            raise ValueError(f"image {value!r} is not an image reference such as redis:8.2.4-alpine3.22")
        return value

    @field_validator("storage_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError(f"storageSize {value!r} is not a Kubernetes quantity such as 1Gi")
        return value

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"storageClass {value!r} is not a StorageClass name such as standard")
        return value

    @field_validator("password_config")
    @classmethod
    def _password_key(cls, value: str) -> str:
        if not _CONFIG_KEY.match(value):
            raise ValueError(f"passwordConfig {value!r} is not a config key name such as redisPassword")
        return value

    @model_validator(mode="after")
    def _mode_fields(self) -> RedisSettings:
        if self.mode == "external" and not self.url:
            raise ValueError(
                "mode is external but url is missing: set agent-budgets:redis.url to host:port "
                "(a comma-separated list for sentinel or cluster)"
            )
        if self.mode == "in-cluster" and (self.url or self.type != "single" or self.tls):
            raise ValueError("url, type and tls apply only to mode external: remove them, or set mode: external")
        in_cluster_only = sorted(
            to_camel(name)
            for name in self.model_fields_set & {"namespace", "image", "storage_size", "storage_class", "protect"}
        )
        if self.mode == "external" and in_cluster_only:
            raise ValueError(
                f"{', '.join(in_cluster_only)} apply only to mode in-cluster: remove them "
                "(an external Redis is run, stored and protected by its own operator)"
            )
        if self.url is not None:
            self._check_url(self.url)
        return self

    def _check_url(self, url: str) -> None:
        parts = [part.strip() for part in url.split(",")]
        hosts = parts
        if self.type == "sentinel":
            if len(parts) < 2 or not re.match(r"^[A-Za-z0-9._-]+$", parts[0]):
                raise ValueError(
                    f"url {url!r} is not a sentinel list: with type sentinel write "
                    "<master name>,<sentinel host>:<port>[,...], e.g. mymaster,sentinel-0.example:26379"
                )
            hosts = parts[1:]
        elif self.type == "single" and len(parts) != 1:
            raise ValueError(
                f"url {url!r} lists {len(parts)} hosts but type is single: give one host:port, "
                "or set type to sentinel or cluster"
            )
        for part in hosts:
            match = re.match(r"^[A-Za-z0-9.-]+:([0-9]{1,5})$", part)
            if not match or not 1 <= int(match.group(1)) <= 65535:
                raise ValueError(f"url part {part!r} must be host:port with a port from 1 to 65535")


ActorId = Annotated[str, StringConstraints(min_length=3, max_length=127)]


class StackSettings(_Model):
    """The whole `agent-budgets:*` configuration of one stack."""

    actors: list[ActorId]
    budgets: BudgetsConfig
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    providers: list[Provider] = Field(default_factory=lambda: [Provider(name="mock", kind="mock")])
    routes: list[Route] = Field(default_factory=lambda: [Route(name="mock", models=["mock-model"], provider="mock")])
    mock_model: MockModelSettings = Field(default_factory=MockModelSettings)
    substrate: SubstrateSettings = Field(default_factory=SubstrateSettings)
    budget_policy: BudgetPolicySettings = Field(default_factory=BudgetPolicySettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    platform: PlatformSettings = Field(default_factory=PlatformSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)

    @field_validator("actors")
    @classmethod
    def _actor_ids(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for index, actor in enumerate(value):
            check_actor_id(actor, f"actors[{index}]")
            if actor in seen:
                raise ValueError(f"actors[{index}] {actor!r} is listed twice: list each actor once")
            seen.add(actor)
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> StackSettings:
        listed = set(self.actors)
        owner: dict[str, str] = {}
        for ci, budget_class in enumerate(self.budgets.classes):
            for ai, actor in enumerate(budget_class.actors):
                where = f"{PROJECT}:budgets.classes[{ci}].actors[{ai}]"
                check_actor_id(actor, where)
                if actor not in listed:
                    raise ValueError(
                        f"{where} {actor!r} (class {budget_class.name!r}) is not in agent-budgets:actors: "
                        "add it there first"
                    )
                if actor in owner:
                    raise ValueError(
                        f"{where} {actor!r} is in class {owner[actor]!r} and class {budget_class.name!r}: "
                        "an actor may be in at most one class"
                    )
                owner[actor] = budget_class.name
        provider_names = [p.name for p in self.providers]
        if len(set(provider_names)) != len(provider_names):
            raise ValueError(f"{PROJECT}:providers has a duplicate name in {provider_names}: names must be unique")
        route_names = [r.name for r in self.routes]
        if len(set(route_names)) != len(route_names):
            raise ValueError(f"{PROJECT}:routes has a duplicate name in {route_names}: names must be unique")
        if not self.routes:
            raise ValueError(f"{PROJECT}:routes is empty: declare at least one model route")
        models_seen: dict[str, str] = {}
        for ri, route in enumerate(self.routes):
            if route.provider not in provider_names:
                raise ValueError(
                    f"{PROJECT}:routes[{ri}].provider {route.provider!r} is not a configured provider "
                    f"(have {provider_names}): add it to agent-budgets:providers"
                )
            for model in route.models:
                if model in models_seen:
                    raise ValueError(
                        f"{PROJECT}:routes[{ri}] model {model!r} is already served by route {models_seen[model]!r}: "
                        "each model name belongs to one route"
                    )
                models_seen[model] = route.name
        if len([p for p in self.providers if p.kind == "mock"]) > 1:
            raise ValueError(f"{PROJECT}:providers declares more than one mock: one in-cluster mock model is enough")
        if any(p.kind == "anthropic" for p in self.providers) and version_tuple(self.platform.agent_router_version) < (
            1,
            2,
            0,
        ):
            raise ValueError(
                f"{PROJECT}:providers has an anthropic provider, but Agent Router "
                f"{self.platform.agent_router_version} cannot translate /v1/chat/completions to Anthropic's "
                "API: set agent-budgets:platform.agentRouterVersion to v1.2.0 or newer"
            )
        self._check_extra_hostnames()
        return self

    def _check_extra_hostnames(self) -> None:
        provider_hosts = [h for h in (p.effective_hostname for p in self.providers) if h]
        for index, host in enumerate(self.substrate.egress.extra_hostnames):
            where = f"{PROJECT}:substrate.egress.extraHostnames[{index}]"
            problem = egress.hostname_problem(host)
            if problem:
                raise ValueError(f"{where}: {problem}")
            if host == GATEWAY_HOSTNAME:
                raise ValueError(f"{where}: {host!r} is the gateway itself, which already has its own rule")
            clashes = egress.provider_host_problems([("extra_hostnames", host)], provider_hosts)
            if clashes:
                raise ValueError(f"{where}: {clashes[0].message}")

    @property
    def mock_provider(self) -> Provider | None:
        """The in-cluster mock provider, when the stack has one."""
        return next((p for p in self.providers if p.kind == "mock"), None)


def version_tuple(version: str) -> tuple[int, int, int]:
    """`v1.9.3` → (1, 9, 3)."""
    match = _VERSION.match(version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def check_actor_id(actor: str, where: str) -> None:
    """Refuse anything but `<atespace>/<name>` with two DNS labels (the JWT subject's shape)."""
    parts = actor.split("/")
    if len(parts) != 2 or not all(is_dns_label(part) for part in parts):
        raise ValueError(
            f"{where} {actor!r} is not an actor id: write <atespace>/<name>, both DNS labels of at most "
            "63 lowercase letters, digits or '-', e.g. agents/actor-a"
        )


# ---------------------------------------------------------------------------------------------------------
# Loading from the raw configuration map.

# What the program's config reader puts in place of a secret's value: validation needs only presence.
SECRET_PLACEHOLDER = "<secret>"

_TOP_LEVEL_KEYS = {field.alias or name: name for name, field in StackSettings.model_fields.items()}


def _format_error(error: Mapping[str, Any]) -> str:
    loc = [str(part) for part in error.get("loc", ())]
    top = loc[0] if loc else ""
    path = top
    for part in loc[1:]:
        path += f"[{part}]" if part.isdigit() else f".{part}"
    key = f"{PROJECT}:{path}" if path else f"{PROJECT}:<config>"
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return f"{key}: unknown key. Remove it or fix its spelling (keys are camelCase)."
    if kind == "missing":
        return f"{key}: required but not set. Add it to Pulumi.<stack>.yaml."
    if kind in {"literal_error", "enum"}:
        return f"{key}: got {error.get('input')!r}: {message}."
    if kind.startswith(("int_", "bool_", "string_", "list_", "too_", "greater_", "less_", "model_")):
        return f"{key}: got {_short(error.get('input'))}: {message}."
    if not path:
        return message
    return f"{key}: {message}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_settings(raw: Mapping[str, Any]) -> StackSettings:
    """Validate the raw `agent-budgets:*` map (keys without the project prefix, values parsed JSON).

    Keys the settings name as secret config (provider keys, the Redis password) are allowed beside the
    sections. Raises ConfigError listing every problem at once, each naming its key.
    """
    problems: list[str] = []
    known = {key: value for key, value in raw.items() if key in _TOP_LEVEL_KEYS}
    settings: StackSettings | None = None
    try:
        settings = StackSettings.model_validate(known)
    except ValidationError as exc:
        problems.extend(_format_error(error) for error in exc.errors())
    if settings is not None:
        secret_keys = {key for key, _ in required_secrets(settings)}
    else:  # don't call the user's secrets unknown just because another key is wrong
        secret_keys = {key for key, value in raw.items() if value == SECRET_PLACEHOLDER}
    unknown = sorted(set(raw) - set(_TOP_LEVEL_KEYS) - secret_keys)
    problems[:0] = [
        f"{PROJECT}:{key}: unknown configuration key. Known keys: {', '.join(sorted(_TOP_LEVEL_KEYS))}"
        + (f", and the secrets {', '.join(sorted(secret_keys))}." if secret_keys else ".")
        for key in unknown
    ]
    if problems or settings is None:
        raise ConfigError("invalid stack configuration:\n  - " + "\n  - ".join(problems))
    return settings


def required_secrets(settings: StackSettings) -> list[tuple[str, str]]:
    """The secret config keys (without prefix) this stack needs, each with what it holds."""
    needed = [
        (provider.api_key_config_key, f"the API key of provider {provider.name!r} ({provider.kind})")
        for provider in settings.providers
        if provider.needs_api_key
    ]
    if settings.redis.mode == "external":
        needed.append((settings.redis.password_config, "the password of the external Redis"))
    return needed


def secret_set_command(key: str) -> str:
    """The command that stores a secret the right way."""
    return f"pulumi config set --secret {PROJECT}:{key} <value>"


def decode_config_value(value: Any) -> Any:
    """Pulumi hands structured config over as JSON strings; scalars stay strings unless they parse."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value

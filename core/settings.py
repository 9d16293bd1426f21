"""The stack-configuration contract of agent-budgets: typed, documented pydantic models of every key.

Each model checks what one field can check on its own (types, ranges, shapes); whatever needs two keys
(class members listed in `actors`, routes naming a provider, ...) is a cross-key check in
`core.cross_checks`, and `core.validation` runs both and reports every problem at once. Every field has a
`description`: the configuration reference in docs/configuration.md is generated from these models
(`make docs`, scripts/gen_docs.py). Only `agent-budgets:actors` and `agent-budgets:budgets` are fixed by the
design; every other key has a default so that `Pulumi.dev.yaml` stays short.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from core import egress, money
from core.problems import PROJECT, ConfigError, Problem

__all__ = ["PROJECT", "ConfigError", "Problem"]  # re-exported: most callers import them from here

# Envoy Gateway v1.9 RateLimitValue.requests is a uint32 (api/v1alpha1/ratelimit_types.go).
MAX_TOKENS = money.UINT32_MAX
MAX_LIMITS_PER_BUDGET = 8
MAX_MODELS_PER_ROUTE = 128
"""The most model names one route serves."""
"""The documented maximum of `limits` per budget (and of budgetPolicy.limitSlots)."""
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
# A count written the way people write numbers in prose: 5,000 / 5_000 / 5 000 / 5k / 2.5M.
_PROSE_NUMBER = re.compile(r"^\s*([0-9]{1,3}(?:[,_ ][0-9]{3})+|[0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*$")
_PROSE_MULTIPLIERS = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


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


def whole_number_from_text(text: str) -> int | None:
    """The whole number a human meant by `text` (`"5,000"`, `"5k"`, `"2.5M"`, `"500"`), or None."""
    match = _PROSE_NUMBER.match(text)
    if not match:
        return None
    digits = re.sub(r"[,_ ]", "", match.group(1))
    value = float(digits) * _PROSE_MULTIPLIERS[match.group(2).lower()]
    return int(value) if value.is_integer() else None


def number_text_hint(text: str, example_key: str) -> str:
    """How to write a number that arrived as text, e.g. `"5,000"` → `write 5000 (no separators or units)`."""
    meant = whole_number_from_text(text)
    if meant is None:
        return f"it is not a number: write a whole number, e.g. {example_key}: 500"
    if text.strip() == str(meant):
        return f"write it without quotes, e.g. {example_key}: {meant}"
    return f"write the number without separators or units, e.g. {example_key}: {meant}"


def check_actor_id(actor: str, where: str = "actor") -> str:
    """Refuse anything but `<atespace>/<name>` with two DNS labels (the JWT subject's shape)."""
    parts = actor.split("/")
    if len(parts) != 2 or not all(is_dns_label(part) for part in parts):
        raise ValueError(
            f"{where} {actor!r} is not an actor id: write <atespace>/<name>, both DNS labels of at most "
            "63 lowercase letters, digits or '-', e.g. agents/actor-a"
        )
    return actor


def _actor_id(value: str) -> str:
    return check_actor_id(value)


# An actor as `<atespace>/<name>`; checked item by item, so an error names its index.
ActorId = Annotated[str, Field(min_length=3, max_length=127), AfterValidator(_actor_id)]


class _Model(BaseModel):
    """Base for every section: camelCase keys as in Pulumi.<stack>.yaml, unknown keys refused.

    Python code builds models by field name; configuration is validated by alias only
    (`model_validate(..., by_name=False)` in core.validation), so a snake_case key in a stack file is
    refused with the camelCase spelling instead of being silently accepted.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        str_strip_whitespace=False,
    )


def _tokens(value: Any) -> int:
    """A token count: whole, positive, within Envoy Gateway's uint32; people's ways of writing it explained."""
    if value is None:
        raise ValueError("is empty (YAML null): give a whole number of tokens, e.g. tokens: 500")
    if isinstance(value, bool):
        raise ValueError(f"got {value!r}: give a whole number of tokens, e.g. tokens: 500")
    if isinstance(value, str):
        raise ValueError(f"got {value!r}: {number_text_hint(value, 'tokens')}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"got {value!r}: tokens are whole; round it, e.g. tokens: {int(value)}")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"got {value!r}: give a whole number of tokens, e.g. tokens: 500")
    if value < 0:
        raise ValueError(f"got {value}, a negative number: a budget is a count of tokens, at least 1")
    if value == 0:
        raise ValueError("got 0: a budget must be at least 1 token (0 would refuse every call)")
    if value > MAX_TOKENS:
        raise ValueError(
            f"got {value}, above Envoy Gateway's maximum of {MAX_TOKENS} (a uint32): use a longer window (per)"
        )
    return value


def _per(value: Any) -> Any:
    if isinstance(value, str) and value not in RATE_LIMIT_UNITS:
        raise ValueError(
            f"per {value!r} is not an Envoy Gateway rate-limit unit: use one of {', '.join(RATE_LIMIT_UNITS)}"
        )
    return value


TokenCount = Annotated[int, Field(strict=True)]


def _usd(value: Any) -> Decimal:
    """A `usd` amount: $0.01 to $1,000,000 in whole mills (core.money)."""
    if value is None:
        raise ValueError("is empty (YAML null): give an amount in dollars, e.g. usd: 5")
    if isinstance(value, str):
        raise ValueError(f"got {value!r}: write the amount as a number without quotes or $, e.g. usd: 5")
    try:
        return money.check_usd_limit(value)
    except money.MoneyError as error:
        raise ValueError(str(error)) from None


UsdAmount = Annotated[Decimal, BeforeValidator(_usd)]
WINDOWS_TEXT = "`Second`, `Minute`, `Hour`, `Day`, `Week`, `Month` or `Year`; fixed and UTC-aligned"


def _limit_problem(tokens: int | None, usd: Decimal | None, per: str | None) -> str | None:
    if tokens is not None and usd is not None:
        return (
            f"has both tokens ({tokens}) and usd ({usd}): a limit counts one of them. Split it into two limits, "
            f"e.g. limits: [{{tokens: {tokens}, per: {per or 'Day'}}}, {{usd: {usd}, per: {per or 'Day'}}}]"
        )
    if tokens is None and usd is None:
        return "has neither tokens nor usd: give one, e.g. {tokens: 500, per: Day} or {usd: 5, per: Day}"
    if per is None:
        return f"has {'tokens' if tokens is not None else 'usd'} but no per: add the window, e.g. per: Day"
    return None


class _LimitFields(_Model):
    """What a limit is written with: `tokens` or `usd` per a `per` window (a `Limit`, or a `Budget` in the
    short form)."""

    tokens: TokenCount | None = Field(
        default=None,
        description=(
            f"Tokens each actor may spend per window: 1 to {MAX_TOKENS:,} (Envoy Gateway's uint32). Exactly one of "
            "`tokens` and `usd`; written on a budget itself, the short form (then no `limits`)."
        ),
    )
    usd: UsdAmount | None = Field(
        default=None,
        description=(
            "Dollars each actor may spend per window: 0.01 to 1,000,000, counted in mills ($0.001); calls are priced "
            "from `prices`. Exactly one of `tokens` and `usd`; written on a budget itself, the short form (then no "
            "`limits`)."
        ),
    )
    per: str | None = Field(default=None, description=f"The window: {WINDOWS_TEXT}.")

    @field_validator("tokens", mode="before")
    @classmethod
    def _whole_tokens(cls, value: Any) -> Any:
        return _tokens(value)

    @field_validator("per")
    @classmethod
    def _known_unit(cls, value: str | None) -> str | None:
        return _per(value)


class Limit(_LimitFields):
    """One limit of a budget: `tokens` or `usd` per fixed, UTC-aligned `per` window."""

    per: str = Field(description=f"The window: {WINDOWS_TEXT}.")

    @model_validator(mode="after")
    def _one_unit(self) -> Limit:
        problem = _limit_problem(self.tokens, self.usd, self.per)
        if problem:
            raise ValueError(problem)
        return self


class Budget(_LimitFields):
    """A budget: one limit written inline (the short form), or `limits`, every one of which applies."""

    limits: list[Limit] | None = Field(
        default=None,
        description=(
            f"Long form: 1 to {MAX_LIMITS_PER_BUDGET} limits (`{{tokens|usd, per}}`), every one applies; a budget "
            "with more than one needs `budgetPolicy.limitSlots` at least as large. Append only."
        ),
    )

    @field_validator("limits", mode="before")
    @classmethod
    def _limit_count(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError(
                "is empty: give at least one limit, e.g. limits: [{tokens: 500, per: Day}], or use the short form "
                "(tokens or usd, and per, on the budget itself)"
            )
        if isinstance(value, list) and len(value) > MAX_LIMITS_PER_BUDGET:
            raise ValueError(
                f"has {len(value)} limits: a budget may have at most {MAX_LIMITS_PER_BUDGET} (one per window and "
                "unit is plenty). Drop the ones another limit already implies"
            )
        return value

    @model_validator(mode="after")
    def _one_form(self) -> Budget:
        inline = [
            key for key, value in (("tokens", self.tokens), ("usd", self.usd), ("per", self.per)) if value is not None
        ]
        if self.limits is not None:
            if inline:
                raise ValueError(
                    f"has both limits and {', '.join(inline)}: use either the short form ({{tokens|usd, per}} on the "
                    "budget) or limits, not both. Move the inline limit into limits"
                )
            return self
        problem = _limit_problem(self.tokens, self.usd, self.per)
        if problem:
            raise ValueError(problem)
        return self

    def limit_list(self) -> list[Limit]:
        """Every limit of the budget, in order (the short form is one limit)."""
        if self.limits is not None:
            return list(self.limits)
        if self.usd is not None:
            return [Limit(usd=self.usd, per=self.per)]  # type: ignore[arg-type]
        return [Limit(tokens=self.tokens, per=self.per)]  # type: ignore[arg-type]


class BudgetClass(Budget):
    """Actors sharing one budget (each still has its own buckets); one rate-limit rule per limit."""

    name: str = Field(description="DNS label, unique among classes. Classes are append-only.")
    # Empty retires the class while keeping every later class (and its counters) in place.
    actors: list[ActorId] = Field(
        default_factory=list,
        description="Members; each must be in `actors` and in at most one class. Empty retires the class in place.",
    )

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        return _check_dns_label(value, "class name")


class BudgetsConfig(_Model):
    """`agent-budgets:budgets`: the default budget and the ordered, append-only classes."""

    default: Budget = Field(description="The budget of every actor not in a class.")
    classes: list[BudgetClass] = Field(
        default_factory=list,
        description="Other budgets in order; each limit of a class is one rate-limit rule. Append only, never reorder.",
    )

    @property
    def uses_usd(self) -> bool:
        """Whether any limit is in dollars (so every route model needs a price)."""
        return any(limit.usd is not None for budget in (self.default, *self.classes) for limit in budget.limit_list())


def _price(field: str) -> Any:
    def check(value: Any) -> Decimal:
        if value is None:
            raise ValueError(f"is empty (YAML null): give {field} in USD per 1,000,000 tokens, e.g. {field}: 2.50")
        if isinstance(value, str):
            raise ValueError(f"got {value!r}: write the price as a number without quotes or $, e.g. {field}: 2.50")
        try:
            return money.check_price(value, field)
        except money.MoneyError as error:
            raise ValueError(str(error)) from None

    return BeforeValidator(check)


class ModelPrices(_Model):
    """What one model costs, in USD per 1,000,000 tokens of each kind, as the provider bills it."""

    input: Annotated[Decimal, _price("input")] = Field(
        description="Fresh input tokens (neither read from nor written to the prompt cache)."
    )
    output: Annotated[Decimal, _price("output")] = Field(
        description="Output tokens, reasoning (thinking) tokens included: both providers bill them as output."
    )
    cached_input: Annotated[Decimal, _price("cachedInput")] | None = Field(
        default=None, description="Input tokens read from the prompt cache; default: the input price."
    )
    cache_write: Annotated[Decimal, _price("cacheWrite")] | None = Field(
        default=None,
        description=(
            "Input tokens written to the prompt cache (Anthropic bills these above the input price); default: the "
            "input price."
        ),
    )

    def to_price(self) -> money.ModelPrice:
        """The checked prices, cache prices defaulted to the input price."""
        return money.ModelPrice.of(
            input=self.input, output=self.output, cached_input=self.cached_input, cache_write=self.cache_write
        )


class KubernetesSettings(_Model):
    """The cluster the program targets: an explicit context, never the ambient one."""

    context: str = Field(
        default="kind-agent-budgets", description="Kube context of the program's explicit Kubernetes provider."
    )
    kubeconfig: str | None = Field(
        default=None,
        description=(
            "Kubeconfig path or contents, for the Kubernetes provider and `kubectl ate`; unset means the kubeconfig "
            "default path. Contents are kept secret: store them with `pulumi config set --secret --path`."
        ),
        json_schema_extra={"sensitive": True},
    )

    @field_validator("context")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("context is empty: name the kube context, e.g. kind-agent-budgets")
        return value


class GatewaySettings(_Model):
    """The model gateway: where our objects live and how requests are buffered."""

    namespace: str = Field(
        default="agent-budgets", description="Where the Gateway, the policies, the routes and the mock model live."
    )
    port: int = Field(
        default=80, ge=1, le=65535, description="Listener port of the Gateway, and the port every egress policy allows."
    )
    request_buffer_limit: str = Field(
        default="50Mi",
        description=(
            "ClientTrafficPolicy buffer (a Kubernetes quantity); Envoy's 32 KiB default is too small for LLM bodies."
        ),
    )
    # kind nodes are small: drop the proxy's default resource requests there.
    small_cluster: bool = Field(default=False, description="Drop the Envoy proxy's resource requests (for kind).")

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
PROVIDER_DEFAULT_HOSTS: dict[str, str] = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
}


class Provider(_Model):
    """A model provider behind the gateway; its key lives only in a Secret next to the gateway."""

    name: str = Field(description="DNS label, unique; routes name it.")
    kind: ProviderKind = Field(description="`mock` (in-cluster), `openai` or `anthropic`.")
    hostname: str | None = Field(
        default=None,
        description=(
            "Upstream host for an OpenAI- or Anthropic-compatible endpoint; default `api.openai.com` / "
            "`api.anthropic.com`."
        ),
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="Upstream port; default 443.")
    # The Pulumi secret config key holding this provider's API key (default: "<name>ApiKey").
    api_key_config: str | None = Field(
        default=None, description="The **secret** config key holding the provider's key; default `<name>ApiKey`."
    )

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
        return self.hostname or PROVIDER_DEFAULT_HOSTS.get(self.kind)

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

    name: str = Field(description="DNS label, unique; the AIGatewayRoute's name.")
    models: list[str] = Field(
        min_length=1, max_length=MAX_MODELS_PER_ROUTE, description="Model names agents send; each belongs to one route."
    )
    provider: str = Field(description="The `providers[].name` that serves these models.")
    model_name_override: str | None = Field(default=None, description="Model name sent upstream instead.")

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

    total_tokens: int = Field(default=200, ge=1, le=1_000_000_000, description="Tokens the mock reports per call.")
    image: str = Field(default="python:3.12-alpine", description="Image that runs the mock's Python server.")
    replicas: int = Field(default=1, ge=1, le=10, description="Mock model pods.")


TrustMode = Literal["clusterTrustBundle", "configMap", "insecureSkipVerify"]


class IdpTrust(_Model):
    """How Envoy Gateway trusts the TLS certificate of Substrate's IdP when it fetches the JWKS."""

    mode: TrustMode = Field(
        default="clusterTrustBundle",
        description=(
            "How the IdP's certificate is verified: `clusterTrustBundle`, `configMap` or `insecureSkipVerify` "
            "(throwaway clusters only)."
        ),
    )
    cluster_trust_bundle: str = Field(
        default="servicedns.podcert.ate.dev:identity:primary-bundle",
        description="The ClusterTrustBundle holding Substrate's service-DNS CA (mode `clusterTrustBundle`).",
    )
    # A ConfigMap in the gateway namespace holding the IdP's CA under key ca.crt.
    config_map: str = Field(
        default="substrate-idp-ca",
        description="A ConfigMap in the gateway namespace with the IdP's CA under `ca.crt` (mode `configMap`).",
    )


def _extra_hostname(value: str) -> str:
    problem = egress.hostname_problem(value)
    if problem:
        raise ValueError(problem)
    if value == GATEWAY_HOSTNAME:
        raise ValueError(f"{value!r} is the gateway itself, which already has its own rule: remove it")
    return value


class EgressConfig(_Model):
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


class SubstrateSettings(_Model):
    """Agent Substrate: who signs actor JWTs, where its keys are, how actors reach the gateway."""

    ref: str = Field(
        default="v1.0.0-rc.1", description="The Substrate version `kubectl ate` must be built from (named in errors)."
    )
    issuer: str = Field(default="https://idp.ate-system.svc", description="JWT issuer (exact match), an https URL.")
    jwks_uri: str = Field(
        default="https://idp.ate-system.svc/openid/v1/jwks",
        description="Where Envoy Gateway fetches the actor keys, an https URL.",
    )
    idp_hostname: str = Field(default="idp.ate-system.svc", description="Host of the Backend `substrate-idp`.")
    idp_port: int = Field(default=443, ge=1, le=65535, description="Port of the Backend `substrate-idp`.")
    audience: str = Field(
        default="agent-router",
        min_length=1,
        max_length=512,
        description="JWT audience: the SecurityPolicy requires it, every egress policy mints it.",
    )
    trust: IdpTrust = Field(default_factory=IdpTrust, description="TLS trust for the IdP's certificate.")
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
        if not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"idpHostname {value!r} is not a lowercase DNS name")
        return value


class BudgetPolicySettings(_Model):
    """Layout of the budget policy. Changing it moves counter keys: every default bucket restarts."""

    # Fixed number of inverted-regex matches that exclude class members from the default rule.
    # 32 by measurement (docs/message-size.md, scripts/measure_exclusion_slots.py): every slot lengthens every
    # default-budget counter key by about 32 bytes (stored in Redis, sent with every rate-limit check) and
    # admits about 83 more class members with ids like agents/actor-00042.
    exclusion_slots: int = Field(
        default=32,
        ge=1,
        le=1023,
        description=(
            "Fixed number of matches that exclude class members from the default rule (about 83 members each; "
            "each one adds about 32 bytes to every default counter key); changing it restarts every default bucket "
            "once. See docs/message-size.md."
        ),
    )
    limit_slots: int = Field(
        default=1,
        ge=1,
        le=MAX_LIMITS_PER_BUDGET,
        description=(
            "Rule slots each budget reserves for its limits: at least the most `limits` any budget has. With 1, the "
            "layout of single-limit versions; changing it restarts every class's counters once (the default "
            "budget's limits keep theirs), so leave room for the windows you will add."
        ),
    )


class RateLimitSettings(_Model):
    """Envoy's behaviour toward the rate-limit service, and how many `envoy-ratelimit` pods serve it."""

    fail_closed: bool = Field(
        default=False,
        description="On a rate-limit store outage, answer 500 instead of letting calls through unmetered.",
    )
    timeout: str = Field(
        default="100ms", description="Envoy → rate-limit service timeout; a slower answer counts as an outage."
    )
    # Fail-closed turns a lone rate-limit pod into a single point of failure: run two or more.
    replicas: int = Field(
        default=1, ge=1, le=16, description="Rate-limit service pods; 2 or more also get a PodDisruptionBudget."
    )

    @field_validator("timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not _DURATION.match(value) or all(ch == "0" for ch in re.sub(r"[a-z]", "", value)):
            raise ValueError(f"timeout {value!r} must be a positive duration such as 100ms or 1s")
        return value


# The extension-server message cap (docs/message-size.md). Envoy Gateway's pattern for maxMessageSize
# (api/v1alpha1/envoygateway_types.go v1.9.0) admits a whole number with an optional suffix; these are the
# suffixes that make sense for a message size.
MIB = 1024 * 1024
EXTENSION_MESSAGE_LIMIT_DEFAULT = "16Mi"
MIN_EXTENSION_MESSAGE_LIMIT = 4 * 1024 * 1024
MAX_EXTENSION_MESSAGE_LIMIT = 512 * 1024 * 1024
_MESSAGE_SIZE = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|k|M|G|)$")
_MESSAGE_SIZE_FACTORS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}


def message_size_bytes(quantity: str) -> int | None:
    """A message size as Envoy Gateway's `maxMessageSize` takes it ("16Mi", "4M", "16777216") in bytes, or
    None when it is not a whole quantity with one of those suffixes."""
    match = _MESSAGE_SIZE.match(quantity)
    return int(match.group(1)) * _MESSAGE_SIZE_FACTORS[match.group(2)] if match else None


def _message_size_text(value: Any) -> Any:
    """A YAML integer is a byte count: Envoy Gateway's quantity accepts a number or text alike."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class PlatformSettings(_Model):
    """Helm releases that install Envoy Gateway and Agent Router."""

    install: bool = Field(
        default=True,
        description=(
            "Install Envoy Gateway and Agent Router with Helm; with `false` they must already run with our values."
        ),
    )
    envoy_gateway_version: str = Field(
        default="v1.9.3", description="The `eg` release of `oci://docker.io/envoyproxy/gateway-helm`."
    )
    agent_router_version: str = Field(
        default="v1.2.1",
        description="The `aieg-crd` and `aieg` releases; v1.2 needs Envoy Gateway v1.9.2 or newer.",
    )

    extension_message_limit: Annotated[str, BeforeValidator(_message_size_text)] = Field(
        default=EXTENSION_MESSAGE_LIMIT_DEFAULT,
        description=(
            "Cap on the one message Envoy Gateway sends Agent Router's extension server, a quantity such as `16Mi` or "
            "a number of bytes (set on both ends: Envoy "
            "Gateway `extensionManager.maxMessageSize`, Agent Router `controller.maxRecvMsgSize`); the preview "
            "refuses budgets and routes whose message would not fit with 25% headroom. See docs/message-size.md."
        ),
    )

    @field_validator("envoy_gateway_version", "agent_router_version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"version {value!r} is not a release version such as v1.9.3")
        return value

    @field_validator("extension_message_limit")
    @classmethod
    def _message_limit(cls, value: str) -> str:
        size = message_size_bytes(value)
        if size is None:
            raise ValueError(
                f"extensionMessageLimit {value!r} is not a whole quantity: write e.g. 16Mi, 16M or 16777216 "
                "(suffixes Ki, Mi, Gi, k, M, G)"
            )
        if not MIN_EXTENSION_MESSAGE_LIMIT <= size <= MAX_EXTENSION_MESSAGE_LIMIT:
            raise ValueError(
                f"extensionMessageLimit {value!r} is {size:,} bytes: use 4Mi to 512Mi (gRPC's own default is 4Mi; "
                "larger messages cost Envoy Gateway and Agent Router memory on every configuration change)"
            )
        return value

    @property
    def extension_message_bytes(self) -> int:
        """The limit in bytes."""
        size = message_size_bytes(self.extension_message_limit)
        assert size is not None  # the validator refused anything else
        return size


RedisMode = Literal["in-cluster", "external"]
RedisType = Literal["single", "sentinel", "cluster"]
REDIS_IN_CLUSTER_ONLY = ("namespace", "image", "storage_size", "storage_class", "protect")
REDIS_EXTERNAL_ONLY = ("url", "type", "tls", "tls_ca_certificate", "sentinel_password_config")


class RedisSettings(_Model):
    """Where rate-limit counters live. In-cluster persists to a volume; external for real environments."""

    mode: RedisMode = Field(default="in-cluster", description="`in-cluster` or `external`.")
    namespace: str = Field(default="agent-budgets-redis", description="In-cluster only: the Redis namespace.")
    image: str = Field(default="redis:8.2.4-alpine3.22", description="In-cluster only: the Redis image.")
    storage_size: str = Field(default="1Gi", description="In-cluster only: size of the volume claim.")
    storage_class: str | None = Field(
        default=None, description="In-cluster only: StorageClass; unset = cluster default."
    )
    # In-cluster only: Pulumi `protect` on the Redis namespace and StatefulSet, so neither a replacement
    # nor `pulumi destroy` can delete the volume that holds spent budgets.
    protect: bool = Field(
        default=False, description="In-cluster only: Pulumi `protect` on the namespace and StatefulSet."
    )
    url: str | None = Field(
        default=None,
        description=(
            "External only: `host:port`; sentinel `<master>,<host:port>,...`; cluster `host:port,host:port,...`."
        ),
    )
    type: RedisType = Field(default="single", description="External only: `single`, `sentinel` or `cluster`.")
    tls: bool = Field(
        default=False,
        description="External only: TLS, verified against the system roots or against `tlsCaCertificate`.",
    )
    password_config: str = Field(
        default="redisPassword",
        description=(
            "The **secret** config key holding the external Redis password, or `user:password` for an ACL user. "
            "The rate-limit service splits the value at its first `:`, so a password that contains `:` must be "
            "written with its user (`default:pa:ss`)."
        ),
    )
    tls_ca_certificate: str | None = Field(
        default=None,
        description=(
            "External with `tls: true` only: the PEM certificate(s) of a private CA that signed the Redis server "
            "certificate (mounted into `envoy-ratelimit` as `REDIS_TLS_CACERT`); unset = the system roots."
        ),
    )
    sentinel_password_config: str | None = Field(
        default=None,
        description=(
            "External `type: sentinel` only: the **secret** config key holding the password of the Sentinel nodes "
            "(`REDIS_SENTINEL_AUTH`); unset = the Sentinels need none."
        ),
    )

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

    @field_validator("sentinel_password_config")
    @classmethod
    def _sentinel_password_key(cls, value: str | None) -> str | None:
        if value is not None and not _CONFIG_KEY.match(value):
            raise ValueError(f"sentinelPasswordConfig {value!r} is not a config key name such as redisSentinelPassword")
        return value

    @field_validator("tls_ca_certificate")
    @classmethod
    def _ca_pem(cls, value: str | None) -> str | None:
        if value is None:
            return value
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----", value)
        leftover = re.sub(r"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----", "", value)
        if not blocks or leftover.strip():
            raise ValueError(
                "tlsCaCertificate is not one or more PEM certificates (-----BEGIN CERTIFICATE----- ... "
                "-----END CERTIFICATE-----, nothing else): paste the CA's certificate, never a key"
            )
        return value


def redis_url_parts(url: str, redis_type: str) -> tuple[str | None, list[str]]:
    """`redis.url` as ratelimit reads it: the master name (sentinel only) and the `host:port` parts."""
    parts = [part.strip() for part in url.split(",")]
    if redis_type == "sentinel":
        return parts[0], parts[1:]
    return None, parts


def redis_url_problem(url: str, redis_type: str) -> str | None:
    """Why `url` is not a Redis address list of `redis_type`, with the fix; None when it is one."""
    parts = [part.strip() for part in url.split(",")]
    master, hosts = redis_url_parts(url, redis_type)
    if redis_type == "sentinel":
        if not hosts or not re.match(r"^[A-Za-z0-9._-]+$", str(master)):
            return (
                f"url {url!r} is not a sentinel list: with type sentinel write "
                "<master name>,<sentinel host>:<port>[,...], e.g. mymaster,sentinel-0.example:26379"
            )
    elif redis_type == "single" and len(parts) != 1:
        return (
            f"url {url!r} lists {len(parts)} hosts but type is single: give one host:port, "
            "or set type to sentinel or cluster"
        )
    for part in hosts:
        match = re.match(r"^[A-Za-z0-9.-]+:([0-9]{1,5})$", part)
        if not match or not 1 <= int(match.group(1)) <= 65535:
            return f"url part {part!r} must be host:port with a port from 1 to 65535"
    for part in parts:
        refused = go_url_parse_error(part)
        if refused:
            return (
                f"url part {part!r} is refused by Envoy Gateway, which checks each part with Go's url.Parse at "
                f"startup ({refused}), so the eg release would fail: name the host by a DNS name that starts with "
                "a letter (for an IP address, a Service of type ExternalName or a headless Service with an "
                "Endpoints object)"
            )
    return None


def go_url_parse_error(text: str) -> str | None:
    """The error Go's `net/url.Parse` returns for `text`, or None (the checks that matter for host:port).

    Go (src/net/url/url.go `Parse`, `getScheme`): an ASCII control character fails; a leading `:` is a
    missing scheme; a scheme is letters then letters, digits, `+`, `-` or `.` up to the first `:`. Without a
    scheme, a first path segment (up to the first `/`) that holds a `:` fails. So `redis.example:6379` parses
    (scheme `redis.example`) while `10.0.0.5:6379`, `-x:1` or `my_host:1` do not. Envoy Gateway v1.9.0 runs
    it on each comma-separated part (api/v1alpha1/validation/envoygateway_validate.go `ValidateRedisURL`).
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return "net/url: invalid control character in URL"
    scheme_end = None
    for index, ch in enumerate(text):
        if ch.isascii() and ch.isalpha():
            continue
        if ch.isascii() and (ch.isdigit() or ch in "+-."):
            if index == 0:
                break
            continue
        if ch == ":":
            if index == 0:
                return "missing protocol scheme"
            scheme_end = index
        break
    if scheme_end is not None:
        return None
    if ":" in text.split("/", 1)[0]:
        return "first path segment in URL cannot contain colon"
    return None


# An OpenTelemetry attribute name as Agent Router's header mapping takes it: dotted lowercase words.
_OTEL_ATTRIBUTE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
# A Kubernetes label key (optional DNS-subdomain prefix) and value.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r} has a prefix that is not a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return f"label key {key!r} is not a Kubernetes label name (1-63 letters, digits, '-', '_', '.')"
    return None


class MonitoringSettings(_Model):
    """Per-actor gateway metrics, and the optional alerts on every budget (Prometheus Operator)."""

    actor_metrics: bool = Field(
        default=True,
        description=(
            "Agent Router labels its GenAI metrics (`gen_ai.client.token.usage`, request duration) with the "
            "caller's `x-actor-id` (chart value `controller.metricsRequestHeaderAttributes`)."
        ),
    )
    actor_attribute: str = Field(
        default="actor.id",
        description=(
            "The OpenTelemetry attribute that holds the actor id; Prometheus shows it with dots as underscores "
            "(`actor.id` → label `actor_id`)."
        ),
    )
    prometheus_rules: bool = Field(
        default=False,
        description=(
            "Create a PrometheusRule with two alerts per budget (near its limit, over it). Needs the Prometheus "
            "Operator CRDs in the cluster."
        ),
    )
    near_limit_percent: float = Field(
        default=80,
        gt=0,
        lt=100,
        description=(
            "The share of a budget at which the near-limit alert fires; also the rate-limit service's "
            "`NEAR_LIMIT_RATIO` (its upstream default is 80%)."
        ),
    )
    rule_labels: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Labels on the PrometheusRule, so that your Prometheus' `ruleSelector` picks it up (e.g. "
            "`release: kube-prometheus-stack`)."
        ),
    )

    @field_validator("near_limit_percent", mode="before")
    @classmethod
    def _percent_is_a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"got {value!r}: give a percentage between 0 and 100, e.g. nearLimitPercent: 80")
        if isinstance(value, str):
            text = value.strip().removesuffix("%").strip()
            raise ValueError(
                f"got {value!r}: write the percentage as a number without quotes or %, e.g. nearLimitPercent: "
                f"{text if text.replace('.', '', 1).isdigit() else 80}"
            )
        return value

    @field_validator("actor_attribute")
    @classmethod
    def _attribute(cls, value: str) -> str:
        if len(value) > 100 or not _OTEL_ATTRIBUTE.match(value):
            raise ValueError(
                f"actorAttribute {value!r} is not an attribute name such as actor.id: lowercase words of letters, "
                "digits and '_', joined by dots"
            )
        return value

    @field_validator("rule_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            problem = _label_key_problem(key)
            if problem:
                raise ValueError(problem)
            if not isinstance(label, str) or not _LABEL_VALUE.match(label):
                raise ValueError(
                    f"label {key}: {label!r} is not a Kubernetes label value (at most 63 letters, digits, '-', '_', "
                    "'.', starting and ending with a letter or digit)"
                )
        return value


def _default_providers() -> list[Provider]:
    return [Provider(name="mock", kind="mock")]


def _default_routes() -> list[Route]:
    return [Route(name="mock", models=["mock-model"], provider="mock")]


class StackSettings(_Model):
    """The whole `agent-budgets:*` configuration of one stack."""

    actors: list[ActorId] = Field(
        default_factory=list,
        description=(
            "Every actor that may call the model gateway, as `<atespace>/<name>` (two DNS labels); each gets an "
            "egress policy."
        ),
    )
    allow_no_actors: bool = Field(
        default=False,
        description=(
            "Accept an empty `actors` while egress policies are enabled (the next `up` deletes every actor's policy)."
        ),
    )
    budgets: BudgetsConfig = Field(description="The default budget and the classes.")
    prices: dict[str, ModelPrices] = Field(
        default_factory=dict,
        json_schema_extra={"mapKey": "model"},
        description=(
            "USD per 1,000,000 tokens of each model, keyed by the model name agents send; every route model needs one "
            "as soon as any limit is in `usd`."
        ),
    )
    suspended: list[ActorId] = Field(
        default_factory=list,
        description=(
            "Actors refused at once (403, before any model call) whatever their budget; each must be in `actors`. "
            "Their counters are kept: removing one restores it with its spent budget."
        ),
    )
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings, description="The target cluster.")
    gateway: GatewaySettings = Field(default_factory=GatewaySettings, description="The model gateway.")
    providers: list[Provider] = Field(
        default_factory=_default_providers,
        description="Model providers behind the gateway; each remote one needs its key as a secret.",
    )
    routes: list[Route] = Field(
        default_factory=_default_routes,
        description="Model routes, one AIGatewayRoute each; every route shares the same budgets.",
    )
    mock_model: MockModelSettings = Field(default_factory=MockModelSettings, description="The in-cluster mock model.")
    substrate: SubstrateSettings = Field(default_factory=SubstrateSettings, description="Agent Substrate.")
    budget_policy: BudgetPolicySettings = Field(
        default_factory=BudgetPolicySettings, description="Layout of the budget policy."
    )
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings, description="The rate-limit service.")
    platform: PlatformSettings = Field(default_factory=PlatformSettings, description="The Helm releases.")
    redis: RedisSettings = Field(default_factory=RedisSettings, description="The rate-limit store.")
    monitoring: MonitoringSettings = Field(
        default_factory=MonitoringSettings, description="Per-actor gateway metrics and budget alerts."
    )

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


# ---------------------------------------------------------------------------------------------------------
# Keys that moved or went away. A stack that still sets one gets the new home named, not "unknown key".


@dataclass(frozen=True)
class RetiredKey:
    """A configuration key that no longer exists: where its setting lives now, and since when."""

    replacement: str | None
    how: str


RETIRED_KEYS: dict[str, RetiredKey] = {
    "substrate.egress.port": RetiredKey(
        replacement="gateway.port",
        how=(
            "the egress rule now allows the gateway's own listener port; if you set this to the gateway's "
            "port, delete it; otherwise set agent-budgets:gateway.port to that value"
        ),
    ),
}


# ---------------------------------------------------------------------------------------------------------
# Secrets and raw values.

# What the program's config reader puts in place of a secret's value: validation needs only presence.
SECRET_PLACEHOLDER = "<secret>"
# Sections that may be stored as Pulumi secrets because a value in them can hold credentials (kubeconfig
# contents). Pulumi marks the whole `agent-budgets:kubernetes` object secret when one value inside it is
# (`pulumi config set --secret --path`), so the program reads these sections' values, keeps the sensitive
# ones secret in state and never shows them in a message.
SECRET_SECTIONS = frozenset({"kubernetes"})


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

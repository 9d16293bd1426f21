"""`agent-budgets:providers`, `routes` and `mockModel`: where calls go, and the in-cluster mock."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from core import money
from core.model_names import model_name_problem
from core.settings.base import CONFIG_KEY, DNS_SUBDOMAIN, DURATION, ConfigModel, check_dns_label, check_image_reference
from core.settings.budgets import MAX_TOKENS

MAX_MODELS_PER_ROUTE = 64
"""The most model names one route serves. The AIGatewayRoute rule takes 128 matches (one per model name), but Agent
Router copies them into one HTTPRoute rule (envoyproxy/ai-gateway v1.1.0 internal/controller/ai_gateway_route.go
`newHTTPRoute`), and the Gateway API caps an HTTPRoute rule at 64 matches (v1.6.1 HTTPRouteRule `matches` maxItems):
with more, the API server refuses the HTTPRoute Agent Router creates and the route serves nothing (seen with
`egctl x translate`, which validates as the API server does: tests/test_real_translators.py)."""
DEFAULT_REQUEST_TIMEOUT = "60s"
"""Agent Router's request timeout for a route rule that sets none (envoyproxy/ai-gateway v1.1.0
api/v1beta1/ai_gateway_route_helper.go `defaultRequestTimeout`): the whole response, streams included."""
ProviderKind = Literal["mock", "openai", "anthropic"]
PROVIDER_DEFAULT_HOSTS: dict[str, str] = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
}


class Provider(ConfigModel):
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
        return check_dns_label(value, "provider name")

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"hostname {value!r} is not a lowercase DNS name such as api.openai.com")
        return value

    @field_validator("api_key_config")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not CONFIG_KEY.match(value):
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


_DURATION_PART = re.compile(r"([0-9]{1,5})(ms|h|m|s)")
_DURATION_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_seconds(text: str) -> float:
    """A Gateway API duration (GEP-2257: `1h30m`, `500ms`) in seconds."""
    return sum(int(number) * _DURATION_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


class Route(ConfigModel):
    """A model route: requests naming one of `models` go to `provider`. All routes share budgets."""

    name: str = Field(description="DNS label, unique; the AIGatewayRoute's name.")
    models: list[str] = Field(
        min_length=1, max_length=MAX_MODELS_PER_ROUTE, description="Model names agents send; each belongs to one route."
    )
    provider: str = Field(description="The `providers[].name` that serves these models.")
    model_name_override: str | None = Field(
        default=None,
        description=(
            "Model name sent upstream instead; calls on this route are then priced by this name, so with a `usd` "
            "limit it needs its own entry under `prices`."
        ),
    )
    max_output_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "Output-token ceiling written into every request of this route (OpenAI `max_completion_tokens`, with "
            "`max_tokens` removed and `n` set to 1; Anthropic `max_tokens`). It replaces whatever the agent asked "
            "for, smaller values included. Unset: the agent's value passes."
        ),
    )
    context_window: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "The largest context window (input and output tokens of one call) of the route's models, as the provider "
            "documents it, including any window an agent can unlock with a request header. Not enforced by the "
            "gateway (the provider refuses a call that does not fit): it bounds a call's cost in `worstCase`."
        ),
    )
    request_timeout: str | None = Field(
        default=None,
        description=(
            f"The longest a call may take, its whole response or stream included (a Gateway API duration such as "
            f"`300s` or `10m`); unset: Agent Router's {DEFAULT_REQUEST_TIMEOUT}. A call cut by it is charged "
            "nothing (docs/budgets.md)."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "route name")

    @field_validator("request_timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None and not DURATION.match(value):
            raise ValueError(f"requestTimeout {value!r} is not a Gateway API duration such as 60s, 10m or 1h30m")
        if value is not None and duration_seconds(value) == 0:
            raise ValueError(
                f"requestTimeout {value!r} would disable the timeout, and with it the bound on how long a call can run "
                "(and on how many run at once): give a positive duration such as 10m"
            )
        return value

    @model_validator(mode="after")
    def _ceiling_below_window(self) -> Route:
        ceiling, window = self.max_output_tokens, self.context_window
        if ceiling is not None and window is not None and ceiling >= window:
            raise ValueError(
                f"maxOutputTokens {ceiling} is not below contextWindow {window}: the window holds the input and the "
                "output of a call, so a ceiling at or above it bounds nothing. Lower maxOutputTokens, or check "
                "contextWindow"
            )
        return self

    @property
    def timeout_seconds(self) -> float:
        """The request timeout in seconds (Agent Router's default when unset)."""
        return duration_seconds(self.request_timeout or DEFAULT_REQUEST_TIMEOUT)

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str]) -> list[str]:
        for model in value:
            _check_model_name(model, "model name")
        if len(set(value)) != len(value):
            raise ValueError(f"models {value} lists a model twice")
        return value

    @field_validator("model_name_override")
    @classmethod
    def _override(cls, value: str | None) -> str | None:
        if value is not None:
            _check_model_name(value, "modelNameOverride")
        return value

    @property
    def billed_models(self) -> tuple[str, ...]:
        """The names this route's calls are priced by (Agent Router's CEL `model`): the override, or each model."""
        return money.billed_models(self.models, self.model_name_override)


def _check_model_name(model: str, what: Literal["model name", "modelNameOverride"]) -> None:
    """A model name goes into header matches and, as a CEL string, into the route's cost expression."""
    if not model or model != model.strip():
        raise ValueError(f"{what} {model[:200]!r} must be a non-empty string without surrounding spaces")
    problem = model_name_problem(model, "models" if what == "model name" else "modelNameOverride")
    if problem:
        raise ValueError(f"{what} {model[:200]!r} {problem}. Write the name exactly as the provider expects it")


class MockModelSettings(ConfigModel):
    """The in-cluster OpenAI-compatible mock used by the dev stack."""

    total_tokens: int = Field(default=200, ge=1, le=1_000_000_000, description="Tokens the mock reports per call.")
    image: str = Field(default="python:3.12-alpine", description="Image that runs the mock's Python server.")
    replicas: int = Field(default=1, ge=1, le=10, description="Mock model pods.")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_reference(value, "image", "python:3.12-alpine")

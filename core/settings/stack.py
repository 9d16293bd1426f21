"""The whole `agent-budgets:*` configuration of one stack, keys that moved or went away, and how secrets and
raw values arrive from the engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from core.identity import SourceName, actors_of_source
from core.problems import PROJECT
from core.settings.base import ActorId, ConfigModel
from core.settings.budgets import BudgetsConfig
from core.settings.identity import IdentitySettings
from core.settings.monitoring import MonitoringSettings
from core.settings.platform import (
    BudgetPolicySettings,
    GatewaySettings,
    KubernetesSettings,
    PlatformSettings,
    RateLimitSettings,
)
from core.settings.prices import ModelPrices, PricedModel
from core.settings.redis import RedisSettings
from core.settings.routing import MockModelSettings, Provider, Route
from core.settings.substrate import SubstrateSettings


def _default_providers() -> list[Provider]:
    return [Provider(name="mock", kind="mock")]


def _default_routes() -> list[Route]:
    return [Route(name="mock", models=["mock-model"], provider="mock")]


class StackSettings(ConfigModel):
    """The whole `agent-budgets:*` configuration of one stack."""

    actors: list[ActorId] = Field(
        default_factory=list,
        description=(
            "Every actor that may call the model gateway: a Substrate actor as `<atespace>/<name>` (each gets an "
            "egress policy), a Kubernetes service account as `serviceaccount:<namespace>/<name>`, an API key as "
            "`apikey:<name>`; its source must be in `identity.sources`."
        ),
    )
    allow_no_actors: bool = Field(
        default=False,
        description=(
            "Accept an empty `actors` while egress policies are enabled (the next `up` deletes every actor's policy)."
        ),
    )
    budgets: BudgetsConfig = Field(description="The default budget and the classes.")
    prices: dict[PricedModel, ModelPrices] = Field(
        default_factory=dict,
        json_schema_extra={"mapKey": "model"},
        description=(
            "USD per 1,000,000 tokens of each model, keyed by the model name the provider bills: a route's "
            "`modelNameOverride` when it has one, else the names agents send. Every billed model needs one as soon as "
            "any limit is in `usd`."
        ),
    )
    suspended: list[ActorId] = Field(
        default_factory=list,
        description=(
            "Actors refused at once (403, before any model call) whatever their budget; each must be in `actors`. "
            "Their counters are kept: removing one restores it with its spent budget."
        ),
    )
    identity: IdentitySettings = Field(
        default_factory=IdentitySettings,
        description="Which identity sources the gateway accepts, and how it verifies each (docs/identity.md).",
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

    def actors_of(self, source: SourceName) -> list[str]:
        """The actors of `actors` whose identity source is `source`, in order."""
        return actors_of_source(self.actors, source)

    @property
    def mock_provider(self) -> Provider | None:
        """The in-cluster mock provider, when the stack has one."""
        return next((p for p in self.providers if p.kind == "mock"), None)


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
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested deeper than Python's parser goes
            return value
    return value

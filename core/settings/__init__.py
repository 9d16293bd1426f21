"""The stack-configuration contract of agent-budgets: typed, documented pydantic models of every key.

Each model checks what one field can check on its own (types, ranges, shapes); whatever needs two keys
(class members listed in `actors`, routes naming a provider, ...) is a cross-key check in
`core.cross_checks`, and `core.validation` runs both and reports every problem at once. Every field has a
`description`: the configuration reference in docs/configuration.md is generated from these models
(`make docs`, scripts/gen_docs.py). Only `agent-budgets:actors` and `agent-budgets:budgets` are fixed by the
design; every other key has a default so that `Pulumi.dev.yaml` stays short.
"""

from __future__ import annotations

from core.problems import PROJECT, ConfigError, Problem
from core.settings.base import (
    CONFIG_KEY,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    ENVOY_GATEWAY_NAMESPACE,
    GATEWAY_CONTROLLER_NAME,
    GATEWAY_HOSTNAME,
    GATEWAY_SERVICE_NAME,
    QUANTITY,
    RATE_LIMIT_UNITS,
    RELEASE_VERSION,
    ActorId,
    ConfigModel,
    check_actor_id,
    check_dns_label,
    is_dns_label,
    number_text_hint,
    version_tuple,
    whole_number_from_text,
)
from core.settings.budgets import (
    MAX_LIMITS_PER_BUDGET,
    MAX_TOKENS,
    WINDOWS_TEXT,
    Budget,
    BudgetClass,
    BudgetsConfig,
    Limit,
    TokenCount,
    UsdAmount,
)
from core.settings.monitoring import (
    MonitoringSettings,
    prometheus_label,
)
from core.settings.platform import (
    EXTENSION_MESSAGE_LIMIT_DEFAULT,
    MAX_EXTENSION_MESSAGE_LIMIT,
    MIB,
    MIN_EXTENSION_MESSAGE_LIMIT,
    BudgetPolicySettings,
    GatewaySettings,
    KubernetesSettings,
    PlatformSettings,
    RateLimitSettings,
    message_size_bytes,
)
from core.settings.prices import (
    ModelPrices,
)
from core.settings.redis import (
    REDIS_EXTERNAL_ONLY,
    REDIS_IN_CLUSTER_ONLY,
    RedisMode,
    RedisSettings,
    RedisType,
    go_url_parse_error,
    redis_url_parts,
    redis_url_problem,
)
from core.settings.routing import (
    MAX_MODELS_PER_ROUTE,
    PROVIDER_DEFAULT_HOSTS,
    MockModelSettings,
    Provider,
    ProviderKind,
    Route,
)
from core.settings.stack import (
    RETIRED_KEYS,
    SECRET_PLACEHOLDER,
    SECRET_SECTIONS,
    RetiredKey,
    StackSettings,
    decode_config_value,
    secret_set_command,
)
from core.settings.substrate import (
    EgressConfig,
    IdpTrust,
    SubstrateSettings,
    TrustMode,
)

__all__ = [
    "CONFIG_KEY",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "DURATION",
    "ENVOY_GATEWAY_NAMESPACE",
    "EXTENSION_MESSAGE_LIMIT_DEFAULT",
    "GATEWAY_CONTROLLER_NAME",
    "GATEWAY_HOSTNAME",
    "GATEWAY_SERVICE_NAME",
    "MAX_EXTENSION_MESSAGE_LIMIT",
    "MAX_LIMITS_PER_BUDGET",
    "MAX_MODELS_PER_ROUTE",
    "MAX_TOKENS",
    "MIB",
    "MIN_EXTENSION_MESSAGE_LIMIT",
    "PROJECT",
    "PROVIDER_DEFAULT_HOSTS",
    "QUANTITY",
    "RATE_LIMIT_UNITS",
    "REDIS_EXTERNAL_ONLY",
    "REDIS_IN_CLUSTER_ONLY",
    "RELEASE_VERSION",
    "RETIRED_KEYS",
    "SECRET_PLACEHOLDER",
    "SECRET_SECTIONS",
    "WINDOWS_TEXT",
    "ActorId",
    "Budget",
    "BudgetClass",
    "BudgetPolicySettings",
    "BudgetsConfig",
    "ConfigError",
    "ConfigModel",
    "EgressConfig",
    "GatewaySettings",
    "IdpTrust",
    "KubernetesSettings",
    "Limit",
    "MockModelSettings",
    "ModelPrices",
    "MonitoringSettings",
    "PlatformSettings",
    "Problem",
    "Provider",
    "ProviderKind",
    "RateLimitSettings",
    "RedisMode",
    "RedisSettings",
    "RedisType",
    "RetiredKey",
    "Route",
    "StackSettings",
    "SubstrateSettings",
    "TokenCount",
    "TrustMode",
    "UsdAmount",
    "check_actor_id",
    "check_dns_label",
    "decode_config_value",
    "go_url_parse_error",
    "is_dns_label",
    "message_size_bytes",
    "number_text_hint",
    "prometheus_label",
    "redis_url_parts",
    "redis_url_problem",
    "secret_set_command",
    "version_tuple",
    "whole_number_from_text",
]

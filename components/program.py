"""The program's edge: read `agent-budgets:*` config from the engine into what `AgentBudgets` is built from.

Nothing is registered until the whole configuration (including required secrets and Envoy Gateway's
caps) has been checked by `core.validation` (the component does it first); a problem ends the run with a
clean `pulumi.RunError` naming every bad key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import pulumi
import pulumi.runtime.config as runtime_config

from agent_budgets.component import SECTION_FIELDS, AgentBudgetsArgs, StackProgram
from core.config_size import CONFIG_ENV_VAR, config_env_bytes, config_size_warning
from core.cross_checks import ConfigView
from core.settings import PROJECT, SECRET_PLACEHOLDER, SECRET_SECTIONS, decode_config_value
from core.validation import needed_secrets

PROVIDER_API_KEYS = "providerApiKeys."
# The component input of each Redis secret → its argument.
SECTION_INPUTS = {"redisPassword": "redis_password", "redisSentinelPassword": "redis_sentinel_password"}


def read_raw_config(project: str = PROJECT) -> dict[str, Any]:
    """Every `<project>:*` key the engine handed the program, values decoded from JSON."""
    prefix = f"{project}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    raw: dict[str, Any] = {}
    for full_key in sorted(keys):
        if not full_key.startswith(prefix):
            continue
        key = full_key.removeprefix(prefix)
        if runtime_config.is_config_secret(full_key) and key not in SECRET_SECTIONS:
            # Secret values are read only where they are used (as Outputs); here, only their presence.
            raw[key] = SECRET_PLACEHOLDER
            continue
        # A section stored as a secret (a kubeconfig's contents inside `kubernetes`) is read: the program
        # needs its settings, and keeps the sensitive values secret (components.stack, the egress shards).
        raw[key] = decode_config_value(runtime_config.get_config(full_key))
    return raw


def runtime_secret_state(key: str) -> tuple[bool, bool]:
    """Whether `agent-budgets:<key>` is set, and whether it is stored as a secret."""
    full_key = f"{PROJECT}:{key}"
    return runtime_config.get_config(full_key) is not None, runtime_config.is_config_secret(full_key)


def secret_config(key: str) -> pulumi.Output[str] | None:
    """A secret config value, kept secret; None when it is not set (validation then reports it)."""
    return pulumi.Config(PROJECT).get_secret(key)


def stack_args(raw: Mapping[str, Any]) -> AgentBudgetsArgs:
    """`AgentBudgets`' arguments from the stack's configuration: each section under its argument, each secret the
    configuration needs read from secret config into its input."""
    args: dict[str, Any] = {field: raw[key] for key, field in SECTION_FIELDS.items() if key in raw}
    sections = {key: value for key, value in raw.items() if key in SECTION_FIELDS}
    provider_api_keys: dict[str, pulumi.Output[str]] = {}
    for secret in needed_secrets(ConfigView(sections)):
        value = secret_config(secret.config_key)
        if value is None:
            continue
        if secret.component_input.startswith(PROVIDER_API_KEYS):
            provider_api_keys[secret.component_input.removeprefix(PROVIDER_API_KEYS)] = value
        else:
            args[SECTION_INPUTS[secret.component_input]] = value
    if provider_api_keys:
        args["provider_api_keys"] = provider_api_keys
    return cast(AgentBudgetsArgs, args)


def warn_on_config_size(environ: Mapping[str, str] = os.environ) -> str | None:
    """The warning of `core.config_size` for the configuration this process was started with (logged too)."""
    warning = config_size_warning(config_env_bytes(environ.get(CONFIG_ENV_VAR, "")))
    if warning is not None:
        pulumi.log.warn(warning)
    return warning


def stack_configuration() -> tuple[AgentBudgetsArgs, StackProgram]:
    """What `__main__.py` builds its `AgentBudgets` from: the arguments, and the whole configuration with the state
    of its secrets (so that unknown keys and misplaced secrets are reported, by their config keys)."""
    warn_on_config_size()
    raw = read_raw_config()
    return stack_args(raw), StackProgram(raw=raw, secret_state=runtime_secret_state)

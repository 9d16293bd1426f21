"""The program's edge: read `agent-budgets:*` config from the engine, validate it all, then build the stack.

Nothing is registered until the whole configuration (including required secrets and Envoy Gateway's
caps) has been checked by `core.validation`; a problem ends the run with a clean `pulumi.RunError`
naming every bad key.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.runtime.config as runtime_config

from components.stack import build_stack
from core.settings import PROJECT, SECRET_PLACEHOLDER, SECRET_SECTIONS, ConfigError, decode_config_value
from core.validation import ValidatedStack, validate_stack


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


def load() -> ValidatedStack:
    """The engine's configuration, validated; raises ConfigError listing every problem."""
    return validate_stack(read_raw_config(), runtime_secret_state)


def run() -> None:
    """Entry point of `__main__.py`."""
    try:
        validated = load()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    for warning in validated.warnings:
        pulumi.log.warn(warning.render())
    outputs = build_stack(validated.settings, validated.rules, validated.egress)
    for key, value in outputs.items():
        pulumi.export(key, value)

"""The program's edge: read `agent-budgets:*` config, validate it all, then build the stack.

Nothing is registered until the whole configuration (including required secrets and Envoy Gateway's
caps) has been checked; a problem ends the run with a clean `pulumi.RunError` naming every bad key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pulumi.runtime.config as runtime_config

from components.actor_egress import EgressPolicySettings, settings_problems
from components.budget_rules import BudgetRules, compile_budget_rules
from components.settings import (
    GATEWAY_HOSTNAME,
    PROJECT,
    SECRET_PLACEHOLDER,
    ConfigError,
    StackSettings,
    decode_config_value,
    parse_settings,
    required_secrets,
    secret_set_command,
)

SecretState = Callable[[str], tuple[bool, bool]]  # config key → (is set, is secret)


def read_raw_config(project: str = PROJECT) -> dict[str, Any]:
    """Every `<project>:*` key the engine handed the program, values decoded from JSON."""
    prefix = f"{project}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    raw: dict[str, Any] = {}
    for full_key in sorted(keys):
        if not full_key.startswith(prefix):
            continue
        if runtime_config.is_config_secret(full_key):
            # Secret values are read only where they are used (as Outputs); here, only their presence.
            raw[full_key.removeprefix(prefix)] = SECRET_PLACEHOLDER
            continue
        raw[full_key.removeprefix(prefix)] = decode_config_value(runtime_config.get_config(full_key))
    return raw


def secret_problems(settings: StackSettings, state: SecretState) -> list[str]:
    """One message per required secret that is missing or stored in plain text."""
    problems: list[str] = []
    for key, purpose in required_secrets(settings):
        present, secret = state(key)
        command = secret_set_command(key)
        if not present:
            problems.append(f"{PROJECT}:{key} is not set: it holds {purpose}. Run `{command}`")
        elif not secret:
            problems.append(
                f"{PROJECT}:{key} is stored in plain text: it holds {purpose}. Remove it with "
                f"`pulumi config rm {PROJECT}:{key}`, then run `{command}`"
            )
    return problems


def egress_problems(settings: StackSettings) -> list[str]:
    """Substrate's own constraints on the egress policies, checked before anything is registered."""
    if not settings.substrate.egress.enabled:
        return []
    return [f"{PROJECT}:substrate.egress: {problem}" for problem in settings_problems(egress_settings(settings))]


def egress_settings(settings: StackSettings) -> EgressPolicySettings:
    """The plain settings of the per-actor egress policies."""
    egress = settings.substrate.egress
    provider_hosts = [h for h in (p.effective_hostname for p in settings.providers) if h]
    return EgressPolicySettings(
        actors=list(settings.actors),
        gateway_hostname=GATEWAY_HOSTNAME,
        gateway_port=settings.gateway.port,
        audiences=[settings.substrate.audience],
        expiration_seconds=egress.expiration_seconds,
        extra_hostnames=list(egress.extra_hostnames),
        provider_hosts=sorted(set(provider_hosts)),
        kube_context=settings.kubernetes.context,
        kubectl=egress.kubectl,
        substrate_ref=settings.substrate.ref,
        timeout_seconds=egress.timeout_seconds,
    )


def _runtime_secret_state(key: str) -> tuple[bool, bool]:
    full_key = f"{PROJECT}:{key}"
    return runtime_config.get_config(full_key) is not None, runtime_config.is_config_secret(full_key)


def load(
    raw: dict[str, Any] | None = None, state: SecretState = _runtime_secret_state
) -> tuple[StackSettings, BudgetRules]:
    """Validate everything; raise ConfigError listing every problem."""
    settings = parse_settings(read_raw_config() if raw is None else raw)
    rules = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots)
    problems = secret_problems(settings, state)
    problems += egress_problems(settings)
    if problems:
        raise ConfigError("invalid stack configuration:\n  - " + "\n  - ".join(problems))
    return settings, rules


def secret_config(key: str) -> pulumi.Output[str]:
    """A secret config value, kept secret (load() has already checked it is set)."""
    value = pulumi.Config(PROJECT).get_secret(key)
    if value is None:  # pragma: no cover - load() refuses a missing secret first
        raise pulumi.RunError(f"{PROJECT}:{key} is not set")
    return value


def run() -> None:
    """Entry point of `__main__.py`."""
    try:
        settings, rules = load()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    # Imported here so a configuration error never pays for (or trips over) resource modules.
    from components.stack import build_stack

    outputs = build_stack(settings, rules)
    for key, value in outputs.items():
        pulumi.export(key, value)

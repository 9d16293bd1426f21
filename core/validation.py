"""The whole stack configuration, checked in one place before any resource exists.

`validate_stack` takes the raw `agent-budgets:*` map and a way to ask whether a secret is set, and
returns typed settings plus the compiled budget rules, or raises `ConfigError` listing every problem.
Pure: the Pulumi runtime is read by `components.program`, which hands the values over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.budget_rules import BudgetRules, compile_budget_rules
from core.egress import EgressPolicySettings, settings_problems
from core.settings import (
    GATEWAY_HOSTNAME,
    PROJECT,
    ConfigError,
    StackSettings,
    parse_settings,
    required_secrets,
    secret_set_command,
)

SecretState = Callable[[str], tuple[bool, bool]]  # config key → (is set, is secret)


@dataclass(frozen=True)
class ValidatedStack:
    """Everything the components need, already checked."""

    settings: StackSettings
    rules: BudgetRules


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


def validate_stack(raw: Mapping[str, Any], state: SecretState) -> ValidatedStack:
    """Validate everything; raise ConfigError listing every problem."""
    settings = parse_settings(raw)
    rules = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots)
    problems = secret_problems(settings, state)
    problems += egress_problems(settings)
    if problems:
        raise ConfigError("invalid stack configuration:\n  - " + "\n  - ".join(problems))
    return ValidatedStack(settings, rules)

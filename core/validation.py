"""The whole stack configuration, checked in one place before any resource exists.

`validate_stack` takes the raw `agent-budgets:*` map (values decoded from JSON; secrets replaced by
`SECRET_PLACEHOLDER`) and a way to ask whether a secret is set, and returns typed settings, the compiled
budget rules and the warnings to print, or raises `ConfigError` with every problem at once:

0. text: every key and string can be written as UTF-8 (core.config_text);
1. key shape: flat dotted keys, snake_case, renamed and unknown keys (core.config_messages);
2. every field, through the pydantic models (core.settings), with messages for common mistakes;
3. every cross-key check (core.cross_checks), each skipping only what a field error makes impossible;
4. Envoy Gateway's caps on the compiled budget rules (core.budget_rules);
5. required secrets: set, and set as secrets;
6. Substrate's own constraints on the egress policies (core.egress).

Pure: the Pulumi runtime is read by `components.program`, which hands the values over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from core import xds_size
from core.budget_rules import ACTOR_HEADER, BudgetRules, compile_budget_rules
from core.config_messages import aliases, describe_field_error, flat_key_problem, unknown_key_problem
from core.config_text import reported_elsewhere, text_problems
from core.cross_checks import (
    ConfigView,
    cross_key_problems,
    dashboard_warnings,
    no_actors_finding,
    pool_warnings,
    price_warnings,
)
from core.egress import EgressPolicySettings, settings_problems
from core.identity import API_KEYS, SUBSTRATE, actors_of_source
from core.manifests import API_KEY_LENGTH, BUDGET_POLICY_NAME, api_key_client_id
from core.money import MoneyError, route_cost_entry
from core.problems import PROJECT, ConfigError, Problem
from core.settings import (
    GATEWAY_HOSTNAME,
    MIB,
    PROVIDER_DEFAULT_HOSTS,
    SECRET_PLACEHOLDER,
    BudgetPolicySettings,
    BudgetsConfig,
    GatewaySettings,
    IdentitySettings,
    ModelPrices,
    PlatformSettings,
    Route,
    StackSettings,
    secret_set_command,
)
from core.suspension import api_key_authorization, jwt_authorization

SecretState = Callable[[str], tuple[bool, bool]]  # config key → (is set, is secret)

TOP_LEVEL_KEYS = aliases(StackSettings)

# Which configuration key each input of an egress policy comes from (core.egress names its inputs).
EGRESS_INPUT_KEYS = {
    "actors": "actors",
    "atespace": "actors",
    "actor": "actors",
    "kube_context": "kubernetes.context",
    "kubeconfig": "kubernetes.kubeconfig",
    "concurrency": "substrate.egress.concurrency",
    "kubectl": "substrate.egress.kubectl",
    "substrate_ref": "substrate.ref",
    "timeout_seconds": "substrate.egress.timeoutSeconds",
    "gateway_hostname": "gateway",
    "gateway_port": "gateway.port",
    "audiences": "substrate.audience",
    "expiration_seconds": "substrate.egress.expirationSeconds",
    "extra_hostnames": "substrate.egress.extraHostnames",
    "rules": "substrate.egress",
}


@dataclass(frozen=True)
class ValidatedStack:
    """Everything the components need, already checked, and what the preview should warn about."""

    settings: StackSettings
    rules: BudgetRules
    warnings: tuple[Problem, ...] = ()
    egress: EgressPolicySettings | None = None
    """Every actor's egress-policy settings, already checked (None when substrate.egress.enabled is false)."""


@dataclass
class _Findings:
    """What one validation run found so far."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    settings: StackSettings | None = None
    """The typed settings, when every field validated (so they are validated once per run)."""


@dataclass(frozen=True)
class NeededSecret:
    """A secret the configuration needs: the secret config key the program reads it from, the `AgentBudgets` input
    a program using the component passes it in (agent_budgets), and what it holds."""

    config_key: str
    component_input: str
    purpose: str


@dataclass(frozen=True)
class SecretInputs:
    """The secret inputs an `AgentBudgets` component was given, by input path (`providerApiKeys.<provider>`,
    `redisPassword`, `redisSentinelPassword`): validation then reports a missing or unused input by that path
    instead of a secret config key."""

    provided: frozenset[str]


def needed_secrets(view: ConfigView) -> list[NeededSecret]:
    """The secrets this configuration needs, read from the raw values.

    Works while other keys are wrong, so a plain-text or missing secret is still reported.
    """
    needed: list[NeededSecret] = []
    for _, entry in view.entries("providers"):
        kind, name = entry.get("kind"), entry.get("name")
        # Any value may stand where text belongs (`kind: [openai]`): only text is looked up.
        if isinstance(kind, str) and kind in PROVIDER_DEFAULT_HOSTS and isinstance(name, str):
            key = entry.get("apiKeyConfig") or f"{name}ApiKey"
            if isinstance(key, str):  # any other value is wrong in itself, and its field error says so
                needed.append(
                    NeededSecret(key, f"providerApiKeys.{name}", f"the API key of provider {name!r} ({kind})")
                )
    if view.get("redis", "mode") == "external":
        key = view.get("redis", "passwordConfig")
        needed.append(
            NeededSecret(
                str(key if isinstance(key, str) else "redisPassword"),
                "redisPassword",
                "the password of the external Redis",
            )
        )
        sentinel = view.get("redis", "sentinelPasswordConfig")
        if isinstance(sentinel, str):
            needed.append(NeededSecret(sentinel, "redisSentinelPassword", "the password of the Redis Sentinel nodes"))
    return needed


def expected_secret_keys(view: ConfigView) -> dict[str, str]:
    """The secret config keys this configuration needs (key → what it holds)."""
    return {secret.config_key: secret.purpose for secret in needed_secrets(view)}


def _split_keys(raw: Mapping[str, Any], findings: _Findings) -> dict[str, Any]:
    """The sections (known top-level keys); a key that is neither a section nor a needed secret is a problem."""
    sections: dict[str, Any] = {}
    others: dict[str, Any] = {}
    for key, value in raw.items():
        if key in TOP_LEVEL_KEYS:
            if value == SECRET_PLACEHOLDER:
                # The value was not handed over (only sections in SECRET_SECTIONS are read when secret).
                findings.problems.append(
                    Problem(
                        key,
                        (
                            f"is stored as a secret, but it is plain configuration: `pulumi config rm "
                            f"{PROJECT}:{key}` and set it again without --secret"
                        ),
                    )
                )
            else:
                sections[key] = value
        else:
            others[key] = value
    secrets = expected_secret_keys(ConfigView(sections))
    for key, value in others.items():
        if key in secrets:
            continue
        if value == SECRET_PLACEHOLDER:
            findings.problems.append(
                Problem(
                    key,
                    f"is a secret that no setting uses: remove it (`pulumi config rm {PROJECT}:{key}`), or name it in "
                    "providers[].apiKeyConfig, redis.passwordConfig or redis.sentinelPasswordConfig",
                )
            )
            continue
        findings.problems.append(flat_key_problem(key, value) or unknown_key_problem([], key, value))
    return sections


def _field_problems(sections: Mapping[str, Any], findings: _Findings) -> frozenset[str]:
    """Every field error of every section; returns the top-level keys that had one."""
    try:
        findings.settings = StackSettings.model_validate(sections, by_alias=True, by_name=False)
    except ValidationError as error:
        details = error.errors(include_url=False)
        # A string pydantic cannot read as Unicode holds a lone surrogate: step 0 reported it by its key.
        findings.problems.extend(
            describe_field_error(detail) for detail in details if detail["type"] != "string_unicode"
        )
        return frozenset(str(detail["loc"][0]) for detail in details if detail.get("loc"))
    return frozenset()


def _check_settings(raw: Mapping[str, Any]) -> tuple[_Findings, ConfigView]:
    """Steps 1-3: key shape, fields, cross-key checks."""
    findings = _Findings()
    sections = _split_keys(raw, findings)
    failed = _field_problems(sections, findings)
    text = [problem for problem in text_problems(raw) if not reported_elsewhere(problem, findings.problems)]
    findings.problems[:0] = text
    view = ConfigView(sections, failed)
    errors, warnings = no_actors_finding(view)
    findings.problems.extend(errors)
    findings.warnings.extend(warnings)
    findings.problems.extend(cross_key_problems(view))
    findings.warnings.extend(price_warnings(view))
    findings.warnings.extend(dashboard_warnings(view))
    findings.warnings.extend(pool_warnings(view))
    return findings, view


def parse_settings(raw: Mapping[str, Any]) -> StackSettings:
    """Typed settings from the raw map: key shape, fields and cross-key checks (no secrets, no caps).

    Raises ConfigError listing every problem.
    """
    findings, _ = _check_settings(raw)
    if findings.problems:
        raise ConfigError(findings.problems)
    assert findings.settings is not None  # no problem, so every field validated
    return findings.settings


def _secret_problems(needed: Sequence[NeededSecret], secrets: SecretState | SecretInputs) -> list[Problem]:
    if isinstance(secrets, SecretInputs):
        return _secret_input_problems(needed, secrets)
    problems: list[Problem] = []
    for secret in needed:
        key, purpose = secret.config_key, secret.purpose
        present, is_secret = secrets(key)
        command = secret_set_command(key)
        if not present:
            problems.append(Problem(key, f"is not set: it holds {purpose}. Run `{command}`"))
        elif not is_secret:
            problems.append(
                Problem(
                    key,
                    f"is stored in plain text: it holds {purpose}. Remove it with `pulumi config rm {PROJECT}:{key}`, "
                    f"then run `{command}`",
                )
            )
    return problems


def _secret_input_problems(needed: Sequence[NeededSecret], inputs: SecretInputs) -> list[Problem]:
    """A component's missing secret inputs, and the ones no setting uses (a misspelt provider name)."""
    problems = [
        Problem(
            secret.component_input,
            f"is not set: it holds {secret.purpose}. Pass it to AgentBudgets as a secret "
            "(Python `pulumi.Output.secret(...)`, TypeScript `config.requireSecret(...)`, YAML `fn::secret`)",
        )
        for secret in needed
        if secret.component_input not in inputs.provided
    ]
    used = {secret.component_input for secret in needed}
    problems.extend(
        Problem(
            path,
            "is set, but no setting uses it: only a provider of kind openai or anthropic needs a key (by its name in "
            "providers), and only redis.mode external a password (redis.sentinelPasswordConfig for the Sentinels')",
        )
        for path in sorted(inputs.provided - used)
    )
    return problems


def egress_settings(settings: StackSettings) -> EgressPolicySettings:
    """The plain settings of the egress policies: every Substrate actor's (the other identity sources reach the
    gateway without Substrate), sharded by the component."""
    egress = settings.substrate.egress
    provider_hosts = [h for h in (p.effective_hostname for p in settings.providers) if h]
    return EgressPolicySettings(
        actors=tuple(settings.actors_of(SUBSTRATE)),
        gateway_hostname=GATEWAY_HOSTNAME,
        gateway_port=settings.gateway.port,
        audiences=(settings.substrate.audience,),
        expiration_seconds=egress.expiration_seconds,
        extra_hostnames=tuple(egress.extra_hostnames),
        provider_hosts=tuple(sorted(set(provider_hosts))),
        kube_context=settings.kubernetes.context,
        kubeconfig=settings.kubernetes.kubeconfig or None,
        kubectl=egress.kubectl,
        substrate_ref=settings.substrate.ref,
        timeout_seconds=egress.timeout_seconds,
        concurrency=egress.concurrency,
    )


def manages_egress_policies(settings: StackSettings) -> bool:
    """Whether the stack holds Substrate egress policies: Substrate is a source and its egress policies are on."""
    return settings.identity.uses(SUBSTRATE) and settings.substrate.egress.enabled


def egress_problems(egress: EgressPolicySettings | None) -> list[Problem]:
    """Substrate's own constraints on the egress policies (a backstop behind the field checks), keyed by the
    configuration key each input comes from. The settings keep the answer: the component that registers the
    shards asks the same object, so one program run checks every actor once."""
    if egress is None:
        return []
    return [
        Problem(EGRESS_INPUT_KEYS.get(problem.field, "substrate.egress"), problem.message)
        for problem in settings_problems(egress)
    ]


def message_estimate(
    rules: BudgetRules,
    routes: Sequence[Route],
    providers: int,
    gateway: GatewaySettings,
    identity: IdentitySettings,
    actors: Sequence[str],
    suspended: Sequence[str],
) -> xds_size.MessageEstimate:
    """The extension-server message these budgets, routes, identity sources and suspensions make (core.xds_size)."""
    api_key_bytes: int | None = None
    if identity.api_keys_enabled:
        credentials = [(api_key_client_id(actor), API_KEY_LENGTH) for actor in actors_of_source(actors, API_KEYS)]
        api_key_bytes = xds_size.api_key_auth_route_bytes(
            credentials, identity.api_keys.headers, ACTOR_HEADER, True
        ) + xds_size.authorization_route_bytes(api_key_authorization(suspended))
    return xds_size.estimate_message(
        gateway.namespace,
        BUDGET_POLICY_NAME,
        rules.specs(),
        xds_size.route_layout(routes, providers),
        jwt_authorization(identity.jwt_sources, actors, suspended, identity.kubernetes.issuer),
        api_key_bytes,
        jwt_listener=bool(identity.jwt_sources),
    )


def stack_rules(budgets: BudgetsConfig, policy: BudgetPolicySettings) -> BudgetRules:
    """The budgets' rate-limit rules in the policy's slots (raises ConfigError for budgets that do not fit)."""
    return compile_budget_rules(budgets, policy.exclusion_slots, policy.limit_slots, policy.class_slots)


def settings_message_estimate(settings: StackSettings) -> xds_size.MessageEstimate:
    """The extension-server message of settings already parsed (a deployed stack's file), its rules compiled the
    way `validate_stack` compiles them."""
    return stack_message_estimate(ValidatedStack(settings, stack_rules(settings.budgets, settings.budget_policy)))


def stack_message_estimate(stack: ValidatedStack) -> xds_size.MessageEstimate:
    """The extension-server message of a validated stack, as its validation computed it (`message_estimate`)."""
    settings = stack.settings
    return message_estimate(
        stack.rules,
        settings.routes,
        len(settings.providers),
        settings.gateway,
        settings.identity,
        settings.actors,
        settings.suspended,
    )


def message_size_problems(estimate: xds_size.MessageEstimate, platform: PlatformSettings) -> list[Problem]:
    """The extension-server message must fit the configured cap with headroom (docs/message-size.md).

    Envoy Gateway copies every budget rule into each model route and sends all routes to Agent Router in
    one message; over the cap, the hook fails and no later change reaches Envoy (core.xds_size).
    """
    limit = platform.extension_message_bytes
    needed = estimate.required_limit()
    if needed <= limit:
        return []
    suggestion = f"{-(-needed // MIB)}Mi"
    return [
        Problem(
            "platform.extensionMessageLimit",
            (
                f"is {platform.extension_message_limit} ({limit:,} bytes), but the message Envoy Gateway sends Agent "
                f"Router for these budgets and routes is {estimate.total_bytes:,} bytes ({estimate.describe()}) and "
                f"needs {xds_size.HEADROOM:g}x that, {needed:,} bytes. Raise platform.extensionMessageLimit to "
                f"{suggestion} or more, or carry fewer bytes per route: fewer model names in routes (each one "
                f"carries every rule), fewer limits per budget (each is one more rule), fewer budget classes or "
                "class members, fewer suspended actors, service accounts or API keys "
                "(docs/message-size.md)"
            ),
        )
    ]


def route_cost_problems(routes: Sequence[Route], prices: Mapping[str, ModelPrices]) -> list[Problem]:
    """Each route's cost expression can be built (a missing price is reported by the cross-key check)."""
    problems: list[Problem] = []
    for index, route in enumerate(routes):
        billed = route.billed_models
        if any(model not in prices for model in billed):
            continue
        try:
            route_cost_entry(billed, {model: prices[model].to_price() for model in billed})
        except MoneyError as error:
            problems.append(Problem(f"routes[{index}].models", str(error)))
    return problems


def validate_stack(raw: Mapping[str, Any], state: SecretState | SecretInputs) -> ValidatedStack:
    """Validate everything; raise ConfigError listing every problem, or return what the components need.

    `state` says which secrets are there: for the program, whether each secret config key is set and set as a
    secret; for an `AgentBudgets` component, which secret inputs it was given.
    """
    findings, view = _check_settings(raw)

    budgets, budget_policy = view.typed("budgets"), view.typed("budgetPolicy")
    rules: BudgetRules | None = None
    if budgets is not None and budget_policy is not None:
        try:
            rules = stack_rules(budgets, budget_policy)
        except ConfigError as error:
            findings.problems.extend(error.problems)
    routes, prices = view.typed("routes"), view.typed("prices")
    if budgets is not None and budgets.uses_usd and routes is not None and prices is not None:
        findings.problems.extend(route_cost_problems(routes, prices))

    routes, providers, platform, gateway, identity, actors, suspended = (
        view.typed(key) for key in ("routes", "providers", "platform", "gateway", "identity", "actors", "suspended")
    )
    if rules is not None and None not in (routes, providers, platform, gateway, identity, actors, suspended):
        estimate = message_estimate(rules, routes, len(providers), gateway, identity, actors, suspended)
        findings.problems.extend(message_size_problems(estimate, platform))

    if view.typed("providers") is not None and view.typed("redis") is not None:
        findings.problems.extend(_secret_problems(needed_secrets(view), state))

    if findings.problems:
        raise ConfigError(findings.problems)
    # Every field and cross-key check passed, so the model validated and the rules compiled.
    settings = findings.settings
    assert settings is not None and rules is not None
    # Substrate's own constraints are a backstop behind the field checks: they run on settings known good.
    egress = egress_settings(settings) if manages_egress_policies(settings) else None
    problems = egress_problems(egress)
    if problems:
        raise ConfigError(problems)
    return ValidatedStack(settings, rules, tuple(findings.warnings), egress)


__all__ = [
    "ConfigError",
    "NeededSecret",
    "Problem",
    "SecretInputs",
    "SecretState",
    "ValidatedStack",
    "egress_problems",
    "egress_settings",
    "manages_egress_policies",
    "message_estimate",
    "message_size_problems",
    "needed_secrets",
    "parse_settings",
    "validate_stack",
]

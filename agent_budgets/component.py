"""`AgentBudgets`: everything agent-budgets builds, as one Pulumi component any program can add.

Its arguments are the sections of the `agent-budgets:*` stack configuration, in the stack file's shape (the
values camelCase as in `Pulumi.<stack>.yaml`, docs/configuration.md), plus the secrets as separate inputs. The
whole configuration is checked by `core.validation` before anything is registered, exactly as for the program:
every problem in one report, and nothing created when there is one.

This module has no `from __future__ import annotations` on purpose: Pulumi infers the component package's schema
from these annotations with `inspect.get_annotations` and no `eval_str` (pulumi/provider/experimental/analyzer.py,
`Analyzer.analyze_component` and `analyze_type`, pulumi 3.272.0), so they must be real types, not strings.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Required, TypedDict

import pulumi

from components.stack import Placement, StackSecrets, build_stack
from core.kubeconfig import is_contents as kubeconfig_is_contents
from core.problems import ConfigError, Problem
from core.settings import StackSettings
from core.validation import SecretInputs, SecretState, ValidatedStack, manages_egress_policies, validate_stack

TYPE_TOKEN = "agent-budgets:index:AgentBudgets"


class AgentBudgetsArgs(TypedDict, total=False):
    """Each section of a stack file's `agent-budgets:*` configuration, in its shape; the secrets as separate inputs."""

    actors: list[str]
    """`actors`: every actor that may call the model gateway (`<atespace>/<name>`, `serviceaccount:`, `apikey:`)."""
    allow_no_actors: bool
    """`allowNoActors`: accept an empty `actors` while egress policies are enabled."""
    budgets: Required[dict[str, Any]]
    """`budgets`: the default budget, the classes and the pools (required)."""
    prices: dict[str, Any]
    """`prices`: USD per 1,000,000 tokens of each billed model, for limits in `usd`."""
    suspended: list[str]
    """`suspended`: actors refused at once (403), their counters kept."""
    identity: dict[str, Any]
    """`identity`: the identity sources the gateway accepts (substrate, kubernetes, apiKeys)."""
    kubernetes: dict[str, Any]
    """`kubernetes`: the target cluster's kube context (and a kubeconfig path; pass contents as `kubeconfig`)."""
    gateway: dict[str, Any]
    """`gateway`: the model gateway (namespace, port, size)."""
    providers: list[dict[str, Any]]
    """`providers`: the model providers behind the gateway (each remote one needs `providerApiKeys.<name>`)."""
    routes: list[dict[str, Any]]
    """`routes`: the model routes, one AIGatewayRoute each."""
    mock_model: dict[str, Any]
    """`mockModel`: the in-cluster mock model."""
    substrate: dict[str, Any]
    """`substrate`: Agent Substrate's issuer, trust and egress policies (`egress.enabled: false` in a package)."""
    budget_policy: dict[str, Any]
    """`budgetPolicy`: the layout of the budget policy (slots kept free for later classes and limits)."""
    rate_limit: dict[str, Any]
    """`rateLimit`: the rate-limit service (fail-open or fail-closed, timeout, replicas)."""
    platform: dict[str, Any]
    """`platform`: the Helm releases of Envoy Gateway and Agent Router, or `install: false`."""
    redis: dict[str, Any]
    """`redis`: the rate-limit store, in-cluster or external."""
    monitoring: dict[str, Any]
    """`monitoring`: per-actor gateway metrics, budget alerts and the Grafana dashboard."""
    kubeconfig: pulumi.Input[str]
    """The kubeconfig of the target cluster, contents or a path; kept a secret. Instead of `kubernetes.kubeconfig`."""
    provider_api_keys: dict[str, pulumi.Input[str]]
    """Each remote provider's API key by its name in `providers`; kept secrets."""
    redis_password: pulumi.Input[str]
    """The external Redis's password (`redis.mode: external`); kept a secret."""
    redis_sentinel_password: pulumi.Input[str]
    """The Redis Sentinels' password, when `redis.sentinelPasswordConfig` is set; kept a secret."""


SECRET_FIELDS = ("kubeconfig", "provider_api_keys", "redis_password", "redis_sentinel_password")
# Each configuration section's argument, by the section's key in a stack file (its pydantic alias).
SECTION_FIELDS = {field.alias or name: name for name, field in StackSettings.model_fields.items()}

EGRESS_REFUSAL = (
    "Substrate egress policies are managed by a Pulumi dynamic provider, which cannot be loaded by a program that "
    "uses AgentBudgets as a package (pulumi/pulumi#5455). Set substrate.egress.enabled to false and create each "
    "actor's egress policy with `kubectl ate` (docs/egress-policies.md), or use AgentBudgets from a Python program "
    "that installs agent-budgets (docs/use-from-your-program.md)"
)


class RemoteModeError(pulumi.InputPropertyError):
    """An input the component cannot honour when it runs as a package for another language; its text names the
    input and what to do instead (the SDK reports a constructor's exception by its text)."""

    def __init__(self, property_path: str, reason: str) -> None:
        super().__init__(property_path, reason)
        self.args = (f"{property_path}: {reason}",)


@dataclass(frozen=True)
class StackProgram:
    """How the agent-budgets Pulumi program itself builds its one `AgentBudgets` (components.program).

    `raw` is the stack's whole `agent-budgets:*` configuration, so unknown keys and misplaced secrets are reported
    with the rest; `secret_state` says whether each secret config key is set, and set as a secret. The program
    registered every component at the stack root before `AgentBudgets`: each gets an alias there.
    """

    raw: Mapping[str, Any]
    secret_state: SecretState


_hosted_as_package = False


def host_as_package() -> None:
    """Mark this process as the component package's plugin (plugin/__main__.py): the consumer is another
    language's program, or a Python one without agent-budgets installed, so no dynamic provider can load."""
    global _hosted_as_package
    _hosted_as_package = True


class AgentBudgets(pulumi.ComponentResource):
    """A token budget for every AI agent: the gateway, routes, identities and budgets of an agent-budgets stack."""

    gateway_url: pulumi.Output[str | None]
    """The URL agents call through the gateway (absent without a JWT identity source)."""
    actors: pulumi.Output[int]
    """How many actors have a budget."""
    budget_rules: pulumi.Output[list[dict[str, Any]]]
    """One entry per limit: its budget, unit, amount, window and rule index."""
    worst_case: pulumi.Output[list[dict[str, Any]]]
    """One entry per tokens or usd limit: the most an actor can have been charged by a window's end."""
    suspended: pulumi.Output[list[str]]
    """The suspended actors."""
    routes: pulumi.Output[dict[str, list[str]]]
    """Each route's model names."""
    redis_mode: pulumi.Output[str]
    """Where the counters live: in-cluster or external."""
    fail_closed: pulumi.Output[bool]
    """Whether calls are refused when the rate-limit service cannot answer."""
    identity_sources: pulumi.Output[list[str]]
    """The identity sources the gateway accepts."""
    api_key_gateway_url: pulumi.Output[str | None]
    """The URL of the API-key listener (with the apiKeys identity source)."""
    api_keys: pulumi.Output[dict[str, str] | None]
    """Each API-key actor's key (a secret)."""
    envoy_gateway_values: pulumi.Output[dict[str, Any] | None]
    """The Envoy Gateway Helm values, for whoever installs it when `platform.install` is false."""
    agent_router_values: pulumi.Output[dict[str, Any] | None]
    """The Agent Router Helm values, for whoever installs it when `platform.install` is false."""

    def __init__(
        self,
        name: str,
        args: AgentBudgetsArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        program: StackProgram | None = None,
    ) -> None:
        validated, secrets = _validated(args, program)
        for warning in validated.warnings:
            pulumi.log.warn(warning.render())
        super().__init__(TYPE_TOKEN, name, None, opts)
        placement = Placement(parent=self, aliases_from_root=program is not None)
        outputs = build_stack(validated.settings, validated.rules, secrets, validated.egress, placement)
        self.stack_outputs: dict[str, Any] = outputs
        self.gateway_url = _output(outputs, "gatewayUrl")
        self.actors = _output(outputs, "actors")
        self.budget_rules = _output(outputs, "budgetRules")
        self.worst_case = _output(outputs, "worstCase")
        self.suspended = _output(outputs, "suspended")
        self.routes = _output(outputs, "routes")
        self.redis_mode = _output(outputs, "redisMode")
        self.fail_closed = _output(outputs, "failClosed")
        self.identity_sources = _output(outputs, "identitySources")
        self.api_key_gateway_url = _output(outputs, "apiKeyGatewayUrl")
        self.api_keys = _output(outputs, "apiKeys")
        self.envoy_gateway_values = _output(outputs, "envoyGatewayValues")
        self.agent_router_values = _output(outputs, "agentRouterValues")
        self.register_outputs(outputs)


def _output(outputs: Mapping[str, Any], key: str) -> Any:
    """A stack output as the component's output (None, which the schema leaves out, when the stack has none)."""
    return pulumi.Output.from_input(outputs[key]) if key in outputs else None


def _validated(args: AgentBudgetsArgs, program: StackProgram | None) -> tuple[ValidatedStack, StackSecrets]:
    """The checked configuration and the secrets; raises before anything is registered when either is wrong."""
    raw: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, field in SECTION_FIELDS.items():
        value = args.get(field)  # type: ignore[misc]
        if value is None:
            continue
        if isinstance(value, pulumi.Output):
            problems.append(Problem(key, "is an Output: the configuration must be known when AgentBudgets is built"))
            continue
        raw[key] = value
    kubeconfig = args.get("kubeconfig")
    deferred_kubeconfig: pulumi.Input[str] | None = None
    if kubeconfig is not None:
        kubernetes = raw.get("kubernetes")
        if isinstance(kubernetes, Mapping) and kubernetes.get("kubeconfig") is not None:
            problems.append(Problem("kubeconfig", "is set twice: pass it either here or as kubernetes.kubeconfig"))
        elif isinstance(kubeconfig, str):
            # Known now: checked and used exactly as kubernetes.kubeconfig (contents are kept a secret).
            raw["kubernetes"] = {**(kubernetes if isinstance(kubernetes, Mapping) else {}), "kubeconfig": kubeconfig}
        else:
            deferred_kubeconfig = kubeconfig
    provider_api_keys = dict(args.get("provider_api_keys") or {})
    secrets = StackSecrets(
        provider_api_keys=provider_api_keys,
        redis_password=args.get("redis_password"),
        redis_sentinel_password=args.get("redis_sentinel_password"),
        kubeconfig=deferred_kubeconfig,
    )
    provided = {f"providerApiKeys.{name}" for name in provider_api_keys}
    provided.update(
        path
        for path, value in (
            ("redisPassword", secrets.redis_password),
            ("redisSentinelPassword", secrets.redis_sentinel_password),
        )
        if value is not None
    )
    state: SecretState | SecretInputs = program.secret_state if program else SecretInputs(frozenset(provided))
    try:
        validated = validate_stack(program.raw if program else raw, state)
    except ConfigError as error:
        raise pulumi.RunError(str(ConfigError([*error.problems, *problems]))) from None
    if problems:
        raise pulumi.RunError(str(ConfigError(problems)))
    _check_deferred_kubeconfig(validated.settings, deferred_kubeconfig)
    if _hosted_as_package:
        _check_package_mode(validated.settings, args.get("kubernetes"))
    return validated, secrets


def _check_deferred_kubeconfig(settings: StackSettings, kubeconfig: pulumi.Input[str] | None) -> None:
    """The egress policies hand the kubeconfig to `kubectl ate`, and their shards are laid out from it when the
    component is built: an Output cannot serve."""
    if kubeconfig is not None and manages_egress_policies(settings) and not _hosted_as_package:
        raise pulumi.RunError(
            str(
                ConfigError(
                    [
                        Problem(
                            "kubeconfig",
                            "is an Output, but the egress policies need the kubeconfig when AgentBudgets is built: "
                            "pass a plain string (AgentBudgets keeps it a secret) or set substrate.egress.enabled "
                            "to false",
                        )
                    ]
                )
            )
        )


def _check_package_mode(settings: StackSettings, kubernetes: Any) -> None:
    """What a program in another language cannot have: the egress policies' dynamic provider, and kubeconfig
    contents among the plain inputs (the engine stores a package component's inputs in the consumer's state)."""
    if manages_egress_policies(settings):
        raise RemoteModeError("substrate.egress.enabled", f"is true (the default). {EGRESS_REFUSAL}")
    kubeconfig = kubernetes.get("kubeconfig") if isinstance(kubernetes, Mapping) else None
    if isinstance(kubeconfig, str) and kubeconfig_is_contents(kubeconfig):
        raise RemoteModeError(
            "kubernetes.kubeconfig",
            "holds kubeconfig contents, which would be stored in plain text with the component's inputs: pass them "
            "as the secret input `kubeconfig` instead",
        )

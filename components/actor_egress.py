"""One Substrate egress policy per configured actor, grouped in a component.

Each actor ``<atespace>/<name>`` gets a child ``ActorEgressPolicy`` named
``egress-<atespace>.<name>``: the name depends only on the actor, so adding or removing one actor
adds or removes exactly its own policy and leaves every other one untouched. The separator is a
dot, which no DNS label (atespace or actor name) can hold, so distinct actors never share a name
(``team-a/bot`` and ``team/a-bot`` would both be ``egress-team-a-bot`` with a dash).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components import egress
from components.egress import EgressConfigError, PolicyInputs, Problem
from components.egress_provider import ActorEgressPolicy, ActorEgressPolicyArgs

COMPONENT_TYPE = "agent-budgets:substrate:ActorEgressPolicies"


@dataclass(frozen=True, kw_only=True)
class EgressPolicySettings:
    """Plain, already-validated configuration for every actor's egress policy."""

    actors: list[str]
    gateway_hostname: str = egress.GATEWAY_HOSTNAME
    gateway_port: int = egress.DEFAULT_GATEWAY_PORT
    audiences: list[str] = field(default_factory=lambda: list(egress.DEFAULT_AUDIENCES))
    expiration_seconds: int = egress.DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: list[str] = field(default_factory=list)
    provider_hosts: list[str] = field(default_factory=list)
    kube_context: str
    kubectl: str = egress.DEFAULT_KUBECTL
    substrate_ref: str
    timeout_seconds: int = egress.DEFAULT_TIMEOUT_SECONDS

    def policy_inputs(self, actor_ref: str) -> PolicyInputs:
        atespace, name = actor_ref.split("/", 1) if "/" in actor_ref else ("", actor_ref)
        return PolicyInputs(
            atespace=atespace,
            actor=name,
            kube_context=self.kube_context,
            substrate_ref=self.substrate_ref,
            gateway_hostname=self.gateway_hostname,
            gateway_port=self.gateway_port,
            audiences=tuple(self.audiences),
            expiration_seconds=self.expiration_seconds,
            extra_hostnames=tuple(self.extra_hostnames),
            provider_hosts=tuple(self.provider_hosts),
            kubectl=self.kubectl,
            timeout_seconds=self.timeout_seconds,
        )


def policy_resource_name(actor_ref: str) -> str:
    """``agents/actor-a`` -> ``egress-agents.actor-a`` (stable: it depends on the actor only, and
    one-to-one: the dot cannot occur in an atespace or actor name)."""
    atespace, name = egress.parse_actor_ref(actor_ref)
    return f"egress-{atespace}.{name}"


def settings_problems(settings: EgressPolicySettings) -> list[Problem]:
    """Every problem in ``settings``, reported once each (the shared part is checked once)."""
    problems: list[Problem] = []
    valid_refs: list[str] = []
    for ref in settings.actors:
        ref_problems = egress.actor_ref_problems(ref)
        problems += ref_problems
        if ref_problems:
            continue
        if ref in valid_refs:
            problems.append(
                Problem(
                    "actors",
                    f"actor {ref!r} is listed twice (both would be the Pulumi resource "
                    f"{policy_resource_name(ref)!r}); list each actor once",
                )
            )
            continue
        valid_refs.append(ref)
    # Everything but the actor names is the same for every actor: check it once.
    if valid_refs:
        sample = settings.policy_inputs(valid_refs[0])
        problems += [p for p in egress.input_problems(sample) if p.field not in ("atespace", "actor")]
    return problems


class ActorEgressPolicies(pulumi.ComponentResource):
    """``agent-budgets:substrate:ActorEgressPolicies``: an ``ActorEgressPolicy`` per actor.

    ``policies`` maps each actor ref (``"<atespace>/<name>"``) to its policy resource. A bad
    configuration raises :class:`~components.egress.EgressConfigError` before any resource is
    registered.
    """

    policies: dict[str, ActorEgressPolicy]

    def __init__(
        self,
        name: str,
        settings: EgressPolicySettings,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        problems = settings_problems(settings)
        if problems:
            raise EgressConfigError(problems)
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self.policies = {}
        for ref in settings.actors:
            inputs = settings.policy_inputs(ref)
            self.policies[ref] = ActorEgressPolicy(
                policy_resource_name(ref),
                ActorEgressPolicyArgs(**inputs.to_props()),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"policyIds": {ref: policy.id for ref, policy in self.policies.items()}})

"""One Substrate egress policy per configured actor, grouped in a component.

Each actor ``<atespace>/<name>`` gets a child ``ActorEgressPolicy`` named
``egress-<atespace>.<name>``: the name depends only on the actor, so adding or removing one actor
adds or removes exactly its own policy and leaves every other one untouched. The separator is a
dot, which no DNS label (atespace or actor name) can hold, so distinct actors never share a name
(``team-a/bot`` and ``team/a-bot`` would both be ``egress-team-a-bot`` with a dash).
"""

from __future__ import annotations

import pulumi

from components.egress_provider import ActorEgressPolicy, ActorEgressPolicyArgs
from core.egress import EgressConfigError, EgressPolicySettings, policy_resource_name, settings_problems

COMPONENT_TYPE = "agent-budgets:substrate:ActorEgressPolicies"


class ActorEgressPolicies(pulumi.ComponentResource):
    """``agent-budgets:substrate:ActorEgressPolicies``: an ``ActorEgressPolicy`` per actor.

    ``policies`` maps each actor ref (``"<atespace>/<name>"``) to its policy resource. A bad
    configuration raises :class:`~core.egress.EgressConfigError` before any resource is
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

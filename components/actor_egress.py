"""The Substrate egress policies of every configured actor, in stable shards, grouped in a component.

Each actor ``<atespace>/<name>`` belongs to one of 64 shards by a hash of its name
(:func:`core.egress.shard_of`); each shard that holds an actor is one ``EgressPolicyShard`` named
``egress-shard-<NN>``. The shard depends on the actor's name alone, so adding or removing an actor
changes exactly one shard, by exactly that actor, and no actor ever moves between shards. Why shards
rather than one resource per actor: docs/egress-policies.md ("Why shards").

Stacks created before the shards hold one ``egress-<atespace>.<name>`` resource per actor. The program no
longer registers those, so the first ``up`` of this version deletes them, after the shards have been
created and have adopted the existing policies; ``ActorEgressPolicyProvider.delete`` then leaves every
adopted policy in place (see components/egress_provider.py).
"""

from __future__ import annotations

import pulumi

from components.egress_provider import EgressPolicyShard
from core.egress import EgressConfigError, EgressPolicySettings, settings_problems, shard_resource_name

COMPONENT_TYPE = "agent-budgets:substrate:ActorEgressPolicies"


class ActorEgressPolicies(pulumi.ComponentResource):
    """``agent-budgets:substrate:ActorEgressPolicies``: one ``EgressPolicyShard`` per non-empty shard.

    ``shards`` maps each shard index to its resource, ``shard_of_actor`` each actor ref
    (``"<atespace>/<name>"``) to its shard index. A bad configuration raises
    :class:`~core.egress.EgressConfigError` before any resource is registered.
    """

    shards: dict[int, EgressPolicyShard]
    shard_of_actor: dict[str, int]

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
        self.shards = {}
        self.shard_of_actor = {}
        for shard in settings.shards():
            self.shards[shard.shard] = EgressPolicyShard(
                shard_resource_name(shard.shard), shard, opts=pulumi.ResourceOptions(parent=self)
            )
            self.shard_of_actor.update(dict.fromkeys(shard.actors, shard.shard))
        self.register_outputs(
            {
                "shards": {shard_resource_name(index): resource.id for index, resource in self.shards.items()},
                "actors": len(self.shard_of_actor),
            }
        )

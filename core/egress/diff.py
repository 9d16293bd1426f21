"""What a shard change does: its diff against the previous outputs, and the plan of calls an update makes
(create, write, keep or delete, per actor)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.egress.cluster import target_change
from core.egress.shards import ABSENT, SHARD_SETTING_KEYS, Recorded, ShardInputs, _setting


@dataclass(frozen=True)
class DiffDecision:
    changes: bool
    replaces: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    actors: list[str] = field(default_factory=list)
    """The actors whose policy a deployment would create, write or delete."""


def live_fingerprints(outputs: Mapping[str, Any]) -> dict[str, str]:
    """``actors`` of a shard's outputs: each actor's live fingerprint (or :data:`ABSENT`)."""
    actors = outputs.get("actors")
    if not isinstance(actors, Mapping):
        return {}
    return {str(ref): str(value) for ref, value in actors.items()}


def recorded_policies(outputs: Mapping[str, Any]) -> dict[str, Recorded]:
    """``policies`` of a shard's outputs: the uid and version last seen for each actor's policy."""
    policies = outputs.get("policies")
    recorded: dict[str, Recorded] = {}
    if not isinstance(policies, Mapping):
        return recorded
    for ref, entry in policies.items():
        if isinstance(entry, Mapping) and entry.get("uid"):
            recorded[str(ref)] = Recorded.of(entry["uid"], entry.get("version"))
    return recorded


def shard_outputs(
    shard: ShardInputs, live: Mapping[str, str], records: Mapping[str, Recorded], cluster: str
) -> dict[str, Any]:
    """A shard's outputs, the format :func:`live_fingerprints` and :func:`recorded_policies` read: the
    inputs, the cluster identity, each actor's live fingerprint (or :data:`ABSENT`), and its recorded uid
    and version."""
    return {
        **shard.to_props(),
        "cluster": cluster,
        "actors": {ref: live.get(ref, ABSENT) for ref in sorted(live)},
        "policies": {ref: {"uid": r.uid, "version": r.version} for ref, r in sorted(records.items())},
    }


def shard_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> DiffDecision:
    """Compare a shard's previous outputs with its new inputs: a new target replaces (old policies
    deleted first); any other setting, or an actor added, removed or out of step, is an update."""
    old, new = ShardInputs.from_props(olds), ShardInputs.from_props(news)
    # The checked inputs carry the identity the provider resolved (a kubeconfig file's server); else derive it.
    cluster = target_change(olds, {**news, "cluster": news.get("cluster", new.cluster)})
    replaces = ["kube_context"] if str(olds.get("kube_context") or "") != new.kube_context else []
    replaces += ["cluster"] if cluster == "replace" else []
    reasons = [*replaces, *(["cluster"] if cluster == "record" else [])]
    reasons += [k for k in SHARD_SETTING_KEYS if _setting(old, k) != _setting(new, k)]
    live, desired = live_fingerprints(olds), new.fingerprint()
    recorded = recorded_policies(olds)
    actors = sorted(
        {ref for ref in new.actors if live.get(ref) != desired or ref not in recorded}
        | {ref for ref in live if ref not in new.actors}
    )
    if actors:
        reasons.append(f"actors ({len(actors)})")
    return DiffDecision(
        changes=bool(reasons),
        replaces=replaces,
        reasons=reasons,
        delete_before_replace=bool(replaces),
        actors=actors,
    )


@dataclass(frozen=True)
class ShardPlan:
    """What an update of one shard does for each actor (pure: no call is made here)."""

    create: list[str]
    """No record of a policy: create it (on AlreadyExists, adopt the existing one)."""
    write: dict[str, Recorded]
    """Recorded, but out of step: update with the recorded preconditions."""
    keep: dict[str, Recorded]
    """Live rules already equal the wanted ones: no call."""
    delete: dict[str, Recorded]
    """No longer in the shard: delete, guarded by the recorded uid and version."""

    @property
    def calls(self) -> int:
        """Processes the plan needs when nothing goes wrong (one per created, written or deleted actor)."""
        return len(self.create) + len(self.write) + len(self.delete)


def plan_shard(outputs: Mapping[str, Any], new: ShardInputs) -> ShardPlan:
    """Plan an update from the shard's previous outputs to ``new`` (see :class:`ShardPlan`)."""
    live, recorded, desired = live_fingerprints(outputs), recorded_policies(outputs), new.fingerprint()
    create: list[str] = []
    write: dict[str, Recorded] = {}
    keep: dict[str, Recorded] = {}
    for ref in new.actors:
        record = recorded.get(ref)
        if record is None or live.get(ref) in (None, ABSENT):
            create.append(ref)
        elif live.get(ref) == desired:
            keep[ref] = record
        else:
            write[ref] = record
    delete = {ref: record for ref, record in sorted(recorded.items()) if ref not in new.actors}
    return ShardPlan(create=create, write=write, keep=keep, delete=delete)

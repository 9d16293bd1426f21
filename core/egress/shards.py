"""Many actors' policies in one Pulumi resource: the 64 stable shards, a shard's inputs and checks, and the
settings shared by every actor's policy."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from core.egress.cluster import cluster_identity
from core.egress.constraints import actor_ref_problems, input_problems, parse_actor_ref
from core.egress.document import (
    DEFAULT_AUDIENCES,
    DEFAULT_EXPIRATION_SECONDS,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_KUBECTL,
    DEFAULT_TIMEOUT_SECONDS,
    GATEWAY_HOSTNAME,
    PolicyInputs,
    _is_int,
    as_int,
)
from core.egress.normalize import desired_rules, rules_fingerprint
from core.egress.problems import Problem

SHARD_COUNT = 64
"""Fixed for good: an actor's shard depends on its name alone, so adding or removing an actor touches one
shard and no actor ever moves between shards (a move would hand a live policy from one resource to
another within a single `pulumi up`, in an order Pulumi does not promise)."""
DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 32
ABSENT = "absent"
"""The live fingerprint of an actor whose policy a refresh did not find."""


def shard_of(actor_ref: str) -> int:
    """The shard (0 to ``SHARD_COUNT - 1``) of ``<atespace>/<name>``: a hash of the name, so stable."""
    digest = hashlib.sha256(actor_ref.encode()).digest()
    return int.from_bytes(digest[:8], "big") % SHARD_COUNT


def shard_resource_name(index: int) -> str:
    """``egress-shard-07``: the Pulumi name of shard 7 (stable: it depends on the index only)."""
    return f"egress-shard-{index:02d}"


def policy_resource_name(actor_ref: str) -> str:
    """``agents/actor-a`` -> ``egress-agents.actor-a``: the name versions before the shards gave each
    actor's own resource (``ActorEgressPolicy``); kept to describe the upgrade of existing stacks."""
    atespace, name = parse_actor_ref(actor_ref)
    return f"egress-{atespace}.{name}"


@dataclass(frozen=True)
class Recorded:
    """What a shard recorded about one actor's live policy: the preconditions of its next write."""

    uid: str
    version: str

    @classmethod
    def of(cls, uid: Any, version: Any) -> Recorded:
        """The record of a uid and version as any source gives them (state, ``kubectl ate`` output, legacy
        state): a version read back as a float (``4.0``) is the same record as ``"4"``."""
        return cls(str(uid), "" if version is None else str(as_int(version)))


@dataclass(frozen=True)
class ShardInputs:
    """Everything one ``EgressPolicyShard`` needs, as plain values (the dynamic resource's inputs).

    Every actor of a shard gets the same rules; only the actor differs. ``cluster`` is derived from
    ``kubeconfig`` and ``kube_context`` (:func:`cluster_identity`) when the props are written.
    """

    shard: int
    actors: tuple[str, ...]
    kube_context: str
    substrate_ref: str
    kubeconfig: str | None = None
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: tuple[str, ...] = ()
    provider_hosts: tuple[str, ...] = ()
    kubectl: str = DEFAULT_KUBECTL
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> ShardInputs:
        """Read resource properties (numbers may arrive as floats; ``actors`` as a map or a list)."""
        common = PolicyInputs.from_props(props)
        actors = props.get("actors")
        refs = sorted(actors) if isinstance(actors, Mapping) else sorted(str(a) for a in actors or [])
        kubeconfig = props.get("kubeconfig")
        shard = props.get("shard")
        concurrency = props.get("concurrency")
        return cls(
            shard=as_int(shard) if shard is not None else -1,
            actors=tuple(refs),
            kubeconfig=kubeconfig if isinstance(kubeconfig, str) and kubeconfig else None,
            **{key: getattr(common, key) for key in _POLICY_SETTINGS},
            concurrency=DEFAULT_CONCURRENCY if concurrency is None else as_int(concurrency),
        )

    def policy_inputs(self, actor_ref: str) -> PolicyInputs:
        """One actor's inputs: the actor, and every shared setting :class:`PolicyInputs` has, copied by name."""
        atespace, name = actor_ref.split("/", 1) if "/" in actor_ref else ("", actor_ref)
        return PolicyInputs(atespace=atespace, actor=name, **{key: getattr(self, key) for key in _POLICY_SETTINGS})

    def desired_rules(self) -> list[Any]:
        """The normalised rules every actor of the shard gets."""
        return desired_rules(self.policy_inputs("x/x"))

    def fingerprint(self) -> str:
        return rules_fingerprint(self.desired_rules())

    @property
    def cluster(self) -> str:
        return cluster_identity(self.kubeconfig, self.kube_context)

    def to_props(self) -> dict[str, Any]:
        """The resource properties: settings, ``cluster``, the rules, and ``actors`` as a map from each
        actor to the fingerprint of the rules it asks for (how a preview names the actors it changes)."""
        fingerprint = self.fingerprint()
        settings = {key: _setting(self, key) for key in SHARD_SETTING_KEYS}
        return {
            "shard": self.shard,
            "actors": {ref: fingerprint for ref in self.actors},
            "kube_context": self.kube_context,
            "cluster": self.cluster,
            **settings,
            "rules": self.desired_rules(),
        }


_POLICY_SETTINGS = tuple(f.name for f in fields(PolicyInputs) if f.name not in ("atespace", "actor"))
"""The settings every actor's :class:`PolicyInputs` takes from its shard (by field name)."""


def shard_problems(shard: ShardInputs) -> list[Problem]:
    """All client-side checks of one shard, run before any ``kubectl ate`` call."""
    problems: list[Problem] = []
    for ref in shard.actors:
        problems += actor_ref_problems(ref)
    return problems + shared_problems(shard)


def shared_problems(shard: ShardInputs) -> list[Problem]:
    """The checks of everything a shard's actors share (all but their names): the same for every actor."""
    sample = shard.policy_inputs(shard.actors[0] if shard.actors else "agents/x")
    problems = [p for p in input_problems(sample) if p.field not in ("atespace", "actor")]
    if not _is_int(shard.concurrency) or not 1 <= shard.concurrency <= MAX_CONCURRENCY:
        problems.append(
            Problem(
                "concurrency",
                f"concurrency {shard.concurrency!r} must be a whole number from 1 to {MAX_CONCURRENCY}",
            )
        )
    return problems


SHARD_TARGET_KEYS = ("kube_context", "cluster")
"""Inputs that say which cluster holds the policies: a change is a replacement that deletes the old
policies first (with the old kubeconfig and context), so none is left behind on the old cluster. A new
context may name the same cluster, so creating first would adopt the policies and the delete would
then remove them."""
SHARD_SETTING_KEYS = tuple(f.name for f in fields(ShardInputs) if f.name not in ("shard", "actors", *SHARD_TARGET_KEYS))
"""Inputs that change no target: every field of :class:`ShardInputs` but the shard, its actors and the
target, so a new field is compared by :func:`shard_diff` without being listed anywhere. A change is an
update: the rule settings rewrite the policies whose fingerprint moves; the others (kubectl path, timeout,
Substrate ref, concurrency, kubeconfig credentials) write nothing but must reach the outputs, which are all
that refresh and delete get."""


def _setting(inputs: ShardInputs, key: str) -> Any:
    value = getattr(inputs, key)
    return list(value) if isinstance(value, tuple) else value


# ---------------------------------------------------------------------------------------------------------
# The settings shared by every actor's policy


@dataclass(frozen=True, kw_only=True)
class EgressPolicySettings:
    """Plain configuration for every actor's egress policy (lists are kept as tuples, so it never changes).

    Checked once per object: :func:`settings_problems` keeps its answer on the object, so the program's
    validation and the component that registers the shards share one check of the same settings.
    """

    actors: tuple[str, ...]
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: tuple[str, ...] = ()
    provider_hosts: tuple[str, ...] = ()
    kube_context: str
    kubeconfig: str | None = None
    kubectl: str = DEFAULT_KUBECTL
    substrate_ref: str
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        for key in _LIST_SETTINGS:
            object.__setattr__(self, key, tuple(getattr(self, key)))

    def shard_inputs(self, index: int, actors: Sequence[str]) -> ShardInputs:
        """One shard's inputs: its actors, and every setting :class:`ShardInputs` has, copied by name."""
        settings = {key: getattr(self, key) for key in _SHARD_SETTINGS}
        return ShardInputs(shard=index, actors=tuple(sorted(actors)), kubeconfig=self.kubeconfig or None, **settings)

    def shards(self) -> list[ShardInputs]:
        """One :class:`ShardInputs` per shard that holds at least one actor, by shard index."""
        members: dict[int, list[str]] = {}
        for ref in self.actors:
            members.setdefault(shard_of(ref), []).append(ref)
        return [self.shard_inputs(index, refs) for index, refs in sorted(members.items())]

    @functools.cached_property
    def problems(self) -> tuple[Problem, ...]:
        """Every problem in these settings, reported once each; found on first use, then kept.

        Linear in the actors: each is checked once, and a set finds the ones listed twice.
        """
        problems: list[Problem] = []
        valid: dict[str, None] = {}  # insertion-ordered set: the first valid actor is the sample below
        for ref in self.actors:
            ref_problems = actor_ref_problems(ref)
            problems += ref_problems
            if ref_problems:
                continue
            if ref in valid:
                problems.append(Problem("actors", f"actor {ref!r} is listed twice; list each actor once"))
                continue
            valid[ref] = None
        # Everything but the actor names is the same for every actor: check it once.
        first = next(iter(valid), None)
        if first is not None:
            problems += shared_problems(self.shard_inputs(shard_of(first), [first]))
        return tuple(problems)


_SHARD_SETTINGS = tuple(f.name for f in fields(ShardInputs) if f.name not in ("shard", "actors", "kubeconfig"))
"""The settings every shard's :class:`ShardInputs` takes from :class:`EgressPolicySettings` (by field name)."""
_LIST_SETTINGS = ("actors", "audiences", "extra_hostnames", "provider_hosts")
"""The settings given as lists, kept as tuples."""


def settings_problems(settings: EgressPolicySettings) -> list[Problem]:
    """Every problem in ``settings`` (see :attr:`EgressPolicySettings.problems`: checked once per object)."""
    return list(settings.problems)

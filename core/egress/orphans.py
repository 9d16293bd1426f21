"""Egress policies a stack does not own: which actors to look at, what ``kubectl ate`` printed, the report.

``kubectl ate`` cannot list egress policies: ``get egress-policy`` takes exactly one actor ("TODO(#1550):
accept several actors", agent-substrate/substrate ``cmd/kubectl-ate/internal/cmd/egress_policy.go`` @18d1c266)
and ateapi's Control service has Get/Create/Update/Delete for them but no List. What it can list is actors
(``get actors -a <atespace> -o json``, ``cmd/kubectl-ate/internal/cmd/actor.go`` @18d1c266, printed as a
``ListActorsResponse`` by ``printer/printer.go``). So the orphan command (``tools/egress_orphans.py``) lists the
actors of each atespace it checks, keeps those the stack does not declare, and reads each one's policy.

Pure: parsed command output in, plain data and text out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.egress.constraints import parse_actor_ref
from core.egress.normalize import rules_fingerprint
from core.egress.shards import Recorded


class OutputError(ValueError):
    """``kubectl ate`` printed something that is not what the pinned version prints."""


def atespaces_of(actors: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The atespaces to check: those of the stack's Substrate actors, and any named besides (sorted, once)."""
    return sorted({parse_actor_ref(ref)[0] for ref in actors} | {a.strip() for a in extra if a.strip()})


def parse_actor_list(text: str) -> list[str]:
    """The ``<atespace>/<name>`` of every actor in ``get actors -o json`` output: a protojson
    ``ListActorsResponse``, ``{}`` when there is none (protojson leaves an empty list out)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputError(f"not JSON ({exc}): {text[:200]!r}") from None
    actors = document.get("actors", []) if isinstance(document, Mapping) else None
    if not isinstance(actors, list):
        raise OutputError(f"not a list of actors: {text[:200]!r}")
    refs = []
    for actor in actors:
        metadata = actor.get("metadata") if isinstance(actor, Mapping) else None
        if not isinstance(metadata, Mapping) or not metadata.get("atespace") or not metadata.get("name"):
            raise OutputError(f"an actor without metadata.atespace and metadata.name: {json.dumps(actor)[:200]}")
        refs.append(f"{metadata['atespace']}/{metadata['name']}")
    return refs


def unowned(listed: Iterable[str], owned: Iterable[str]) -> list[str]:
    """The listed actors the stack does not own (sorted): their policies, if any, are no shard's."""
    return sorted(set(listed) - set(owned))


@dataclass(frozen=True)
class Orphan:
    """A policy found on an actor the stack does not own."""

    ref: str
    recorded: Recorded
    same_rules: bool
    """Whether its rules are the ones this stack writes (likely left by it) or others (likely someone else's)."""
    outcome: str = ""
    """What ``--delete`` did: ``deleted``, ``gone`` (deleted meanwhile) or ``left: <why>``; empty in a dry run."""

    @classmethod
    def of(cls, ref: str, policy: Mapping[str, Any], stack_fingerprint: str) -> Orphan:
        metadata = policy.get("metadata") if isinstance(policy.get("metadata"), Mapping) else {}
        same = rules_fingerprint(policy.get("rules") or []) == stack_fingerprint
        return cls(ref, Recorded.of(metadata.get("uid", ""), metadata.get("version")), same)


def render_report(
    stack: str, atespaces: Sequence[str], listed: int, checked: int, orphans: Sequence[Orphan], delete: bool
) -> str:
    """The command's report: what was checked, one line per policy found, and what to do next."""
    lines = [
        f"stack {stack}: {listed} actors in atespace{'s' if len(atespaces) != 1 else ''} {', '.join(atespaces)}; "
        f"{checked} of them not in the stack's actors, checked for an egress policy"
    ]
    if not orphans:
        lines.append("no egress policy the stack does not own")
        return "\n".join(lines) + "\n"
    lines.append(f"{len(orphans)} egress {'policy' if len(orphans) == 1 else 'policies'} the stack does not own:")
    width = max(len(o.ref) for o in orphans)
    for orphan in orphans:
        rules = "this stack's rules" if orphan.same_rules else "other rules"
        line = f"  {orphan.ref:<{width}}  uid {orphan.recorded.uid}  version {orphan.recorded.version}  {rules}"
        lines.append(line + (f"  {orphan.outcome}" if orphan.outcome else ""))
    if not delete:
        lines.append(
            "dry run: nothing deleted. Run again with --delete to delete each, guarded by the uid and version above"
        )
    return "\n".join(lines) + "\n"

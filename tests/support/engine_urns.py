"""The URNs the Pulumi engine gives the resources a program registers, and the old resource each one takes over.

Pulumi's mock monitor makes up URNs of its own (it keeps the root stack's type in its children's URNs), so this
module computes them as the engine does, from each registration's parent, type and name, and matches them to a
previous deployment's resources the way the engine's step generator does before it diffs (pulumi/pulumi
v3.259.0-14-g1b59498):

* `engine_urn`: `Deployment.generateURN` (pkg/resource/deploy/deployment.go): the parent's qualified type, then
  `$` and the type, unless the parent is the root stack; `resource.CreateURN` (sdk/go/common/resource/alias.go) for
  an alias's parent;
* `OldResourceMatcher.match`: `stepGenerator.getOldResource` with `generateAliases`, `collapseAliasToUrn` and
  `inheritedChildAlias` (pkg/resource/deploy/step_generator.go): the URN first, then the resource's own aliases,
  then one alias per alias its parent matched by (the parent's old URN as the parent, the parent's old name in
  place of a name prefix), each old resource claimed at most once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi.runtime.proto import alias_pb2

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
URN_PREFIX = "urn:pulumi:"


@dataclass(frozen=True)
class AliasSpec:
    """An alias as the SDK sends it to an engine that supports alias specs (pulumi/runtime/resource.py)."""

    urn: str = ""
    name: str = ""
    type: str = ""
    parent: str = ""
    no_parent: bool = False
    stack: str = ""
    project: str = ""

    @classmethod
    def from_proto(cls, alias: alias_pb2.Alias) -> AliasSpec:
        if alias.urn:
            return cls(urn=alias.urn)
        spec = alias.spec
        return cls(
            name=spec.name,
            type=spec.type,
            parent=spec.parentUrn,
            no_parent=spec.noParent,
            stack=spec.stack,
            project=spec.project,
        )


def qualified_type(urn: str) -> str:
    """The type part of a URN, parents' types included: `urn:pulumi:<stack>::<project>::<qualified type>::<name>`."""
    return urn.removeprefix(URN_PREFIX).split("::")[2]


def urn_name(urn: str) -> str:
    """The name part of a URN (everything after the type, which may itself hold `::`)."""
    return "::".join(urn.removeprefix(URN_PREFIX).split("::")[3:])


def urn_type(urn: str) -> str:
    """The resource's own type: the last `$`-separated part of the qualified type."""
    return qualified_type(urn).rsplit("$", 1)[-1]


def engine_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    """`Deployment.generateURN`: a root-stack (or no) parent adds no type."""
    if parent and qualified_type(parent) != ROOT_STACK_TYPE:
        return f"{URN_PREFIX}{stack}::{project}::{qualified_type(parent)}${type_}::{name}"
    return f"{URN_PREFIX}{stack}::{project}::{type_}::{name}"


@dataclass(frozen=True)
class EngineResource:
    """One registration with the engine's URNs: its own, its parent's (empty at the root), its provider's and its
    dependencies'."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    provider: str
    dependencies: tuple[str, ...]
    protect: bool
    delete_before_replace: bool
    inputs: dict[str, Any]
    aliases: tuple[AliasSpec, ...] = ()


def engine_resources(registrations: Iterable[Any], stack: str, project: str) -> list[EngineResource]:
    """The RecordingMonitor's registrations (parents first, as the SDK registers them) with the engine's URNs."""
    by_mock_urn: dict[str, str] = {}
    resources: list[EngineResource] = []

    def translated(mock_urn: str) -> str:
        if not mock_urn or qualified_type(mock_urn).endswith(ROOT_STACK_TYPE):
            return ""
        return by_mock_urn[mock_urn]

    for registration in registrations:
        parent = translated(registration.parent)
        urn = engine_urn(stack, project, parent, registration.type, registration.name)
        by_mock_urn[registration.urn] = urn
        provider = registration.provider.rsplit("::", 1)[0] if registration.provider else ""
        resources.append(
            EngineResource(
                urn=urn,
                type=registration.type,
                name=registration.name,
                parent=parent,
                custom=registration.custom,
                provider=translated(provider),
                dependencies=tuple(sorted(translated(dependency) for dependency in registration.dependencies)),
                protect=registration.protect,
                delete_before_replace=registration.delete_before_replace,
                inputs=registration.inputs,
                aliases=tuple(getattr(registration, "aliases", ())),
            )
        )
    return resources


@dataclass
class OldResourceMatcher:
    """The engine's matching of new registrations to the resources of the previous deployment (`olds`)."""

    stack: str
    project: str
    olds: frozenset[str]
    aliases: dict[str, str] = field(default_factory=dict)
    """New URN → the old URN it took over through an alias (`stepGenerator.aliases`)."""
    claimed: dict[str, str] = field(default_factory=dict)
    """Old URN → the new URN that took it over."""

    def _collapse(self, resource: EngineResource, alias: AliasSpec) -> str:
        """`collapseAliasToUrn`."""
        if alias.urn:
            return alias.urn
        parent = alias.parent or resource.parent
        if alias.parent:
            parent = self.aliases.get(parent, parent)
        if alias.no_parent or (parent and qualified_type(parent) == ROOT_STACK_TYPE):
            parent = ""
        name, type_ = alias.name or resource.name, alias.type or resource.type
        stack, project = alias.stack or self.stack, alias.project or self.project
        if not parent:
            return f"{URN_PREFIX}{stack}::{project}::{type_}::{name}"
        return parent[: parent.rindex("::")] + f"${type_}::{name}"

    def _inherited(self, child_type: str, child_name: str, parent_name: str, parent_alias: str) -> str:
        """`inheritedChildAlias`: a child named after its parent follows the parent's old name."""
        name = child_name
        if child_name.startswith(parent_name):
            name = urn_name(parent_alias) + child_name[len(parent_name) :]
        return f"{URN_PREFIX}{self.stack}::{self.project}::{qualified_type(parent_alias)}${child_type}::{name}"

    def candidate_urns(self, resource: EngineResource) -> list[str]:
        """The URN, then `generateAliases`, without repeats."""
        found = [resource.urn]
        own = [self._collapse(resource, alias) for alias in resource.aliases]
        found.extend(own)
        parent_alias = self.aliases.get(resource.parent) if resource.parent else None
        if parent_alias is not None:
            parent_name = urn_name(resource.parent)
            found.append(self._inherited(resource.type, resource.name, parent_name, parent_alias))
            found.extend(self._inherited(urn_type(alias), urn_name(alias), parent_name, parent_alias) for alias in own)
        return list(dict.fromkeys(found))

    def match(self, resource: EngineResource) -> str | None:
        """The old resource this registration takes over (None: a create), as `getOldResource` finds it."""
        for candidate in self.candidate_urns(resource):
            if candidate in self.olds:
                previous = self.claimed.get(candidate)
                assert previous is None, f"{resource.urn} and {previous} both claim {candidate}"
                self.claimed[candidate] = resource.urn
                if candidate != resource.urn:
                    self.aliases[resource.urn] = candidate
                return candidate
        return None


def match_all(resources: Sequence[EngineResource], olds: Iterable[str], stack: str, project: str) -> dict[str, str]:
    """New URN → old URN for every registration that takes over an old resource, in registration order."""
    matcher = OldResourceMatcher(stack, project, frozenset(olds))
    matches: dict[str, str] = {}
    for resource in resources:
        old = matcher.match(resource)
        if old is not None:
            matches[resource.urn] = old
    return matches


def old_urn(matches: Mapping[str, str], urn: str) -> str:
    """What a reference to `urn` (a parent, a provider, a dependency) pointed to in the previous deployment."""
    return matches.get(urn, urn)

"""A Pulumi MockMonitor that records what the engine would receive for each resource.

Each registration keeps its inputs (secrets still wrapped as secrets), parent, provider, dependencies,
aliases and resource options, and every component's registered outputs: the facts mocks alone do not show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor

from tests.support.engine_urns import AliasSpec


@dataclass
class Registration:
    """One registered resource as the engine would see it."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    provider: str
    inputs: dict[str, Any]
    dependencies: set[str]
    protect: bool
    delete_before_replace: bool
    aliases: list[AliasSpec] = field(default_factory=list)

    @property
    def object_name(self) -> str | None:
        return (self.inputs.get("metadata") or {}).get("name")

    @property
    def object_namespace(self) -> str | None:
        return (self.inputs.get("metadata") or {}).get("namespace")


class RecordingMonitor(MockMonitor):
    """A MockMonitor that also keeps each request's dependencies, options and the component outputs."""

    instances: list[RecordingMonitor] = []  # noqa: RUF012 - filled when a harness builds its own monitor

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.outputs: dict[str, Any] = {}
        RecordingMonitor.instances.append(self)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            dependencies = set(request.dependencies)
            for urns in request.propertyDependencies.values():
                dependencies.update(urns.urns)
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    custom=bool(request.custom),
                    provider=request.provider,
                    inputs=rpc.deserialize_properties(request.object, keep_unknowns=True),
                    dependencies=dependencies,
                    protect=bool(request.protect),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    aliases=[AliasSpec.from_proto(alias) for alias in request.aliases],
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self.outputs[request.urn] = rpc.deserialize_properties(request.outputs, keep_unknowns=True)
        return super().RegisterResourceOutputs(request)

    # --- queries ---

    def of_type(self, suffix: str) -> list[Registration]:
        return [r for r in self.registrations if r.type.endswith(suffix)]

    def one(self, suffix: str, object_name: str | None = None) -> Registration:
        found = [r for r in self.of_type(suffix) if object_name is None or r.object_name == object_name]
        assert len(found) == 1, f"expected one {suffix} {object_name or ''}: {[r.name for r in found]}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        [found] = [r for r in self.registrations if r.urn == urn]
        return found

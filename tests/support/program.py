"""Run the real `__main__.py` under Pulumi mocks with a given stack configuration, and record it all.

This is how pulumi/examples' testing-unit-py drives a program, plus a record of every registered
resource (type, name, inputs; and through the recording monitor parents, dependencies and component
outputs), of `pulumi.export` and of warnings. Every run also does what Agent Router's controller does with
each CEL cost of each AIGatewayRoute (tests/support/agent_router_cel.py): so every cost expression any test
makes the program generate compiles with Agent Router's declarations and passes the trial run.
"""

from __future__ import annotations

import hashlib
import json
import runpy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
from pulumi.runtime import rpc

from tests.support.agent_router_cel import check_cost_expression
from tests.support.monitor import RecordingMonitor
from tools.spend.stack import load_stack

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "agent-budgets"
MOCK_PASSWORD_PREFIX = "mock-random-"


@dataclass
class Registered:
    """One resource as the engine would receive it."""

    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    urn: str = ""

    @property
    def kind(self) -> str:
        """`kubernetes:gateway.envoyproxy.io/v1alpha1:Backend` → `Backend`."""
        return self.type.rsplit(":", 1)[-1]

    @property
    def api_version(self) -> str:
        """The Kubernetes apiVersion for kubernetes:* types."""
        return self.type.split(":")[1] if self.type.startswith("kubernetes:") else ""

    def as_object(self) -> dict[str, Any]:
        """The Kubernetes object a cluster would receive."""
        obj = {key: value for key, value in self.inputs.items() if key not in {"apiVersion", "kind"}}
        return {"apiVersion": self.api_version.replace("core/", ""), "kind": self.kind, **obj}


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that remember every resource and hand out deterministic ids and random results."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.random_results: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "random:index/randomPassword:RandomPassword":
            # The same resource and keepers give the same value in every run (as a RandomPassword keeps its result
            # until a keeper changes); a changed keeper gives a new one.
            keepers = hashlib.sha256(json.dumps(args.inputs.get("keepers") or {}, sort_keys=True).encode()).hexdigest()
            value = f"{MOCK_PASSWORD_PREFIX}{args.name}-{keepers[:8]}"
            self.random_results.append(value)
            state["result"] = value
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), bool(args.custom)))
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


@dataclass
class ProgramRun:
    """What one run of the program registered and exported."""

    mocks: RecordingMocks
    monitor: RecordingMonitor | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    resolved_outputs: dict[str, Any] = field(default_factory=dict)
    """The value of every output exported as a `pulumi.Output` (the secret ones), once resolved."""
    secret_outputs: dict[str, bool] = field(default_factory=dict)
    """For every output exported as a `pulumi.Output`, whether the engine would hold it as a secret."""
    warnings: list[str] = field(default_factory=list)

    @property
    def resources(self) -> list[Registered]:
        """Every registered resource, components included."""
        return self.mocks.resources

    def of_kind(self, kind: str) -> list[Registered]:
        """Resources whose type ends with `:<kind>`."""
        return [r for r in self.resources if r.type.endswith(f":{kind}")]

    def one(self, kind: str, name: str | None = None) -> Registered:
        """The single resource of a kind (and Kubernetes object name)."""
        found = [r for r in self.of_kind(kind) if name is None or (r.inputs.get("metadata") or {}).get("name") == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {[r.name for r in found]}"
        return found[0]

    def cost_expressions(self) -> list[str]:
        """The CEL of every `type: CEL` llmRequestCosts entry of every AIGatewayRoute."""
        return [
            cost["cel"]
            for route in self.of_kind("AIGatewayRoute")
            for cost in route.inputs["spec"]["llmRequestCosts"]
            if cost["type"] == "CEL"
        ]

    def custom_resources(self) -> list[Registered]:
        """Resources of Kubernetes kinds that come from CRDs (not core/apps/networking/helm)."""
        builtin = (
            "kubernetes:core/",
            "kubernetes:apps/",
            "kubernetes:networking.k8s.io/",
            "kubernetes:rbac.authorization.k8s.io/",
            "kubernetes:helm.sh/",
        )
        return [
            r
            for r in self.resources
            if r.type.startswith("kubernetes:") and not r.type.startswith(builtin) and r.custom
        ]

    def builtin_resources(self) -> list[Registered]:
        """Resources of built-in Kubernetes kinds: every Kubernetes resource that is neither a Helm release nor a
        custom resource (tests/support/kubernetes_schema.py checks them)."""
        custom = {id(resource) for resource in self.custom_resources()}
        return [
            r
            for r in self.resources
            if r.type.startswith("kubernetes:")
            and r.custom
            and not r.type.startswith("kubernetes:helm.sh/")
            and id(r) not in custom
        ]

    def builtin_objects(self) -> list[dict[str, Any]]:
        """The built-in objects as the cluster receives them: secrets in plain text (the engine unwraps them)."""
        return [plain(resource.as_object()) for resource in self.builtin_resources()]


def plain(value: Any) -> Any:
    """`value` with every Pulumi secret (the engine's wrapper of a secret input) replaced by what it holds."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return plain(value["value"])
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def stack_config(stack: str) -> dict[str, Any]:
    """The `agent-budgets:*` values of Pulumi.<stack>.yaml, without the prefix (read as the spend report reads them)."""
    return load_stack(ROOT, stack).raw


def run_program(
    config: dict[str, Any],
    secrets: dict[str, str] | None = None,
    plain: dict[str, str] | None = None,
    stack: str = "test",
    mocks: RecordingMocks | None = None,
    main: Callable[[], None] | None = None,
) -> ProgramRun:
    """Run `__main__.py` (or `main`, a program of another shape) with `agent-budgets:<key>` config; `secrets` are
    set as secret config."""
    all_config = {f"{PROJECT}:{key}": json.dumps(value) for key, value in config.items()}
    for key, value in (secrets or {}).items():
        all_config[f"{PROJECT}:{key}"] = value
    for key, value in (plain or {}).items():
        all_config[f"{PROJECT}:{key}"] = value
    pulumi.runtime.set_all_config(all_config, secret_keys=[f"{PROJECT}:{key}" for key in (secrets or {})])
    mocks = mocks or RecordingMocks()
    run = ProgramRun(mocks)

    def record_export(name: str, value: Any) -> None:
        run.outputs[name] = value
        if isinstance(value, pulumi.Output):  # a secret output: record its value and that it stays secret
            value.apply(lambda plain: run.resolved_outputs.__setitem__(name, plain))
            pulumi.Output.all(value.is_secret()).apply(lambda flags: run.secret_outputs.update({name: flags[0]}))

    def record_warning(message: str, *args: Any, **kwargs: Any) -> None:
        run.warnings.append(message)

    @pulumi.runtime.test
    def program() -> None:
        if main is not None:
            main()
        else:
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

    before = len(RecordingMonitor.instances)
    with (
        mock.patch("pulumi.runtime.mocks.MockMonitor", RecordingMonitor),
        mock.patch.object(pulumi, "export", record_export),
        mock.patch.object(pulumi.log, "warn", record_warning),
    ):
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False)
        program()
    [run.monitor] = RecordingMonitor.instances[before:]
    for expression in run.cost_expressions():
        check_cost_expression(expression)
    return run

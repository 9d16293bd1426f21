"""The Kubernetes permissions a deployment needs, derived from what the program registers (docs/deploy.md).

The program runs under Pulumi mocks (tests/support/program.py `run_program`, the unit tests' harness) for three
stacks a real cluster can have: `Pulumi.prod.yaml`; the same with the in-cluster Redis (the default `redis.mode`,
which adds a StatefulSet, a Service and a NetworkPolicy); and `full`, every optional feature on
(scripts/gen_resource_baseline.py `full_config`). Every Kubernetes object any of them registers becomes one row per
API group and resource: where it lives and which stacks need it. So a kind the program starts to create shows in the
table at the next `make docs`, and tests/test_generated_docs.py fails until it does: the list cannot drift.

What this does not derive: what the Helm charts install (docs/deploy.md says it in prose) and what `kubectl ate`
needs from Substrate's API server (not Kubernetes RBAC).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The verbs Pulumi's Kubernetes provider uses on an object it manages: read it (preview, refresh: get), create and
# change it with server-side apply (patch), replace or delete it, and wait for it through an informer (list, watch;
# pulumi-kubernetes `provider/pkg/await`).
MANAGED_VERBS = "get, list, watch, create, update, patch, delete"
# What the provider reads while it waits for an object to be ready: a StatefulSet's Pods and a Service's Endpoints
# (pulumi-kubernetes `provider/pkg/await/statefulset.go` and `service.go`: an informer on `pods`, on `endpoints`, in
# the object's namespace).
WAITED_ON = {("apps", "StatefulSet"): ("", "Pod"), ("", "Service"): ("", "Endpoints")}
WATCH_VERBS = "get, list, watch"
VERB_NAMES = {MANAGED_VERBS: "manage", WATCH_VERBS: "read"}
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Kinds whose resource name the rules of `plural` do not give.
IRREGULAR_PLURALS = {"Endpoints": "endpoints"}


@dataclass(frozen=True)
class Row:
    """One API group and resource the deployer must be allowed to manage."""

    group: str
    resource: str
    kind: str
    namespace: str
    """Where its objects live; empty for a cluster-scoped kind."""
    stacks: tuple[str, ...]
    verbs: str = MANAGED_VERBS


@dataclass(frozen=True)
class Release:
    """One Helm release the program installs."""

    name: str
    chart: str
    namespace: str
    stacks: tuple[str, ...]


def plural(kind: str) -> str:
    """The resource name of a kind as the API server serves it: `GatewayClass` → `gatewayclasses`,
    `EnvoyProxy` → `envoyproxies` (the CRDs' `spec.names.plural`, which a test compares)."""
    lower = kind.lower()
    if kind in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[kind]
    if re.search(r"[^aeiou]y$", lower):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "sh", "ch")):
        return lower + "es"
    return lower + "s"


def _group_of(resource_type: str) -> str:
    """`kubernetes:gateway.networking.k8s.io/v1:Gateway` → `gateway.networking.k8s.io`; core → ``."""
    group = resource_type.split(":")[1].rsplit("/", 1)[0]
    return "" if group == "core" else group


def _namespace(inputs: Mapping[str, Any]) -> str:
    metadata = inputs.get("metadata") or {}
    return str(metadata.get("namespace") or "")


def kubernetes_objects(resources: Iterable[Any]) -> list[tuple[str, str, str]]:
    """(group, kind, namespace) of every Kubernetes object registered, Helm releases and providers left out."""
    found = []
    for resource in resources:
        if not resource.custom or not resource.type.startswith("kubernetes:") or resource.type == HELM_RELEASE:
            continue
        found.append((_group_of(resource.type), resource.type.rsplit(":", 1)[-1], _namespace(resource.inputs)))
    return found


def releases_of(resources: Iterable[Any]) -> list[tuple[str, str, str]]:
    """(release name, chart, namespace) of every Helm release registered."""
    return [
        (str(r.inputs.get("name")), str(r.inputs.get("chart")), str(r.inputs.get("namespace")))
        for r in resources
        if r.type == HELM_RELEASE
    ]


def _verbs(group: str, kind: str) -> str:
    return WATCH_VERBS if (group, kind) in WAITED_ON.values() else MANAGED_VERBS


def rows(runs: Mapping[str, Iterable[Any]]) -> tuple[list[Row], list[Release]]:
    """The permission rows (one per API group, kind and namespace) and the Helm releases of several runs, each
    named by its stack."""
    kinds: dict[tuple[str, str, str], list[str]] = {}
    charts: dict[tuple[str, str, str], list[str]] = {}
    for stack, resources in runs.items():
        resources = list(resources)
        for group, kind, namespace in kubernetes_objects(resources):
            waited = WAITED_ON.get((group, kind))
            for found in [(group, kind, namespace), *([(*waited, namespace)] if waited else [])]:
                stacks = kinds.setdefault(found, [])
                if stack not in stacks:
                    stacks.append(stack)
        for release in releases_of(resources):
            stacks = charts.setdefault(release, [])
            if stack not in stacks:
                stacks.append(stack)
    table = [
        Row(group, plural(kind), kind, namespace, tuple(stacks), _verbs(group, kind))
        for (group, kind, namespace), stacks in sorted(
            kinds.items(), key=lambda item: (item[0][0], plural(item[0][1]), item[0][2])
        )
    ]
    releases = [Release(name, chart, namespace, tuple(stacks)) for (name, chart, namespace), stacks in charts.items()]
    return table, releases


def render(table: list[Row], releases: list[Release], stacks: Iterable[str]) -> str:
    """The Markdown block of docs/deploy.md."""
    everywhere = tuple(stacks)

    def needed(row_stacks: tuple[str, ...]) -> str:
        return "always" if row_stacks == everywhere else ", ".join(row_stacks)

    lines = [
        "| API group | resource (kind) | namespace | verbs | needed by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in table:
        group = f"`{row.group}`" if row.group else 'core (`""`)'
        where = f"`{row.namespace}`" if row.namespace else "cluster-scoped"
        lines.append(
            f"| {group} | `{row.resource}` ({row.kind}) | {where} | {VERB_NAMES[row.verbs]} | {needed(row.stacks)} |"
        )
    lines.append("")
    lines.append(
        f"manage: {MANAGED_VERBS}; read: {WATCH_VERBS}. Helm releases (`platform.install: true`, the default):"
    )
    lines.append("")
    for release in releases:
        lines.append(f"- `{release.name}` in `{release.namespace}`: `{release.chart}` ({needed(release.stacks)})")
    return "\n".join(lines)


# The stacks the table is derived from.
STACKS = ("prod", "in-cluster Redis", "full")


def stack_inputs() -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """The configuration and secrets of each stack the table covers."""
    from scripts.gen_resource_baseline import EXAMPLE_SECRETS, FULL_SECRETS, full_config
    from tests.support.program import stack_config

    prod = stack_config("prod")
    in_cluster = copy.deepcopy(prod)
    in_cluster["redis"] = {"mode": "in-cluster"}
    in_cluster_secrets = {key: value for key, value in EXAMPLE_SECRETS.items() if key != "redisPassword"}
    return {
        "prod": (prod, EXAMPLE_SECRETS),
        "in-cluster Redis": (in_cluster, in_cluster_secrets),
        "full": (full_config(), FULL_SECRETS),
    }


def program_runs() -> dict[str, list[Any]]:
    """Every resource each stack registers, under mocks."""
    from tests.support.program import run_program

    return {
        stack: run_program(config, secrets=secrets, stack="prod").resources
        for stack, (config, secrets) in stack_inputs().items()
    }


def blocks(runs: Mapping[str, list[Any]] | None = None) -> dict[str, str]:
    """The GENERATED block of docs/deploy.md."""
    runs = runs if runs is not None else program_runs()
    table, releases = rows(runs)
    return {"cluster-permissions": render(table, releases, runs)}

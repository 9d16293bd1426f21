"""Write the resource baseline of the dev and prod stacks (and of `full`, every optional feature on): what `pulumi up`
of each registers, by the URNs the program had before `AgentBudgets`.

    venv/bin/python scripts/gen_resource_baseline.py --refresh   # after a deliberate change to what a stack registers

The URNs in tests/fixtures/resource-baseline/{dev,prod,full}.json are frozen: they were written by this script,
without `--refresh`, at the commit that added it, from the program as it was before `AgentBudgets` (every component
registered at the stack root), and they are the proof that an existing stack's `pulumi up` replaces and deletes
nothing. tests/test_agent_budgets_urns.py runs today's program under the same mocks, matches each registration to an
old URN by the engine's own rules (tests/support/engine_urns.py) and requires every old resource to be taken over,
by one of the same type, name, parent and provider, with the inputs, dependencies and options the file records, and
nothing new but the `AgentBudgets` component.

`--refresh` takes the same steps, refuses (and writes nothing) where the takeover fails, and otherwise rewrites only
what ordinary development changes: each frozen URN's inputs digest, its dependencies (as old URNs) and its options.
When to run it and how to read its diff: docs/development.md "The resource baseline".

Each resource is recorded by URN with its type, name, parent, provider, dependencies, options and the SHA-256 of its
inputs (a digest, so that no secret value, not even a mock one, is written to the repository).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.engine_urns import EngineResource

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BASELINE_DIR = ROOT / "tests" / "fixtures" / "resource-baseline"
COMPONENT_TYPE = "agent-budgets:index:AgentBudgets"
# What makes a resource the one it was: frozen (a different value is another resource, or a replacement).
FROZEN_FIELDS = ("urn", "type", "name", "parent", "custom", "provider")
# What ordinary development changes, and `--refresh` rewrites (the diff is reviewed: docs/development.md).
REGENERABLE_FIELDS = ("inputs", "dependencies", "protect", "deleteBeforeReplace")
STACKS = ("dev", "prod", "full")
# Stand-ins for the prod stack's secret config (the same as scripts/gen_docs.py's): only their digest is written.
EXAMPLE_SECRETS = {"openaiApiKey": "example", "anthropicApiKey": "example", "redisPassword": "example"}
# The `full` stack's, with the Sentinels' password.
FULL_SECRETS = {**EXAMPLE_SECRETS, "redisSentinelPassword": "example"}
EXAMPLE_CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmg\n-----END CERTIFICATE-----\n"


def full_config() -> dict[str, Any]:
    """The prod stack with every optional feature on: all three identity sources (the Kubernetes JWKS fetched
    through the API server), a pool, a suspended actor, an external Redis Sentinel over TLS with a private CA and its
    own password, the PrometheusRule, every PodMonitor (envoy-proxy too) and the dashboard; egress policies on."""
    from tests.support.program import stack_config

    config = copy.deepcopy(stack_config("prod"))
    config["identity"] = {"sources": ["substrate", "kubernetes", "apiKeys"], "kubernetes": {"jwks": "apiServer"}}
    members = ["serviceaccount:agents/research-bot", "apikey:ci-bot"]
    config["actors"] = [*config["actors"], *members, "apikey:nightly"]
    config["suspended"] = ["apikey:nightly"]
    config["budgets"]["pools"] = [
        {"name": "team", "atespaces": ["agents"], "members": members, "limits": [{"tokens": 900000, "per": "Day"}]}
    ]
    config["budgetPolicy"]["classSlots"] = 4
    config["redis"] = {
        "mode": "external",
        "type": "sentinel",
        "url": "mymaster,sentinel-0.example:26379",
        "tls": True,
        "tlsCaCertificate": EXAMPLE_CA,
        "sentinelPasswordConfig": "redisSentinelPassword",
    }
    config["monitoring"] = {"prometheusRules": True, "podMonitors": True, "proxyMetrics": True, "dashboard": True}
    return config


def stack_inputs(stack: str) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The configuration and the secret configuration of one baseline stack."""
    from tests.support.program import stack_config

    if stack == "full":
        return full_config(), FULL_SECRETS
    return stack_config(stack), EXAMPLE_SECRETS if stack == "prod" else None


def inputs_digest(inputs: dict[str, Any]) -> str:
    """The SHA-256 of a resource's inputs as the engine receives them (secret markers included)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def stack_run(stack: str) -> Any:
    """The program under mocks for Pulumi.<stack>.yaml (the unit tests' harness)."""
    from tests.support.program import run_program

    config, secrets = stack_inputs(stack)
    return run_program(config, secrets=secrets, stack=stack)


def engine_resources(stack: str) -> list[EngineResource]:
    """Every resource of the stack with the URNs the engine gives it (tests/support/engine_urns.py)."""
    from tests.support.engine_urns import engine_resources as with_engine_urns
    from tests.support.program import PROJECT

    run = stack_run(stack)
    assert run.monitor is not None
    return with_engine_urns(run.monitor.registrations, stack, PROJECT)


def record(resource: EngineResource, previous: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One resource as the baseline records it, each URN it names translated by `previous` (new URN → old)."""
    previous = previous or {}
    return {
        "urn": previous.get(resource.urn, resource.urn),
        "type": resource.type,
        "name": resource.name,
        "parent": previous.get(resource.parent, resource.parent),
        "custom": resource.custom,
        "provider": previous.get(resource.provider, resource.provider),
        "dependencies": sorted(previous.get(urn, urn) for urn in resource.dependencies),
        "protect": resource.protect,
        "deleteBeforeReplace": resource.delete_before_replace,
        "inputs": inputs_digest(resource.inputs),
    }


@dataclass(frozen=True)
class Takeover:
    """Today's registrations of a stack against its baseline, as the engine pairs them."""

    records: dict[str, dict[str, Any]]
    """Old URN → the registration that takes it over, recorded with old URNs (the component as the root)."""
    problems: list[str]
    """Why the migration proof fails: an old resource not taken over, a new one other than the component, a
    takeover at the same URN (not through an alias), a frozen field that differs."""


def takeover(resources: Sequence[EngineResource], olds: Mapping[str, dict[str, Any]], stack: str) -> Takeover:
    """Match `resources` to the old ones by the engine's rules and check that the takeover is the migration."""
    from tests.support.engine_urns import match_all
    from tests.support.program import PROJECT

    matches = match_all(resources, olds, stack, PROJECT)
    created = [resource for resource in resources if resource.urn not in matches]
    problems = [f"deleted (no registration takes it over): {urn}" for urn in sorted(set(olds) - set(matches.values()))]
    components = [resource.urn for resource in created if (resource.type, resource.parent) == (COMPONENT_TYPE, "")]
    problems += [f"created: {resource.urn}" for resource in created if resource.urn not in components]
    records: dict[str, dict[str, Any]] = {}
    for resource in resources:
        if resource.urn not in matches:
            continue
        now = record(resource, matches)
        if resource.parent in components:  # the resources the stack had at its root
            now["parent"] = ""
        records[now["urn"]] = now
        if resource.urn == now["urn"]:
            problems.append(f"taken over at its own URN, not through an alias: {resource.urn}")
        old = olds[now["urn"]]
        problems += [
            f"{now['urn']}: {key} was {old[key]!r}, is {now[key]!r}" for key in FROZEN_FIELDS if now[key] != old[key]
        ]
    if len(components) != 1:
        problems.append(f"{len(components)} {COMPONENT_TYPE} components at the root, not one")
    return Takeover(records, problems)


def committed(stack: str) -> dict[str, dict[str, Any]]:
    """The committed baseline of one stack, by old URN."""
    return {item["urn"]: item for item in json.loads((BASELINE_DIR / f"{stack}.json").read_text())["resources"]}


def render(stack: str, records: Iterable[dict[str, Any]]) -> str:
    """The baseline file of one stack (by URN: registration order is not fixed)."""
    resources = sorted(records, key=lambda item: item["urn"])
    return json.dumps({"stack": stack, "resources": resources}, indent=1, sort_keys=True) + "\n"


def refreshed(stack: str) -> str:
    """The baseline of one stack with today's regenerable fields; SystemExit naming each problem of the takeover."""
    olds = committed(stack)
    result = takeover(engine_resources(stack), olds, stack)
    if result.problems:
        raise SystemExit(f"{stack}: the baseline cannot be refreshed:\n  " + "\n  ".join(result.problems))
    return render(
        stack, ({**olds[urn], **{key: now[key] for key in REGENERABLE_FIELDS}} for urn, now in result.records.items())
    )


def written_from_scratch(stack: str) -> str:
    """The baseline of one stack as the program registers it, only before `AgentBudgets`."""
    resources = engine_resources(stack)
    if any(resource.type == COMPONENT_TYPE for resource in resources):
        raise SystemExit(
            f"{stack}: the program registers {COMPONENT_TYPE}: its URNs are not the old ones; use --refresh"
        )
    return render(stack, (record(resource) for resource in resources))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="keep the frozen URNs; rewrite each one's inputs digest, dependencies and options from today's program",
    )
    args = parser.parse_args(argv)
    # Every stack first: a refusal writes no file.
    files = {stack: refreshed(stack) if args.refresh else written_from_scratch(stack) for stack in STACKS}
    BASELINE_DIR.mkdir(parents=True, exist_ok=True)
    for stack, text in files.items():
        (BASELINE_DIR / f"{stack}.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

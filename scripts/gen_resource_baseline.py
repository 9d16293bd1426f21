"""Write the resource baseline of the dev and prod stacks (and of `full`, every optional feature on): what `pulumi up`
of each registers.

    venv/bin/python scripts/gen_resource_baseline.py   # rewrite tests/fixtures/resource-baseline/{dev,prod,full}.json

The committed files were written by this script at the commit that added it, from the program as it was before
`AgentBudgets` (every component registered at the stack root): check that commit out and run it to regenerate them.
tests/test_agent_budgets_urns.py runs today's program under the same mocks and proves that each resource of the
baseline is registered again, at the same URN or behind an alias the engine resolves to it, with the same inputs,
provider, dependencies and options: an existing stack sees no replacement and no delete. Run it on today's program
only for a change meant to alter what the stacks register (and say so in CHANGELOG.md): the test then holds the
program to the new file.

Each resource is recorded by URN with its type, name, parent, provider, dependencies, options and the SHA-256 of its
inputs (a digest, so that no secret value, not even a mock one, is written to the repository).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BASELINE_DIR = ROOT / "tests" / "fixtures" / "resource-baseline"
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


def engine_resources(stack: str) -> list[Any]:
    """Every resource of the stack with the URNs the engine gives it (tests/support/engine_urns.py)."""
    from tests.support.engine_urns import engine_resources as with_engine_urns
    from tests.support.program import PROJECT

    run = stack_run(stack)
    assert run.monitor is not None
    return with_engine_urns(run.monitor.registrations, stack, PROJECT)


def record(resource: Any) -> dict[str, Any]:
    """One resource as the baseline records it."""
    return {
        "urn": resource.urn,
        "type": resource.type,
        "name": resource.name,
        "parent": resource.parent,
        "custom": resource.custom,
        "provider": resource.provider,
        "dependencies": list(resource.dependencies),
        "protect": resource.protect,
        "deleteBeforeReplace": resource.delete_before_replace,
        "inputs": inputs_digest(resource.inputs),
    }


def resource_records(stack: str) -> list[dict[str, Any]]:
    """Every resource of the stack as the engine would record it, by URN (registration order is not fixed)."""
    return sorted((record(resource) for resource in engine_resources(stack)), key=lambda item: item["urn"])


def render(stack: str) -> str:
    """The baseline file of one stack."""
    return json.dumps({"stack": stack, "resources": resource_records(stack)}, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    BASELINE_DIR.mkdir(parents=True, exist_ok=True)
    for stack in STACKS:
        (BASELINE_DIR / f"{stack}.json").write_text(render(stack))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate every block of the docs that code produces (`make docs`), or check that none is stale.

    venv/bin/python scripts/gen_docs.py          # rewrite the GENERATED blocks (scripts/doc_blocks.py)
    venv/bin/python scripts/gen_docs.py --check  # exit 1 when a committed block differs from the code

The pages and what writes them:

* docs/configuration.md: the configuration reference, from the pydantic models (core/config_reference.py);
* docs/outputs.md: every stack output's example, the program's real output under Pulumi mocks
  (`run_program` of tests/support/program.py, the harness of the unit tests) for Pulumi.dev.yaml,
  Pulumi.prod.yaml, Pulumi.dev.yaml with `platform.install: false` and Pulumi.dev-kubernetes.yaml;
* docs/message-size.md: the exclusion-slot table, the examples and the cost of a suspension
  (scripts/measure_exclusion_slots.py);
* docs/dashboard.md: what each dashboard panel answers, for Pulumi.prod.yaml with the dashboard on
  (core/dashboard.py);
* docs/budgets.md: each limit's worst case next to what a seeded simulation of enforcement reached
  (tests/support/enforcement.py, `make simulate`);
* docs/deploy.md: the Kubernetes permissions a deployment needs, from what the program registers for the prod
  stack, the prod stack with the in-cluster Redis and the `full` stack (scripts/cluster_permissions.py);
* docs/rig.md: every image the rig builds, what it stands for and how it differs (rig/catalog.py);
* plugin/schema.json (a whole file): the component package's schema, inferred in this process from
  `AgentBudgets` as the plugin's GetSchema answers it (agent_budgets/package.py).

tests/test_generated_docs.py runs the same generators on every `make test` and fails while a page is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.config_reference import render_reference  # noqa: E402
from scripts import cluster_permissions, measure_exclusion_slots  # noqa: E402
from scripts.doc_blocks import sync_document  # noqa: E402

COMMAND = "make docs"
# Stand-ins for the prod stack's secret config: the outputs never hold a secret, so their value never shows.
EXAMPLE_SECRETS = {"openaiApiKey": "example", "anthropicApiKey": "example", "redisPassword": "example"}


def json_text(value: Any) -> str:
    """An output as `pulumi stack output --json` would show it, laid out to read well in a page: a list of
    objects one object a line, a small map on one line, anything larger indented."""
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        return "[\n" + ",\n".join(f"  {json.dumps(item)}" for item in value) + "\n]"
    flat = json.dumps(value)
    return flat if len(flat) <= 100 else json.dumps(value, indent=2)


def _json_block(value: Any) -> str:
    return f"```json\n{json_text(value)}\n```"


def stack_outputs() -> dict[str, dict[str, Any]]:
    """The outputs of the dev stack, the prod stack, the dev stack with `platform.install: false` and the
    Substrate-free dev stack (its `apiKeys` is a Pulumi secret: only its actors are shown, never a key)."""
    from tests.support.program import run_program, stack_config

    outside = stack_config("dev")
    outside["platform"] = {**outside.get("platform", {}), "install": False}
    kubernetes = run_program(stack_config("dev-kubernetes"), stack="dev-kubernetes")
    return {
        "dev": run_program(stack_config("dev"), stack="dev").outputs,
        "prod": run_program(stack_config("prod"), secrets=EXAMPLE_SECRETS, stack="prod").outputs,
        "outside": run_program(outside, stack="dev").outputs,
        "dev-kubernetes": {
            **kubernetes.outputs,
            "apiKeys": {actor: "<48 letters and digits>" for actor in kubernetes.resolved_outputs["apiKeys"]},
        },
    }


def output_blocks(outputs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """Every GENERATED block of docs/outputs.md, by name."""
    runs = outputs if outputs is not None else stack_outputs()
    dev, prod, outside = runs["dev"], runs["prod"], runs["outside"]
    blocks = {
        name: _json_block(dev[output])
        for name, output in (
            ("gateway-url", "gatewayUrl"),
            ("actors", "actors"),
            ("budget-rules-dev", "budgetRules"),
            ("suspended", "suspended"),
            ("routes-dev", "routes"),
            ("redis-mode", "redisMode"),
            ("fail-closed", "failClosed"),
        )
    }
    kubernetes = runs["dev-kubernetes"]
    blocks["identity-sources"] = _json_block(kubernetes["identitySources"])
    blocks["api-key-gateway-url"] = _json_block(kubernetes["apiKeyGatewayUrl"])
    blocks["api-keys"] = _json_block(kubernetes["apiKeys"])
    blocks["budget-rules-prod"] = _json_block(prod["budgetRules"])
    blocks["worst-case-dev"] = _json_block(dev["worstCase"])
    blocks["worst-case-prod"] = _json_block(prod["worstCase"])
    blocks["routes-prod"] = _json_block(prod["routes"])
    blocks["envoy-gateway-values"] = _json_block(outside["envoyGatewayValues"])
    blocks["agent-router-values"] = _json_block(outside["agentRouterValues"])
    return blocks


def simulation_blocks() -> dict[str, str]:
    """The GENERATED block of docs/budgets.md: the simulation's table (seeded, so the same on every run)."""
    from tests.support.enforcement import RUNS, SEED, simulate, table

    return {"enforcement-simulation": table(simulate(SEED, RUNS), RUNS, SEED)}


def configuration_blocks() -> dict[str, str]:
    """The GENERATED block of docs/configuration.md."""
    return {"config-reference": render_reference()}


def dashboard_blocks() -> dict[str, str]:
    """The GENERATED block of docs/dashboard.md: the panels of the prod stack with every panel's data."""
    from core.dashboard import panel_table
    from core.validation import validate_stack
    from tools.spend.stack import load_stack

    raw = dict(load_stack(ROOT, "prod").raw)
    raw["monitoring"] = {**raw.get("monitoring", {}), "prometheusRules": True, "dashboard": True}
    validated = validate_stack(raw, lambda key: (True, True))
    return {"panels": panel_table(validated.settings, validated.rules)}


def rig_blocks() -> dict[str, str]:
    """The GENERATED block of docs/rig.md: every image the rig builds (rig/catalog.py)."""
    from rig.catalog import image_table

    return {"rig-images": image_table()}


DOCS: dict[str, Callable[[], dict[str, str]]] = {
    "docs/configuration.md": configuration_blocks,
    "docs/outputs.md": output_blocks,
    "docs/message-size.md": measure_exclusion_slots.blocks,
    "docs/dashboard.md": dashboard_blocks,
    "docs/budgets.md": simulation_blocks,
    "docs/deploy.md": cluster_permissions.blocks,
    "docs/rig.md": rig_blocks,
}


def package_schema_text() -> str:
    """plugin/schema.json."""
    from agent_budgets.package import schema_text

    return schema_text()


# Files that code writes whole.
FILES: dict[str, Callable[[], str]] = {"plugin/schema.json": package_schema_text}


def sync_file(path: Path, text: str, check: bool, shown_as: str) -> int:
    """Write `text` to `path` (or with `check`, compare); 1 when the committed file differed."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return 0
    if check:
        print(f"{shown_as} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1
    path.write_text(text, encoding="utf-8")
    print(f"updated {shown_as}")
    return 0


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    """Write (or with --check, compare) every generated block; the exit status says whether all were current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the committed pages are current")
    args = parser.parse_args(argv)
    status = 0
    for page, generate in DOCS.items():
        status |= sync_document(root / page, generate(), check=args.check, command=COMMAND, shown_as=page)
    for name, render in FILES.items():
        status |= sync_file(root / name, render(), check=args.check, shown_as=name)
    return status


if __name__ == "__main__":
    raise SystemExit(main())

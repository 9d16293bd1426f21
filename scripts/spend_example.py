"""Regenerate the example output and the field tables in docs/spend.md from the real report.

    venv/bin/python scripts/spend_example.py          # rewrite the blocks between the GENERATED markers
    venv/bin/python scripts/spend_example.py --check  # exit 1 when the committed blocks are out of date

The examples are real runs of `python -m tools.spend` (its `run` function, nothing mocked): the budgets of
Pulumi.prod.yaml (with agents/coder-2 suspended and a pool of the two coders), its Redis pointed at a local
redis-server that holds counters written the way envoyproxy/ratelimit writes them (INCRBY + EXPIRE, keys from the
rate-limit model), and the clock fixed at 2026-11-30 18:48:00 UTC so the text does not change from run to run.
tests/test_spend_docs.py runs the check on every `make test`.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import spend  # noqa: E402
from core.identity import SOURCE_TITLES, SOURCES, actor_header_value  # noqa: E402
from core.manifests import BUDGET_POLICY_NAME  # noqa: E402
from scripts import doc_blocks  # noqa: E402
from tools.spend import cli  # noqa: E402
from tools.spend.stack import load_stack  # noqa: E402

DOC = ROOT / "docs" / "spend.md"
NOW = 1796064480  # 2026-11-30T18:48:00Z, a Monday
EXAMPLE_STACK = "prod"
# A pool of the two coders on top of their class, as the example adds it to Pulumi.prod.yaml's budgets (after its
# three classes, with room for two more).
POOLS = [
    {"name": "coders", "members": ["agents/coder-1", "agents/coder-2"], "limits": [{"tokens": 3000000, "per": "Day"}]}
]
CLASS_SLOTS = 5
# What each counter holds in the current window, per (actor, limit index) of Pulumi.prod.yaml, and per (pool row,
# limit index): tokens, calls, or mills ($0.001) for a usd limit. The default budget has a tokens, a calls and a
# per-model usd limit; agents/research-1's three limits (tokens/Hour, $/Day, $/Month); every other budget has a
# tokens limit and a calls limit. The coders' pool holds what coder-1 spent (coder-2 spent nothing).
COUNTERS = {
    ("agents/support-2", 0): 201_350,
    ("agents/support-2", 1): 9,
    ("agents/support-2", 2): 1_130,
    ("agents/support-1", 0): 184_200,
    ("agents/support-1", 1): 20,
    ("agents/support-1", 2): 2_040,
    ("agents/research-1", 0): 120_000,
    ("agents/research-1", 1): 4_210,
    ("agents/research-1", 2): 31_870,
    ("agents/coder-1", 0): 1_240_000,
    ("agents/coder-1", 1): 41,
    ("agents/nightly-batch", 0): 9_800_000,
    ("agents/nightly-batch", 1): 310,
    ("pool:coders", 0): 1_240_000,
}
SUSPENDED = ["agents/coder-2"]


def example_project(folder: Path, redis_port: int) -> Path:
    """Pulumi.yaml and Pulumi.prod.yaml, the Redis URL pointed at the local server (no TLS), with the coders' pool."""
    document = yaml.safe_load((ROOT / f"Pulumi.{EXAMPLE_STACK}.yaml").read_text(encoding="utf-8"))
    config = document["config"]
    config["agent-budgets:redis"] = {"mode": "external", "url": f"localhost:{redis_port}"}
    config["agent-budgets:suspended"] = list(SUSPENDED)
    config["agent-budgets:budgets"]["pools"] = POOLS
    config["agent-budgets:budgetPolicy"]["classSlots"] = CLASS_SLOTS
    for key in ("openaiApiKey", "anthropicApiKey", "redisPassword"):
        config[f"agent-budgets:{key}"] = {"secure": "v1:example"}
    (folder / "Pulumi.yaml").write_bytes((ROOT / "Pulumi.yaml").read_bytes())
    (folder / f"Pulumi.{EXAMPLE_STACK}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return folder


def seed_counters(client: Any, project: Path) -> None:
    """Write each counter for the window of NOW as ratelimit does: INCRBY, then EXPIRE."""
    validated = load_stack(project, EXAMPLE_STACK).validate()
    namespace = validated.settings.gateway.namespace
    actors = sorted({actor for actor, _ in COUNTERS if not actor.startswith("pool:")})
    plan = spend.plan_counters(actors, validated.rules, namespace, BUDGET_POLICY_NAME, NOW)
    planned = {(c.actor or c.budget, c.limit_index): c for c in plan.counters}
    assert set(planned) == set(COUNTERS), "Pulumi.prod.yaml's budgets moved"
    pipeline = client.pipeline(transaction=False)
    for pair, counter in planned.items():
        pipeline.incrby(counter.key, COUNTERS[pair])
        pipeline.expire(counter.key, counter.resets_at - counter.window_start)
    pipeline.execute()


def run_spend(project: Path, password: str, options: Sequence[str]) -> tuple[int, str, str]:
    args = cli.build_parser().parse_args(["--project-dir", str(project), "--stack", EXAMPLE_STACK, *options])
    out, err = io.StringIO(), io.StringIO()
    status = cli.run(args, out, err, clock=lambda: NOW, environ={cli.PASSWORD_ENV: password})
    return status, out.getvalue(), err.getvalue()


def _session(command: str, status: int, out: str, err: str) -> str:
    text = f"$ {command}\n{out}{err}"
    if status:
        text += f"$ echo $?\n{status}\n"
    return "```console\n" + text + "```\n"


def field_table(fields: dict[str, str], header: str) -> str:
    lines = [f"| {header} | meaning |", "| --- | --- |"]
    lines += [f"| `{name}` | {meaning} |" for name, meaning in fields.items()]
    return "\n".join(lines) + "\n"


# One actor of each identity source, as the dev stacks name them (Pulumi.dev.yaml, Pulumi.dev-kubernetes.yaml).
EXAMPLE_ACTORS = {
    "substrate": "agents/actor-a",
    "kubernetes": "serviceaccount:agents/actor-a",
    "apiKeys": "apikey:actor-key",
}


def actor_id_table() -> str:
    """Each identity source's actor as the stack and the report's `actor` write it, and the `x-actor-id` value its
    calls carry: the report's `subject` and the metrics' `actor_id` label."""
    assert set(EXAMPLE_ACTORS) == set(SOURCES), "an identity source has no example actor"
    lines = ["| identity source | `actor` (as in `agent-budgets:actors`) | `subject`, `x-actor-id` and `actor_id` |"]
    lines.append("| --- | --- | --- |")
    for source in SOURCES:
        actor = EXAMPLE_ACTORS[source]
        lines.append(f"| `{source}` ({SOURCE_TITLES[source]}) | `{actor}` | `{actor_header_value(actor)}` |")
    return "\n".join(lines) + "\n"


def metric_table() -> str:
    lines = ["| metric (gauge) | meaning |", "| --- | --- |"]
    lines += [f"| `{gauge.name}` | {gauge.help} |" for gauge in (*spend.PROMETHEUS_GAUGES, spend.REPORT_TIMESTAMP)]
    lines.append("")
    lines.append(
        f"Every series but the last carries the labels {', '.join(f'`{x}`' for x in spend.PROMETHEUS_LABELS)}."
    )
    return "\n".join(lines) + "\n"


def generate(redis_port: int, password: str, client: Any) -> dict[str, str]:
    """Every generated block of docs/spend.md, by name."""
    with tempfile.TemporaryDirectory(prefix="agent-budgets-spend-example-") as folder:
        project = example_project(Path(folder), redis_port)
        client.flushall()
        seed_counters(client, project)
        make = f"make spend STACK={EXAMPLE_STACK}"
        runs: dict[str, tuple[str, Sequence[str]]] = {
            "table": (make, []),
            "over": (f"{make} ARGS='--over 90'", ["--over", "90"]),
            "json": (f"{make} ARGS='--json --actor agents/coder-1'", ["--json", "--actor", "agents/coder-1"]),
            "research": (f"{make} ARGS='--actor agents/research-1'", ["--actor", "agents/research-1"]),
            "pool": (f"{make} ARGS='--actor agents/coder-1'", ["--actor", "agents/coder-1"]),
            "prometheus": (
                f"{make} ARGS='--prometheus --actor agents/research-1'",
                ["--prometheus", "--actor", "agents/research-1"],
            ),
            "fail-over": (f"{make} ARGS='--fail-over 90 --over 90'", ["--fail-over", "90", "--over", "90"]),
        }
        blocks = {
            name: _session(command, *run_spend(project, password, options)) for name, (command, options) in runs.items()
        }
        client.flushall()
    blocks["json-fields"] = (
        field_table(spend.JSON_TOP_FIELDS, "field") + "\n" + field_table(spend.JSON_ROW_FIELDS, "row field")
    )
    blocks["metrics"] = metric_table()
    blocks["actor-ids"] = actor_id_table()
    return blocks


def replace_blocks(text: str, blocks: dict[str, str]) -> str:
    """The page with every GENERATED block's body replaced (scripts/doc_blocks.py); a block the page lacks is
    an error."""
    return doc_blocks.replace_blocks(text, blocks, "docs/spend.md")


def main(argv: list[str] | None = None, start: Callable[..., Any] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the committed blocks are current")
    args = parser.parse_args(argv)
    from tests.support.redis_server import local_redis

    with (start or local_redis)("example-redis-password") as server:
        blocks = generate(server.port, server.password, server.client())
    return doc_blocks.sync_document(
        DOC,
        blocks,
        check=args.check,
        command="venv/bin/python scripts/spend_example.py",
        shown_as=str(DOC.relative_to(ROOT)),
    )


if __name__ == "__main__":
    raise SystemExit(main())

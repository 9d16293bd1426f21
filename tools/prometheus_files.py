"""`python -m tools.prometheus_files`: a stack's alerts and scrape jobs as plain Prometheus files, for a
Prometheus the Prometheus Operator does not manage (docs/spend.md).

* `rules`: a rule file (`rule_files:` in prometheus.yml) holding exactly the groups of the PrometheusRule the
  program creates with `monitoring.prometheusRules` (core.monitoring, core.monitors).
* `scrape-configs`: the `scrape_configs:` entries the operator would generate for the program's PodMonitors
  (core.monitors.scrape_configs), so the series carry the same labels the alerts expect.

Like `make spend`, it reads `Pulumi.<stack>.yaml` and validates it with the program's own checks; it needs no
cluster, no Pulumi CLI and no secret (none is read), and it works whether or not `monitoring.prometheusRules`
is on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from core.monitoring import prometheus_rule_manifest
from core.monitors import scrape_configs
from core.settings import ConfigError
from core.validation import validate_stack
from tools.spend.stack import StackError, find_project_dir, load_stack

EXIT_INPUT = 2


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the alert expressions) as `|` blocks, as a person would write them."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.prometheus_files", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("rules", "scrape-configs"), help="which file to print on stdout")
    parser.add_argument("--stack", default="dev", help="reads Pulumi.<STACK>.yaml (default: %(default)s)")
    parser.add_argument(
        "--project-dir",
        type=Path,
        default=None,
        help="the folder holding Pulumi.yaml (default: the nearest one at or above the current folder)",
    )
    return parser


def document(what: str, stack_name: str, project_dir: Path) -> dict[str, Any]:
    """The YAML document to print; raises StackError or ConfigError for a stack that cannot be read."""
    stack = load_stack(project_dir, stack_name)
    # Neither file holds or needs a secret: secrets count as set, so a checkout without them still works.
    validated = validate_stack(stack.raw, lambda key: (True, True))
    if what == "rules":
        manifest = prometheus_rule_manifest(validated.settings, validated.rules, stack.name)
        return {"groups": manifest.spec["groups"]}
    return {"scrape_configs": scrape_configs(validated.settings)}


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Everything after option parsing; returns the exit status."""
    try:
        project_dir = args.project_dir or find_project_dir(Path.cwd())
        content = document(args.what, args.stack, project_dir)
    except StackError as error:
        print(f"prometheus_files: {error}", file=stderr)
        return EXIT_INPUT
    except ConfigError as error:
        print(f"prometheus_files: stack {args.stack!r}: {error}", file=stderr)
        return EXIT_INPUT
    stdout.write(f"# agent-budgets {args.what} of stack {args.stack}: python -m tools.prometheus_files\n")
    yaml.dump(content, stdout, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv), sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

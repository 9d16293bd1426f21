"""`python -m tools.egress_orphans`: the egress policies in a stack's atespaces that the stack does not own.

A policy belongs to a stack while its actor is in the stack's `agent-budgets:actors` (its shard records it, or
the next `pulumi up` adopts it). Any other policy in the atespaces of those actors is the stack's no longer (an
actor removed from the stack, left behind by an interrupted `up`) or never was (made by hand or by another
tool): this command lists them and, with `--delete`, deletes them. See docs/egress-policies.md.

`kubectl ate` has no command that lists egress policies (core/egress/orphans.py says where upstream shows it),
so the command lists the actors of each atespace (`kubectl ate get actors -a <atespace> -o json`), then reads
the policy of each actor the stack does not declare (`get egress-policy <actor> -a <atespace> -o json`, as the
provider reads it). With `--delete` each policy found is deleted guarded by the uid and version just read
(`delete egress-policy --uid --version`): a policy changed or recreated since is left and reported.

Reads `Pulumi.<stack>.yaml` and validates it with the program's own code (no Pulumi CLI, no state); reaches
the cluster with the stack's `kubernetes.context`, `kubernetes.kubeconfig` and `substrate.egress.kubectl`.

Exit status: 0 no policy the stack does not own is left (none found, or all deleted); 1 some are left (a dry
run found them, or `--delete` left one that changed since it was read); 2 bad input (options, unknown stack,
invalid configuration, no atespace to check); 3 `kubectl ate` failed (could not list, read or delete).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from core.egress import (
    ABORTED,
    ACTOR_NOT_FOUND,
    NOT_FOUND,
    PLUGIN_MISSING,
    EgressConfigError,
    Orphan,
    OutputError,
    actor_ref_problems,
    atespaces_of,
    classify_failure,
    parse_actor_list,
    parse_actor_ref,
    render_report,
    unowned,
)
from core.identity import SUBSTRATE
from core.settings import ConfigError
from core.validation import egress_settings, manages_egress_policies
from tools.kubeconfig import kubeconfig_file
from tools.spend.cli import InputError, kubeconfig_setting
from tools.spend.stack import StackError, find_project_dir, load_stack

EXIT_OK, EXIT_LEFT, EXIT_INPUT, EXIT_CLI = 0, 1, 2, 3

DESCRIPTION = """\
List the Substrate egress policies in the stack's atespaces that the stack does not own (their actor is not
in agent-budgets:actors), and delete them with --delete. A dry run by default: nothing is changed unless
--delete is given."""

EPILOG = f"""\
The atespaces checked are those of the stack's Substrate actors, and each --atespace. An atespace whose last
actor left the stack is no longer among them: name it with --atespace. Every policy of an actor the stack does
not declare is listed, whoever made it: "other rules" marks one whose rules are not the ones this stack writes
(likely someone else's). Deleting a policy denies all of its actor's egress.

exit status: {EXIT_OK} none left; {EXIT_LEFT} some left (found by a dry run, or changed since read);
{EXIT_INPUT} bad input; {EXIT_CLI} kubectl ate failed.

examples:
  make egress-orphans STACK=dev
  python -m tools.egress_orphans --stack prod --atespace retired-team
  python -m tools.egress_orphans --stack prod --delete"""


class AteCallError(Exception):
    """A `kubectl ate` call failed or printed something unexpected (exit status 3)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.egress_orphans",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", default="dev", help="the stack whose Pulumi.<stack>.yaml is read (default: dev)")
    parser.add_argument("--project-dir", type=Path, default=None, help="the folder holding Pulumi.yaml")
    parser.add_argument(
        "--atespace",
        action="append",
        default=[],
        metavar="NAME",
        help="check this atespace too (repeatable), e.g. one whose last actor left the stack",
    )
    parser.add_argument(
        "--delete",
        action="store_true",
        help="delete every policy listed, each guarded by the uid and version read (default: a dry run)",
    )
    parser.add_argument(
        "--kubectl", metavar="PATH", default=None, help="the kubectl to run (default: substrate.egress.kubectl)"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="the kubeconfig file holding kubernetes.context, instead of the stack's kubernetes.kubeconfig (needed "
        "when that is a secret, which this command does not decrypt, unless $KUBECONFIG holds the context)",
    )
    return parser


@dataclass(frozen=True)
class Ate:
    """`kubectl ate` with the stack's context and kubeconfig, each call bounded by the stack's timeout."""

    kubectl: str
    context: str
    kubeconfig: str | None
    timeout: float

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """One call; the flags after the plugin name (kubectl refuses them before it)."""
        argv = [self.kubectl, "ate", *args, "--context", self.context]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        command = shlex.join(argv)
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except FileNotFoundError as exc:
            raise AteCallError(f"cannot run {self.kubectl!r} for `{command}`: {exc.strerror}") from exc
        except subprocess.TimeoutExpired as exc:
            raise AteCallError(f"`{command}` did not finish within {self.timeout:g}s") from exc
        return result

    def failure(self, result: subprocess.CompletedProcess[str], what: str) -> AteCallError:
        said = _last_line(result.stderr) or _last_line(result.stdout) or f"exit status {result.returncode}"
        if classify_failure(result.stderr + "\n" + result.stdout) == PLUGIN_MISSING:
            said = (
                f"{self.kubectl} has no `ate` plugin: build kubectl-ate at the stack's substrate.ref and put it on "
                "PATH (docs/egress-policies.md, Where `kubectl ate` comes from)"
            )
        return AteCallError(f"`{shlex.join(result.args)}` failed ({what}): {said}")

    def actors(self, atespace: str) -> list[str]:
        result = self.run("get", "actors", "-a", atespace, "-o", "json")
        if result.returncode != 0:
            raise self.failure(result, f"listing the actors of atespace {atespace}")
        try:
            return parse_actor_list(result.stdout)
        except OutputError as exc:
            raise AteCallError(f"`{shlex.join(result.args)}` printed {exc}; check the kubectl-ate version") from None

    def policy(self, ref: str) -> dict[str, Any] | None:
        """The actor's policy, or None (no policy, or the actor is gone since it was listed)."""
        atespace, name = parse_actor_ref(ref)
        result = self.run("get", "egress-policy", name, "-a", atespace, "-o", "json")
        if result.returncode == 0 and result.stdout.strip():
            try:
                document = json.loads(result.stdout)
            except json.JSONDecodeError:
                raise AteCallError(f"`{shlex.join(result.args)}` printed something that is not JSON") from None
            if isinstance(document, dict) and isinstance(document.get("metadata"), dict):
                return document
            raise AteCallError(f"`{shlex.join(result.args)}` printed a policy without metadata")
        if classify_failure(result.stderr + "\n" + result.stdout) in (NOT_FOUND, ACTOR_NOT_FOUND):
            return None
        raise self.failure(result, f"reading the egress policy of {ref}")

    def delete(self, orphan: Orphan) -> str:
        """Delete the policy if it is still the one read: ``deleted``, ``gone`` or ``left: <why>``."""
        atespace, name = parse_actor_ref(orphan.ref)
        guard = ["--uid", orphan.recorded.uid, "--version", orphan.recorded.version]
        result = self.run("delete", "egress-policy", name, "-a", atespace, *guard)
        if result.returncode == 0:
            return "deleted"
        kind = classify_failure(result.stderr + "\n" + result.stdout)
        if kind in (NOT_FOUND, ACTOR_NOT_FOUND):
            return "gone"
        if kind == ABORTED:
            return "left: changed or recreated since it was read; run the command again"
        raise self.failure(result, f"deleting the egress policy of {orphan.ref}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _check_atespaces(names: Sequence[str]) -> None:
    for name in names:
        if actor_ref_problems(f"{name}/x"):
            raise InputError(f"--atespace {name!r} is not an atespace name: a DNS label (lowercase, digits, '-')")


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO, environ: dict[str, str] | None = None) -> int:
    """Everything after option parsing; returns the exit status."""
    environ = dict(os.environ) if environ is None else environ
    try:
        _check_atespaces(args.atespace)
        project_dir = args.project_dir or find_project_dir(Path.cwd())
        stack = load_stack(project_dir, args.stack)
        settings = stack.validate().settings
        declared = settings.actors_of(SUBSTRATE)
        owned = declared if manages_egress_policies(settings) else []
        atespaces = atespaces_of(declared, args.atespace)
        if not atespaces:
            raise InputError(
                f"no atespace to check: stack {args.stack} has no Substrate actor. Name the atespaces with --atespace"
            )
        kubeconfig_value = kubeconfig_setting(stack, settings, args, environ)
    except (StackError, InputError) as error:
        print(f"egress-orphans: {error}", file=stderr)
        return EXIT_INPUT
    except (ConfigError, EgressConfigError) as error:
        print(f"egress-orphans: stack {args.stack!r}: {error}", file=stderr)
        return EXIT_INPUT
    egress = egress_settings(settings)
    stack_fingerprint = egress.shard_inputs(0, []).fingerprint()
    try:
        with kubeconfig_file(kubeconfig_value) as kubeconfig:
            ate = Ate(args.kubectl or egress.kubectl, egress.kube_context, kubeconfig, float(egress.timeout_seconds))
            listed = [ref for atespace in atespaces for ref in ate.actors(atespace)]
            candidates = unowned(listed, owned)
            with ThreadPoolExecutor(max_workers=egress.concurrency, thread_name_prefix="kubectl-ate") as pool:
                policies = dict(zip(candidates, pool.map(ate.policy, candidates), strict=True))
                orphans = [Orphan.of(ref, p, stack_fingerprint) for ref, p in policies.items() if p is not None]
                if args.delete:
                    outcomes = list(pool.map(ate.delete, orphans))
                    orphans = [replace(o, outcome=outcome) for o, outcome in zip(orphans, outcomes, strict=True)]
    except AteCallError as error:
        print(f"egress-orphans: {error}", file=stderr)
        return EXIT_CLI
    stdout.write(render_report(args.stack, atespaces, len(listed), len(candidates), orphans, args.delete))
    left = [o for o in orphans if not args.delete or o.outcome.startswith("left")]
    return EXIT_LEFT if left else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

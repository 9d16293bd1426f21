"""`python -m tools.spend`: the spend report of one stack. See docs/spend.md.

Reads `Pulumi.<stack>.yaml`, validates it with the program's own code, asks the rate-limit model for each
(actor, limit) counter of the current window, reads them all from Redis in one round trip and prints the
report. Nothing is written anywhere.

Exit status: 0 report printed; 1 `--fail-over` found a row at or above its threshold; 2 bad input (options,
unknown stack, invalid configuration, unknown actor); 3 the counters could not be read (kubectl, Redis
unreachable, password refused).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from core import spend
from core.identity import actor_header_value
from core.manifests import BUDGET_POLICY_NAME
from core.platform_values import PASSWORD_KEY, REDIS_AUTH_SECRET, REDIS_NAME, REDIS_PORT
from core.settings import SECRET_PLACEHOLDER, ConfigError, StackSettings
from tools.kubeconfig import expand_path, kubeconfig_file
from tools.spend.kube import Kubectl, KubeError, TerminatedError, port_forward
from tools.spend.stack import StackConfig, StackError, find_project_dir, load_stack
from tools.spend.store import CounterReadError, CounterStore, RedisEndpoint, connect, split_auth

EXIT_OK, EXIT_OVER, EXIT_INPUT, EXIT_READ = 0, 1, 2, 3
PASSWORD_ENV = "AGENT_BUDGETS_REDIS_PASSWORD"
SENTINEL_PASSWORD_ENV = "AGENT_BUDGETS_REDIS_SENTINEL_PASSWORD"

DESCRIPTION = """\
Who spent what, who is near the limit, and when each window resets: one line per actor and limit, and
one per pool limit (the counter its members share), read from the rate-limit counters the gateway keeps
in Redis, most used first.

The stack's budgets come from Pulumi.<stack>.yaml (no Pulumi CLI needed) and are checked with the
program's own validation. The in-cluster Redis is reached through a kubectl port-forward (stopped when
the report ends) with the password from its Kubernetes Secret; an external Redis (redis.mode: external)
at redis.url, with the password from an environment variable."""

EPILOG = f"""\
"spent" is what the rate-limit service has charged in the current window: the token counts Agent Router
reported at the end of each admitted response. The call that crosses a limit is admitted and charged in
full, so spent can exceed the limit by one response; calls made while Redis or the rate-limit service was
down (fail-open) were not counted. Windows are fixed and UTC-aligned (a Day resets at 00:00 UTC).

exit status: {EXIT_OK} report printed; {EXIT_OVER} --fail-over found a row at or above PCT; {EXIT_INPUT} bad input
(unknown stack, invalid configuration, unknown actor, bad option); {EXIT_READ} the counters could not be
read (kubectl failed, Redis unreachable or refused the password).

examples:
  make spend STACK=dev
  python -m tools.spend --stack prod --over 80
  python -m tools.spend --stack prod --prometheus > /var/lib/node_exporter/agent_budgets.prom
  python -m tools.spend --stack prod --fail-over 90 || notify-team"""


def percent(text: str) -> float:
    """An argparse type: a percentage, 0 or more (100 = at the limit; above 100 = over it)."""
    try:
        value = float(text)
        spend.percent_threshold(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (a number, 0 or more, e.g. 80)") from None
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Every option, each explained in --help."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.spend",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--stack", default="dev", help="the stack to report on: reads Pulumi.<STACK>.yaml (default: %(default)s)"
    )
    parser.add_argument(
        "--project-dir",
        type=Path,
        default=None,
        help="the folder holding Pulumi.yaml (default: the nearest one at or above the current folder)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help="print JSON with stable field names (documented in docs/spend.md) instead of a table",
    )
    output.add_argument(
        "--prometheus",
        action="store_true",
        help="print the same figures in the Prometheus text format, for a node-exporter textfile or a CronJob",
    )
    parser.add_argument(
        "--actor",
        metavar="ACTOR",
        help=(
            "only this actor and the pools it is in, as in agent-budgets:actors (<atespace>/<name>, "
            "serviceaccount:<namespace>/<name> or apikey:<name>) or as its x-actor-id (actor/<atespace>/<name>, ...)"
        ),
    )
    parser.add_argument(
        "--over",
        metavar="PCT",
        type=percent,
        help="only rows at or above PCT percent of their limit (e.g. 80; 100 = at the limit)",
    )
    parser.add_argument(
        "--fail-over",
        metavar="PCT",
        type=percent,
        help=f"exit with status {EXIT_OVER} when any row (of --actor, if given) is at or above PCT percent; "
        "the report is printed either way (for cron jobs and CI)",
    )
    parser.add_argument(
        "--password-env",
        metavar="NAME",
        default=PASSWORD_ENV,
        help="external Redis only: the environment variable holding its password, or user:password for an ACL "
        "user (default: %(default)s)",
    )
    parser.add_argument(
        "--sentinel-password-env",
        metavar="NAME",
        default=SENTINEL_PASSWORD_ENV,
        help="external Redis with redis.sentinelPasswordConfig only: the environment variable holding the "
        "Sentinels' own password, or user:password (default: %(default)s)",
    )
    parser.add_argument(
        "--kubectl", metavar="PATH", default="kubectl", help="in-cluster Redis only: the kubectl binary to use"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="in-cluster Redis only: the kubeconfig file holding kubernetes.context, instead of the stack's "
        "kubernetes.kubeconfig (needed when that is a secret, which this report does not decrypt, unless "
        "$KUBECONFIG holds the context)",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=30.0,
        help="give up on kubectl or Redis after this long (default: %(default)g)",
    )
    return parser


class InputError(Exception):
    """Bad input the user must fix (exit status 2)."""


def resolve_actor(settings: StackSettings, actor: str) -> str:
    """The actor id of `--actor` (written as in `actors`, or as its `x-actor-id`), or InputError naming the actors
    the stack has."""
    for known in settings.actors:
        if actor in (known, actor_header_value(known)):
            return known
    listed = ", ".join(settings.actors[:10]) + (
        f" and {len(settings.actors) - 10} more" if len(settings.actors) > 10 else ""
    )
    raise InputError(
        f"unknown actor {actor!r}: it is not in agent-budgets:actors of this stack (which has {listed or 'none'}). "
        "Write it as in agent-budgets:actors: <atespace>/<name>, serviceaccount:<namespace>/<name> or apikey:<name>"
    )


def kubeconfig_setting(
    stack: StackConfig, settings: StackSettings, args: argparse.Namespace, environ: dict[str, str]
) -> str | None:
    """The kubeconfig value to hand kubectl (a path or contents; None: kubectl's own default).

    `--kubeconfig` wins. A `kubernetes.kubeconfig` stored as a secret cannot be read without the Pulumi CLI: then
    `$KUBECONFIG` is used when set, else the user is told how to fix it (InputError).
    """
    if args.kubeconfig:
        path = expand_path(args.kubeconfig)
        if not os.path.isfile(path):
            raise InputError(f"--kubeconfig {args.kubeconfig}: no such file. Give the path of a kubeconfig file")
        return path
    configured = settings.kubernetes.kubeconfig
    if configured == SECRET_PLACEHOLDER and stack.secret_state("kubernetes")[1]:
        if environ.get("KUBECONFIG"):
            return None  # kubectl reads $KUBECONFIG itself
        raise InputError(
            f"agent-budgets:kubernetes.kubeconfig is a secret in {stack.path.name}, which this report cannot "
            f"decrypt (it reads the stack file, not the Pulumi backend): pass --kubeconfig PATH to a kubeconfig "
            f"file holding context {settings.kubernetes.context!r}, or export KUBECONFIG=PATH"
        )
    return configured


def secret_from_env(environ: dict[str, str], name: str, option: str) -> tuple[str | None, str | None, str]:
    """(user, password, where it came from) of a secret read from environment variable `name`."""
    secret = environ.get(name)
    username, password = split_auth(secret)
    source = f"environment variable {name}"
    if secret is None:
        source += f" (not set: export it, or name another one with {option})"
    return username, password, source


@contextmanager
def open_counters(
    settings: StackSettings, args: argparse.Namespace, environ: dict[str, str], kubeconfig_value: str | None
) -> Iterator[CounterStore]:
    """A connection to the stack's Redis: through a port-forward in-cluster, directly when external."""
    redis = settings.redis
    if redis.mode == "external":
        assert redis.url is not None  # validated
        username, password, source = secret_from_env(environ, args.password_env, "--password-env")
        sentinel_auth = redis.type == "sentinel" and bool(redis.sentinel_password_config)
        sentinel_username, sentinel_password, sentinel_source = (
            secret_from_env(environ, args.sentinel_password_env, "--sentinel-password-env")
            if sentinel_auth
            else (None, None, "")
        )
        private_ca = " and the CA of redis.tlsCaCertificate" if redis.tls and redis.tls_ca_certificate else ""
        endpoint = RedisEndpoint.from_url(
            redis.type,
            redis.url,
            where=f"external Redis {redis.url} ({redis.type}{', TLS' + private_ca if redis.tls else ''})",
            tls=redis.tls,
            ca_pem=redis.tls_ca_certificate if redis.tls else None,
            username=username,
            password=password,
            password_source=source,
            sentinel_auth=sentinel_auth,
            sentinel_username=sentinel_username,
            sentinel_password=sentinel_password,
            sentinel_password_source=sentinel_source,
            timeout=args.timeout,
        )
        with connect(endpoint) as store:
            yield store
        return
    with kubeconfig_file(kubeconfig_value) as kubeconfig:
        kubectl = Kubectl(settings.kubernetes.context, kubeconfig, args.kubectl, timeout=args.timeout)
        secret = kubectl.secret_value(redis.namespace, REDIS_AUTH_SECRET, PASSWORD_KEY)
        username, password = split_auth(secret)
        with port_forward(kubectl, redis.namespace, f"service/{REDIS_NAME}", REDIS_PORT, args.timeout) as local:
            endpoint = RedisEndpoint(
                kind="single",
                nodes=(("127.0.0.1", local),),
                where=(
                    f"the in-cluster Redis {redis.namespace}/{REDIS_NAME} (context {settings.kubernetes.context}, "
                    f"through kubectl port-forward on 127.0.0.1:{local})"
                ),
                username=username,
                password=password,
                password_source=f"Secret {redis.namespace}/{REDIS_AUTH_SECRET}",
                timeout=args.timeout,
            )
            with connect(endpoint) as store:
                yield store


def render(report: spend.SpendReport, args: argparse.Namespace) -> str:
    """The report in the requested format."""
    if args.json:
        return spend.render_json(report)
    if args.prometheus:
        return spend.render_prometheus(report)
    return spend.render_table(report)


def run(
    args: argparse.Namespace,
    stdout: TextIO,
    stderr: TextIO,
    clock: Callable[[], float] = time.time,
    environ: dict[str, str] | None = None,
) -> int:
    """Everything after option parsing; returns the exit status."""
    environ = dict(os.environ) if environ is None else environ
    try:
        project_dir = args.project_dir or find_project_dir(Path.cwd())
        stack = load_stack(project_dir, args.stack)
        validated = stack.validate()
        settings = validated.settings
        actors = [resolve_actor(settings, args.actor)] if args.actor else list(settings.actors)
        kubeconfig_value = (
            kubeconfig_setting(stack, settings, args, environ) if settings.redis.mode == "in-cluster" else None
        )
    except (StackError, InputError) as error:
        print(f"spend: {error}", file=stderr)
        return EXIT_INPUT
    except ConfigError as error:
        print(f"spend: stack {args.stack!r} ({stack.path.name}): {error}", file=stderr)
        return EXIT_INPUT
    policy_namespace = settings.gateway.namespace
    try:
        with open_counters(settings, args, environ, kubeconfig_value) as store:
            # The window is decided after connecting (a port-forward can take seconds) and just before reading.
            now = int(clock())
            plan = spend.plan_counters(
                actors,
                validated.rules,
                policy_namespace,
                BUDGET_POLICY_NAME,
                now,
                suspended=set(settings.suspended),
                listed=settings.actors,
            )
            values = store.read(plan.keys)
    except (KubeError, CounterReadError, TerminatedError) as error:
        print(f"spend: {error}", file=stderr)
        return EXIT_READ
    try:
        report = spend.build_report(args.stack, f"{policy_namespace}/{BUDGET_POLICY_NAME}", now, plan, values)
    except spend.SpendError as error:
        print(f"spend: {error}", file=stderr)
        return EXIT_READ
    shown = report if args.over is None else spend.with_rows(report, spend.rows_at_or_above(report.rows, args.over))
    stdout.write(render(shown, args))
    if args.fail_over is not None:
        over = spend.rows_at_or_above(report.rows, args.fail_over)
        if over:
            names = ", ".join(
                f"{row.counter.actor or 'pool'} ({row.counter.budget}, {spend.format_percent(row)})" for row in over
            )
            print(f"spend: {len(over)} row(s) at or above {args.fail_over:g}%: {names}", file=stderr)
            return EXIT_OVER
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Parse options and run; the exit status is returned (argparse exits 2 itself on a bad option)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:  # the port-forward has been stopped on the way out
        print("spend: interrupted", file=sys.stderr)
        return 130

"""`make spend` never answers with a traceback: property-based tests of what its user types.

Two inputs are generated: the options (`--stack`, `--actor`, `--over`, `--fail-over`, the output flags, in any
order, with odd text and numbers, as a shell would hand them over, lone surrogates included: Python decodes
undecodable bytes of argv to them), and the stack file itself (the generated stack files of
tests/support/stack_files.py, written as YAML, some of its bytes mangled: not UTF-8, cut short, a tab). Whatever
the input, the command ends as docs/spend.md documents: argparse's usage error (status 2), or
`tools.spend.cli.run`'s status 0 (report), 1 (`--fail-over` found a row, report printed), 2 (bad input) or 3
(counters unreadable), every failure one `spend: ` message, and the report UTF-8 text.

The counters are read from the session's real redis-server through a stack with an external Redis; the other
stacks' kubectl is a path that does not exist, so they end at status 3 without a cluster.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.support.mutations import EXTREME_NUMBERS, odd_characters, odd_text
from tests.support.properties import examples, explore_deadline
from tests.support.stack_files import ROOT, SECURE_VALUE, STACK_DOCUMENTS, GeneratedStack, stack_files
from tools.spend import cli

STATUSES = {cli.EXIT_OK, cli.EXIT_OVER, cli.EXIT_INPUT, cli.EXIT_READ}
LOCAL_STACK = "local"
GENERATED_STACK = "generated"
MISSING_KUBECTL = "/nonexistent/kubectl-for-property-tests"


def local_stack(port: int, actors: list[str]) -> dict[str, Any]:
    """The dev stack's budgets over an external Redis: the session's redis-server (`localhost`, because Envoy
    Gateway's url check refuses an IP address followed by a port)."""
    config = dict(STACK_DOCUMENTS["dev"]["config"])
    config["agent-budgets:actors"] = actors
    config["agent-budgets:redis"] = {"mode": "external", "url": f"localhost:{port}"}
    config["agent-budgets:redisPassword"] = SECURE_VALUE
    return {"config": config}


@pytest.fixture(scope="module")
def project(tmp_path_factory, redis_server) -> tuple[Path, dict[str, str], list[str]]:
    """A project folder with the repository's stack files and the local one; the environment that reads it."""
    folder = tmp_path_factory.mktemp("spend-properties")
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    for name in STACK_DOCUMENTS:
        shutil.copy(ROOT / f"Pulumi.{name}.yaml", folder / f"Pulumi.{name}.yaml")
    actors = list(STACK_DOCUMENTS["dev"]["config"]["agent-budgets:actors"])
    (folder / f"Pulumi.{LOCAL_STACK}.yaml").write_text(
        yaml.safe_dump(local_stack(redis_server.port, actors)), encoding="utf-8"
    )
    client = redis_server.client()
    client.flushall()
    client.close()
    return folder, {cli.PASSWORD_ENV: redis_server.password}, actors


def run_spend(folder: Path, environ: dict[str, str], options: list[str]) -> tuple[int, str, str, Any]:
    """`main` as `make spend` runs it, with a fixed clock; (status, stdout, stderr, parsed options or None)."""
    argv = ["--project-dir", str(folder), "--kubectl", MISSING_KUBECTL, "--timeout", "2", *options]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = cli.build_parser().parse_args(argv)
        except SystemExit as exit:
            return int(exit.code or 0), out.getvalue(), err.getvalue(), None
    status = cli.run(args, out, err, clock=lambda: 1_790_000_000.5, environ=environ)
    return status, out.getvalue(), err.getvalue(), args


def check_outcome(status: int, out: str, err: str, args: Any) -> None:
    """The documented statuses and messages, and nothing else."""
    note(f"status {status}\nstdout: {out[:1000]}\nstderr: {err[:1000]}")
    assert "Traceback" not in err
    if args is None:
        assert status == cli.EXIT_INPUT and "usage: python -m tools.spend" in err, "argparse's own usage error"
        return
    assert status in STATUSES
    if status in (cli.EXIT_OK, cli.EXIT_OVER):
        assert out.strip(), "a report is printed"
        out.encode("utf-8")  # stdout is strict UTF-8: a report must be text it can write
    if status == cli.EXIT_OVER:
        assert args.fail_over is not None
        assert err.startswith("spend: ")
    if status in (cli.EXIT_INPUT, cli.EXIT_READ):
        assert out == "" and err.startswith("spend: ") and err.count("\n") >= 1


def near(values: list[str]) -> st.SearchStrategy[str]:
    """A value the user meant, or that value with odd characters in it, or any odd text."""
    exact = st.sampled_from(values)
    edited = st.builds(
        lambda value, inserted, cut: value[:cut] + inserted + value[cut:],
        exact,
        st.lists(odd_characters, min_size=1, max_size=2).map("".join),
        st.integers(min_value=0, max_value=20),
    )
    return st.one_of(exact, edited, odd_text)


PERCENTAGES = st.one_of(
    st.sampled_from(["80", "0", "100", "99.5", "-1", "nan", "inf", "-inf", "1e309", "80%", "", " 80", "0x10", "1_000"]),
    st.sampled_from(EXTREME_NUMBERS).map(str),
    st.floats().map(str),
    st.integers().map(str),
    odd_text,
)


@st.composite
def spend_options(draw: st.DrawFn, actors: list[str]) -> list[str]:
    """`--stack`, `--actor`, `--over`, `--fail-over` and the output flags, any of them, in any order."""
    values = {
        "--stack": near([LOCAL_STACK, *STACK_DOCUMENTS, "missing"]),
        "--actor": near([*actors, *(f"actor/{actor}" for actor in actors)]),
        "--over": PERCENTAGES,
        "--fail-over": PERCENTAGES,
    }
    chosen = draw(st.lists(st.sampled_from([*values, "--json", "--prometheus"]), max_size=5))
    options: list[str] = []
    for option in chosen:
        if option in values:
            value = draw(values[option])
            options += draw(st.sampled_from([[option, value], [f"{option}={value}"]]))
        else:
            options.append(option)
    if draw(st.booleans()):
        options.append(draw(odd_text))  # a stray word
    return options


@settings(max_examples=examples(120), deadline=explore_deadline(10_000), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_options_end_with_a_documented_status_and_message(project, data) -> None:
    folder, environ, actors = project
    options = data.draw(spend_options(actors), label="options")
    check_outcome(*run_spend(folder, environ, options))


def test_the_local_stack_reports_from_the_real_redis(project):
    """The happy path of the property above exists: the local stack reads real counters (all zero here)."""
    folder, environ, actors = project
    status, out, err, _ = run_spend(folder, environ, ["--stack", LOCAL_STACK, "--json"])
    assert (status, err) == (cli.EXIT_OK, "")
    assert all(actor in out for actor in actors)


# ---------------------------------------------------------------------------------------------------------
# The stack file


def mangled(text: str, draw: st.DrawFn) -> bytes:
    """The stack file's bytes, maybe damaged the ways files get damaged."""
    data = text.encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none", "latin-1", "cut", "tab", "bom", "nul"]))
    note(f"file damage: {damage}")
    if damage == "latin-1":  # an editor saved it in Latin-1: `é` is the single byte 0xE9
        return data + "# résumé\n".encode("latin-1")
    if damage == "cut":
        return data[: draw(st.integers(min_value=0, max_value=len(data)))]
    if damage == "tab":
        return data.replace(b"\n  ", b"\n\t", 1)
    if damage == "bom":
        return b"\xef\xbb\xbf" + data
    if damage == "nul":
        return data + b"\x00"
    return data


# No deadline: a generated stack file may be thousands of lines, and PyYAML reads it at its own pace.
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated=stack_files(), data=st.data())
def test_any_stack_file_ends_with_a_documented_status_and_message(project, generated: GeneratedStack, data) -> None:
    folder, environ, _ = project
    text = yaml.safe_dump(generated.document, allow_unicode=False, sort_keys=False)
    (folder / f"Pulumi.{GENERATED_STACK}.yaml").write_bytes(mangled(text, data.draw))
    check_outcome(*run_spend(folder, environ, ["--stack", GENERATED_STACK]))

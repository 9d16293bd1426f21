"""`python -m tools.spend` end to end: a stack file, a real Redis on 127.0.0.1, and kubectl faked as
tests/fake_kubectl_spend.py describes (the two calls the report makes, answered as kubectl answers them).

Every output format and option is checked on real values, and so is every error path: unknown stack,
invalid configuration (the same message `pulumi preview` gives), unknown actor, Redis unreachable, wrong
password, a kube context that does not exist. The port-forward must be stopped whatever happens.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from core import spend
from core.settings import ConfigError
from core.validation import validate_stack
from tests.support.redis_server import free_port
from tests.test_spend_redis import DAY_START, NOW, charge, upstream_key
from tools.spend import cli
from tools.spend import stack as stack_module
from tools.spend.stack import StackError, duplicate_key, load_stack, project_defaults

ROOT = Path(__file__).resolve().parents[1]
FAKE_KUBECTL = Path(__file__).with_name("fake_kubectl_spend.py")
CONTEXT = "kind-spend-test"
ACTORS = ["agents/actor-a", "agents/actor-b", "agents/actor-c"]
BUDGETS = {
    "default": {"tokens": 500, "per": "Day"},
    "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}],
}


def write_project(folder: Path, stacks: dict[str, dict], project_config: dict | None = None) -> Path:
    project: dict = {"name": "agent-budgets", "runtime": "python"}
    if project_config:
        project["config"] = project_config
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    for name, config in stacks.items():
        document = {"config": {f"agent-budgets:{key}": value for key, value in config.items()}}
        (folder / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return folder


def in_cluster_config(**extra) -> dict:
    return {
        "kubernetes": {"context": CONTEXT},
        "actors": ACTORS,
        "budgets": BUDGETS,
        "budgetPolicy": {"exclusionSlots": 1},
        **extra,
    }


class FakeCluster:
    """The fake kubectl's state file and a PATH-ready kubectl that runs it."""

    def __init__(self, folder: Path, redis_port: int, password: str) -> None:
        self.state = folder / "kubectl-state.json"
        self.kubectl = folder / "kubectl"
        self.kubectl.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_KUBECTL}" "$@"\n', encoding="utf-8")
        self.kubectl.chmod(0o755)
        self.write(
            {
                "contexts": [CONTEXT],
                "secrets": {"agent-budgets-redis/redis-auth": {"password": password}},
                "services": {"agent-budgets-redis/redis": redis_port},
            }
        )

    def write(self, state: dict) -> None:
        self.state.write_text(json.dumps(state), encoding="utf-8")

    def read(self) -> dict:
        return json.loads(self.state.read_text(encoding="utf-8"))

    def port_forwards(self) -> list[dict]:
        return [call for call in self.read().get("calls", []) if "port-forward" in call["argv"]]


@pytest.fixture
def cluster(tmp_path, redis_db, monkeypatch):
    fake = FakeCluster(tmp_path, redis_db.port, redis_db.password)
    monkeypatch.setenv("FAKE_KUBECTL_SPEND", str(fake.state))
    monkeypatch.delenv("KUBECONFIG", raising=False)  # the fake's default kubeconfig is its state's contexts
    return fake


def spend_run(project: Path, *options: str, environ: dict | None = None, now: int = NOW, kubectl: Path | None = None):
    """Run the command as `main` would; return (exit status, stdout, stderr)."""
    argv = ["--project-dir", str(project), *options]
    if kubectl is not None:
        argv += ["--kubectl", str(kubectl)]
    args = cli.build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    status = cli.run(args, out, err, clock=lambda: now + 0.75, environ=environ or {})
    return status, out.getvalue(), err.getvalue()


def seed(redis_db) -> None:
    """actor-a 450 of 500 (90%), actor-b 1000 of 5000 (20%), actor-c nothing, as ratelimit writes them."""
    client = redis_db.client()
    charge(client, upstream_key(0, "actor/agents/actor-a", DAY_START), 450, 86_400, jitter=42)
    charge(client, upstream_key(1, "actor/agents/actor-b", DAY_START), 1000, 86_400)


def waited_for_stop(cluster: FakeCluster) -> set[int]:
    for _ in range(100):
        stopped = set(cluster.read().get("stopped", []))
        if {call["pid"] for call in cluster.port_forwards()} <= stopped:
            return stopped
        time.sleep(0.05)
    return set(cluster.read().get("stopped", []))


def test_table_through_a_port_forward_that_is_stopped_afterwards(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    status, out, err = spend_run(project, "--stack", "dev", kubectl=cluster.kubectl)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "ACTOR           BUDGET       LIMIT  SPENT  REMAINING   USED  RESETS (UTC)",
        "agents/actor-a  default    500/Day    450         50  90.0%  2026-12-01 00:00:00 (in 5h 12m)",
        "agents/actor-b  large    5,000/Day  1,000      4,000  20.0%  2026-12-01 00:00:00 (in 5h 12m)",
        "agents/actor-c  default    500/Day      0        500   0.0%  2026-12-01 00:00:00 (in 5h 12m)",
        "stack dev, policy agent-budgets/agent-budgets, at 2026-11-30T18:48:00Z: 3 row(s)",
    ]
    forwards = cluster.port_forwards()
    assert [call["argv"] for call in forwards] == [
        [
            "--context",
            CONTEXT,
            "-n",
            "agent-budgets-redis",
            "port-forward",
            "--address",
            "127.0.0.1",
            "service/redis",
            ":6379",
        ]
    ]
    assert {call["pid"] for call in forwards} <= waited_for_stop(cluster)
    assert all(redis_db.password not in " ".join(call["argv"]) for call in cluster.read()["calls"])


def test_json_has_the_documented_fields_and_real_values(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    status, out, _ = spend_run(project, "--json", kubectl=cluster.kubectl)
    document = json.loads(out)
    assert status == 0
    assert list(document) == list(spend.JSON_TOP_FIELDS)
    assert [list(row) for row in document["rows"]] == [list(spend.JSON_ROW_FIELDS)] * 3
    first = document["rows"][0]
    assert {k: first[k] for k in ("actor", "budget", "rule", "limit", "spent", "remaining", "used_percent")} == {
        "actor": "agents/actor-a",
        "budget": "default",
        "rule": 0,
        "limit": 500,
        "spent": 450,
        "remaining": 50,
        "used_percent": 90.0,
    }
    assert (first["resets_at"], first["resets_in_seconds"], first["refused"]) == ("2026-12-01T00:00:00Z", 18720, False)
    assert first["counter_key"] == upstream_key(0, "actor/agents/actor-a", DAY_START)
    assert (document["generated_at"], document["unmetered"]) == ("2026-11-30T18:48:00Z", [])


def test_prometheus_output_parses_with_the_reference_parser(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    status, out, _ = spend_run(project, "--prometheus", kubectl=cluster.kubectl)
    assert status == 0
    families = {family.name: family for family in text_string_to_metric_families(out)}
    # Only tokens limits in this stack: the usd and calls families are left out.
    wanted = {gauge.name for gauge in spend.PROMETHEUS_GAUGES if gauge.unit not in ("usd", "calls")}
    wanted |= {spend.REPORT_TIMESTAMP.name}
    assert set(families) == wanted
    assert all(family.type == "gauge" for family in families.values())

    def value(metric: str, actor: str) -> float:
        (sample,) = [s for s in families[metric].samples if s.labels.get("actor") == actor]
        return sample.value

    assert value("agent_budgets_spent_tokens", "agents/actor-a") == 450
    assert value("agent_budgets_used_ratio", "agents/actor-a") == 0.9
    assert value("agent_budgets_limit_tokens", "agents/actor-b") == 5000
    assert value("agent_budgets_remaining_tokens", "agents/actor-c") == 500
    assert value("agent_budgets_window_reset_timestamp_seconds", "agents/actor-a") == 1796083200
    (sample,) = families["agent_budgets_spent_tokens"].samples[:1]
    assert sample.labels == {
        "stack": "dev",
        "actor": "agents/actor-a",
        "budget": "default",
        "rule": "0",
        "limit": "0",
        "per": "Day",
    }
    assert families[spend.REPORT_TIMESTAMP.name].samples[0].value == NOW


def test_over_keeps_only_rows_at_or_above_the_share(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    status, out, _ = spend_run(project, "--json", "--over", "90", kubectl=cluster.kubectl)
    assert status == 0 and [row["actor"] for row in json.loads(out)["rows"]] == ["agents/actor-a"]
    status, out, _ = spend_run(project, "--json", "--over", "90.01", kubectl=cluster.kubectl)
    assert status == 0 and json.loads(out)["rows"] == []
    status, out, _ = spend_run(project, "--json", "--over", "20", kubectl=cluster.kubectl)
    assert [row["actor"] for row in json.loads(out)["rows"]] == ["agents/actor-a", "agents/actor-b"]


def test_fail_over_sets_the_exit_status_and_still_prints_the_report(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    status, out, err = spend_run(project, "--fail-over", "80", kubectl=cluster.kubectl)
    assert status == cli.EXIT_OVER
    assert "agents/actor-a" in out and "agents/actor-c" in out
    assert err == "spend: 1 row(s) at or above 80%: agents/actor-a (default, 90.0%)\n"
    status, _, err = spend_run(project, "--fail-over", "91", kubectl=cluster.kubectl)
    assert (status, err) == (0, "")
    status, _, _ = spend_run(project, "--actor", "agents/actor-b", "--fail-over", "80", kubectl=cluster.kubectl)
    assert status == 0  # only actor-b's row is considered, at 20%


def test_actor_selects_one_actor_by_id_or_subject(tmp_path, redis_db, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    seed(redis_db)
    for name in ("agents/actor-b", "actor/agents/actor-b"):
        status, out, _ = spend_run(project, "--json", "--actor", name, kubectl=cluster.kubectl)
        rows = json.loads(out)["rows"]
        assert status == 0 and [(r["actor"], r["budget"], r["spent"]) for r in rows] == [
            ("agents/actor-b", "large", 1000)
        ]


def test_actor_selects_a_service_account_or_an_api_key_by_id_or_x_actor_id(tmp_path, redis_db, cluster):
    """`make spend --actor` for the other identity sources: the counters ratelimit wrote under each one's
    x-actor-id (keys written by hand, as cache_key.go lays them out), found by the id or by the header value."""
    config = in_cluster_config(
        identity={"sources": ["substrate", "kubernetes", "apiKeys"]},
        actors=["agents/actor-a", "serviceaccount:ns/bot.v2", "apikey:ci-bot"],
        budgets={**BUDGETS, "classes": [{**BUDGETS["classes"][0], "actors": ["apikey:ci-bot"]}]},
    )
    project = write_project(tmp_path, {"dev": config})
    client = redis_db.client()
    charge(client, upstream_key(0, "system:serviceaccount:ns:bot.v2", DAY_START), 120, 86_400)
    charge(client, upstream_key(1, "apikey.ci-bot", DAY_START), 700, 86_400)
    for name, expected in (
        ("serviceaccount:ns/bot.v2", ("serviceaccount:ns/bot.v2", "default", 120)),
        ("system:serviceaccount:ns:bot.v2", ("serviceaccount:ns/bot.v2", "default", 120)),
        ("apikey.ci-bot", ("apikey:ci-bot", "large", 700)),
    ):
        status, out, err = spend_run(project, "--json", "--actor", name, kubectl=cluster.kubectl)
        assert (status, err) == (0, ""), name
        assert [(r["actor"], r["budget"], r["spent"]) for r in json.loads(out)["rows"]] == [expected], name


def test_unknown_actor_is_refused_before_anything_is_read(tmp_path, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    status, out, err = spend_run(project, "--actor", "agents/nobody", kubectl=cluster.kubectl)
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert err == (
        "spend: unknown actor 'agents/nobody': it is not in agent-budgets:actors of this stack (which has "
        "agents/actor-a, agents/actor-b, agents/actor-c). Write it as in agent-budgets:actors: <atespace>/<name>, "
        "serviceaccount:<namespace>/<name> or apikey:<name>\n"
    )
    assert cluster.read().get("calls", []) == []


def test_unknown_stack_names_the_stacks_that_exist(tmp_path):
    project = write_project(tmp_path, {"dev": in_cluster_config(), "prod": in_cluster_config()})
    status, out, err = spend_run(project, "--stack", "staging")
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert "unknown stack 'staging': there is no Pulumi.staging.yaml" in err
    assert err.endswith("Stacks with a file here: dev, prod\n")


@pytest.mark.parametrize(
    "stack",
    ["x" * 300, "dev\x00", "../dev", "dev prod", "d\udcffv", ""],
    ids=["longer than a file name may be", "a NUL byte", "a path", "a space", "an undecodable byte", "empty"],
)
def test_a_stack_name_pulumi_would_refuse_is_an_input_error(tmp_path, stack):
    """A 300-character --stack raised OSError (File name too long) from the stack-file lookup."""
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    status, out, err = spend_run(project, "--stack", stack)
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert err.startswith("spend: ") and "is not a stack name: Pulumi's are 1 to 100 letters, digits" in err


def test_a_stack_file_that_is_not_utf8_is_an_input_error(tmp_path):
    """A stack file saved as Latin-1 raised UnicodeDecodeError while it was read."""
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    with (project / "Pulumi.dev.yaml").open("ab") as stack_file:
        stack_file.write("# owner: Zoë\n".encode("latin-1"))
    status, out, err = spend_run(project)
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert "Pulumi.dev.yaml is not UTF-8 text (byte 0xEB at offset" in err
    assert err.endswith("save it as UTF-8\n")


def test_a_stack_file_nested_too_deep_is_an_input_error(tmp_path):
    """PyYAML raised RecursionError on a few hundred nested lists."""
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    nested = "[" * 2_000 + "]" * 2_000
    (project / "Pulumi.dev.yaml").write_text(f"config:\n  agent-budgets:actors: {nested}\n", encoding="utf-8")
    status, out, err = spend_run(project)
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert "Pulumi.dev.yaml nests lists or maps deeper than a YAML reader goes" in err


def test_a_key_written_twice_in_a_stack_file_is_refused_as_pulumi_refuses_it(tmp_path):
    """PyYAML kept the last of two equal keys, so the report counted against a budget Pulumi would never deploy:
    Pulumi reads stack files with gopkg.in/yaml.v3, which refuses a map holding a key twice (tools/spend/stack.py).
    Keys compare by written value, quoted or not; keys equal only after decoding (`true`, `True`) are not equal."""
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    stack_file = project / "Pulumi.dev.yaml"
    text = stack_file.read_text(encoding="utf-8")
    stack_file.write_text(text + '  "agent-budgets:actors": [agents/actor-z]\n', encoding="utf-8")
    status, out, err = spend_run(project)
    assert (status, out) == (cli.EXIT_INPUT, "")
    line = len(text.splitlines()) + 1
    first = 1 + next(i for i, row in enumerate(text.splitlines()) if row.strip().startswith("agent-budgets:actors:"))
    assert err == (
        f"spend: {stack_file} line {line}: the key 'agent-budgets:actors' is written twice in one map "
        f"(config.agent-budgets:actors, first at line {first}); Pulumi refuses the file (mapping key "
        f'"agent-budgets:actors" already defined at line {first}): keep one\n'
    )
    assert duplicate_key(yaml.compose("a: {b: 1, c: [{d: 1, 'd': 2}]}")) == (
        "line 1: the key 'd' is written twice in one map (a.c[0].d, first at line 1); Pulumi refuses the file "
        '(mapping key "d" already defined at line 1): keep one'
    )
    assert duplicate_key(yaml.compose("a: 1\nA: 2\ntrue: 1\nTrue: 2\nb: &x {c: 1}\nd: *x\n")) is None


def test_invalid_configuration_gives_the_programs_own_messages(tmp_path):
    config = in_cluster_config(budgets={"default": {"tokens": 0, "per": "Fortnight"}}, gateway={"pot": 80})
    project = write_project(tmp_path, {"dev": config})
    status, out, err = spend_run(project)
    with pytest.raises(ConfigError) as preview:
        validate_stack(config, lambda key: (False, False))
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert err == f"spend: stack 'dev' (Pulumi.dev.yaml): {preview.value}\n"
    assert "agent-budgets:budgets.default.tokens" in err and "agent-budgets:gateway.pot" in err


def test_a_missing_kube_context_says_how_to_fix_it(tmp_path, cluster):
    project = write_project(tmp_path, {"dev": in_cluster_config(kubernetes={"context": "kind-gone"})})
    status, _, err = spend_run(project, kubectl=cluster.kubectl)
    assert status == cli.EXIT_READ
    assert 'error: context "kind-gone" does not exist' in err
    assert "'kind-gone' (agent-budgets:kubernetes.context) is not in your kubeconfig" in err


def test_a_port_forward_that_never_starts_is_stopped_and_reported(tmp_path, cluster):
    state = cluster.read()
    cluster.write({**state, "silent": True})
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    status, _, err = spend_run(project, "--timeout", "1", kubectl=cluster.kubectl)
    assert status == cli.EXIT_READ
    assert "port-forward agent-budgets-redis/service/redis:6379 did not start within 1s" in err
    assert {call["pid"] for call in cluster.port_forwards()} <= waited_for_stop(cluster)


def test_a_wrong_in_cluster_password_is_reported_and_the_forward_stopped(tmp_path, cluster):
    state = cluster.read()
    state["secrets"]["agent-budgets-redis/redis-auth"]["password"] = "stale-password"
    cluster.write(state)
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    status, out, err = spend_run(project, kubectl=cluster.kubectl)
    assert (status, out) == (cli.EXIT_READ, "")
    assert "the in-cluster Redis agent-budgets-redis/redis" in err and "refused the login" in err
    assert "check the password (from Secret agent-budgets-redis/redis-auth)" in err
    assert "stale-password" not in err
    assert {call["pid"] for call in cluster.port_forwards()} <= waited_for_stop(cluster)


def external_config(port: int) -> dict:
    config = in_cluster_config(redis={"mode": "external", "url": f"localhost:{port}"})
    config["redisPassword"] = {"secure": "v1:AAAABBBBCCCC"}
    return config


def test_external_redis_with_the_password_from_the_environment(tmp_path, redis_db):
    project = write_project(tmp_path, {"prod": external_config(redis_db.port)})
    seed(redis_db)
    status, out, err = spend_run(
        project, "--stack", "prod", "--json", environ={"AGENT_BUDGETS_REDIS_PASSWORD": redis_db.password}
    )
    assert (status, err) == (0, "")
    assert [(r["actor"], r["spent"]) for r in json.loads(out)["rows"]] == [
        ("agents/actor-a", 450),
        ("agents/actor-b", 1000),
        ("agents/actor-c", 0),
    ]
    status, out, _ = spend_run(
        project, "--stack", "prod", "--json", "--password-env", "PROD_REDIS", environ={"PROD_REDIS": redis_db.password}
    )
    assert status == 0 and json.loads(out)["rows"][0]["spent"] == 450


def test_external_redis_wrong_or_missing_password(tmp_path, redis_db):
    project = write_project(tmp_path, {"prod": external_config(redis_db.port)})
    status, _, err = spend_run(project, "--stack", "prod", environ={"AGENT_BUDGETS_REDIS_PASSWORD": "wrong"})
    assert status == cli.EXIT_READ
    assert f"external Redis localhost:{redis_db.port} (single) refused the login" in err
    assert "check the password (from environment variable AGENT_BUDGETS_REDIS_PASSWORD)" in err
    status, _, err = spend_run(project, "--stack", "prod", environ={})
    assert status == cli.EXIT_READ
    assert "AGENT_BUDGETS_REDIS_PASSWORD (not set: export it, or name another one with --password-env)" in err


def test_external_redis_unreachable(tmp_path):
    port = free_port()
    project = write_project(tmp_path, {"prod": external_config(port)})
    status, _, err = spend_run(
        project, "--stack", "prod", "--timeout", "2", environ={"AGENT_BUDGETS_REDIS_PASSWORD": "x"}
    )
    assert status == cli.EXIT_READ
    assert f"spend: external Redis localhost:{port} (single) is unreachable:" in err
    assert "Check that Redis runs and that this machine can reach it" in err


def test_the_repositorys_own_stacks_load_and_validate():
    dev = load_stack(ROOT, "dev").validate()
    assert dev.settings.actors == ["agents/actor-a", "agents/actor-b"]
    assert [rule.purpose for rule in dev.rules.rules] == ["default"]
    with pytest.raises(StackError, match="unknown stack 'nope'"):
        load_stack(ROOT, "nope")


def test_stack_files_are_read_with_libyaml_into_what_the_pure_python_loader_reads():
    """The stack reader takes libyaml's safe loader (a 10,000-actor stack file in a tenth of the time) and must
    read every stack file exactly as yaml.safe_load does (without libyaml it is that loader)."""
    expected = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
    assert stack_module.SAFE_LOADER is expected
    for path in sorted(ROOT.glob("Pulumi*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=stack_module.SAFE_LOADER) == yaml.safe_load(text), path.name


def test_secrets_and_project_level_values_are_read_as_pulumi_reads_them(tmp_path):
    project = write_project(
        tmp_path,
        {"dev": {"actors": ACTORS, "openaiApiKey": {"secure": "v1:xyz"}}},
        project_config={"agent-budgets:budgets": {"value": BUDGETS}, "other:key": 1, "pulumi:tags": {"value": {}}},
    )
    stack = load_stack(project, "dev")
    assert stack.raw["budgets"] == BUDGETS and stack.raw["openaiApiKey"] == "<secret>"
    assert stack.secret_state("openaiApiKey") == (True, True)
    assert stack.secret_state("actors") == (True, False)
    assert stack.secret_state("redisPassword") == (False, False)
    assert "v1:xyz" not in json.dumps(stack.raw)
    assert project_defaults({"config": {"actors": ["a/b"], "agent-budgets:x": {"default": 3}}}) == {
        "actors": ["a/b"],
        "x": 3,
    }


def test_help_explains_every_option():
    done = subprocess.run(
        [sys.executable, "-m", "tools.spend", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert done.returncode == 0, done.stderr
    for option in (
        "--stack",
        "--project-dir",
        "--json",
        "--prometheus",
        "--actor",
        "--over",
        "--fail-over",
        "--password-env",
        "--kubectl",
        "--kubeconfig",
        "--sentinel-password-env",
        "--timeout",
    ):
        assert option in done.stdout
    assert "exit status: 0 report printed; 1 --fail-over" in done.stdout
    assert "spent can exceed the limit by one response" in " ".join(done.stdout.split())


def test_a_bad_percentage_is_an_option_error():
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["--over", "lots"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--fail-over", "-5"])


def test_sigterm_while_reading_stops_the_port_forward(tmp_path, cluster):
    """A CronJob deadline or `kill` must not leave kubectl running: the forward is stopped, the exit is 3."""
    import signal
    import socket
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted = threading.Event()
    held = []

    def accept_and_say_nothing():
        connection, _ = silent.accept()
        held.append(connection)
        accepted.set()

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    state = cluster.read()
    state["services"]["agent-budgets-redis/redis"] = silent.getsockname()[1]
    cluster.write(state)
    project = write_project(tmp_path, {"dev": in_cluster_config()})
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.spend", "--project-dir", str(project), "--kubectl", str(cluster.kubectl)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FAKE_KUBECTL_SPEND": str(cluster.state)},
    )
    try:
        assert accepted.wait(30), "the report never connected through the port-forward"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
        silent.close()
        for connection in held:
            connection.close()
    assert process.returncode == cli.EXIT_READ
    assert "spend: stopped by signal 15" in err
    assert {call["pid"] for call in cluster.port_forwards()} <= waited_for_stop(cluster)
    assert cluster.port_forwards()


# --- review 2, M3 and SHOULD-FIX 1-2: the stack's kubeconfig as a path, as contents, or as a secret ----------


def kubeconfig_text(context: str = CONTEXT, as_json: bool = False) -> str:
    """A kubeconfig naming `context` (YAML over several lines, or single-line JSON)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kind", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "admin", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": context, "context": {"cluster": "kind", "user": "admin"}}],
        "current-context": context,
    }
    return json.dumps(document) if as_json else yaml.safe_dump(document)


def kubectl_calls(cluster: FakeCluster) -> list[dict]:
    return cluster.read().get("calls", [])


def test_fake_kubectl_refuses_a_kubeconfig_file_that_does_not_exist(tmp_path, cluster):
    """As client-go's loading rules do: an explicit --kubeconfig must exist, before anything else is looked at."""
    missing = tmp_path / "nope.yaml"
    done = subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(missing), "--context", CONTEXT, "-n", "x", "get", "secret", "y",
         "-o", "jsonpath={.data.z}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: stat {missing}: no such file or directory\n"


def test_a_kubeconfig_path_in_the_stack_reaches_both_kubectl_calls(tmp_path, redis_db, cluster):
    path = tmp_path / "kubeconfig-dev.yaml"
    path.write_text(kubeconfig_text(), encoding="utf-8")
    cluster.write({**cluster.read(), "contexts": []})  # only the file knows the context
    project = write_project(
        tmp_path, {"dev": in_cluster_config(kubernetes={"context": CONTEXT, "kubeconfig": str(path)})}
    )
    seed(redis_db)
    status, out, err = spend_run(project, "--json", kubectl=cluster.kubectl)
    assert (status, err) == (0, "")
    assert json.loads(out)["rows"][0]["spent"] == 450
    calls = kubectl_calls(cluster)
    assert [call["argv"][:4] for call in calls] == [["--kubeconfig", str(path), "--context", CONTEXT]] * 2
    assert {call["argv"][6] for call in calls} == {"get", "port-forward"}


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml-lines", "single-line-json"])
def test_kubeconfig_contents_go_to_a_private_file_removed_afterwards(tmp_path, redis_db, cluster, as_json):
    """Contents are recognised as the egress provider recognises them (core/kubeconfig.py), single-line JSON
    included, and handed to kubectl as a file readable by this user only, removed when the report ends."""
    contents = kubeconfig_text(as_json=as_json)
    assert (len(contents.strip().splitlines()) == 1) is as_json
    cluster.write({**cluster.read(), "contexts": []})
    project = write_project(
        tmp_path, {"dev": in_cluster_config(kubernetes={"context": CONTEXT, "kubeconfig": contents})}
    )
    seed(redis_db)
    status, _, err = spend_run(project, "--json", kubectl=cluster.kubectl)
    assert (status, err) == (0, "")
    calls = kubectl_calls(cluster)
    assert len(calls) == 2 and len({call["kubeconfig"] for call in calls}) == 1
    for call in calls:
        assert call["argv"][:2] == ["--kubeconfig", call["kubeconfig"]]
        assert (call["kubeconfig_mode"], call["kubeconfig_text"]) == (0o600, contents)
    assert not Path(calls[0]["kubeconfig"]).exists()


def secret_kubeconfig_project(tmp_path: Path) -> Path:
    kubernetes = {"context": CONTEXT, "kubeconfig": {"secure": "v1:c2VjcmV0LWt1YmVjb25maWc="}}
    return write_project(tmp_path, {"dev": in_cluster_config(kubernetes=kubernetes)})


def test_a_secret_kubeconfig_without_a_way_to_read_it_is_an_input_error_naming_the_fix(tmp_path, cluster):
    project = secret_kubeconfig_project(tmp_path)
    status, out, err = spend_run(project, kubectl=cluster.kubectl)
    assert (status, out) == (cli.EXIT_INPUT, "")
    assert err == (
        "spend: agent-budgets:kubernetes.kubeconfig is a secret in Pulumi.dev.yaml, which this report cannot decrypt "
        "(it reads the stack file, not the Pulumi backend): pass --kubeconfig PATH to a kubeconfig file holding "
        f"context {CONTEXT!r}, or export KUBECONFIG=PATH\n"
    )
    assert kubectl_calls(cluster) == []  # never `--kubeconfig '<secret>'`


def test_a_secret_kubeconfig_with_the_kubeconfig_option(tmp_path, redis_db, cluster):
    path = tmp_path / "mine.yaml"
    path.write_text(kubeconfig_text(), encoding="utf-8")
    cluster.write({**cluster.read(), "contexts": []})
    project = secret_kubeconfig_project(tmp_path)
    seed(redis_db)
    status, out, err = spend_run(project, "--json", "--kubeconfig", str(path), kubectl=cluster.kubectl)
    assert (status, err) == (0, "")
    assert [row["spent"] for row in json.loads(out)["rows"]] == [450, 1000, 0]
    assert [call["argv"][:2] for call in kubectl_calls(cluster)] == [["--kubeconfig", str(path)]] * 2
    status, _, err = spend_run(project, "--kubeconfig", str(tmp_path / "typo.yaml"), kubectl=cluster.kubectl)
    assert (status, err) == (cli.EXIT_INPUT, f"spend: --kubeconfig {tmp_path / 'typo.yaml'}: no such file. "
                                             "Give the path of a kubeconfig file\n")  # fmt: skip


def test_a_secret_kubeconfig_falls_back_to_the_kubeconfig_environment_variable(
    tmp_path, redis_db, cluster, monkeypatch
):
    path = tmp_path / "ambient.yaml"
    path.write_text(kubeconfig_text(), encoding="utf-8")
    cluster.write({**cluster.read(), "contexts": []})
    monkeypatch.setenv("KUBECONFIG", str(path))  # what kubectl itself reads
    project = secret_kubeconfig_project(tmp_path)
    seed(redis_db)
    status, _, err = spend_run(project, kubectl=cluster.kubectl, environ={"KUBECONFIG": str(path)})
    assert (status, err) == (0, "")
    assert [call["argv"][:2] for call in kubectl_calls(cluster)] == [["--context", CONTEXT]] * 2


def test_a_kubeconfig_path_missing_on_this_machine_is_reported_with_the_fix(tmp_path, cluster):
    missing = tmp_path / "ci-only" / "kubeconfig"
    project = write_project(
        tmp_path, {"dev": in_cluster_config(kubernetes={"context": CONTEXT, "kubeconfig": str(missing)})}
    )
    status, _, err = spend_run(project, kubectl=cluster.kubectl)
    assert status == cli.EXIT_READ
    assert f"error: stat {missing}: no such file or directory" in err
    assert f"pass --kubeconfig PATH to a kubeconfig holding context {CONTEXT!r}" in err


# --- review 2, M4: the stack's redis.tlsCaCertificate and redis.sentinelPasswordConfig --------------------


def test_external_redis_behind_a_private_ca(tmp_path, redis_db):
    from tests.support.tls_proxy import issue_server_certificate, tls_terminator

    certificate = issue_server_certificate("localhost")
    seed(redis_db)
    environ = {"AGENT_BUDGETS_REDIS_PASSWORD": redis_db.password}
    with tls_terminator(redis_db.port, certificate) as tls_port:
        trusted = external_config(tls_port)
        trusted["redis"].update(tls=True, tlsCaCertificate=certificate.ca_pem)
        untrusted = external_config(tls_port)
        untrusted["redis"].update(tls=True)
        project = write_project(tmp_path, {"prod": trusted, "other": untrusted})
        status, out, err = spend_run(project, "--stack", "prod", "--json", environ=environ)
        assert (status, err) == (0, "")
        assert [row["spent"] for row in json.loads(out)["rows"]] == [450, 1000, 0]
        status, _, err = spend_run(project, "--stack", "other", "--timeout", "5", environ=environ)
    assert status == cli.EXIT_READ
    assert "certificate verify failed" in err and "is its certificate trusted?" in err


def test_external_sentinels_with_their_own_password(tmp_path, redis_db):
    from tests.support.redis_server import local_sentinel

    seed(redis_db)
    with local_sentinel(redis_db, "budgets", password="sentinel-secret") as sentinel_port:
        config = external_config(0)
        config["redis"] = {
            "mode": "external",
            "type": "sentinel",
            "url": f"budgets,localhost:{sentinel_port}",
            "sentinelPasswordConfig": "redisSentinelPassword",
        }
        config["redisSentinelPassword"] = {"secure": "v1:AAAADDDD"}
        project = write_project(tmp_path, {"prod": config})
        both = {"AGENT_BUDGETS_REDIS_PASSWORD": redis_db.password, "SENTINELS": "sentinel-secret"}
        status, out, err = spend_run(
            project, "--stack", "prod", "--json", "--sentinel-password-env", "SENTINELS", environ=both
        )
        assert (status, err) == (0, "")
        assert [row["spent"] for row in json.loads(out)["rows"]] == [450, 1000, 0]
        status, _, err = spend_run(
            project, "--stack", "prod", environ={"AGENT_BUDGETS_REDIS_PASSWORD": redis_db.password}
        )
    assert status == cli.EXIT_READ
    assert f"the Sentinels at localhost:{sentinel_port} refused the login" in err
    unset = (
        "AGENT_BUDGETS_REDIS_SENTINEL_PASSWORD (not set: export it, or name another one with --sentinel-password-env)"
    )
    assert f"environment variable {unset}" in err
    assert "AGENT_BUDGETS_REDIS_PASSWORD" not in err


def test_make_spend_takes_the_stack_from_its_command_line_only(tmp_path):
    """Review 2 nit: a STACK variable in the caller's environment must not choose the stack."""

    def planned(*args: str, env: dict[str, str]) -> str:
        done = subprocess.run(
            ["make", "-n", "-s", "spend", f"STAMP={tmp_path / 'stamp'}", *args],
            cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ, **env},
        )  # fmt: skip
        return done.stdout

    (tmp_path / "stamp").touch()
    assert "-m tools.spend --stack dev" in planned(env={"STACK": "prod", "ARGS": "--json"})
    assert "--json" not in planned(env={"STACK": "prod", "ARGS": "--json"})
    assert "-m tools.spend --stack prod --over 80" in planned("STACK=prod", "ARGS=--over 80", env={"STACK": "dev"})

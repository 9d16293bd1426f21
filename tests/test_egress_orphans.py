"""`python -m tools.egress_orphans` against the fake `kubectl ate` (tests/fake_kubectl.py, through tests/fake_ate.py).

The command lists the actors of the stack's atespaces (`get actors -a <atespace> -o json`, agent-substrate/substrate
`cmd/kubectl-ate/internal/cmd/actor.go` and `printer/printer.go` @18d1c266), reads the policy of each actor the stack
does not declare (`get egress-policy`, `egress_policy.go` @18d1c266) and, with `--delete`, deletes each guarded by
the uid and version it read. Every assertion is on what the fake stored and the processes it ran.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from components import egress_provider as ep
from core import egress
from core.egress import OutputError, parse_actor_list
from core.validation import egress_settings, parse_settings
from tests.fake_ate import TEST, Engine, FakeAte, environ, make_fake
from tools import egress_orphans

A, B, C, D, E = (f"agents/actor-{x}" for x in "abcde")
ELSEWHERE = "retired/actor-f"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(ep, "RETRY_BASE_SECONDS", 0.0)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeAte:
    fake = make_fake(tmp_path)
    for key, value in environ(fake).items():
        monkeypatch.setenv(key, value)
    fake.add_actors([A, B, C, D, E, ELSEWHERE])
    return fake


def stack_config(fake: FakeAte, actors: list[str]) -> dict:
    return {
        "kubernetes": {"context": "kind-test"},
        "actors": actors,
        "budgets": {"default": {"tokens": 500, "per": "Day"}},
        "substrate": {"egress": {"kubectl": fake.kubectl, "timeoutSeconds": 10}},
    }


def write_stack(folder: Path, config: dict) -> Path:
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "agent-budgets", "runtime": "python"}))
    document = {"config": {f"agent-budgets:{key}": value for key, value in config.items()}}
    (folder / "Pulumi.test.yaml").write_text(yaml.safe_dump(document))
    return folder


def create_policy(fake: FakeAte, ref: str, config: dict, **changes) -> None:
    """A policy as the stack's provider writes it (or, with ``changes``, with other rules)."""
    inputs = egress_settings(parse_settings(config)).shard_inputs(0, [ref]).policy_inputs(ref)
    document = egress.build_policy(egress.PolicyInputs(**{**inputs.__dict__, **changes}))
    atespace, name = ref.split("/")
    result = fake.run("ate", "create", "egress-policy", name, "-a", atespace, "-f", "-", stdin=json.dumps(document))
    assert result.returncode == 0, result.stderr


def orphans_run(project: Path, *options: str) -> tuple[int, str, str]:
    args = egress_orphans.build_parser().parse_args(["--project-dir", str(project), "--stack", "test", *options])
    out, err = io.StringIO(), io.StringIO()
    status = egress_orphans.run(args, out, err)
    return status, out.getvalue(), err.getvalue()


def test_lists_then_deletes_every_policy_the_stack_does_not_own(fake, tmp_path):
    """Actors a and b are the stack's; c (this stack's rules: left behind) and e (other rules) have policies and
    are not; d has none; retired/actor-f is in an atespace the stack does not name until --atespace does. Broken
    once by letting `core.egress.orphans.unowned` keep the stack's own actors: the dry run read and listed actor-a
    and actor-b too, and the assertion on the report failed."""
    config = stack_config(fake, [A, B])
    project = write_stack(tmp_path, config)
    for ref in (A, B, C, ELSEWHERE):
        create_policy(fake, ref, config)
    create_policy(fake, E, config, gateway_port=8080)
    uids = {ref: policy["metadata"]["uid"] for ref, policy in fake.policies().items()}
    fake.clear_calls()

    status, out, err = orphans_run(project)
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        "stack test: 5 actors in atespace agents; 3 of them not in the stack's actors, checked for an egress policy",
        "2 egress policies the stack does not own:",
        f"  {C}  uid {uids[C]}  version 1  this stack's rules",
        f"  {E}  uid {uids[E]}  version 1  other rules",
        "dry run: nothing deleted. Run again with --delete to delete each, guarded by the uid and version above",
    ]
    assert sorted((argv[1], argv[2], argv[3]) for argv in fake.argvs()) == [
        ("get", "actors", "-a"),
        ("get", "egress-policy", "actor-c"),
        ("get", "egress-policy", "actor-d"),
        ("get", "egress-policy", "actor-e"),
    ]  # only actors outside the stack are read, and nothing is written
    assert all(argv[argv.index("--context") + 1] == "kind-test" for argv in fake.argvs())
    assert set(fake.policies()) == {A, B, C, E, ELSEWHERE}

    fake.clear_calls()
    status, out, err = orphans_run(project, "--delete", "--atespace", "retired")
    assert (status, err) == (0, "")
    assert [line.split() for line in out.splitlines()[1:]] == [
        ["3", "egress", "policies", "the", "stack", "does", "not", "own:"],
        [C, "uid", uids[C], "version", "1", "this", "stack's", "rules", "deleted"],
        [E, "uid", uids[E], "version", "1", "other", "rules", "deleted"],
        [ELSEWHERE, "uid", uids[ELSEWHERE], "version", "1", "this", "stack's", "rules", "deleted"],
    ]
    deletes = sorted(argv[3:] for argv in fake.argvs() if argv[1] == "delete")
    assert [(d[0], d[d.index("--uid") + 1], d[d.index("--version") + 1]) for d in deletes] == [
        ("actor-c", uids[C], "1"),
        ("actor-e", uids[E], "1"),
        ("actor-f", uids[ELSEWHERE], "1"),
    ]
    assert set(fake.policies()) == {A, B}

    status, out, _ = orphans_run(project, "--atespace", "retired")
    assert status == 0 and out.splitlines()[-1] == "no egress policy the stack does not own"


def test_a_policy_changed_since_it_was_read_is_left_and_reported(fake, tmp_path):
    """`delete egress-policy --uid --version` answers Aborted when the guards no longer match (egress_policy.go
    @18d1c266): the policy stays, the line says so, and the exit status is 1."""
    config = stack_config(fake, [A])
    project = write_stack(tmp_path, config)
    create_policy(fake, C, config)
    conflict = 'Error: failed to delete egress policy for actor "actor-c" in atespace "agents": rpc error: '
    fake.set(fail_next={"delete": [conflict + "code = Aborted desc = EgressPolicy version conflict"]})
    status, out, _ = orphans_run(project, "--delete")
    assert status == 1
    assert "left: changed or recreated since it was read; run the command again" in out
    assert set(fake.policies()) == {C}


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"no_substrate": {TEST: "service"}}, "failed to connect to ate-api-server: failed to get api service"),
        ({"plugin_missing": True}, "has no `ate` plugin: build kubectl-ate at the stack's substrate.ref"),
    ],
)
def test_a_cluster_it_cannot_read_is_a_failure_not_an_empty_list(fake, tmp_path, knobs, said):
    """builder.go's "failed to connect to ate-api-server" comes before any RPC (the fake's `no_substrate`); kubectl
    without the plugin answers `unknown command "ate"`. Neither may read as "no actors"."""
    project = write_stack(tmp_path, stack_config(fake, [A]))
    fake.set(**knobs)
    status, out, err = orphans_run(project)
    assert (status, out) == (3, "")
    assert "failed (listing the actors of atespace agents)" in err and said in err


def test_fake_lists_actors_as_actor_go_does(fake):
    """actor.go @18d1c266: a listing needs exactly one of -a and -A; names need -a; json is a ListActorsResponse
    (printer.go), `{}` when empty."""
    listed = fake.run("ate", "get", "actors", "-a", "agents", "-o", "json")
    assert parse_actor_list(listed.stdout) == [A, B, C, D, E]
    every = fake.run("ate", "get", "actor", "-A", "-ojson")
    assert parse_actor_list(every.stdout) == [A, B, C, D, E, ELSEWHERE]
    assert fake.run("ate", "get", "actors", "-a", "empty", "-o", "json").stdout.strip() == "{}"
    one = json.loads(fake.run("ate", "get", "actors", "actor-a", "-a", "agents", "-o", "json").stdout)
    assert one == {"metadata": {"atespace": "agents", "name": "actor-a"}}
    for args, error in [
        ([], "specify --atespace <name> to list one atespace, or -A/--all-atespaces for all"),
        (["-A", "-a", "agents"], "--atespace and -A/--all-atespaces are mutually exclusive"),
        (["actor-a"], "--atespace is required when getting actors"),
        (["actor-a", "-A"], "-A/--all-atespaces cannot be used when getting actors; pass --atespace"),
        (["nobody", "-a", "agents"], 'failed to get actor "nobody": rpc error: code = NotFound'),
    ]:
        result = fake.run("ate", "get", "actors", *args)
        assert result.returncode == 1 and f"Error: {error}" in result.stderr


def test_an_orphan_the_undo_could_not_delete_is_found_once_its_actor_leaves_the_stack(fake, tmp_path):
    """The window the provider's undo leaves (its own delete fails) is closed by the command: the failed create's
    policy for actor-a, in no state, is found after actor-a leaves the stack and deleted."""
    missing = "agents/missing-124"  # no such actor, in actor-a's shard: the shard's create fails
    assert egress.shard_of(missing) == egress.shard_of(A)
    [declared] = egress_settings(parse_settings(stack_config(fake, [A, missing]))).shards()
    fake.set(fail_always={"delete": "Error: rpc error: code = PermissionDenied desc = not allowed"})
    with pytest.raises(ep.ShardError, match="could not delete 1 of the 1 egress policies it had created"):
        Engine(ep.EgressShardProvider()).up(declared)
    fake.set(fail_always={})
    assert set(fake.policies()) == {A}
    project = write_stack(tmp_path, stack_config(fake, [B]))  # actor-a removed before any successful `up`
    status, out, _ = orphans_run(project, "--delete")
    assert status == 0 and f"  {A}  uid uid-0001  version 1  this stack's rules  deleted" in out.splitlines()
    assert fake.policies() == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--atespace", "Not_A_Label"], "--atespace 'Not_A_Label' is not an atespace name"),
        (["--stack", "nope"], "unknown stack 'nope'"),
    ],
)
def test_bad_input_is_refused_before_any_call(fake, tmp_path, options, message):
    project = write_stack(tmp_path, stack_config(fake, [A]))
    args = egress_orphans.build_parser().parse_args(["--project-dir", str(project), "--stack", "test", *options])
    err = io.StringIO()
    assert egress_orphans.run(args, io.StringIO(), err) == 2
    assert message in err.getvalue() and fake.calls() == []


def test_a_stack_without_substrate_actors_needs_an_atespace(fake, tmp_path):
    config = stack_config(fake, ["serviceaccount:agents/bot"])
    config["identity"] = {"sources": ["kubernetes"]}
    project = write_stack(tmp_path, config)
    status, _, err = orphans_run(project)
    assert status == 2 and "no atespace to check" in err and fake.calls() == []
    status, out, _ = orphans_run(project, "--atespace", "agents")
    assert status == 0 and "5 actors in atespace agents; 5 of them not in the stack's actors" in out


def test_the_actor_list_is_read_as_protojson_prints_it():
    """printer.go @18d1c266 prints a ListActorsResponse; protojson leaves an empty list out (`{}`)."""
    listing = {"actors": [{"metadata": {"atespace": "agents", "name": "a", "version": "3"}, "status": {}}]}
    assert parse_actor_list(json.dumps(listing)) == ["agents/a"]
    assert parse_actor_list("{}") == []
    with pytest.raises(OutputError, match=r"without metadata\.atespace"):
        parse_actor_list('{"actors": [{"metadata": {"name": "a"}}]}')
    with pytest.raises(OutputError, match="not JSON"):
        parse_actor_list("NAME  AGE")

"""The egress-policy providers against a fake `kubectl ate` (tests/fake_kubectl.py, handled by tests/fake_ate.py).

Each test drives the real provider code the way Pulumi's dynamic-provider host does (check, diff, then
create, update, read or delete with the props the engine hands over) and asserts on the fake's record of
every process run and on the policies it stores per cluster.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic.dynamic
import pytest

from components import egress_provider as ep
from core import egress
from core.egress import EgressConfigError, ShardInputs
from tests.fake_ate import OTHER, TEST, Engine, FakeAte, environ, kubeconfig_document, make_fake, wire

REPO = Path(__file__).resolve().parent.parent
GW = egress.GATEWAY_HOSTNAME
A, B, C = "agents/actor-a", "agents/actor-b", "agents/actor-c"

# A provider as stored in the state of stacks created before the shards (one resource per actor):
# `serialize_provider(ActorEgressPolicyProvider())` by the version that created them.
LEGACY_PROVIDER_BLOB = (
    "gASVPwAAAAAAAACMGmNvbXBvbmVudHMuZWdyZXNzX3Byb3ZpZGVylIwZQWN0b3JFZ3Jlc3NQb2xpY3lQcm92aWRlcpSTlCmBlC4="
)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeAte:
    fake = make_fake(tmp_path)
    for key, value in environ(fake).items():
        monkeypatch.setenv(key, value)
    fake.add_actors([A, B, C])
    return fake


SHIPPED_RETRY_BASE_SECONDS = ep.RETRY_BASE_SECONDS  # before `no_backoff` zeroes it for each test


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    """Retries and conflict rounds without the real waits (the backoff itself is tested on its own)."""
    monkeypatch.setattr(ep, "RETRY_BASE_SECONDS", 0.0)


@pytest.fixture
def warnings(monkeypatch) -> list[str]:
    """What the providers report on the Pulumi CLI (pulumi.log warn and info)."""
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: seen.append(message))
    monkeypatch.setattr(pulumi.log, "info", lambda message, *_, **__: seen.append(message))
    return seen


@pytest.fixture
def provider() -> ep.EgressShardProvider:
    return ep.EgressShardProvider()


def shard(fake: FakeAte, actors=(A,), **overrides) -> ShardInputs:
    """A shard as the component declares it (the shard index is that of the first actor)."""
    settings = dict(kube_context="kind-test", substrate_ref="v1.0.0-rc.1", kubectl=fake.kubectl, timeout_seconds=10)
    settings.update(overrides)
    return ShardInputs(shard=egress.shard_of(actors[0]) if actors else 0, actors=tuple(sorted(actors)), **settings)


@pytest.fixture
def engine(provider) -> Engine:
    return Engine(provider)


def jwt_of(rules: list) -> dict:
    return rules[0]["http"]["effects"]["replaceHeaders"][0]["actorJwt"]


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# --- the fake answers what kubectl and kubectl-ate answer -------------------------------------------


def manifest(**metadata) -> str:
    document = egress.build_policy(egress.PolicyInputs("agents", "actor-a", "kind-test", "v1"))
    document["metadata"].update(metadata)
    return json.dumps(document)


def test_fake_refuses_flags_before_the_plugin_name_like_kubectl(fake):
    result = fake.run("--context", "kind-test", "ate", "get", "egress-policy", "actor-a", "-a", "agents")
    assert result.returncode == 1
    assert "flags cannot be placed before plugin name: --context" in result.stderr


def test_fake_takes_output_on_every_verb_as_a_persistent_flag(fake):
    """root.go: -o/--output is persistent; create and update print the stored policy in that format."""
    created = fake.run(
        "ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", "-o", "json", stdin=manifest()
    )
    assert created.returncode == 0, created.stderr
    printed = json.loads(created.stdout)
    assert printed["metadata"] == {
        "atespace": "agents",
        "name": "default",
        "uid": "uid-0001",
        "version": "1",
        "createTime": "2026-10-01T00:00:00Z",
        "updateTime": "2026-10-01T00:00:00Z",
    }
    assert jwt_of(printed["rules"]) == {"audiences": ["agent-router"], "expirationSeconds": "900"}
    updated = fake.run(
        "ate", "update", "egress-policy", "actor-a", "-a", "agents", "--output=json", "-f", "-",
        stdin=manifest(uid="uid-0001", version="1"),
    )  # fmt: skip
    assert json.loads(updated.stdout)["metadata"]["version"] == "2"
    table = fake.run("ate", "get", "egress-policy", "actor-a", "-a", "agents")
    assert table.stdout.splitlines()[0].split() == ["ATESPACE", "ACTOR", "RULES", "VERSION", "AGE"]
    deleted = fake.run("ate", "delete", "egress-policy", "actor-a", "-aagents", "-o", "yaml")
    assert (deleted.returncode, deleted.stdout) == (
        0,
        'egress policy for actor "actor-a" in atespace "agents" deleted\n',
    )
    bad = fake.run("ate", "get", "egress-policy", "actor-a", "-a", "agents", "-o", "wide")
    assert 'invalid output format "wide". Must be one of: table, json, yaml' in bad.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["get", "egress-policy", "actor-a", "-a", "agents", "-f", "-"], "unknown shorthand flag: 'f' in -f"),
        (["get", "egress-policy", "actor-a", "-a", "agents", "--uid", "u"], "unknown flag: --uid"),
        (
            ["create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", "--version", "1"],
            "unknown flag: --version",
        ),
        (["update", "egress-policy", "actor-a", "-a", "agents", "-f", "-", "--uid=u"], "unknown flag: --uid"),
        (["delete", "egress-policy", "actor-a", "-a", "agents", "-f", "-"], "unknown shorthand flag: 'f' in -f"),
        (["delete", "egress-policy", "actor-a", "-a", "agents", "--uid", ""], "--uid must not be empty"),
        (
            ["delete", "egress-policy", "actor-a", "-a", "agents", "--version", "0"],
            "--version must be at least 1, got 0",
        ),
        (
            ["delete", "egress-policy", "actor-a", "-a", "agents", "--version", "x"],
            'invalid argument "x" for "--version"',
        ),
        (["get", "egress-policy", "actor-a"], 'required flag(s) "atespace" not set'),
        (["create", "egress-policy", "actor-a"], 'required flag(s) "atespace", "filename" not set'),
        (["get", "egress-policy", "-a", "agents"], "accepts 1 arg(s), received 0"),
        (["get", "egress-policy", "actor-a", "actor-b", "-a", "agents"], "accepts 1 arg(s), received 2"),
        (["get", "egress-policy", "actor-a", "-a"], "flag needs an argument: 'a' in -a"),
        (["get", "egress-policy", "actor-a", "-a", "agents", "--context"], "flag needs an argument: --context"),
        (
            ["get", "egress-policy", "actor-a", "-a", "agents", "--trace=maybe"],
            'invalid argument "maybe" for "--trace"',
        ),
        (["patch", "egress-policy", "actor-a", "-a", "agents"], 'unknown command "patch" for "kubectl-ate"'),
    ],
)
def test_fake_refuses_what_the_cli_refuses(fake, args, error):
    result = fake.run("ate", *args, stdin="{}")
    assert result.returncode == 1
    assert f"Error: {error}" in result.stderr


def test_fake_accepts_the_persistent_flags_anywhere_after_the_plugin_name(fake):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    result = fake.run(
        "ate", "--trace", "get", "--endpoint", "localhost:8443", "egress-policies", "actor-a",
        "--token-file=-", "-a=agents", "--context", "kind-test", "--kubeconfig", str(fake.kubeconfig), "-ojson",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["metadata"]["uid"] == "uid-0001"


def test_fake_get_of_a_missing_policy_exits_0_and_of_a_missing_actor_fails(fake):
    missing_policy = fake.run("ate", "get", "egress-policy", "actor-a", "-a", "agents", "-o", "json")
    assert (missing_policy.returncode, missing_policy.stdout) == (0, "")
    assert 'actor "actor-a" in atespace "agents" has no egress policy' in missing_policy.stderr
    missing_actor = fake.run("ate", "get", "egress-policy", "nobody", "-a", "agents", "-o", "json")
    assert missing_actor.returncode == 1 and 'actor "nobody" in atespace "agents" not found' in missing_actor.stderr


def test_fake_manifests_are_strict(fake):
    def create(text: str) -> subprocess.CompletedProcess:
        return fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=text)

    assert 'unknown field "cidrs"' in create(json.dumps({"rules": [{"cidrs": {}}]})).stderr
    assert "manifest is empty" in create("").stderr
    assert 'does not match --atespace "agents"' in create(manifest(atespace="other")).stderr
    assert 'manifest metadata.name "x" must be "default"' in create(manifest(name="x")).stderr
    proto_names = {"rules": [{"tls_passthrough": {"hostnames": ["a.example"], "ports": {"numbers": [443]}}}]}
    assert create(json.dumps(proto_names)).returncode == 0
    update = fake.run("ate", "update", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    assert "lacks the metadata.uid and metadata.version preconditions" in update.stderr


def test_fake_delete_guards_and_missing_objects(fake):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    stale = fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents", "--uid", "uid-0001", "--version", "2")
    assert "code = Aborted desc = EgressPolicy version conflict" in stale.stderr
    wrong = fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents", "--uid", "uid-9999")
    assert "code = Aborted desc = EgressPolicy UID conflict" in wrong.stderr
    assert fake.policy(A) is not None
    right = fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents", "--uid", "uid-0001", "--version", "1")
    assert right.returncode == 0 and fake.policy(A) is None
    again = fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents")
    assert 'actor "actor-a" in atespace "agents" has no egress policy' in again.stderr
    gone = fake.run("ate", "delete", "egress-policy", "nobody", "-a", "agents")
    assert 'actor "nobody" in atespace "agents" not found' in gone.stderr


def test_fake_resolves_the_cluster_like_client_go(fake, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(kubeconfig_document({"kind-test": OTHER})))
    fake.add_actors([A], server=OTHER)
    args = ("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-")
    assert fake.run(*args, stdin=manifest()).returncode == 0  # ambient $KUBECONFIG, current context
    assert fake.run(*args, "--kubeconfig", str(other), "--context", "kind-test", stdin=manifest()).returncode == 0
    assert fake.policy(A, TEST) is not None and fake.policy(A, OTHER) is not None
    missing = fake.run(*args, "--kubeconfig", str(tmp_path / "nope"), stdin=manifest())
    assert f"failed to load kubeconfig: stat {tmp_path / 'nope'}: no such file or directory" in missing.stderr
    unknown = fake.run(*args, "--context", "kind-nope", stdin=manifest())
    assert "failed to load kubeconfig: context was not found for specified context: kind-nope" in unknown.stderr


def test_fake_build_without_update_takes_its_flags_for_the_parent_command(fake):
    fake.set(missing_verbs=["update", "delete"])
    result = fake.run("ate", "update", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    assert "unknown shorthand flag: 'a' in -a" in result.stderr


# --- defect 3: -o json on writes; the stored policy comes back without a get ---------------------


def test_create_reads_uid_and_version_from_the_create_itself(fake, engine):
    engine.up(shard(fake, [A]))
    assert fake.argvs() == [
        ["ate", "create", "egress-policy", "actor-a", "-a", "agents", "--context", "kind-test", "-f", "-", "-o", "json"]
    ]
    assert fake.stdin_of(0) == egress.build_policy(shard(fake).policy_inputs(A))
    assert engine.outputs["policies"] == {A: {"uid": "uid-0001", "version": "1"}}
    assert engine.outputs["actors"] == {A: shard(fake).fingerprint()}
    assert engine.id == egress.shard_resource_name(egress.shard_of(A))


def test_an_update_is_one_call_with_the_recorded_preconditions(fake, engine):
    engine.up(shard(fake, [A, B]))
    fake.clear_calls()
    engine.up(shard(fake, [A, B], expiration_seconds=1200))
    assert sorted(fake.verbs()) == ["update", "update"]
    assert all(argv[-4:] == ["-f", "-", "-o", "json"] for argv in fake.argvs())
    assert {fake.stdin_of(i)["metadata"]["version"] for i in (0, 1)} == {"1"}
    assert engine.outputs["policies"][A]["version"] == "2"
    assert jwt_of(fake.policy(A)["rules"])["expirationSeconds"] == 1200


def test_a_create_that_printed_no_policy_is_reported(fake, provider):
    fake.set(print_next={"create": "created"})
    with pytest.raises(ep.ShardError, match="printed something that is not JSON"):
        provider.create(wire(shard(fake).to_props()))


# --- defect 1: the kubeconfig reaches kubectl ate; a new cluster leaves nothing behind -------------


def test_a_kubeconfig_path_reaches_every_call(fake, engine, tmp_path):
    """The ambient kubeconfig names kind-test for the TEST cluster; the configured file, for OTHER."""
    configured = tmp_path / "prod-kubeconfig.json"
    configured.write_text(json.dumps(kubeconfig_document({"kind-test": OTHER})))
    fake.add_actors([A, B], server=OTHER)
    engine.up(shard(fake, [A, B], kubeconfig=str(configured)))
    engine.refresh()
    engine.destroy()
    assert len(fake.argvs()) == 6
    assert all(flag(argv, "--kubeconfig") == str(configured) for argv in fake.argvs())
    assert fake.policies(TEST) == {}  # never the ambient cluster
    assert [c["argv"][1] for c in fake.calls()] == ["create", "create", "get", "get", "delete", "delete"]


def test_kubeconfig_contents_go_to_a_private_file_removed_afterwards(fake, engine, tmp_path):
    contents = json.dumps(kubeconfig_document({"kind-test": OTHER}), indent=2)
    fake.add_actors([A], server=OTHER)
    engine.up(shard(fake, [A], kubeconfig=contents))
    [call] = fake.calls()
    path = call["kubeconfig"]
    assert call["kubeconfig_mode"] == 0o600 and call["kubeconfig_text"] == contents
    assert not os.path.exists(path)  # removed once the operation ended
    assert fake.policy(A, OTHER) is not None and fake.policy(A, TEST) is None
    assert engine.outputs["cluster"] == f"server:{OTHER}"
    assert contents not in json.dumps({k: v for k, v in engine.outputs.items() if k != "kubeconfig"})


def test_a_new_cluster_replaces_the_shard_deleting_the_old_policies_first(fake, engine):
    engine.up(shard(fake, [A, B]))  # ambient kubeconfig: TEST
    fake.add_actors([A, B], server=OTHER)
    fake.clear_calls()
    decision = engine.up(shard(fake, [A, B], kubeconfig=json.dumps(kubeconfig_document({"kind-test": OTHER}))))
    assert (decision.replaces, decision.delete_before_replace) == (["cluster"], True)
    assert [argv[1] for argv in fake.argvs()] == ["delete", "delete", "create", "create"]
    assert fake.policies(TEST) == {} and set(fake.policies(OTHER)) == {A, B}


def test_a_new_context_replaces_the_shard_deleting_the_old_policies_first(fake, engine):
    engine.up(shard(fake, [A]))
    fake.add_actors([A], server=OTHER)
    decision = engine.up(shard(fake, [A], kube_context="kind-other"))
    assert (decision.replaces, decision.delete_before_replace) == (["kube_context"], True)
    assert fake.policy(A, TEST) is None and fake.policy(A, OTHER) is not None


def test_a_kubeconfig_file_is_known_by_the_server_it_names(fake, engine, tmp_path):
    """Review 2, SHOULD-FIX 4: the identity of a path is read from the file where the program runs."""
    configured = tmp_path / "kubeconfig-prod.json"
    configured.write_text(json.dumps(kubeconfig_document({"kind-test": OTHER})))
    fake.add_actors([A], server=OTHER)
    engine.up(shard(fake, [A], kubeconfig=str(configured)))
    assert engine.inputs["cluster"] == engine.outputs["cluster"] == f"server:{OTHER}"
    document = kubeconfig_document({"kind-test": OTHER})
    document["users"][0]["user"]["token"] = "rotated"
    configured.write_text(json.dumps(document))
    fake.clear_calls()
    assert engine.up(shard(fake, [A], kubeconfig=str(configured))).changes is False  # same server: no change
    configured.unlink()  # a machine without the file: the recorded server stands, no new cluster
    assert engine.up(shard(fake, [A], kubeconfig=str(configured))).changes is False
    assert fake.calls() == []


def test_a_kubeconfig_file_edited_to_name_another_cluster_is_a_new_cluster(fake, engine, tmp_path):
    """The file now names another server: the shard is replaced, and its delete refuses to reach the new
    cluster with the old policies' records (they are on the old one); a file per cluster finishes the move."""
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps(kubeconfig_document({"kind-test": OTHER})))
    fake.add_actors([A, B], server=OTHER)
    engine.up(shard(fake, [A, B], kubeconfig=str(path)))
    path.write_text(json.dumps(kubeconfig_document({"kind-test": TEST})))  # edited in place
    fake.clear_calls()
    with pytest.raises(ep.ClusterMovedError) as err:
        engine.up(shard(fake, [A, B], kubeconfig=str(path)))
    message = str(err.value)
    assert f"written to the cluster at {OTHER} through kubeconfig file {str(path)!r}, which now names {TEST}" in message
    assert "Restore a kubeconfig for the old cluster at" in message and "pulumi state delete" in message
    assert fake.calls() == [] and set(fake.policies(OTHER)) == {A, B} and fake.policies(TEST) == {}
    with pytest.raises(ep.ClusterMovedError):
        engine.refresh()
    path.write_text(json.dumps(kubeconfig_document({"kind-test": OTHER})))  # the old cluster's file, restored
    new_path = tmp_path / "kubeconfig-new.json"
    new_path.write_text(json.dumps(kubeconfig_document({"kind-test": TEST})))
    decision = engine.up(shard(fake, [A, B], kubeconfig=str(new_path)))
    assert (decision.replaces, decision.delete_before_replace) == (["cluster"], True)
    assert fake.policies(OTHER) == {} and set(fake.policies(TEST)) == {A, B}
    assert engine.outputs["cluster"] == f"server:{TEST}"


def test_a_state_that_recorded_the_path_learns_the_server_without_a_replacement(fake, engine, tmp_path):
    """Stacks whose shards recorded `path:<path>` (before the file's server was read): one update that runs no
    process records the server; nothing is replaced."""
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps(kubeconfig_document({"kind-test": TEST})))
    engine.up(shard(fake, [A], kubeconfig=str(path)))
    engine.inputs["cluster"] = engine.outputs["cluster"] = f"path:{path}"  # as the earlier version recorded
    fake.clear_calls()
    decision = engine.up(shard(fake, [A], kubeconfig=str(path)))
    assert (decision.changes, decision.replaces, decision.reasons) == (True, [], ["cluster"])
    assert fake.calls() == [] and engine.outputs["cluster"] == f"server:{TEST}"


def test_new_credentials_for_the_same_cluster_are_an_update_without_calls(fake, engine):
    document = kubeconfig_document({"kind-test": TEST})
    engine.up(shard(fake, [A], kubeconfig=json.dumps(document)))
    document["users"][0]["user"]["token"] = "rotated"
    fake.clear_calls()
    decision = engine.up(shard(fake, [A], kubeconfig=json.dumps(document)))
    assert (decision.changes, decision.replaces) == (True, [])
    assert fake.calls() == []
    assert "rotated" in engine.outputs["kubeconfig"]  # what refresh and destroy will use


# --- defect 2: kubectl, timeout and Substrate ref reach read and delete -----------------------------


def test_operational_settings_are_an_update_that_reaches_refresh_and_destroy(fake, engine, tmp_path):
    engine.up(shard(fake, [A]))
    other_kubectl = tmp_path / "bin" / "kubectl-2"
    other_kubectl.write_text(Path(fake.kubectl).read_text())
    other_kubectl.chmod(0o755)
    fake.clear_calls()
    decision = engine.up(shard(fake, [A], kubectl=str(other_kubectl), timeout_seconds=60, substrate_ref="v1.0.0"))
    assert decision.changes is True and decision.replaces == []
    assert sorted(decision.reasons) == ["kubectl", "substrate_ref", "timeout_seconds"]
    assert fake.calls() == []  # no Substrate object changes
    assert (engine.outputs["kubectl"], engine.outputs["timeout_seconds"]) == (str(other_kubectl), 60)
    Path(fake.kubectl).unlink()  # the old path is gone: refresh and destroy must not need it
    engine.refresh()
    engine.destroy()
    assert fake.verbs() == ["get", "delete"] and fake.policy(A) is None


# --- defect 4: a kubectl-ate without update/delete egress-policy is named as such ------------------


def test_a_build_without_update_egress_policy_is_a_version_skew_naming_the_command(fake, engine):
    engine.up(shard(fake, [A]))
    fake.set(missing_verbs=["update", "delete"])
    with pytest.raises(ep.ShardError) as err:
        engine.up(shard(fake, [A], gateway_port=8080))
    message = str(err.value)
    assert "this kubectl-ate build has no `update egress-policy` command" in message
    assert "update and delete came later" in message and "git checkout v1.0.0-rc.1" in message


# --- defect 5: retries with backoff ---------------------------------------------------------------


def test_unavailable_is_retried_until_it_passes(fake, engine):
    unavailable = "Error: failed to create egress policy: rpc error: code = Unavailable desc = connection refused"
    fake.set(fail_next={"create": [unavailable, "Error: rpc error: code = DeadlineExceeded desc = slow"]})
    engine.up(shard(fake, [A]))
    assert fake.verbs() == ["create", "create", "create"]
    assert fake.policy(A)["metadata"]["version"] == 1


def test_retries_stop_after_the_last_attempt_and_say_how_many(fake, provider):
    unavailable = "Error: failed to create egress policy: rpc error: code = Unavailable desc = connection refused"
    fake.set(fail_always={"create": unavailable})
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake, [A]).to_props()))
    assert f"failed after {ep.RETRY_ATTEMPTS} attempts (Unavailable)" in str(err.value)
    assert fake.verbs() == ["create"] * ep.RETRY_ATTEMPTS


# --- review 2, M1: no Substrate API server on the cluster is never "no policy" -----------------------------


@pytest.mark.parametrize("step", ["service", "pods", "deployment", "token"])
def test_fake_without_substrate_fails_before_any_rpc_as_the_client_builder_does(fake, step):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    fake.set(no_substrate={TEST: step})
    result = fake.run("ate", "get", "egress-policy", "actor-a", "-a", "agents", "-o", "json")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("Error: failed to connect to ate-api-server: ")
    assert result.stderr.strip().endswith(("not found", "no ate-api-server pods found in ate-system namespace"))


@pytest.mark.parametrize("step", ["service", "pods", "deployment", "token"])
def test_refresh_without_substrate_fails_and_keeps_every_record(fake, engine, step):
    """A context naming another cluster (or Substrate reinstalled): builder.go's "... not found" comes before
    any RPC. Read as NotFound it recorded every actor absent and dropped its uid and version (review 2, M1)."""
    engine.up(shard(fake, [A, B]))
    before = dict(engine.outputs)
    fake.set(no_substrate={TEST: step})
    fake.clear_calls()
    with pytest.raises(ep.ShardError) as err:
        engine.refresh()
    message = str(err.value)
    assert "found no Substrate API server through kube context 'kind-test'" in message
    assert f"failed {ep.RETRY_ATTEMPTS} times: Error: failed to connect to ate-api-server: " in message
    assert "is Substrate installed on this cluster" in message and "Nothing was read, changed" in message
    assert engine.outputs == before and set(engine.outputs["policies"]) == {A, B}
    assert set(fake.verbs()) == {"get"} and len(fake.calls()) >= ep.RETRY_ATTEMPTS  # retried, then fatal


@pytest.mark.parametrize("step", ["service", "token"])
def test_destroy_and_removal_without_substrate_fail_and_delete_nothing(fake, engine, step):
    engine.up(shard(fake, [A, B]))
    fake.set(no_substrate={TEST: step})
    with pytest.raises(ep.ShardError, match="found no Substrate API server"):
        engine.up(shard(fake, [A]))  # B removed: its delete must not count as "gone"
    with pytest.raises(ep.ShardError, match="found no Substrate API server"):
        engine.destroy()
    assert engine.outputs is not None and set(engine.outputs["policies"]) == {A, B}  # the state keeps them
    assert set(fake.policies()) == {A, B}
    fake.set(no_substrate={})  # Substrate back (or the right context): the same state finishes the job
    engine.up(shard(fake, [A]))
    engine.destroy()
    assert fake.policies() == {}


def test_legacy_resources_name_the_ambient_kubeconfig_the_upgrade_needs(fake, tmp_path, monkeypatch):
    """Review 2, SHOULD-FIX 5: the per-actor resources never recorded a kubeconfig; on a runner whose ambient
    kubeconfig lacks the context, the upgrade's delete says to export KUBECONFIG."""
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    outputs = legacy_outputs(fake, A)
    elsewhere = tmp_path / "laptop-kubeconfig.json"
    elsewhere.write_text(json.dumps(kubeconfig_document({"kind-laptop": OTHER}, "kind-laptop")))
    monkeypatch.setenv("KUBECONFIG", str(elsewhere))
    for call in (ep.ActorEgressPolicyProvider().delete, ep.ActorEgressPolicyProvider().read):
        with pytest.raises(ep.KubeconfigError) as err:
            call(A, outputs)
        message = str(err.value)
        assert "context was not found for specified context: kind-test" in message
        assert "export KUBECONFIG=<a kubeconfig file holding context 'kind-test'>" in message
    assert fake.policy(A) is not None


def test_legacy_resources_without_substrate_fail_instead_of_vanishing(fake):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    outputs = legacy_outputs(fake, A)
    fake.set(no_substrate={TEST: "service"})
    with pytest.raises(ep.ApiServerUnreachableError):
        ep.ActorEgressPolicyProvider().read(A, outputs)
    with pytest.raises(ep.ApiServerUnreachableError):
        ep.ActorEgressPolicyProvider().delete(A, outputs)
    assert fake.policy(A) is not None


def test_a_not_found_without_a_grpc_code_is_not_a_missing_policy(fake, engine):
    """Only "code = NotFound" and kubectl-ate's own wordings mean the policy (or actor) is gone."""
    engine.up(shard(fake, [A, B]))
    before = dict(engine.outputs)
    fake.set(fail_next={"delete": ['Error: namespaces "ate-system" not found'], "get": ["Error: pods not found"]})
    with pytest.raises(
        ep.ShardError, match=r"1 of 1 actors failed(?s:.*)agents/actor-b: .* failed \(Unknown\): Error: namespaces"
    ):
        engine.up(shard(fake, [A]))
    with pytest.raises(ep.ShardError, match=r"\(Unknown\): Error: pods not found"):
        engine.refresh()
    assert engine.outputs == before and fake.policy(B) is not None


def test_a_timeout_is_retried_then_reported_with_the_command(fake, provider, monkeypatch):
    monkeypatch.setattr(ep, "RETRY_ATTEMPTS", 2)
    fake.set(sleep_seconds=30)
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake, [A], timeout_seconds=1).to_props()))
    message = str(err.value)
    assert "did not finish within 1s and was stopped" in message and "(2 attempts, each timed out)" in message
    assert fake.verbs() == ["create", "create"]


def test_failures_that_cannot_pass_are_not_retried(fake, provider):
    with pytest.raises(ep.ShardError, match="context was not found for specified context: kind-nope"):
        provider.create(wire(shard(fake, [A, B], kube_context="kind-nope").to_props()))
    assert len(fake.calls()) <= 2  # one per actor at most, no retry (and the shard stops at the first)


def test_the_documented_retry_figures_are_the_code_constants():
    """docs/egress-policies.md restates the retry count and the longest wait before each retry."""
    text = " ".join((REPO / "docs" / "egress-policies.md").read_text(encoding="utf-8").split())
    match = re.search(
        r"at most (\d+) runs \(`RETRY_ATTEMPTS`\), waiting a random time of up to (.+?) before each retry", text
    )
    assert match, "the retry sentence of docs/egress-policies.md changed: update this test"
    base = SHIPPED_RETRY_BASE_SECONDS
    waits = [min(ep.RETRY_CAP_SECONDS, base * 2 ** (n - 1)) for n in range(1, ep.RETRY_ATTEMPTS)]
    shown = [f"{w:g} s" for w in waits]
    assert int(match.group(1)) == ep.RETRY_ATTEMPTS
    assert match.group(2) == ", ".join(shown[:-1]) + ", then " + shown[-1]


def test_backoff_is_capped_exponential_with_full_jitter(monkeypatch):
    monkeypatch.setattr(ep, "RETRY_BASE_SECONDS", 0.5)
    monkeypatch.setattr(ep.random, "uniform", lambda low, high: (low, high))
    assert [ep.backoff_seconds(n) for n in range(1, 7)] == [(0, 0.5), (0, 1.0), (0, 2.0), (0, 4.0), (0, 8.0), (0, 8.0)]


# --- defect 6: guarded deletes; adoption is reported ------------------------------------------------


def test_deletes_carry_the_recorded_uid_and_version(fake, engine):
    engine.up(shard(fake, [A, B]))
    recorded = engine.outputs["policies"][B]
    fake.clear_calls()
    engine.up(shard(fake, [A]))
    [argv] = fake.argvs()
    assert argv[1] == "delete" and (flag(argv, "--uid"), flag(argv, "--version")) == (recorded["uid"], "1")
    assert fake.policy(B) is None


def test_a_policy_recreated_by_someone_else_is_not_deleted(fake, engine, warnings):
    engine.up(shard(fake, [A, B]))
    old_uid = engine.outputs["policies"][B]["uid"]
    fake.run("ate", "delete", "egress-policy", "actor-b", "-a", "agents")
    fake.run("ate", "create", "egress-policy", "actor-b", "-a", "agents", "-f", "-", stdin=manifest())
    new_uid = fake.policy(B)["metadata"]["uid"]
    fake.clear_calls()
    engine.up(shard(fake, [A]))
    assert fake.policy(B)["metadata"]["uid"] == new_uid != old_uid  # still there
    assert fake.verbs() == ["delete", "get"]
    assert any("did not delete 1 egress policies recreated by someone else" in w and B in w for w in warnings)
    assert f"uid {old_uid} is now {new_uid}" in " ".join(warnings)


def test_a_policy_edited_since_but_not_recreated_is_deleted_with_the_actor(fake, engine):
    engine.up(shard(fake, [A, B]))
    uid = engine.outputs["policies"][B]["uid"]
    fake.run(
        "ate", "update", "egress-policy", "actor-b", "-a", "agents", "-f", "-", stdin=manifest(uid=uid, version="1")
    )
    fake.clear_calls()
    engine.up(shard(fake, [A]))
    assert fake.verbs() == ["delete", "get", "delete"] and fake.policy(B) is None


def test_adopting_an_existing_policy_warns_and_takes_it_over(fake, engine, warnings):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    engine.up(shard(fake, [A]))
    assert fake.verbs() == ["create", "create", "get", "update"]
    assert fake.policy(A)["metadata"]["version"] == 2  # written even though the rules were right
    assert engine.outputs["policies"][A] == {"uid": "uid-0001", "version": "2"}
    assert any("adopted 1 egress policies that existed already (agents/actor-a)" in w for w in warnings)


def test_a_create_whose_answer_was_lost_is_not_reported_as_adopted(fake, engine, warnings, monkeypatch):
    """The first create lands but its answer is lost (Unavailable after the commit): the retry meets
    AlreadyExists for the policy it made itself, which is no adoption."""
    real_run_once = ep.AteClient.run_once
    lost: list[str] = []

    def answer_lost_once(client, verb, *extra, stdin=None):
        result = real_run_once(client, verb, *extra, stdin=stdin)
        if verb == "create" and not lost:
            lost.append(verb)
            return ep.CliResult(
                result.command, 1, "", "Error: rpc error: code = Unavailable desc = reset", ep.UNAVAILABLE
            )
        return result

    monkeypatch.setattr(ep.AteClient, "run_once", answer_lost_once)
    engine.up(shard(fake, [A]))
    assert fake.verbs() == ["create", "create", "get", "update"]
    assert engine.outputs["policies"][A]["version"] == "2"
    assert not [w for w in warnings if "adopted" in w]


# --- defect 7: no ambient fallback on import; the pickled references stay loadable --------------------


def test_import_without_recorded_inputs_is_refused_before_any_call(fake, provider):
    with pytest.raises(ep.EgressPolicyError, match="`pulumi import` of a shard is not supported"):
        provider.read("egress-shard-05", {"__provider": "serialized"})
    with pytest.raises(ep.EgressPolicyError, match="reading it with the ambient kube context could reach another"):
        ep.ActorEgressPolicyProvider().read(A, {"__provider": "serialized"})
    assert fake.calls() == []


def _load_in_a_fresh_process(blob: str) -> str:
    code = (
        "import base64, sys, dill; p = dill.loads(base64.b64decode(sys.stdin.read())); "
        "print(type(p).__module__ + '.' + type(p).__name__, callable(p.read), callable(p.delete))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_providers_pickle_by_reference_to_their_stable_import_path():
    """Pulumi stores the pickled provider in every resource's state; a moved module or renamed class
    would make refresh and destroy of existing stacks fail to load it."""
    blob = pulumi.dynamic.dynamic.serialize_provider(ep.EgressShardProvider())
    assert _load_in_a_fresh_process(blob) == "components.egress_provider.EgressShardProvider True True"
    assert b"components.egress_provider" in base64.b64decode(blob) and len(blob) < 400
    legacy = pulumi.dynamic.dynamic.serialize_provider(ep.ActorEgressPolicyProvider())
    assert legacy == LEGACY_PROVIDER_BLOB  # byte for byte what existing stacks hold
    assert (
        _load_in_a_fresh_process(LEGACY_PROVIDER_BLOB)
        == "components.egress_provider.ActorEgressPolicyProvider True True"
    )


# --- upgrading stacks with one resource per actor -----------------------------------------------------


def legacy_outputs(fake: FakeAte, ref: str) -> dict[str, Any]:
    """What a per-actor resource of an earlier version recorded, for a policy it created then."""
    live = fake.policy(ref)
    inputs = egress.PolicyInputs(*ref.split("/"), "kind-test", "v1.0.0-rc.1", kubectl=fake.kubectl, timeout_seconds=10)
    return wire(
        {
            **inputs.to_props(),
            "uid": live["metadata"]["uid"],
            "version": str(live["metadata"]["version"]),
            "rules": egress.normalize_rules(live["rules"]),
        }
    )


def test_upgrading_from_per_actor_resources_keeps_every_policy(fake, warnings):
    """The first `up` of the sharded version: the shards are created (adopting the policies), then the
    engine deletes the per-actor resources it no longer sees; an actor removed in the same `up` loses its
    policy, the others keep theirs at every moment."""
    for ref in (A, B, C):
        atespace, name = ref.split("/")
        fake.run("ate", "create", "egress-policy", name, "-a", atespace, "-f", "-", stdin=manifest())
    legacy = {ref: legacy_outputs(fake, ref) for ref in (A, B, C)}
    fake.clear_calls()
    shards = {}
    for declared in egress.EgressPolicySettings(
        actors=[A, B], kube_context="kind-test", substrate_ref="v1.0.0-rc.1", kubectl=fake.kubectl, timeout_seconds=10
    ).shards():
        shards[declared.shard] = Engine(ep.EgressShardProvider())
        shards[declared.shard].up(declared)
    assert {ref: fake.policy(ref)["metadata"]["version"] for ref in (A, B)} == {A: 2, B: 2}
    old = ep.ActorEgressPolicyProvider()
    for ref in (A, B, C):
        old.delete(ref, legacy[ref])
    assert set(fake.policies()) == {A, B}
    deletes = [argv for argv in fake.argvs() if argv[1] == "delete"]
    assert [(argv[3], flag(argv, "--version")) for argv in deletes] == [
        ("actor-a", "1"),
        ("actor-b", "1"),
        ("actor-c", "1"),
    ]
    assert any("adopted 1 egress policies" in w for w in warnings)
    assert sum("left in place" in w for w in warnings) == 2
    for engine in shards.values():
        engine.destroy()
    assert fake.policies() == {}


def test_legacy_resources_still_refresh(fake):
    fake.run("ate", "create", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=manifest())
    outputs = legacy_outputs(fake, A)
    update = ("ate", "update", "egress-policy", "actor-a", "-a", "agents", "-f", "-")
    fake.run(*update, stdin=manifest(uid="uid-0001", version="1"))
    result = ep.ActorEgressPolicyProvider().read(A, outputs)
    assert (result.id, result.outs["version"], result.outs["kube_context"]) == (A, "2", "kind-test")
    assert flag(fake.argvs()[-1], "--context") == "kind-test"
    fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents")
    assert ep.ActorEgressPolicyProvider().read(A, outputs).id == ""


# --- scale: what a preview, a no-op and a one-actor change cost ---------------------------------------


def test_a_no_op_preview_and_up_run_no_process(fake, engine):
    engine.up(shard(fake, [A, B, C]))
    fake.clear_calls()
    decision = engine.up(shard(fake, [A, B, C]))
    assert (decision.changes, decision.replaces, decision.actors) == (False, [], [])
    engine.refresh()
    fake.clear_calls()
    assert engine.up(shard(fake, [A, B, C])).changes is False
    assert fake.calls() == []


def test_adding_and_removing_an_actor_is_one_call_each(fake, engine):
    engine.up(shard(fake, [A, B]))
    fake.clear_calls()
    added = engine.up(shard(fake, [A, B, C]))
    assert added.actors == [C] and fake.verbs() == ["create"]
    fake.clear_calls()
    removed = engine.up(shard(fake, [A, C]))
    assert removed.actors == [B] and fake.verbs() == ["delete"]
    assert set(engine.outputs["actors"]) == {A, C} and set(engine.outputs["policies"]) == {A, C}


def test_drift_found_by_refresh_names_the_actor_and_is_repaired(fake, engine):
    engine.up(shard(fake, [A, B]))
    edited = json.loads(manifest(uid=engine.outputs["policies"][A]["uid"], version="1"))
    edited["rules"][0]["http"]["ports"] = {"numbers": [8080]}
    fake.run("ate", "update", "egress-policy", "actor-a", "-a", "agents", "-f", "-", stdin=json.dumps(edited))
    fake.run("ate", "delete", "egress-policy", "actor-b", "-a", "agents")
    engine.refresh()
    assert engine.outputs["actors"][B] == egress.ABSENT and B not in engine.outputs["policies"]
    fake.clear_calls()
    decision = engine.up(shard(fake, [A, B]))
    assert decision.actors == [A, B]
    assert sorted(fake.verbs()) == ["create", "update"]
    assert fake.policy(A)["rules"][0]["http"]["ports"] == {"numbers": [80]} and fake.policy(B) is not None
    fake.clear_calls()
    assert engine.up(shard(fake, [A, B])).changes is False and fake.calls() == []


def test_concurrency_bounds_the_processes_in_flight(fake, engine):
    """The fake holds each call until 3 are in progress at once: 3 overlap for sure, and never a 4th."""
    actors = [f"agents/actor-{i}" for i in range(9)]
    fake.add_actors(actors)
    fake.set(track_in_flight=True, rendezvous=3)
    engine.up(shard(fake, actors, concurrency=3))
    assert json.loads((fake.root / "in_flight.json").read_text())["max"] == 3
    assert len(fake.policies()) == 9


# --- partial failure: the next up repairs it without manual steps -------------------------------------
#
# A failed create records nothing in the state, and a failed update keeps the previous state: the Python
# dynamic-provider host aborts the call with the error and no partial state (pulumi/dynamic/__main__.py in SDK
# 3.272.0, `Create` and `Update` under `_abort_with_traceback`). So whatever a failed shard operation created
# belongs to no state: it is deleted again before the failure is reported (issue 30, hole 6).


def test_a_failed_create_leaves_no_policy_behind(fake, engine, warnings):
    """A shard create that fails midway (one actor does not exist: FailedPrecondition "parent Actor does not
    exist", controlapi/egress_policy.go mapEgressPolicyWrite, as the fake answers after egress_policy.go @18d1c266)
    deletes the policies it had created for the others. Before the undo, actor-a's policy outlived its removal
    from the stack (no state recorded it): broken once by returning before the undo in `create`, this test
    failed on `fake.policies() == {}` with {actor-a, actor-b}."""
    missing = "agents/actor-x"
    with pytest.raises(ep.ShardError) as err:
        engine.up(shard(fake, [A, B, missing]))
    assert fake.policies() == {}
    message = str(err.value)
    assert "1 of 3 actors failed (create their egress policies)" in message
    assert f"{missing}: cannot create the egress policy of actor {missing}: the actor does not exist yet" in message
    assert f"deleted again the 2 egress policies it had created ({A}, {B})" in message
    assert engine.outputs is None  # a failed create records nothing
    deletes = [argv for argv in fake.argvs() if argv[1] == "delete"]
    assert sorted((argv[3], flag(argv, "--version")) for argv in deletes) == [("actor-a", "1"), ("actor-b", "1")]
    assert all(flag(argv, "--uid") for argv in deletes)  # guarded by the uid each create printed
    # actor-a leaves the stack before any successful `up`: nothing of it is left on the cluster
    fake.add_actors([missing])
    fake.clear_calls()
    engine.up(shard(fake, [B, missing]))
    assert set(fake.policies()) == {B, missing}
    assert sorted(fake.verbs()) == ["create", "create"]
    assert not [w for w in warnings if "adopted" in w]


def test_a_failed_update_deletes_only_the_policies_it_created(fake, engine):
    """An update that fails keeps the shard's previous state: the policies it created (a new actor's, and one
    recreated after a NotFound update: the fake's update of a missing policy, egress_policy.go @18d1c266) are
    deleted again; the ones it updated and the ones it left alone stay. Broken once by undoing every written
    policy: actor-b's updated policy was deleted and the assertion on it failed."""
    engine.up(shard(fake, [A, B]))
    before = dict(engine.outputs)
    fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents")  # by hand, unseen by the state
    missing = "agents/actor-x"
    with pytest.raises(ep.ShardError) as err:
        engine.up(shard(fake, [A, B, C, missing], gateway_port=8080))
    assert set(fake.policies()) == {B}
    message = str(err.value)
    assert "1 of 4 actors failed (update their egress policies)" in message
    assert f"deleted again the 2 egress policies it had created ({A}, {C})" in message
    assert engine.outputs == before  # the engine keeps the old state
    assert fake.policy(B)["rules"][0]["http"]["ports"] == {"numbers": [8080]}  # updated, and kept
    fake.clear_calls()
    engine.up(shard(fake, [B]))  # actor-a and actor-c leave the stack: nothing of theirs is left
    assert set(fake.policies()) == {B}


def test_a_policy_that_existed_before_the_failed_create_is_left_alone(fake, engine, warnings):
    """Adopted (AlreadyExists, then read and written with its uid and version): it was not created by the
    failed operation, so its undo does not delete it. Broken once by undoing every policy the operation wrote
    (adopted ones included): actor-c's policy was deleted."""
    fake.run("ate", "create", "egress-policy", "actor-c", "-a", "agents", "-f", "-", stdin=manifest())
    with pytest.raises(ep.ShardError) as err:
        engine.up(shard(fake, [A, C, "agents/actor-x"]))
    assert f"deleted again the 1 egress policies it had created ({A})" in str(err.value)
    assert set(fake.policies()) == {C}
    assert fake.policy(C)["metadata"]["uid"] == "uid-0001"


def test_an_undo_that_cannot_delete_says_what_is_left_and_how_to_remove_it(fake, engine):
    """The undo's own delete fails (PermissionDenied, not retried): the failure names each policy left behind,
    its uid and version, the guarded command that removes it and the orphan command. Broken once by reporting
    only the original failure: the assertions on "could not delete" failed."""
    fake.set(fail_always={"delete": "Error: rpc error: code = PermissionDenied desc = not allowed"})
    with pytest.raises(ep.ShardError) as err:
        engine.up(shard(fake, [A, "agents/actor-x"]))
    message = str(err.value)
    uid = fake.policy(A)["metadata"]["uid"]
    assert "could not delete 1 of the 1 egress policies it had created" in message
    assert f"{A} (uid {uid}, version 1): " in message and "PermissionDenied" in message
    assert f"kubectl ate delete egress-policy actor-a -a agents --uid {uid} --version 1" in message
    assert "python -m tools.egress_orphans" in message
    assert set(fake.policies()) == {A}


def test_a_failed_create_is_resumed_by_the_next_up(fake, engine, warnings):
    missing = "agents/actor-x"
    with pytest.raises(ep.ShardError):
        engine.up(shard(fake, [A, B, missing]))
    fake.add_actors([missing])
    fake.clear_calls()
    engine.up(shard(fake, [A, B, missing]))
    assert set(fake.policies()) == {A, B, missing}
    assert sorted(fake.verbs()) == ["create", "create", "create"]  # nothing left to adopt
    assert not [w for w in warnings if "adopted" in w]


def test_a_failed_update_is_resumed_by_the_next_up(fake, engine):
    engine.up(shard(fake, [A, B]))
    before = dict(engine.outputs)
    fake.set(fail_next={"update": ["Error: rpc error: code = PermissionDenied desc = no"]})
    with pytest.raises(ep.ShardError, match="1 of 2 actors failed"):
        engine.up(shard(fake, [A, B], gateway_port=8080))
    assert engine.outputs == before  # the engine keeps the old state
    fake.clear_calls()
    engine.up(shard(fake, [A, B], gateway_port=8080))
    # one policy was written by the failed run (its recorded version is stale: Aborted, read, equal)
    assert sorted(fake.verbs()) == ["get", "update", "update"]
    assert {fake.policy(r)["rules"][0]["http"]["ports"]["numbers"][0] for r in (A, B)} == {8080}
    fake.clear_calls()
    assert engine.up(shard(fake, [A, B], gateway_port=8080)).changes is False


# --- per-actor write details ------------------------------------------------------------------------


def client(fake: FakeAte, ref: str = A) -> ep.AteClient:
    return ep.AteClient(ep.Target(fake.kubectl, "kind-test", None, 10.0, "v1"), *ref.split("/"))


def test_a_policy_that_vanishes_during_a_write_is_created_again(fake):
    inputs = shard(fake).policy_inputs(A)
    first = ep.ensure_policy(client(fake), inputs, None)
    fake.set(vanish_on_update_once=True)
    fake.clear_calls()
    second = ep.ensure_policy(
        client(fake), egress.PolicyInputs("agents", "actor-a", "kind-test", "v1", gateway_port=81), first.recorded
    )
    assert fake.verbs() == ["update", "create"]
    assert second.recorded.uid != first.recorded.uid


def test_conflicts_are_bounded(fake):
    inputs = shard(fake).policy_inputs(A)
    first = ep.ensure_policy(client(fake), inputs, None)
    fake.set(abort_updates=99)
    changed = egress.PolicyInputs("agents", "actor-a", "kind-test", "v1", gateway_port=81)
    with pytest.raises(ep.UpdateConflictError, match=f"still changing after {ep.CONFLICT_ATTEMPTS} attempts"):
        ep.ensure_policy(client(fake), changed, first.recorded)
    fake.set(abort_updates=0, phantom_exists=99)
    fake.run("ate", "delete", "egress-policy", "actor-a", "-a", "agents")
    with pytest.raises(ep.EgressPolicyError, match="kept appearing and disappearing"):
        ep.ensure_policy(client(fake), inputs, None)


def test_an_actor_deleted_with_its_policy_counts_as_deleted(fake, engine):
    engine.up(shard(fake, [A, B]))
    fake.run("ate", "delete", "actor", "actor-b", "-a", "agents")
    assert fake.policy(B) is None  # Substrate deletes the actor's policy with the actor
    engine.up(shard(fake, [A]))
    assert set(engine.outputs["policies"]) == {A}


def test_invalid_inputs_fail_before_any_call(fake, provider):
    news = wire(shard(fake, [A], expiration_seconds=100, extra_hostnames=("api.openai.com",)).to_props())
    failures = provider.check({}, news).failures
    reasons = " ".join(f.reason for f in failures)
    assert "expirationSeconds 100" in reasons and "'api.openai.com' reaches model provider" in reasons
    with pytest.raises(EgressConfigError, match="expirationSeconds 100"):
        provider.create(news)
    assert fake.calls() == []
    with pytest.raises(EgressConfigError):
        ep.ensure_policy(client(fake), egress.PolicyInputs("agents", "actor-a", "kind-test", "v1", audiences=()), None)


# --- missing binary, missing plugin, version skew -------------------------------------------------------


def test_missing_kubectl_says_how_to_build_kubectl_ate(fake, provider, tmp_path):
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake, [A, B], kubectl=str(tmp_path / "no-such-kubectl")).to_props()))
    message = str(err.value)
    assert "no-such-kubectl" in message and "install kubectl" in message and "stopped after 0 of 2" in message
    assert "git checkout v1.0.0-rc.1" in message and "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate" in message


def test_missing_plugin_says_how_to_build_kubectl_ate(fake, provider):
    fake.set(plugin_missing=True)
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake).to_props()))
    assert 'unknown command "ate" for "kubectl"' in str(err.value)


def test_kubectl_ate_without_a_context_flag_is_a_version_skew(fake, provider):
    fake.set(unknown_flags=["--context"])
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake).to_props()))
    message = str(err.value)
    assert "unknown flag: --context" in message and "this kubectl-ate build has no --context flag" in message
    assert fake.policies() == {}


def test_kubectl_ate_without_delete_guards_is_a_version_skew(fake, engine):
    engine.up(shard(fake, [A, B]))
    fake.set(unknown_flags=["--uid"])
    with pytest.raises(ep.ShardError, match="`delete egress-policy` has no --uid/--version guards"):
        engine.up(shard(fake, [A]))
    assert fake.policy(B) is not None


@pytest.mark.parametrize(
    ("knob", "field"), [("server_unknown_fields", "tlsPassthrough"), ("cli_unknown_fields", "actorJwt")]
)
def test_a_field_unknown_to_the_server_or_cli_is_a_version_skew(fake, provider, knob, field):
    fake.set(**{knob: [field]})
    with pytest.raises(ep.ShardError) as err:
        provider.create(wire(shard(fake, extra_hostnames=("pypi.org",)).to_props()))
    assert f'unknown field "{field}"' in str(err.value) and "out of step" in str(err.value)


# --- check and diff -------------------------------------------------------------------------------------


def test_check_rebuilds_rules_fingerprints_and_cluster(fake, provider):
    declared = wire(shard(fake, [A, B], gateway_port=8080).to_props())
    declared.update(rules=[{"http": {"hostnames": ["x.example"]}}], actors={A: "stale", B: "stale"}, cluster="forged")
    checked = provider.check({}, declared).inputs
    expected = shard(fake, [A, B], gateway_port=8080)
    assert checked["rules"] == expected.desired_rules() and checked["rules"][0]["http"]["ports"] == {"numbers": [8080]}
    assert checked["actors"] == {A: expected.fingerprint(), B: expected.fingerprint()}
    assert checked["cluster"] == "" and checked["__provider"] == "serialized"


def test_diff_with_unknown_inputs(fake, engine, provider):
    engine.up(shard(fake, [A]))
    unknown = pulumi.runtime.rpc.UNKNOWN
    port = provider.diff(engine.id, engine.outputs, {**engine.inputs, "gateway_port": unknown})
    assert (port.changes, port.replaces) == (True, [])
    kubeconfig = provider.diff(engine.id, engine.outputs, {**engine.inputs, "kubeconfig": unknown})
    assert (kubeconfig.replaces, kubeconfig.delete_before_replace) == (["cluster"], True)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Error: rpc error: code = AlreadyExists desc = EgressPolicy already exists", ep.ALREADY_EXISTS),
        ("rpc error: code = ALREADY_EXISTS desc = x", ep.ALREADY_EXISTS),
        ("EgressPolicy already exists", ep.ALREADY_EXISTS),
        ("rpc error: code = NotFound desc = x", ep.NOT_FOUND),
        ('Error: actor "a" in atespace "s" has no egress policy', ep.NOT_FOUND),
        ('Error: actor "a" in atespace "s" has no egress policy to update; create it', ep.NOT_FOUND),
        ('Error: actor "a" in atespace "s" not found', ep.ACTOR_NOT_FOUND),
        ("rpc error: code = FailedPrecondition desc = parent Actor does not exist", ep.FAILED_PRECONDITION),
        ("preconditions do not match ...: rpc error: code = Aborted desc = EgressPolicy version conflict", ep.ABORTED),
        ('invalid EgressPolicy: proto: (line 1:2): unknown field "cidr"', ep.UNKNOWN_FIELD),
        ("rpc error: code = InvalidArgument desc = rules[0]", ep.INVALID_ARGUMENT),
        ('Error: unknown command "ate" for "kubectl"', ep.PLUGIN_MISSING),
        ("rpc error: code = Unavailable desc = connection refused", ep.UNAVAILABLE),
        ("rpc error: code = DeadlineExceeded desc = x", ep.UNAVAILABLE),
        ("failed to connect to ate-api-server: failed to get api service: timeout", ep.API_SERVER_UNREACHABLE),
        (
            'Error: failed to connect to ate-api-server: failed to get api service: services "api" not found',
            ep.API_SERVER_UNREACHABLE,
        ),
        (
            "Error: failed to connect to ate-api-server: failed to request ateapi bearer token: "
            'serviceaccounts "ate-client" not found',
            ep.API_SERVER_UNREACHABLE,
        ),
        ('Error: namespaces "ate-system" not found', ep.UNKNOWN),
        ("EgressPolicy not found", ep.UNKNOWN),
        ("rpc error: code = Unavailable desc = failed to connect to all addresses", ep.UNAVAILABLE),
        ("failed to connect to ate-api-server: failed to load kubeconfig: context was not found", ep.KUBECONFIG),
        ("rpc error: code = Unauthenticated desc = x", ep.PERMISSION_DENIED),
        ("Error: unknown flag: --context", ep.UNKNOWN_FLAG),
        ("Error: unknown shorthand flag: 'o' in -o", ep.UNKNOWN_FLAG),
        ("something else entirely", ep.UNKNOWN),
    ],
)
def test_classify_failure(text, kind):
    assert ep.classify_failure(text) == kind


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Error: unknown flag: --context\nUsage: ...", "--context"),
        ("Error: unknown flag: --context=kind-x", "--context"),
        ("Error: unknown shorthand flag: 'o' in -o", "-o"),
        ("Error: rpc error: code = NotFound", ""),
    ],
)
def test_unknown_flag_of(text, found):
    assert ep.unknown_flag_of(text) == found

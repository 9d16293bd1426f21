"""ActorEgressPolicyProvider against a fake `kubectl` that emulates kubectl-ate (tests/fake_kubectl.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pytest

from components import egress_provider as ep
from core import egress
from core.egress import EgressConfigError

FAKE = Path(__file__).with_name("fake_kubectl.py")
REPO = Path(__file__).resolve().parent.parent
GW = egress.GATEWAY_HOSTNAME
ID = "agents/actor-a"


@dataclass
class Fake:
    kubectl: str
    state_file: Path

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def set(self, **knobs) -> None:
        state = self.state()
        state.update(knobs)
        self.state_file.write_text(json.dumps(state))

    def calls(self) -> list[list[str]]:
        return [c["argv"] for c in self.state().get("calls", [])]

    def verbs(self) -> list[str]:
        return [argv[1] for argv in self.calls()]

    def stdin_of(self, index: int) -> dict:
        return json.loads(self.state()["calls"][index]["stdin"])

    def clear_calls(self) -> None:
        self.set(calls=[])

    def policy(self, key: str = ID) -> dict | None:
        return self.state().get("policies", {}).get(key)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.kubectl, *args], capture_output=True, text=True, timeout=10, check=False)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Fake:
    state = tmp_path / "ate-state.json"
    state.write_text(json.dumps({"actors": ["agents/actor-a", "agents/actor-b"], "policies": {}}))
    wrapper = tmp_path / "kubectl"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S {shlex.quote(str(FAKE))} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("FAKE_ATE_STATE", str(state))
    return Fake(str(wrapper), state)


@pytest.fixture
def provider() -> ep.ActorEgressPolicyProvider:
    return ep.ActorEgressPolicyProvider()


def props(fake: Fake, **overrides) -> dict:
    """Inputs as the engine hands them to the provider (numbers arrive as floats)."""
    base = {
        "atespace": "agents",
        "actor": "actor-a",
        "kube_context": "kind-test",
        "substrate_ref": "v0.5.0",
        "gateway_hostname": GW,
        "gateway_port": 80.0,
        "audiences": ["agent-router"],
        "expiration_seconds": 900.0,
        "extra_hostnames": [],
        "provider_hosts": [],
        "kubectl": fake.kubectl,
        "timeout_seconds": 10.0,
        "__provider": "serialized",
    }
    return {**base, **overrides}


def jwt_of(rules: list) -> dict:
    return rules[0]["http"]["effects"]["replaceHeaders"][0]["actorJwt"]


def argv(verb: str, *extra: str, actor: str = "actor-a") -> list[str]:
    return ["ate", verb, "egress-policy", actor, "-a", "agents", "--context", "kind-test", *extra]


CREATE = argv("create", "-f", "-")
UPDATE = argv("update", "-f", "-")
GET = argv("get", "-o", "json")


# --- the fake itself behaves like the documented CLI ---------------------------------------------


def test_fake_refuses_flags_before_the_plugin_name_like_kubectl(fake):
    result = fake.run("--context", "kind-test", "ate", "get", "egress-policy", "actor-a", "-a", "agents")
    assert result.returncode == 1
    assert "flags cannot be placed before plugin name: --context" in result.stderr


def test_fake_get_of_a_missing_policy_exits_0_with_a_message(fake):
    result = fake.run(*argv("get", "-o", "json"))
    assert (result.returncode, result.stdout) == (0, "")
    assert 'actor "actor-a" in atespace "agents" has no egress policy' in result.stderr


@pytest.mark.parametrize("verb", ["create", "update", "delete"])
@pytest.mark.parametrize("flag", [["-o", "json"], ["-o=json"], ["--output", "json"]])
def test_fake_defines_output_only_on_get(fake, verb, flag):
    result = subprocess.run(
        [fake.kubectl, *argv(verb, "-f", "-", *flag)], input="{}", capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "unknown shorthand flag: 'o' in -o" in result.stderr or "unknown flag: --output" in result.stderr
    assert fake.policy() is None
    assert fake.run(*argv("get", *flag)).returncode == 0


def test_fake_create_and_update_print_no_policy(fake):
    manifest = json.dumps(egress.build_policy(egress.PolicyInputs.from_props(props(fake))))
    created = subprocess.run([fake.kubectl, *CREATE], input=manifest, capture_output=True, text=True, check=False)
    assert created.returncode == 0 and "uid" not in created.stdout and "Authorization" not in created.stdout


def test_fake_prints_int64_as_strings_like_protojson(fake, provider):
    provider.create(props(fake))
    printed = json.loads(fake.run(*argv("get", "-o", "json")).stdout)
    assert printed["metadata"]["version"] == "1"
    assert jwt_of(printed["rules"]) == {"audiences": ["agent-router"], "expirationSeconds": "900"}


# --- create --------------------------------------------------------------------------------------


def test_create_new_policy(fake, provider):
    result = provider.create(props(fake))
    assert result.id == ID
    assert fake.calls() == [CREATE, GET]  # no -o on create: the policy is read back with get
    assert fake.stdin_of(0) == egress.build_policy(egress.PolicyInputs.from_props(props(fake)))
    outs = result.outs
    assert (outs["uid"], outs["version"]) == ("uid-0001", "1")
    assert jwt_of(outs["rules"]) == {"audiences": ["agent-router"], "expirationSeconds": 900}
    assert outs["rules"][0]["http"]["hostnames"] == [GW]
    assert outs["rules"][0]["http"]["ports"] == {"numbers": [80]}
    assert (outs["gateway_port"], outs["expiration_seconds"], outs["kube_context"]) == (80, 900, "kind-test")
    assert "__provider" not in outs
    assert fake.policy()["metadata"]["uid"] == "uid-0001"


def test_create_with_extra_hostnames_and_port(fake, provider):
    outs = provider.create(props(fake, gateway_port=8080.0, extra_hostnames=["pypi.org"])).outs
    assert outs["rules"] == [
        {
            "http": {
                "hostnames": [GW],
                "ports": {"numbers": [8080]},
                "effects": {
                    "replaceHeaders": [
                        {
                            "header": "Authorization",
                            "prefix": "Bearer ",
                            "actorJwt": {"audiences": ["agent-router"], "expirationSeconds": 900},
                        }
                    ]
                },
            }
        },
        {"tlsPassthrough": {"hostnames": ["pypi.org"], "ports": {"numbers": [443]}}},
    ]


def test_create_already_exists_and_equal_adopts_without_writing(fake, provider):
    provider.create(props(fake))
    fake.clear_calls()
    result = provider.create(props(fake))  # e.g. the stack lost its state
    assert fake.verbs() == ["create", "get"]
    assert (result.outs["uid"], result.outs["version"]) == ("uid-0001", "1")
    assert fake.policy()["metadata"]["version"] == 1


def test_create_already_exists_and_different_updates_with_fresh_preconditions(fake, provider):
    provider.create(props(fake, gateway_port=8080.0))
    fake.clear_calls()
    result = provider.create(props(fake))
    assert fake.calls() == [CREATE, GET, UPDATE, GET]
    sent = fake.stdin_of(2)
    assert sent["metadata"] == {"atespace": "agents", "name": "default", "uid": "uid-0001", "version": "1"}
    assert (result.outs["uid"], result.outs["version"]) == ("uid-0001", "2")
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [80]}


def test_create_retries_when_the_existing_policy_vanished(fake, provider):
    fake.set(phantom_exists=1)
    result = provider.create(props(fake))
    assert fake.verbs() == ["create", "get", "create", "get"]
    assert result.outs["version"] == "1"


def test_create_gives_up_when_the_policy_keeps_appearing_and_vanishing(fake, provider, monkeypatch):
    monkeypatch.setattr(ep, "RETRY_BACKOFF_SECONDS", 0)
    fake.set(phantom_exists=99)
    with pytest.raises(ep.EgressPolicyError, match="kept appearing and disappearing"):
        provider.create(props(fake))
    assert fake.verbs().count("create") == ep.UPDATE_ATTEMPTS


def test_create_for_a_missing_actor_says_to_create_the_actor_first(fake, provider):
    with pytest.raises(ep.ActorMissingError) as err:
        provider.create(props(fake, actor="actor-x"))
    message = str(err.value)
    assert "egress policy of actor agents/actor-x: the actor does not exist yet" in message
    assert "Create the actor first (kubectl ate create actor actor-x -a agents" in message
    assert "FailedPrecondition" in message
    assert fake.verbs() == ["create"]


def test_create_rejected_field_on_the_server_means_versions_out_of_step(fake, provider):
    fake.set(server_unknown_fields=["tlsPassthrough"])
    with pytest.raises(ep.VersionSkewError) as err:
        provider.create(props(fake, extra_hostnames=["pypi.org"]))
    message = str(err.value)
    assert 'unknown field "tlsPassthrough"' in message and "out of step" in message
    assert "git checkout v0.5.0" in message and "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate" in message


def test_create_rejected_field_in_an_old_cli_means_versions_out_of_step(fake, provider):
    fake.set(cli_unknown_fields=["actorJwt"])
    with pytest.raises(ep.VersionSkewError, match='unknown field "actorJwt"'):
        provider.create(props(fake))


def test_create_other_failure_is_reported_with_the_command(fake, provider):
    fake.set(fail_next={"create": "Error: rpc error: code = Unavailable desc = connection refused"})
    with pytest.raises(ep.KubectlAteCommandError) as err:
        provider.create(props(fake))
    assert err.value.kind == ep.UNAVAILABLE
    assert "ate create egress-policy actor-a -a agents --context kind-test" in str(err.value)
    assert "is the cluster reachable" in str(err.value)


def test_invalid_inputs_fail_before_any_call(fake, provider):
    with pytest.raises(EgressConfigError) as err:
        provider.create(props(fake, expiration_seconds=100.0, extra_hostnames=["api.openai.com"]))
    assert "expirationSeconds 100" in str(err.value) and "'api.openai.com' reaches model provider" in str(err.value)
    with pytest.raises(EgressConfigError):
        provider.update(ID, {}, props(fake, audiences=[]))
    assert fake.calls() == []


def test_create_output_is_not_read(fake, provider):
    fake.set(print_next={"create": "something no parser would take for a policy"})  # exits 0, stores nothing
    provider.create(props(fake))
    assert fake.verbs() == ["create", "get", "create", "get"]  # the get found nothing, so it created again
    assert fake.policy()["metadata"]["uid"] == "uid-0001"


def test_a_policy_deleted_right_after_create_is_created_again(fake, provider, monkeypatch):
    real_get = ep.AteClient.get
    gets = []

    def get_after_a_concurrent_delete(client):
        gets.append(1)
        if len(gets) == 1:
            fake.run(*argv("delete"))
        return real_get(client)

    monkeypatch.setattr(ep.AteClient, "get", get_after_a_concurrent_delete)
    result = provider.create(props(fake))
    assert fake.verbs() == ["create", "delete", "get", "create", "get"]
    assert result.outs["uid"] == "uid-0002" == fake.policy()["metadata"]["uid"]


def test_kube_context_is_passed_after_the_plugin_name(fake, provider):
    fake.set(contexts=["kind-test"])
    provider.create(props(fake))
    with pytest.raises(ep.KubectlAteCommandError, match='context "kind-other" does not exist'):
        provider.create(props(fake, kube_context="kind-other"))
    assert all(call[0] == "ate" for call in fake.calls())


def test_kubectl_ate_without_a_context_flag_is_a_version_skew(fake, provider):
    fake.set(unknown_flags=["--context"])
    with pytest.raises(ep.VersionSkewError) as err:
        provider.create(props(fake))
    message = str(err.value)
    assert "unknown flag: --context" in message
    assert "this kubectl-ate build has no --context flag" in message and "'kind-test'" in message
    assert "not the kubectl-ate of the pinned Substrate version" in message
    assert "git checkout v0.5.0" in message and "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate" in message
    assert fake.verbs() == ["create"] and fake.policy() is None
    with pytest.raises(ep.VersionSkewError, match="no --context flag"):
        provider.read(ID, props(fake))
    with pytest.raises(ep.VersionSkewError, match="no --context flag"):
        provider.delete(ID, props(fake))


def test_another_unknown_flag_is_a_version_skew_naming_the_flag(fake, provider):
    fake.set(unknown_flags=["-a"])
    with pytest.raises(ep.VersionSkewError) as err:
        provider.read(ID, props(fake))
    message = str(err.value)
    assert "kubectl-ate rejected -a as an unknown flag" in message and "out of step" in message
    assert "git checkout v0.5.0" in message


# --- missing binary, missing plugin, timeout -----------------------------------------------------


def test_missing_kubectl_says_how_to_build_kubectl_ate(fake, provider, tmp_path):
    with pytest.raises(ep.KubectlAteMissingError) as err:
        provider.create(props(fake, kubectl=str(tmp_path / "no-such-kubectl")))
    message = str(err.value)
    assert "no-such-kubectl" in message and "install kubectl" in message
    assert "git checkout v0.5.0" in message
    assert "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate" in message and "on PATH" in message


def test_missing_plugin_says_how_to_build_kubectl_ate(fake, provider):
    fake.set(plugin_missing=True)
    with pytest.raises(ep.KubectlAteMissingError) as err:
        provider.read(ID, props(fake))
    message = str(err.value)
    assert 'unknown command "ate" for "kubectl"' in message
    assert "at the pinned version v0.5.0" in message and "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate" in message


def test_a_hung_command_times_out_and_names_the_command(fake, provider):
    fake.set(sleep_seconds=30)
    started = time.monotonic()
    with pytest.raises(ep.KubectlAteTimeoutError) as err:
        provider.delete(ID, props(fake, timeout_seconds=1.0))
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert f"`{fake.kubectl} ate delete egress-policy actor-a -a agents --context kind-test`" in message
    assert "within 1s" in message and "kind-test" in message


# --- read ----------------------------------------------------------------------------------------


def test_read_returns_the_live_policy(fake, provider):
    created = provider.create(props(fake)).outs
    result = provider.read(ID, {**created, "__provider": "serialized"})
    assert result.id == ID
    assert fake.calls()[-1] == GET
    assert (result.outs["uid"], result.outs["version"], result.outs["rules"]) == (
        "uid-0001",
        "1",
        created["rules"],
    )
    assert provider.diff(ID, result.outs, props(fake)).changes is False


@pytest.mark.parametrize("as_string", [True, False])
def test_read_normalises_expiration_printed_as_string_or_number(fake, provider, as_string):
    provider.create(props(fake))
    fake.set(expiration_as_string=as_string)
    printed = json.loads(fake.run(*argv("get", "-o", "json")).stdout)
    assert jwt_of(printed["rules"])["expirationSeconds"] == ("900" if as_string else 900)
    outs = provider.read(ID, props(fake)).outs
    assert jwt_of(outs["rules"])["expirationSeconds"] == 900
    assert provider.diff(ID, outs, props(fake)).changes is False


def test_refresh_detects_drift(fake, provider):
    provider.create(props(fake))
    state = fake.state()
    state["policies"][ID]["rules"][0]["http"]["effects"]["replaceHeaders"][0]["actorJwt"]["expirationSeconds"] = 3600
    state["policies"][ID]["metadata"]["version"] = 2
    fake.state_file.write_text(json.dumps(state))
    outs = provider.read(ID, props(fake)).outs
    assert jwt_of(outs["rules"])["expirationSeconds"] == 3600 and outs["version"] == "2"
    decision = provider.diff(ID, outs, props(fake))
    assert (decision.changes, decision.replaces) == (True, [])


def test_refresh_detects_a_deleted_policy(fake, provider):
    provider.create(props(fake))
    fake.run(*argv("delete"))
    result = provider.read(ID, props(fake))
    assert result.id == "" and result.outs == {}


def test_refresh_of_a_deleted_actor_drops_the_policy(fake, provider):
    provider.create(props(fake))
    fake.set(actors=["agents/actor-b"])
    assert provider.read(ID, props(fake)).id == ""


def test_read_takes_the_target_from_the_id_when_props_lack_it(fake, provider):
    provider.create(props(fake))
    bare = {"kube_context": "kind-test", "kubectl": fake.kubectl, "substrate_ref": "v0.5.0"}
    result = provider.read(ID, bare)
    assert result.id == ID and result.outs["uid"] == "uid-0001"


def test_read_failure_raises(fake, provider):
    fake.set(fail_next={"get": "Error: rpc error: code = PermissionDenied desc = nope"})
    with pytest.raises(ep.KubectlAteCommandError) as err:
        provider.read(ID, props(fake))
    assert err.value.kind == ep.PERMISSION_DENIED


def test_unclassified_read_failure_raises(fake, provider):
    fake.set(fail_next={"get": "Error: something odd"})
    with pytest.raises(ep.KubectlAteCommandError, match=r"failed \(Unknown\): Error: something odd"):
        provider.read(ID, props(fake))


def test_get_that_exits_0_without_policy_or_reason_is_an_error(fake, provider):
    provider.create(props(fake))
    fake.set(silent_get_once=True)
    with pytest.raises(ep.KubectlAteCommandError, match="exited 0 but printed no policy and no reason"):
        provider.read(ID, props(fake))


@pytest.mark.parametrize(
    ("printed", "fragment"),
    [("ATESPACE   ACTOR   RULES", "printed something that is not JSON"), ('{"rules": []}', "JSON without metadata")],
)
def test_unexpected_get_output_is_an_error(fake, provider, printed, fragment):
    fake.set(print_next={"get": printed})
    with pytest.raises(ep.KubectlAteCommandError, match=fragment):
        provider.create(props(fake))
    assert fake.verbs() == ["create", "get"]


# --- update --------------------------------------------------------------------------------------


def test_update_uses_uid_and_version_from_a_fresh_get(fake, provider):
    created = provider.create(props(fake)).outs
    state = fake.state()
    state["policies"][ID]["metadata"]["version"] = 7  # someone else wrote it since
    fake.state_file.write_text(json.dumps(state))
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.calls() == [GET, UPDATE, GET]
    assert fake.stdin_of(1)["metadata"] == {"atespace": "agents", "name": "default", "uid": "uid-0001", "version": "7"}
    assert (result.outs["version"], result.outs["gateway_port"]) == ("8", 8080)
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [8080]}


def test_update_retries_once_after_aborted(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(abort_updates=1)
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, expiration_seconds=1200.0))
    assert fake.verbs() == ["get", "update", "get", "update", "get"]
    assert result.outs["version"] == "2"
    assert jwt_of(fake.policy()["rules"])["expirationSeconds"] == 1200


def test_update_gives_up_after_bounded_aborted_retries(fake, provider, monkeypatch):
    monkeypatch.setattr(ep, "RETRY_BACKOFF_SECONDS", 0)
    created = provider.create(props(fake)).outs
    fake.set(abort_updates=99)
    fake.clear_calls()
    with pytest.raises(ep.UpdateConflictError, match="still changing after 5 attempts"):
        provider.update(ID, created, props(fake, expiration_seconds=1200.0))
    assert fake.verbs().count("update") == ep.UPDATE_ATTEMPTS == 5


def test_update_skips_the_write_when_the_live_policy_already_matches(fake, provider):
    created = provider.create(props(fake)).outs
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, kube_context="kind-test"))
    assert fake.verbs() == ["get"]
    assert result.outs["version"] == "1"


def test_update_recreates_a_policy_deleted_out_of_band(fake, provider):
    created = provider.create(props(fake)).outs
    fake.run(*argv("delete"))
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.verbs() == ["get", "create", "get"]
    assert result.outs["uid"] == "uid-0002" and result.outs["version"] == "1"


def test_update_recreates_a_policy_deleted_between_get_and_update(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(vanish_on_update_once=True)
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.verbs() == ["get", "update", "create", "get"]
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [8080]}


def test_update_recreates_a_policy_deleted_right_after_the_update(fake, provider, monkeypatch):
    created = provider.create(props(fake)).outs
    real_update = ep.AteClient.update

    def update_then_a_concurrent_delete(client, document):
        result = real_update(client, document)
        fake.run(*argv("delete"))
        return result

    monkeypatch.setattr(ep.AteClient, "update", update_then_a_concurrent_delete)
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.verbs() == ["get", "update", "delete", "get", "create", "get"]
    assert result.outs["uid"] == "uid-0002" == fake.policy()["metadata"]["uid"]
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [8080]}


def test_update_for_a_missing_actor_says_to_create_the_actor_first(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(actors=[])
    with pytest.raises(ep.ActorMissingError, match="Create the actor first"):
        provider.update(ID, created, props(fake, gateway_port=8080.0))


def test_update_other_failure_raises(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(fail_next={"update": "Error: rpc error: code = InvalidArgument desc = rules[0]: bad"})
    with pytest.raises(ep.KubectlAteCommandError) as err:
        provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert err.value.kind == ep.INVALID_ARGUMENT and "rules[0]: bad" in str(err.value)


def test_update_without_preconditions_is_refused_by_the_cli(fake, provider):
    provider.create(props(fake))
    manifest = json.dumps(egress.build_policy(egress.PolicyInputs.from_props(props(fake))))
    result = subprocess.run(
        [fake.kubectl, *argv("update", "-f", "-")], input=manifest, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1 and "lacks the metadata.uid and metadata.version" in result.stderr


# --- delete --------------------------------------------------------------------------------------


def test_delete(fake, provider):
    created = provider.create(props(fake)).outs
    fake.clear_calls()
    provider.delete(ID, created)
    assert fake.calls() == [argv("delete")]
    assert fake.policy() is None


def test_delete_of_a_missing_policy_succeeds(fake, provider):
    provider.create(props(fake, actor="actor-b"))
    assert fake.run(*argv("delete")).returncode == 1  # the CLI reports it as an error
    fake.clear_calls()
    assert provider.delete(ID, props(fake)) is None
    assert fake.calls() == [argv("delete")]
    assert fake.policy() is None and fake.policy("agents/actor-b") is not None  # the other one is untouched


def test_delete_after_the_actor_is_gone_succeeds(fake, provider):
    provider.create(props(fake))
    provider.create(props(fake, actor="actor-b"))
    deleted = fake.run("ate", "delete", "actor", "actor-a", "-a", "agents", "--context", "kind-test")
    assert deleted.returncode == 0
    assert fake.policy() is None  # Substrate deletes the actor's policy with the actor
    assert fake.run(*argv("delete")).returncode == 1  # the CLI reports the actor as not found
    fake.clear_calls()
    assert provider.delete(ID, props(fake)) is None
    assert fake.calls() == [argv("delete")]
    assert fake.state()["actors"] == ["agents/actor-b"] and fake.policy("agents/actor-b") is not None


def test_delete_failure_raises(fake, provider):
    provider.create(props(fake))
    fake.set(fail_next={"delete": "Error: rpc error: code = Unavailable desc = connection refused"})
    with pytest.raises(ep.KubectlAteCommandError, match="Unavailable"):
        provider.delete(ID, props(fake))
    assert fake.policy() is not None


# --- diff and check ------------------------------------------------------------------------------


@pytest.fixture
def created(fake, provider) -> dict:
    return {**provider.create(props(fake)).outs, "__provider": "serialized"}


def test_diff_after_create_is_empty(fake, provider, created):
    decision = provider.diff(ID, created, props(fake))
    assert (decision.changes, decision.replaces) == (False, [])


def test_diff_of_a_rule_change_replaces_nothing(fake, provider, created):
    for change in ({"gateway_port": 8080.0}, {"expiration_seconds": 600.0}, {"extra_hostnames": ["pypi.org"]}):
        decision = provider.diff(ID, created, props(fake, **change))
        assert (decision.changes, decision.replaces) == (True, []), change


def test_diff_of_the_target(fake, provider, created):
    actor = provider.diff(ID, created, props(fake, actor="actor-b"))
    assert (actor.changes, actor.replaces, actor.delete_before_replace) == (True, ["actor"], False)
    assert provider.diff(ID, created, props(fake, atespace="other")).replaces == ["atespace"]


def test_a_new_kube_context_replaces_the_policy_deleting_the_old_one_first(fake, provider, created):
    context = provider.diff(ID, created, props(fake, kube_context="kind-other"))
    assert (context.changes, context.replaces, context.delete_before_replace) == (True, ["kube_context"], True)
    unknown = provider.diff(ID, created, props(fake, kube_context=pulumi.runtime.rpc.UNKNOWN))
    assert (unknown.changes, unknown.replaces, unknown.delete_before_replace) == (True, ["kube_context"], True)


def test_replacing_across_kube_contexts_leaves_no_orphan(fake, provider, created):
    """The engine's delete-before-replace: delete with the old inputs, then create with the new."""
    fake.set(contexts=["kind-test", "kind-other"])
    news = provider.check(created, props(fake, kube_context="kind-other")).inputs
    assert provider.diff(ID, created, news).delete_before_replace is True
    fake.clear_calls()
    provider.delete(ID, created)
    outs = provider.create(news).outs
    contexts = [call[call.index("--context") + 1] for call in fake.calls()]
    assert [c[1] for c in fake.calls()] == ["delete", "create", "get"]
    assert contexts == ["kind-test", "kind-other", "kind-other"]
    assert outs["kube_context"] == "kind-other" and fake.policy() is not None


def test_diff_ignores_cli_settings(fake, provider, created):
    news = props(fake, kubectl="/usr/local/bin/kubectl", timeout_seconds=60.0, substrate_ref="v0.6.0")
    assert provider.diff(ID, created, news).changes is False


def test_diff_with_unknown_inputs(fake, provider, created):
    unknown = pulumi.runtime.rpc.UNKNOWN
    port = provider.diff(ID, created, props(fake, gateway_port=unknown))
    assert (port.changes, port.replaces) == (True, [])
    actor = provider.diff(ID, created, props(fake, actor=unknown))
    assert (actor.changes, actor.replaces) == (True, ["actor"])


def test_diff_against_state_without_rules(fake, provider, created):
    del created["rules"]
    assert provider.diff(ID, created, props(fake)).changes is True


def test_check_accepts_and_normalises_valid_inputs(fake, provider):
    result = provider.check({}, props(fake))
    assert result.failures == []
    assert (result.inputs["gateway_port"], result.inputs["timeout_seconds"]) == (80, 10)
    assert result.inputs["__provider"] == "serialized"


def test_check_adds_the_rules_that_will_be_sent(fake, provider):
    news = props(fake, gateway_port=8080.0, extra_hostnames=["pypi.org"], rules=None)
    rules = provider.check({}, news).inputs["rules"]
    inputs = egress.PolicyInputs.from_props(news)
    assert rules == egress.normalize_rules(egress.build_rules(inputs))
    assert [next(iter(r)) for r in rules] == ["http", "tlsPassthrough"]
    assert rules[0]["http"]["ports"] == {"numbers": [8080]}
    assert jwt_of(rules) == {"audiences": ["agent-router"], "expirationSeconds": 900}
    provider.create(provider.check({}, news).inputs)
    assert egress.normalize_rules(fake.stdin_of(0)["rules"]) == rules  # what was sent
    stale = provider.check({}, props(fake, rules=[{"http": {"hostnames": ["x.example"]}}])).inputs["rules"]
    assert stale == egress.desired_rules(egress.PolicyInputs.from_props(props(fake)))  # always rebuilt


def test_a_no_op_up_reports_no_changes(fake, provider):
    """The engine's sequence for `pulumi up` twice with the same program: check, create; then
    check (olds = the checked inputs) and diff against the stored outputs, also after a refresh."""
    program = props(fake, rules=None)  # ActorEgressPolicy declares rules as an output
    first = provider.check({}, program).inputs
    created = provider.create(first)
    state = {**created.outs, "__provider": "serialized"}
    second = provider.check(first, program).inputs
    assert second == first
    decision = provider.diff(created.id, state, second)
    assert (decision.changes, decision.replaces, decision.delete_before_replace) == (False, [], False)
    refreshed = {**provider.read(created.id, state).outs, "__provider": "serialized"}
    assert provider.diff(created.id, refreshed, second).changes is False
    changed = provider.check(first, props(fake, expiration_seconds=1200.0)).inputs
    assert provider.diff(created.id, state, changed).changes is True  # the check can fail


def test_check_reports_each_bad_input(fake, provider):
    result = provider.check({}, props(fake, expiration_seconds=5000.0, extra_hostnames=["*.anthropic.com"]))
    got = {(f.property, f.reason.split(":")[0]) for f in result.failures}
    assert ("expiration_seconds", "egress rule 1 (http)") in got
    assert (
        "extra_hostnames",
        "extra hostname '*.anthropic.com' reaches model provider host 'api.anthropic.com'",
    ) in got
    assert fake.calls() == []


def test_check_skips_validation_of_unknown_inputs(fake, provider):
    result = provider.check({}, props(fake, audiences=[pulumi.runtime.rpc.UNKNOWN]))
    assert result.failures == []


# --- classification and serialisation ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Error: rpc error: code = AlreadyExists desc = EgressPolicy already exists", ep.ALREADY_EXISTS),
        ("rpc error: code = ALREADY_EXISTS desc = x", ep.ALREADY_EXISTS),
        ("EgressPolicy already exists", ep.ALREADY_EXISTS),
        ("rpc error: code = NotFound desc = x", ep.NOT_FOUND),
        ('Error: actor "a" in atespace "s" has no egress policy', ep.NOT_FOUND),
        ('Error: actor "a" in atespace "s" not found', ep.ACTOR_NOT_FOUND),
        ("rpc error: code = FailedPrecondition desc = parent Actor does not exist", ep.FAILED_PRECONDITION),
        ("rpc error: code = failed_precondition desc = x", ep.FAILED_PRECONDITION),
        ("preconditions do not match ...: rpc error: code = Aborted desc = x", ep.ABORTED),
        ("code = ABORTED", ep.ABORTED),
        ('invalid EgressPolicy: proto: (line 1:2): unknown field "cidr"', ep.UNKNOWN_FIELD),
        ('rpc error: code = InvalidArgument desc = unknown field "x"', ep.UNKNOWN_FIELD),
        ("rpc error: code = InvalidArgument desc = rules[0]", ep.INVALID_ARGUMENT),
        ('Error: unknown command "ate" for "kubectl"', ep.PLUGIN_MISSING),
        ('error: unknown command "ate" for "kubectl"', ep.PLUGIN_MISSING),
        ("rpc error: code = Unavailable desc = connection refused", ep.UNAVAILABLE),
        ("rpc error: code = DeadlineExceeded desc = x", ep.UNAVAILABLE),
        ("failed to connect to ate-api-server: boom", ep.UNAVAILABLE),
        ("rpc error: code = Unauthenticated desc = x", ep.PERMISSION_DENIED),
        ("Error: unknown flag: --context", ep.UNKNOWN_FLAG),
        ("Error: unknown shorthand flag: 'o' in -o", ep.UNKNOWN_FLAG),
        ("something else entirely", ep.UNKNOWN),
    ],
)
def test_classify_failure(text, kind):
    assert ep.classify_failure(text) == kind


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("Error: unknown flag: --context\nUsage: ...", "--context"),
        ("Error: unknown flag: --context=kind-x", "--context"),
        ("Error: unknown shorthand flag: 'o' in -o", "-o"),
        ("Error: unknown shorthand flag: 'o' in -o=json", "-o"),
        ("Error: rpc error: code = NotFound", ""),
    ],
)
def test_unknown_flag_of(text, flag):
    assert ep.unknown_flag_of(text) == flag


def test_provider_pickles_by_reference_and_loads_in_a_fresh_process():
    blob = pulumi.dynamic.dynamic.serialize_provider(ep.ActorEgressPolicyProvider())
    code = (
        "import base64, sys, dill; p = dill.loads(base64.b64decode(sys.stdin.read())); "
        "print(type(p).__module__ + '.' + type(p).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "components.egress_provider.ActorEgressPolicyProvider"
    assert len(blob) < 2000  # the class is referenced, not copied into the state

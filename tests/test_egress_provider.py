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

from components import egress
from components import egress_provider as ep
from components.egress import EgressConfigError

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


# --- the fake itself behaves like the documented CLI ---------------------------------------------


def test_fake_refuses_flags_before_the_plugin_name_like_kubectl(fake):
    result = fake.run("--context", "kind-test", "ate", "get", "egress-policy", "actor-a", "-a", "agents")
    assert result.returncode == 1
    assert "flags cannot be placed before plugin name: --context" in result.stderr


def test_fake_get_of_a_missing_policy_exits_0_with_a_message(fake):
    result = fake.run(*argv("get", "-o", "json"))
    assert (result.returncode, result.stdout) == (0, "")
    assert 'actor "actor-a" in atespace "agents" has no egress policy' in result.stderr


def test_fake_prints_int64_as_strings_like_protojson(fake, provider):
    provider.create(props(fake))
    printed = json.loads(fake.run(*argv("get", "-o", "json")).stdout)
    assert printed["metadata"]["version"] == "1"
    assert jwt_of(printed["rules"]) == {"audiences": ["agent-router"], "expirationSeconds": "900"}


# --- create --------------------------------------------------------------------------------------


def test_create_new_policy(fake, provider):
    result = provider.create(props(fake))
    assert result.id == ID
    assert fake.calls() == [argv("create", "-f", "-", "-o", "json")]
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
    assert fake.verbs() == ["create", "get", "update"]
    assert fake.calls()[2] == argv("update", "-f", "-", "-o", "json")
    sent = fake.stdin_of(2)
    assert sent["metadata"] == {"atespace": "agents", "name": "default", "uid": "uid-0001", "version": "1"}
    assert (result.outs["uid"], result.outs["version"]) == ("uid-0001", "2")
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [80]}


def test_create_retries_when_the_existing_policy_vanished(fake, provider):
    fake.set(phantom_exists=1)
    result = provider.create(props(fake))
    assert fake.verbs() == ["create", "get", "create"]
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


def test_kube_context_is_passed_after_the_plugin_name(fake, provider):
    fake.set(contexts=["kind-test"])
    provider.create(props(fake))
    with pytest.raises(ep.KubectlAteCommandError, match='context "kind-other" does not exist'):
        provider.create(props(fake, kube_context="kind-other"))
    assert all(call[0] == "ate" for call in fake.calls())


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
    assert fake.calls()[-1] == argv("get", "-o", "json")
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
def test_unexpected_cli_output_is_an_error(fake, provider, printed, fragment):
    fake.set(print_next={"create": printed})
    with pytest.raises(ep.KubectlAteCommandError, match=fragment):
        provider.create(props(fake))


# --- update --------------------------------------------------------------------------------------


def test_update_uses_uid_and_version_from_a_fresh_get(fake, provider):
    created = provider.create(props(fake)).outs
    state = fake.state()
    state["policies"][ID]["metadata"]["version"] = 7  # someone else wrote it since
    fake.state_file.write_text(json.dumps(state))
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.calls() == [argv("get", "-o", "json"), argv("update", "-f", "-", "-o", "json")]
    assert fake.stdin_of(1)["metadata"] == {"atespace": "agents", "name": "default", "uid": "uid-0001", "version": "7"}
    assert (result.outs["version"], result.outs["gateway_port"]) == ("8", 8080)
    assert result.outs["rules"][0]["http"]["ports"] == {"numbers": [8080]}


def test_update_retries_once_after_aborted(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(abort_updates=1)
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, expiration_seconds=1200.0))
    assert fake.verbs() == ["get", "update", "get", "update"]
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
    assert fake.verbs() == ["get", "create"]
    assert result.outs["uid"] == "uid-0002" and result.outs["version"] == "1"


def test_update_recreates_a_policy_deleted_between_get_and_update(fake, provider):
    created = provider.create(props(fake)).outs
    fake.set(vanish_on_update_once=True)
    fake.clear_calls()
    result = provider.update(ID, created, props(fake, gateway_port=8080.0))
    assert fake.verbs() == ["get", "update", "create"]
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
    assert fake.run(*argv("delete")).returncode == 1  # the CLI reports it as an error
    provider.delete(ID, props(fake))
    assert fake.verbs()[-1] == "delete"


def test_delete_after_the_actor_is_gone_succeeds(fake, provider):
    provider.create(props(fake))
    fake.set(actors=["agents/actor-b"])
    provider.delete(ID, props(fake))


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
    assert provider.diff(ID, created, props(fake, actor="actor-b")).replaces == ["actor"]
    assert provider.diff(ID, created, props(fake, atespace="other")).replaces == ["atespace"]
    context = provider.diff(ID, created, props(fake, kube_context="kind-other"))
    assert (context.changes, context.replaces) == (True, [])


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
        ("something else entirely", ep.UNKNOWN),
    ],
)
def test_classify_failure(text, kind):
    assert ep.classify_failure(text) == kind


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

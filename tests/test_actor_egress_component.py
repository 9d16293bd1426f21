"""ActorEgressPolicies under Pulumi mocks: stable shards, one actor per change, the right inputs."""

from __future__ import annotations

import base64
import dataclasses
import json

import dill
import pulumi
import pytest

from components.actor_egress import COMPONENT_TYPE, ActorEgressPolicies
from components.egress_provider import EgressPolicyShard, EgressShardProvider
from core import egress
from core.egress import GATEWAY_HOSTNAME, EgressConfigError, EgressPolicySettings, settings_problems, shards

SHARD_TYPE = "pulumi-python:dynamic:EgressPolicyShard"
ACTORS = ["agents/actor-a", "agents/actor-b", "team-x/actor-c"]


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[tuple[str, str, bool, dict]] = []  # (type, name, custom, inputs)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append((args.typ, args.name, args.custom, dict(args.inputs)))
        return [args.name, dict(args.inputs)]

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def settings(**overrides) -> EgressPolicySettings:
    base = dict(actors=ACTORS, kube_context="kind-dev", substrate_ref="v1.0.0-rc.1")
    return EgressPolicySettings(**{**base, **overrides})


def run_program(egress_settings: EgressPolicySettings) -> tuple[RecordingMocks, dict]:
    """Run the component once under fresh mocks; return the mocks and what it exposed."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="agent-budgets", stack="test", preview=False)
    resolved: dict = {}

    @pulumi.runtime.test
    def program():
        component = ActorEgressPolicies("actor-egress", egress_settings)
        resolved["component"] = component
        outs = [pulumi.Output.all(s.urn, s.id) for s in component.shards.values()]
        return pulumi.Output.all(*outs).apply(lambda values: resolved.update(shards=values))

    program()
    return mocks, resolved


def shards_of(mocks: RecordingMocks) -> dict[str, dict]:
    """Registered shards by name, with their inputs minus the pickled provider."""
    found = {}
    for typ, name, custom, inputs in mocks.resources:
        if typ == SHARD_TYPE:
            assert custom is True
            found[name] = {k: v for k, v in inputs.items() if k != "__provider"}
    return found


def test_each_actor_is_in_the_shard_its_name_hashes_to():
    mocks, resolved = run_program(settings(gateway_port=8080, extra_hostnames=["pypi.org"]))
    shards = shards_of(mocks)
    expected = {egress.shard_resource_name(egress.shard_of(ref)): ref for ref in ACTORS}
    assert set(shards) == set(expected)  # these three land in three different shards
    for name, ref in expected.items():
        assert list(shards[name]["actors"]) == [ref]
    name = egress.shard_resource_name(egress.shard_of("team-x/actor-c"))
    inputs = shards[name]
    fingerprint = inputs["actors"]["team-x/actor-c"]
    assert fingerprint == egress.rules_fingerprint(inputs["rules"])
    assert {k: v for k, v in inputs.items() if k not in ("actors", "rules")} == {
        "shard": egress.shard_of("team-x/actor-c"),
        "kube_context": "kind-dev",
        "cluster": "",
        "substrate_ref": "v1.0.0-rc.1",
        "gateway_hostname": GATEWAY_HOSTNAME,
        "gateway_port": 8080,
        "audiences": ["agent-router"],
        "expiration_seconds": 900,
        "extra_hostnames": ["pypi.org"],
        "provider_hosts": [],
        "kubectl": "kubectl",
        "timeout_seconds": 30,
        "concurrency": egress.DEFAULT_CONCURRENCY,
    }
    assert [next(iter(rule)) for rule in inputs["rules"]] == ["http", "tlsPassthrough"]
    components = [(t, n) for t, n, custom, _ in mocks.resources if not custom]
    assert components == [(COMPONENT_TYPE, "actor-egress")]
    component = resolved["component"]
    assert component.shard_of_actor == {ref: egress.shard_of(ref) for ref in ACTORS}
    assert all(isinstance(s, EgressPolicyShard) for s in component.shards.values())
    for urn, _ in resolved["shards"]:
        assert f"::{COMPONENT_TYPE}${SHARD_TYPE}::egress-shard-" in urn  # parent=component


def test_many_actors_share_64_shards_at_most():
    refs = [f"agents/agent-{i:05d}" for i in range(1000)]
    shards = shards_of(run_program(settings(actors=refs))[0])
    assert len(shards) == egress.SHARD_COUNT
    assert sorted(ref for inputs in shards.values() for ref in inputs["actors"]) == sorted(refs)
    sizes = [len(inputs["actors"]) for inputs in shards.values()]
    assert max(sizes) <= 2 * len(refs) / egress.SHARD_COUNT  # the hash spreads them


def test_each_shard_carries_the_pickled_shard_provider():
    mocks, _ = run_program(settings(actors=["agents/actor-a"]))
    (inputs,) = [i for t, _, _, i in mocks.resources if t == SHARD_TYPE]
    provider = dill.loads(base64.b64decode(inputs["__provider"]))
    assert isinstance(provider, EgressShardProvider)


def test_adding_or_removing_an_actor_changes_only_its_shard_by_that_actor():
    refs = [f"agents/agent-{i:03d}" for i in range(200)]
    before = shards_of(run_program(settings(actors=refs))[0])
    after = shards_of(run_program(settings(actors=[*refs, "agents/newcomer"]))[0])
    changed = {name for name in after if after[name] != before.get(name)}
    assert changed == {egress.shard_resource_name(egress.shard_of("agents/newcomer"))}
    [name] = changed
    assert set(after[name]["actors"]) - set(before[name]["actors"]) == {"agents/newcomer"}
    removed = shards_of(run_program(settings(actors=refs[1:]))[0])
    changed = {name for name in before if removed.get(name) != before[name]}
    assert changed == {egress.shard_resource_name(egress.shard_of(refs[0]))}


def test_a_setting_change_reaches_every_shard_and_renames_nothing():
    before = shards_of(run_program(settings())[0])
    after = shards_of(run_program(settings(expiration_seconds=1200))[0])
    assert set(after) == set(before)
    assert {s["expiration_seconds"] for s in after.values()} == {1200}
    assert all(s["actors"] != before[n]["actors"] for n, s in after.items())  # every fingerprint moved


def test_kubeconfig_contents_are_a_secret_input_and_name_the_cluster():
    contents = json.dumps(
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://prod.example:6443"}}],
            "contexts": [{"name": "kind-dev", "context": {"cluster": "c", "user": "u"}}],
        },
        indent=2,
    )
    mocks, monitor = run_with_monitor(settings(actors=["agents/actor-a"], kubeconfig=contents))
    [(name, inputs)] = shards_of(mocks).items()
    assert monitor.secret[name] == {"kubeconfig"}
    assert inputs["cluster"] == "server:https://prod.example:6443"


def test_a_kubeconfig_path_is_not_secret_and_is_the_identity_when_the_file_is_not_here():
    mocks, monitor = run_with_monitor(settings(actors=["agents/actor-a"], kubeconfig="~/.kube/no-such-prod"))
    [(name, inputs)] = shards_of(mocks).items()
    assert (inputs["kubeconfig"], inputs["cluster"]) == ("~/.kube/no-such-prod", "path:~/.kube/no-such-prod")
    assert monitor.secret[name] == set()


def test_a_kubeconfig_file_is_known_by_the_server_it_names(tmp_path):
    """Read at program time, where the file is: editing it to name another cluster is a new cluster."""
    path = tmp_path / "prod.yaml"
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://prod.example:6443"}}],
                "contexts": [{"name": "kind-dev", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    mocks, monitor = run_with_monitor(settings(actors=["agents/actor-a"], kubeconfig=str(path)))
    [(name, inputs)] = shards_of(mocks).items()
    assert (inputs["kubeconfig"], inputs["cluster"]) == (str(path), "server:https://prod.example:6443")
    assert monitor.secret[name] == set()


SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # how the wire protocol marks a secret value


class OptionsMonitor(pulumi.runtime.mocks.MockMonitor):
    """The mock monitor, also keeping what mocks drop: each registration's hideDiffs option and which of
    its inputs went over the wire as secrets."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.hidden: dict[str, list[str]] = {}
        self.secret: dict[str, set[str]] = {}

    def RegisterResource(self, request):  # noqa: N802 - the gRPC method name
        self.hidden[request.name] = list(request.hideDiffs)
        fields = request.object.fields
        self.secret[request.name] = {
            key
            for key, value in fields.items()
            if value.HasField("struct_value") and SECRET_SIG in str(value.struct_value)
        }
        return super().RegisterResource(request)


def run_with_monitor(egress_settings: EgressPolicySettings) -> tuple[RecordingMocks, OptionsMonitor]:
    mocks = RecordingMocks()
    monitor = OptionsMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="agent-budgets", stack="test", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program():
        return ActorEgressPolicies("actor-egress", egress_settings).urn

    program()
    return mocks, monitor


def test_shards_hide_their_bookkeeping_from_diffs():
    """The uid/version records move on every write; previews show the per-actor fingerprints instead."""
    mocks, monitor = run_with_monitor(settings(actors=["agents/actor-a"]))
    [name] = shards_of(mocks)
    assert monitor.hidden[name] == ["policies"]
    assert monitor.hidden["actor-egress"] == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"extra_hostnames": ["api.openai.com"]}, "extra hostname 'api.openai.com' reaches model provider host"),
        (
            {"extra_hostnames": ["llm.corp.example"], "provider_hosts": ["https://llm.corp.example/v1"]},
            "reaches model provider host 'llm.corp.example'",
        ),
        ({"expiration_seconds": 60}, "expirationSeconds 60 must be an integer from 300 to 3600"),
        ({"actors": ["actor-a"]}, 'must be written "<atespace>/<name>"'),
        ({"actors": ["agents/actor-a", "agents/actor-b", "agents/actor-a"]}, "actor 'agents/actor-a' is listed twice"),
        ({"kube_context": ""}, "kube context is empty"),
        ({"concurrency": 0}, "concurrency 0 must be a whole number from 1 to 32"),
    ],
)
def test_bad_settings_fail_before_any_resource_is_registered(overrides, fragment):
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="agent-budgets", stack="test", preview=False)
    with pytest.raises(EgressConfigError) as err:
        ActorEgressPolicies("actor-egress", settings(**overrides))
    assert fragment in str(err.value)
    assert mocks.resources == []


def test_shared_settings_are_reported_once_not_per_actor():
    problems = settings_problems(settings(expiration_seconds=10))
    assert len(problems) == 1


class CountedRef(str):
    """An actor ref that counts how often it is compared or hashed: a scan of a list compares it with every
    element, a set lookup hashes it once."""

    comparisons = 0
    hashes = 0

    def __eq__(self, other: object) -> bool:
        CountedRef.comparisons += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        CountedRef.hashes += 1
        return str.__hash__(self)


def test_the_settings_check_visits_each_actor_once_and_runs_once_per_settings(monkeypatch):
    """Duplicate detection is a set lookup, not a scan of the actors seen so far (which made 100,000 actors
    take minutes): each actor's name is checked once, hashed at most twice and compared only with its duplicate;
    a second ask of the same settings (the component, after core.validation) checks nothing again."""
    checked: list[str] = []
    original = shards.actor_ref_problems

    def counting(ref):
        checked.append(ref)
        return original(ref)

    monkeypatch.setattr(shards, "actor_ref_problems", counting)
    actors = [CountedRef(f"agents/actor-{n:04d}") for n in range(3000)]
    listed = [*actors, CountedRef(actors[7]), CountedRef(actors[2999]), "not-an-actor"]
    egress_settings = settings(actors=listed)
    CountedRef.comparisons = CountedRef.hashes = 0
    problems = settings_problems(egress_settings)
    assert [p.message for p in problems] == [
        "actor 'agents/actor-0007' is listed twice; list each actor once",
        "actor 'agents/actor-2999' is listed twice; list each actor once",
        'actor \'not-an-actor\' must be written "<atespace>/<name>", e.g. "agents/actor-a"',
    ]
    assert checked == listed
    assert CountedRef.hashes <= 2 * len(listed) and CountedRef.comparisons <= 2  # a list scan: 4.5 million
    assert settings_problems(egress_settings) == problems and checked == listed
    with pytest.raises(EgressConfigError):
        ActorEgressPolicies("actor-egress", egress_settings)
    assert checked == listed


def test_settings_are_a_frozen_dataclass():
    s = settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.kube_context = "other"  # type: ignore[misc]

"""ActorEgressPolicies under Pulumi mocks: one policy per actor, stable names, right inputs."""

from __future__ import annotations

import base64
import dataclasses

import dill
import pulumi
import pytest

from components.actor_egress import (
    COMPONENT_TYPE,
    ActorEgressPolicies,
    EgressPolicySettings,
    policy_resource_name,
    settings_problems,
)
from components.egress_provider import ActorEgressPolicy, ActorEgressPolicyProvider
from core.egress import GATEWAY_HOSTNAME, EgressConfigError

DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[tuple[str, str, bool, dict]] = []  # (type, name, custom, inputs)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append((args.typ, args.name, args.custom, dict(args.inputs)))
        state = dict(args.inputs)
        if args.typ == DYNAMIC_TYPE:
            state.update(uid=f"uid-{args.name}", version="1", rules=[])
        return [f"{args.inputs.get('atespace')}/{args.inputs.get('actor')}", state]

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def settings(**overrides) -> EgressPolicySettings:
    base = dict(
        actors=["agents/actor-a", "agents/actor-b", "team-x/actor-c"],
        kube_context="kind-dev",
        substrate_ref="v0.5.0",
    )
    return EgressPolicySettings(**{**base, **overrides})


def run_program(egress_settings: EgressPolicySettings) -> tuple[RecordingMocks, dict]:
    """Run the component once under fresh mocks; return the mocks and the resolved URNs/ids."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="agent-budgets", stack="test", preview=False)
    resolved: dict = {}

    @pulumi.runtime.test
    def program():
        component = ActorEgressPolicies("actor-egress", egress_settings)
        resolved["component"] = component
        refs = list(component.policies)
        outs = [pulumi.Output.all(p.urn, p.id, p.uid) for p in component.policies.values()]

        def record(values):
            resolved["policies"] = dict(zip(refs, values, strict=True))

        return pulumi.Output.all(*outs).apply(record)

    program()
    return mocks, resolved


def policies_of(mocks: RecordingMocks) -> dict[str, dict]:
    """Registered dynamic resources by name, with their inputs minus the pickled provider."""
    found = {}
    for typ, name, custom, inputs in mocks.resources:
        if typ == DYNAMIC_TYPE:
            assert custom is True
            found[name] = {k: v for k, v in inputs.items() if k != "__provider"}
    return found


def test_one_policy_per_actor_with_the_right_inputs():
    mocks, resolved = run_program(settings(gateway_port=8080, extra_hostnames=["pypi.org"]))
    policies = policies_of(mocks)
    assert sorted(policies) == ["egress-agents.actor-a", "egress-agents.actor-b", "egress-team-x.actor-c"]
    assert policies["egress-team-x.actor-c"] == {
        "atespace": "team-x",
        "actor": "actor-c",
        "kube_context": "kind-dev",
        "substrate_ref": "v0.5.0",
        "gateway_hostname": GATEWAY_HOSTNAME,
        "gateway_port": 8080,
        "audiences": ["agent-router"],
        "expiration_seconds": 900,
        "extra_hostnames": ["pypi.org"],
        "provider_hosts": [],
        "kubectl": "kubectl",
        "timeout_seconds": 30,
    }
    components = [(t, n) for t, n, custom, _ in mocks.resources if not custom]
    assert components == [(COMPONENT_TYPE, "actor-egress")]
    component = resolved["component"]
    assert set(component.policies) == {"agents/actor-a", "agents/actor-b", "team-x/actor-c"}
    assert all(isinstance(p, ActorEgressPolicy) for p in component.policies.values())
    urn, policy_id, uid = resolved["policies"]["team-x/actor-c"]
    assert urn.endswith(f"::{COMPONENT_TYPE}${DYNAMIC_TYPE}::egress-team-x.actor-c")  # parent=component
    assert (policy_id, uid) == ("team-x/actor-c", "uid-egress-team-x.actor-c")


def test_each_policy_carries_the_pickled_provider():
    mocks, _ = run_program(settings(actors=["agents/actor-a"]))
    (inputs,) = [i for t, _, _, i in mocks.resources if t == DYNAMIC_TYPE]
    provider = dill.loads(base64.b64decode(inputs["__provider"]))
    assert isinstance(provider, ActorEgressPolicyProvider)


def test_removing_an_actor_removes_only_its_policy():
    before = policies_of(run_program(settings())[0])
    after = policies_of(run_program(settings(actors=["agents/actor-a", "team-x/actor-c"]))[0])
    assert set(before) - set(after) == {"egress-agents.actor-b"}
    assert set(after) <= set(before)
    assert {n: before[n] for n in after} == after  # the others are registered exactly as before


def test_adding_an_actor_adds_only_its_policy():
    before = policies_of(run_program(settings())[0])
    grown = ["agents/actor-a", "agents/actor-new", "agents/actor-b", "team-x/actor-c"]
    after = policies_of(run_program(settings(actors=grown))[0])
    assert set(after) - set(before) == {"egress-agents.actor-new"}
    assert {n: after[n] for n in before} == before
    assert after["egress-agents.actor-new"]["actor"] == "actor-new"


def test_a_setting_change_reaches_every_policy_and_renames_nothing():
    before = policies_of(run_program(settings())[0])
    after = policies_of(run_program(settings(expiration_seconds=1200))[0])
    assert set(after) == set(before)
    assert {p["expiration_seconds"] for p in after.values()} == {1200}


def test_resource_names_are_stable_per_actor():
    assert policy_resource_name("agents/actor-a") == "egress-agents.actor-a"


def test_actors_differing_only_in_where_the_dash_falls_get_distinct_policies():
    pairs = ["team-a/bot", "team/a-bot", "a-b/c", "a/b-c"]
    assert settings_problems(settings(actors=pairs)) == []
    mocks, resolved = run_program(settings(actors=pairs))
    policies = policies_of(mocks)
    assert sorted(policies) == ["egress-a-b.c", "egress-a.b-c", "egress-team-a.bot", "egress-team.a-bot"]
    assert (policies["egress-team-a.bot"]["atespace"], policies["egress-team-a.bot"]["actor"]) == ("team-a", "bot")
    assert (policies["egress-team.a-bot"]["atespace"], policies["egress-team.a-bot"]["actor"]) == ("team", "a-bot")
    assert {ref: v[1] for ref, v in resolved["policies"].items()} == {ref: ref for ref in pairs}


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
        (
            {"actors": ["agents/actor-a", "agents/actor-b", "agents/actor-a"]},
            "actor 'agents/actor-a' is listed twice (both would be the Pulumi resource 'egress-agents.actor-a')",
        ),
        ({"kube_context": ""}, "kube context is empty"),
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


def test_settings_are_a_frozen_dataclass():
    s = settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.kube_context = "other"  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(EgressPolicySettings)] == [
        "actors",
        "gateway_hostname",
        "gateway_port",
        "audiences",
        "expiration_seconds",
        "extra_hostnames",
        "provider_hosts",
        "kube_context",
        "kubectl",
        "substrate_ref",
        "timeout_seconds",
    ]

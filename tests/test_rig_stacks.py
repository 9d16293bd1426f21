"""The rig's engine steps beyond the first deploy, without a node: the actor keys it signs with for the rig stack,
the budget change it makes to either stack file, the YAML program of the component package, the move's judgement of
an upgrade preview, and the egress step's reading of the engine's diff.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format

from agent_budgets import AgentBudgetsArgs
from agent_budgets.component import RemoteModeError, _check_package_mode
from core.egress.shards import shard_of
from core.filter_chain import AGENT_ROUTER_FILTER, HEADER_TO_METADATA, IDENTITY_BEFORE_AGENT_ROUTER, JWT_AUTHN, ROUTER
from core.manifests import budget_policy_manifest
from core.validation import parse_settings, validate_stack
from core.xds_size import RATE_LIMIT_FILTER, rate_limit_domains
from rig import actor_keys, component_package, differential, egress_check, lifecycle, live_checks, move, program, scale
from rig.engine import Engine, changed_resources
from rig.processes import StepError
from tests.support.envoy_routes import NAME, NS, budget_rule, reference_route
from tools.spend.stack import load_stack

ROOT = Path(__file__).resolve().parents[1]


def _settings(stack: str):
    return parse_settings(load_stack(ROOT, stack).raw)


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_the_rig_signs_actor_jwts_with_the_claims_the_security_policy_checks(tmp_path: Path):
    engine = Engine(run=tmp_path, project_root=ROOT, by_hand=None, log_dir=None)  # type: ignore[arg-type]
    settings = _settings("rig")
    claims = _claims(actor_keys.actor_token(engine, settings, "agents/actor-a"))
    assert claims["iss"] == "https://idp.ate-system.svc"
    assert claims["aud"] == "agent-router"
    assert claims["sub"] == "actor/agents/actor-a"
    assert claims["exp"] - claims["iat"] == 900
    # One key per run, private to root, and the JWKS published is the key that signs.
    key_file = actor_keys.signing_key_path(engine)
    assert key_file.stat().st_mode & 0o777 == 0o600
    first = actor_keys.actor_signer(engine).jwks()
    assert actor_keys.actor_signer(engine).jwks() == first
    assert json.loads(first)["keys"][0]["kid"] == actor_keys.KEY_ID
    assert "sub" not in _claims(actor_keys.actor_token(engine, settings, "agents/actor-a", sub=None))


@pytest.mark.parametrize(
    ("stack", "caller", "old", "new"),
    [("rig", "agents/actor-a", 1000, 200), ("dev-kubernetes", "serviceaccount:agents/actor-a", 500, 100)],
)
def test_the_budget_change_cuts_the_default_token_limit_of_either_stack_file(stack, caller, old, new):
    settings = _settings(stack)
    assert lifecycle.default_budget_caller(settings) == caller
    budgets = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["agent-budgets:budgets"]
    changed, was, now = lifecycle.lowered_default(budgets)
    assert (was, now) == (old, new)
    # Only that number moves, and the result is still a valid budget.
    raw = load_stack(ROOT, stack).raw
    limits = parse_settings({**raw, "budgets": changed}).budgets.default.limit_list()
    assert [limit.tokens for limit in limits if limit.tokens is not None] == [new]
    assert {key: value for key, value in changed.items() if key != "default"} == {
        key: value for key, value in budgets.items() if key != "default"
    }


def test_the_budget_change_refuses_a_default_without_a_token_limit():
    with pytest.raises(StepError, match="no token limit"):
        lifecycle.lowered_default({"default": {"limits": [{"usd": 1, "per": "Day"}]}})


def test_the_yaml_program_sets_only_properties_the_package_schema_has(tmp_path: Path):
    schema = json.loads((ROOT / "plugin" / "schema.json").read_text())
    inputs = schema["resources"]["agent-budgets:index:AgentBudgets"]["inputProperties"]
    properties = component_package.properties_of(ROOT / "Pulumi.dev-kubernetes.yaml")
    assert properties["actors"] == [
        "serviceaccount:agents/actor-a",
        "serviceaccount:agents/actor-b",
        "apikey:actor-key",
    ]
    path = component_package.write_program(tmp_path, ROOT / "plugin", properties)
    program = yaml.safe_load(path.read_text())
    assert program["runtime"] == "yaml"
    assert program["packages"] == {"agent-budgets": str(ROOT / "plugin")}
    assert set(program["resources"]["budgets"]["properties"]) <= set(inputs)
    assert set(schema["resources"]["agent-budgets:index:AgentBudgets"]["properties"]) >= {"gatewayUrl", "worstCase"}


def test_the_egress_variant_is_refused_by_the_package_with_the_words_the_step_looks_for():
    properties = component_package.properties_of(ROOT / "Pulumi.dev-kubernetes.yaml")
    settings = parse_settings(component_package.with_egress(properties))
    with pytest.raises(RemoteModeError) as refused:
        _check_package_mode(settings, properties.get("kubernetes"))
    assert refused.value.property_path == component_package.EGRESS_PROPERTY
    assert refused.value.reason.startswith(component_package.EGRESS_REASON_START)
    # Without the variant the same properties pass the package's check.
    assert _check_package_mode(parse_settings(properties), properties.get("kubernetes")) is None


def _steps(*pairs: tuple[str, str]) -> str:
    return json.dumps({"steps": [{"op": op, "urn": urn} for op, urn in pairs]})


def test_the_upgrade_is_judged_by_replacements_deletions_and_creations():
    component = "urn:pulumi:move::agent-budgets::agent-budgets:index:AgentBudgets::agent-budgets"
    redis = "urn:pulumi:move::agent-budgets::agent-budgets:index:AgentBudgets$kubernetes:apps/v1:StatefulSet::redis"
    good = changed_resources(_steps(("same", redis), ("create", component), ("update", redis)))
    assert move.judge_upgrade(good) == []
    assert move.judge_upgrade(changed_resources(_steps(("replace", redis), ("create", component)))) == [
        f"replace {redis}"
    ]
    assert move.judge_upgrade(changed_resources(_steps(("delete", redis)))) == [
        f"delete {redis}",
        "the AgentBudgets component is not created",
    ]
    assert move.judge_upgrade(changed_resources(_steps(("create", component), ("create", redis)))) == [
        f"create {redis}"
    ]


def test_the_old_program_gets_the_overlay_without_the_keys_it_lacks():
    overlay = {
        "agent-budgets:kubernetes": {"context": "agent-budgets-rig"},
        "agent-budgets:platform": {"charts": {}, "images": {"registry": "127.0.0.1:5000"}},
        "agent-budgets:redis": {"image": "r"},
    }
    assert move.old_overlay(overlay) == {
        "agent-budgets:kubernetes": {"context": "agent-budgets-rig"},
        "agent-budgets:redis": {"image": "r"},
        "agent-budgets:platform": {"install": False},
    }


def test_a_commit_is_exported_as_its_tracked_files(tmp_path: Path):
    target = move.export_commit(ROOT, "HEAD", tmp_path / "copy")
    assert (target / "Pulumi.yaml").read_text() == (ROOT / "Pulumi.yaml").read_text()
    assert (target / "venv").is_symlink()
    assert not (target / ".git").exists()


def test_an_actor_is_found_for_an_occupied_shard():
    shard = shard_of("agents/actor-a")
    added = egress_check.actor_in_shard(shard, {"agents/actor-a"})
    assert shard_of(added) == shard
    assert added != "agents/actor-a"


DIFF = """\
Previewing update (rig):
  pulumi:pulumi:Stack: (same)
    [urn=urn:pulumi:rig::agent-budgets::pulumi:pulumi:Stack::agent-budgets-rig]
    ~ pulumi-python:dynamic:EgressPolicyShard: (update)
        [id=egress-shard-05]
        [urn=urn:pulumi:rig::agent-budgets::agent-budgets:index:AgentBudgets$pulumi-python:dynamic:EgressPolicyShard::egress-shard-05]
      ~ actors            : {
            agents/actor-a       : "sha256:f9f88bd28bf30d09"
          + agents/actor-egress-1: "sha256:f9f88bd28bf30d09"
        }
        concurrency       : 8
    ~ kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy: (update)
        [urn=urn:pulumi:rig::agent-budgets::kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy::jwt]
      ~ spec: {
            policies: []
        }
Resources:
    ~ 2 to update
"""


def test_the_diff_of_one_shard_ends_at_the_next_resource():
    block = egress_check.shard_block(DIFF, "egress-shard-05")
    assert "+ agents/actor-egress-1" in block
    assert "concurrency" in block
    assert "SecurityPolicy" not in block and "policies" not in block
    assert egress_check.shard_block(DIFF, "egress-shard-06") == ""


def test_the_fakes_kubeconfig_is_the_same_document_in_json(tmp_path: Path):
    source = tmp_path / "admin.yaml"
    document = {"apiVersion": "v1", "clusters": [{"name": "c", "cluster": {"server": "https://10.244.0.1:6443"}}]}
    source.write_text(yaml.safe_dump(document))
    target = egress_check.json_kubeconfig(source, tmp_path / "admin.json")
    assert json.loads(target.read_text()) == document
    assert target.stat().st_mode & 0o777 == 0o600


def test_the_broken_stack_of_the_policy_step_lists_each_actor_once():
    rig_actors = load_stack(ROOT, "rig").raw["actors"]
    assert lifecycle.with_substrate_actor(rig_actors) == rig_actors
    assert lifecycle.with_substrate_actor(["serviceaccount:agents/a"]) == ["serviceaccount:agents/a", "agents/actor-a"]


def test_after_the_moves_commit_only_a_config_maps_replacement_is_accepted():
    config_map = (
        "urn:pulumi:move::agent-budgets::agent-budgets:index:AgentBudgets$agent-budgets:models:MockModel"
        "$kubernetes:core/v1:ConfigMap::mock-model-server"
    )
    redis = "urn:pulumi:move::agent-budgets::agent-budgets:index:AgentBudgets$kubernetes:apps/v1:StatefulSet::redis"
    replaced = changed_resources(_steps(("replace", config_map), ("update", redis)))
    assert move.judge_later_commits(replaced) == []
    # The same replacement is refused at the move's own commit, and a Redis replacement after it.
    assert move.judge_upgrade(replaced) == [f"replace {config_map}", "the AgentBudgets component is not created"]
    assert move.judge_later_commits(changed_resources(_steps(("replace", redis)))) == [f"replace {redis}"]
    assert move.judge_later_commits(changed_resources(_steps(("create", redis), ("delete", config_map)))) == [
        f"create {redis}",
        f"delete {config_map}",
    ]


def test_an_agent_router_object_is_stuck_once_deleted_long_enough_with_its_finalizer():
    def item(name: str, deleted: str | None, finalizers: list[str]) -> dict:
        metadata = {"name": name, "namespace": "agent-budgets", "finalizers": finalizers}
        if deleted:
            metadata["deletionTimestamp"] = deleted
        return {"kind": "AIGatewayRoute", "metadata": metadata}

    now = 1796210742.0  # 2026-12-02T11:25:42Z
    items = [
        item("mock-small", "2026-12-02T11:25:00Z", [program.AGENT_ROUTER_FINALIZER]),
        item("mock-large", "2026-12-02T11:25:30Z", [program.AGENT_ROUTER_FINALIZER]),  # 12 s: not yet
        item("released", "2026-12-02T11:20:00Z", []),  # its finalizer is gone: the API server removes it
        item("live", None, [program.AGENT_ROUTER_FINALIZER]),
    ]
    assert program.stuck_on_finalizer(items, now) == ["AIGatewayRoute/agent-budgets/mock-small"]
    assert program.stuck_on_finalizer(items, now, after=5) == [
        "AIGatewayRoute/agent-budgets/mock-large",
        "AIGatewayRoute/agent-budgets/mock-small",
    ]


def test_a_model_field_must_be_live_with_its_value_and_live_defaults_are_allowed():
    model = {"spec": {"rules": [{"name": "r", "timeouts": {"request": "60s"}}], "hostnames": ["a"]}}
    live = {"spec": {"rules": [{"name": "r", "timeouts": {"request": "60s"}, "matches": []}], "hostnames": ["a"]}}
    assert differential.missing_or_different(model, live) == []
    live["spec"]["rules"][0]["timeouts"]["request"] = "30s"
    assert differential.missing_or_different(model, live) == [
        '.spec.rules[0].timeouts.request: the model has "60s", live "30s"'
    ]
    assert differential.missing_or_different({"a": [1, 2]}, {"a": [1]}) == [".a: the model has 2 item(s), live [1]"]
    assert differential.missing_or_different({"a": 1}, {}) == [".a: missing live (the model has 1)"]


def _listener(name: str, filters: list[str]) -> dict:
    hcm = {"@type": differential.HCM_TYPE, "http_filters": [{"name": f} for f in filters]}
    return {"active_state": {"listener": {"name": name, "filter_chains": [{"filters": [{"typed_config": hcm}]}]}}}


def test_the_gateways_listener_chains_are_read_from_a_config_dump_and_judged_by_the_model():
    custom = "envoy.filters.http.custom_response/backendtrafficpolicy/agent-budgets/agent-budgets"
    ratelimit = "envoy.filters.http.ratelimit/agent-budgets/agent-budgets"
    seen = [JWT_AUTHN, AGENT_ROUTER_FILTER, custom, "envoy.filters.http.rbac", ratelimit, HEADER_TO_METADATA, ROUTER]
    dump = {
        "configs": [
            {"dynamic_listeners": [_listener("agent-budgets/agent-router/http", seen)]},
            {"dynamic_listeners": [_listener("envoy-gateway-proxy-ready-0.0.0.0-19003", ["health", ROUTER])]},
        ]
    }
    chains = differential.listener_filters(dump)
    assert chains["agent-budgets/agent-router/http"] == seen
    order = list(IDENTITY_BEFORE_AGENT_ROUTER)
    assert differential.judge_filter_chains(chains, order) == {"agent-budgets/agent-router/http": seen}
    # Without the program's filterOrder the processor lands before the JWT filter, and the live chain disagrees.
    with pytest.raises(StepError, match=r"core/filter_chain\.py says"):
        differential.judge_filter_chains(chains, [])
    with pytest.raises(StepError, match="no HTTP listener of the Gateway"):
        differential.judge_filter_chains({"envoy-gateway-proxy-ready": [ROUTER]}, order)


def test_redis_keys_are_judged_against_the_models_prediction():
    predicted = {"agents/actor-a": ["d_rule-0_actor/agents/actor-a_0", "d_rule-1_actor/agents/actor-a_0"], "b": ["k"]}
    live = {"d_rule-0_actor/agents/actor-a_0": 30, "d_rule-1_actor/agents/actor-a_0": 171}
    assert differential.judge_redis_keys(predicted, ["agents/actor-a"], live) == {
        "keys": 2,
        "per_actor": {"agents/actor-a": 2},
    }
    with pytest.raises(StepError, match="predicts for no actor"):
        differential.judge_redis_keys(predicted, ["agents/actor-a"], {**live, "stray": 1})
    with pytest.raises(StepError, match="not in Redis"):
        differential.judge_redis_keys(predicted, ["agents/actor-a", "b"], live)
    # Yesterday's counter of the same rule lives on until it expires: the model's too.
    assert differential.judge_redis_keys(
        predicted, ["agents/actor-a"], {**live, "d_rule-0_actor/agents/actor-a_-86400": 5}
    ) == {"keys": 3, "per_actor": {"agents/actor-a": 2}}


def test_the_spend_report_must_hold_every_live_counter_with_its_value():
    live = {"k1": 30, "k2": 171}
    report = {"rows": [{"counter_key": "k1", "counter_value": 30}, {"counter_key": "k2", "counter_value": 171}]}
    report["rows"].append({"counter_key": "k3", "counter_value": 0})  # a window without a counter yet
    assert differential.judge_spend_report(report, live) == {"rows": 3, "rows_with_a_counter": 2}
    report["rows"][1]["counter_value"] = 170
    with pytest.raises(StepError, match="differs from Redis"):
        differential.judge_spend_report(report, live)
    with pytest.raises(StepError, match="no row for"):
        differential.judge_spend_report({"rows": report["rows"][:1]}, live)
    # A key of an earlier window is not the report's: only the current windows' keys must have a row.
    assert differential.judge_spend_report({"rows": report["rows"][:1]}, {"k1": 30, "old": 9}, {"k1"})["rows"] == 1


def test_every_actor_of_the_rig_stack_has_predicted_counters_and_pool_members_share_one():
    stack = validate_stack(load_stack(ROOT, "rig").raw, lambda key: (True, True))
    manifest = budget_policy_manifest(stack.settings, stack.rules)
    policy = {"metadata": {"namespace": manifest.namespace, "name": manifest.name}, "spec": manifest.spec}
    predicted = differential.predicted_keys(stack.settings, policy, 1796210742)
    assert set(predicted) == set(stack.settings.actors)
    assert all(predicted.values())
    # The pool `team` (bot-a and key-a) has one counter the two share; no one else charges it.
    shared = set(predicted["serviceaccount:agents/bot-a"]) & set(predicted["apikey:key-a"])
    assert len(shared) == 1
    assert not shared & set(predicted["agents/actor-a"])
    # actor-a's two limits (tokens and usd, both per Day) end with that day's start, 2026-12-02T00:00Z.
    assert len(predicted["agents/actor-a"]) == 2
    assert all(key.endswith("_1796169600") for key in predicted["agents/actor-a"])


def test_a_burst_under_a_calls_limit_admits_exactly_what_it_leaves():
    live_checks.judge_bounded_burst([200] * 9 + [429] * 23, 9, 2000, 9000)
    with pytest.raises(StepError, match="9 left of the calls limit"):
        live_checks.judge_bounded_burst([200] * 10 + [429] * 22, 9, 2200, 9000)
    with pytest.raises(StepError, match="'500': 1"):
        live_checks.judge_bounded_burst([200] * 9 + [429] * 22 + [500], 9, 2000, 9000)
    with pytest.raises(StepError, match="above worstCase 9000"):
        live_checks.judge_bounded_burst([200] * 9 + [429] * 23, 9, 9200, 9000)


METRICS = """\
# HELP watchable_subscribe_duration_seconds How long a subscriber took to handle an update.
# TYPE watchable_subscribe_duration_seconds histogram
watchable_subscribe_duration_seconds_bucket{message="xds-ir",runner="xds-translator",le="0.001"} 3
watchable_subscribe_duration_seconds_sum{message="xds-ir",runner="xds-translator"} 0.25
watchable_subscribe_duration_seconds_count{message="xds-ir",runner="xds-translator"} 4
watchable_subscribe_duration_seconds_sum{message="provider-resources",runner="gateway-api"} 1.5
watchable_subscribe_duration_seconds_count{message="provider-resources",runner="gateway-api"} 10
watchable_subscribe_duration_seconds_sum{message="other",runner="gateway-api"} 0.5
watchable_subscribe_duration_seconds_count{message="other",runner="gateway-api"} 2
xds_snapshot_create_total{nodeID="x"} 7
"""


def test_envoy_gateways_runner_times_are_added_per_runner_and_differenced_over_a_change():
    before = scale.runner_seconds(METRICS)
    assert before == {"xds-translator": (0.25, 4.0), "gateway-api": (2.0, 12.0)}
    after = {"xds-translator": (0.75, 5.0), "gateway-api": (2.0, 12.0), "infrastructure": (0.1, 1.0)}
    assert scale.growth(before, after) == {
        "infrastructure": {"seconds": 0.1, "updates": 1},
        "xds-translator": {"seconds": 0.5, "updates": 1},
    }


def test_the_scale_layout_keeps_the_stacks_own_actors_and_fills_up_to_the_size():
    own = ["serviceaccount:agents/actor-a", "apikey:actor-key"]
    actors, budgets, suspended = scale.layout(own, 10_000)
    assert len(actors) == 10_000 and actors[:2] == own and len(set(actors)) == 10_000
    members = [actor for entry in budgets["classes"] for actor in entry["actors"]]
    assert len(budgets["classes"]) == 50 and len(members) == int(9_998 * 0.02) // 50 * 50
    assert not set(members) & set(own) and not set(suspended) & set(own)
    assert len(suspended) == 10
    small, small_budgets, _ = scale.layout(own, 10)
    # Ten actors hold no class member (2% of eight is none): the default budget alone, no empty class.
    assert len(small) == 10 and small_budgets["classes"] == []


def test_the_scale_caller_is_a_fresh_service_account_under_the_default_budget():
    own = ["serviceaccount:agents/actor-a", "apikey:actor-key"]
    actors, budgets, suspended = scale.layout(own, 10_000)
    warm, caller = scale.default_callers(actors, budgets, suspended)
    assert (warm, caller) == ("serviceaccount:bench/agent-0-009996", "serviceaccount:bench/agent-0-009997")
    assert scale.layout(own, 10, run="12345")[0][-1] == "serviceaccount:bench/agent-12345-000007"
    assert caller not in suspended and all(caller not in entry["actors"] for entry in budgets["classes"])
    with pytest.raises(StepError, match="fewer than two"):
        scale.default_callers(own, {"classes": []}, [])


def test_the_scale_program_builds_agent_budgets_from_the_stack_files_sections(tmp_path: Path):
    overlay = {"agent-budgets:mockModel": {"image": "python:3.12"}, "agent-budgets:kubernetes": {"context": "rig"}}
    sections = scale.program_sections(ROOT / "Pulumi.dev-kubernetes.yaml", overlay)
    assert sections["mock_model"] == {"image": "python:3.12"} and sections["kubernetes"] == {"context": "rig"}
    assert sections["actors"][0] == "serviceaccount:agents/actor-a"
    assert set(sections) <= set(AgentBudgetsArgs.__annotations__)
    back = scale.yaml_sections(sections)
    assert back["mockModel"] == {"image": "python:3.12"} and "mock_model" not in back
    assert parse_settings(back).identity.sources == ["kubernetes", "apiKeys"]
    scale.write_program(tmp_path / "program", ROOT, ROOT / "venv", sections)
    main = (tmp_path / "program" / "__main__.py").read_text()
    compile(main, "__main__.py", "exec")
    assert repr(str(ROOT)) in main
    assert json.loads((tmp_path / "program" / "sections.json").read_text()) == sections
    project = yaml.safe_load((tmp_path / "program" / "Pulumi.yaml").read_text())
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(ROOT / "venv")}}


def test_a_routes_rate_limit_bytes_are_read_back_from_a_config_dump_as_the_model_counts_them():
    rules = [
        budget_rule([{"name": "x-actor-id", "type": "Distinct"}]),
        budget_rule([{"name": "x-actor-id", "type": "Distinct"}]),
    ]
    [(domain, model)] = rate_limit_domains(NS, NAME, rules).items()
    route = json_format.MessageToDict(reference_route(rules), preserving_proto_field_name=True)
    dump = {"configs": [{"dynamic_route_configs": [{"route_config": {"virtual_hosts": [{"routes": [route]}]}}]}]}
    sizes = differential.route_rate_limit_bytes(dump, f"{RATE_LIMIT_FILTER}/{domain}")
    assert sizes == {route["name"]: model}
    assert differential.route_rate_limit_bytes(dump, f"{RATE_LIMIT_FILTER}/other") == {}


def _priced_call(began: float, ended: float, mills: int) -> dict:
    return {"began": began, "ended": ended, "mills": mills}


def test_a_price_switch_at_the_processor_s_reload_passes():
    calls = [_priced_call(0.1, 0.2, 1), _priced_call(4.9, 5.4, 1), _priced_call(5.5, 5.6, 18), _priced_call(6, 6.1, 18)]
    # The call in flight over the reload may carry either price.
    live_checks.judge_price_switch(calls, old=1, new=18, reload_at=5.2)


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([_priced_call(0.1, 0.2, 1), _priced_call(6, 6.1, 7)], "charged neither 1 nor 18 mills"),
        ([_priced_call(0.1, 0.2, 1), _priced_call(6, 6.1, 1)], "calls began after it were charged the old prices"),
        ([_priced_call(0.1, 0.2, 18), _priced_call(6, 6.1, 18)], "or ended before it the new ones"),
        ([_priced_call(0.1, 0.2, 1), _priced_call(4, 4.1, 1)], "no call in 30 s was charged the new prices"),
    ],
)
def test_a_price_switch_that_is_not_the_reload_s_fails(calls, message):
    with pytest.raises(StepError, match=message):
        live_checks.judge_price_switch(calls, old=1, new=18, reload_at=5.2)

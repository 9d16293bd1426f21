"""Every identity source through the real program under Pulumi mocks: what a cluster would receive for a stack with
Substrate actors, Kubernetes service accounts and API keys, and what each kind of caller then gets from the gateway
(tests/support/gateway_auth.py models Envoy's filters over the program's own manifests)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pulumi.runtime import rpc

from core.budget_rules import compile_budget_rules
from core.filter_chain import API_KEY_AUTH, CUSTOM_RESPONSE, JWT_AUTHN, listener_chain
from core.identity import actor_header_value
from core.ratelimit_model import PolicyModel
from core.suspension import (
    API_KEY_AUTH_FILTER,
    JWT_AUTHN_FILTER,
    RBAC_FILTER,
    SERVICE_ACCOUNT_TOKEN_REFUSED_BODY,
    listener_http_filters,
    one_actor_id_rule,
)
from core.validation import parse_settings
from tests.support import kubernetes_schema
from tests.support.crds import load_catalog
from tests.support.gateway_auth import (
    API_KEY_REFUSED,
    JWT_BAD_FORMAT,
    JWT_MISSED,
    JWT_UNKNOWN_ISSUER,
    JWT_VERIFICATION,
    RBAC,
    Listener,
    Token,
    answer,
    provider_request,
    refusal_message,
    secret_string_data,
)
from tests.support.program import ProgramRun, Registered, run_program, stack_config

SUBSTRATE_ISSUER = "https://idp.ate-system.svc"
CLUSTER_ISSUER = "https://kubernetes.default.svc.cluster.local"
SA = "serviceaccount:agents/research-bot"
OTHER_SA = "serviceaccount:agents/not-listed"
KEY = "apikey:ci-bot"


def identities(**changes: Any) -> dict[str, Any]:
    """The dev stack with all three sources, an actor of each in a class, and one of each suspended."""
    config = stack_config("dev")
    config["identity"] = {"sources": ["substrate", "kubernetes", "apiKeys"]}
    config["actors"] = [*config["actors"], SA, "serviceaccount:agents/helper", KEY, "apikey:nightly"]
    config["budgets"] = {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b", SA, KEY]}],
    }
    config.update(changes)
    return config


@pytest.fixture(scope="module")
def mixed() -> ProgramRun:
    return run_program(identities())


@pytest.fixture(scope="module")
def suspended() -> ProgramRun:
    return run_program(identities(suspended=["agents/actor-a", "serviceaccount:agents/helper", "apikey:nightly"]))


def spec(run: ProgramRun, kind: str, name: str | None = None) -> dict[str, Any]:
    return run.one(kind, name).inputs["spec"]


def test_one_jwt_provider_per_jwt_source_each_naming_its_issuer_and_copying_sub(mixed):
    jwt = spec(mixed, "SecurityPolicy", "agent-budgets-jwt")["jwt"]
    assert "optional" not in jwt and "failOpen" not in jwt
    providers = jwt["providers"]
    assert [p["name"] for p in providers] == ["agent-substrate", "kubernetes-service-accounts"]
    assert [p["issuer"] for p in providers] == [SUBSTRATE_ISSUER, CLUSTER_ISSUER]
    assert [p["audiences"] for p in providers] == [["agent-router"], ["agent-router"]]
    assert all(p["claimToHeaders"] == [{"header": "x-actor-id", "claim": "sub"}] for p in providers)
    # configMap (the default): the keys from a ConfigMap beside the policy, never fetched.
    assert providers[1]["localJWKS"] == {
        "type": "ValueRef",
        "valueRef": {"group": "", "kind": "ConfigMap", "name": "kubernetes-service-account-jwks"},
    }


def test_api_keys_have_a_listener_and_a_policy_of_their_own(mixed):
    listeners = spec(mixed, "Gateway")["listeners"]
    assert [(entry["name"], entry["port"]) for entry in listeners] == [("http", 80), ("apikeys", 8081)]
    policy = spec(mixed, "SecurityPolicy", "agent-budgets-api-keys")
    assert "jwt" not in policy
    assert policy["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "agent-router", "sectionName": "apikeys"}
    ]
    assert policy["apiKeyAuth"] == {
        "credentialRefs": [
            {"group": "", "kind": "Secret", "name": "agent-budgets-api-key-ci-bot"},
            {"group": "", "kind": "Secret", "name": "agent-budgets-api-key-nightly"},
        ],
        "extractFrom": [{"headers": ["authorization", "x-api-key"]}],
        "forwardClientIDHeader": "x-actor-id",
        "sanitize": True,
    }
    assert policy["authorization"] == {"defaultAction": "Allow", "rules": [one_actor_id_rule()]}
    # The model routes attach to both listeners (no sectionName in their parentRefs).
    for route in mixed.of_kind("AIGatewayRoute"):
        assert all("sectionName" not in ref for ref in route.inputs["spec"]["parentRefs"])


def test_each_api_key_is_generated_kept_in_its_own_secret_and_exported_only_as_a_secret(mixed):
    passwords = {r.name: r.inputs for r in mixed.of_kind("RandomPassword") if r.name.startswith("api-keys-")}
    assert sorted(passwords) == ["api-keys-ci-bot", "api-keys-nightly"]
    assert all(p["length"] == 48 and p["special"] is False for p in passwords.values())
    assert all(p["keepers"] == {"rotation": "0"} for p in passwords.values())
    secret = mixed.one("Secret", "agent-budgets-api-key-ci-bot").inputs
    assert secret["stringData"][rpc._special_sig_key] == rpc._special_secret_sig
    assert secret["metadata"]["annotations"] == {"agent-budgets.dev/actor": "apikey:ci-bot"}
    key = secret_string_data(secret)["apikey.ci-bot"]
    assert mixed.secret_outputs == {"apiKeys": True}
    nightly = secret_string_data(mixed.one("Secret", "agent-budgets-api-key-nightly").inputs)["apikey.nightly"]
    assert mixed.resolved_outputs["apiKeys"] == {"apikey:ci-bot": key, "apikey:nightly": nightly}
    assert key != nightly
    # The key appears in no other input and in no plain output.
    plain = json.dumps({k: v for k, v in mixed.outputs.items() if k != "apiKeys"}, default=str)
    assert key not in plain
    elsewhere = [r.name for r in mixed.resources if key in json.dumps(r.inputs) and r.kind != "Secret"]
    assert elsewhere == []
    assert mixed.outputs["apiKeyGatewayUrl"] == "http://agent-router.envoy-gateway-system.svc.cluster.local:8081"
    assert mixed.outputs["identitySources"] == ["substrate", "kubernetes", "apiKeys"]


def test_raising_a_rotation_counter_replaces_that_key_only(mixed):
    identity = {"sources": ["substrate", "kubernetes", "apiKeys"], "apiKeys": {"rotations": {KEY: 2}}}
    rotated = run_program(identities(identity=identity))
    keepers = {r.name: r.inputs["keepers"] for r in rotated.of_kind("RandomPassword") if r.name.startswith("api-keys-")}
    assert keepers == {"api-keys-ci-bot": {"rotation": "2"}, "api-keys-nightly": {"rotation": "0"}}
    old, new = mixed.resolved_outputs["apiKeys"], rotated.resolved_outputs["apiKeys"]
    assert new[KEY] != old[KEY] and new["apikey:nightly"] == old["apikey:nightly"]


def test_egress_policies_are_created_for_substrate_actors_only(mixed):
    shards = [r for r in mixed.resources if r.type.endswith(":EgressPolicyShard")]
    actors = sorted(actor for shard in shards for actor in shard.inputs["actors"])
    assert actors == ["agents/actor-a", "agents/actor-b"]


def test_budgets_apply_to_an_actor_of_each_source(mixed):
    settings = parse_settings(identities())
    rules = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots)
    assert spec(mixed, "BackendTrafficPolicy")["rateLimit"]["global"]["rules"] == rules.specs()
    model = PolicyModel("agent-budgets", "agent-budgets", rules.specs())
    for actor in ("agents/actor-b", SA, KEY):  # the class
        assert [rule.index for rule in model.for_actor(actor_header_value(actor))] == [1], actor
    for actor in ("agents/actor-a", "serviceaccount:agents/helper", "apikey:nightly"):  # the default
        assert [rule.index for rule in model.for_actor(actor_header_value(actor))] == [0], actor


def test_a_pool_charges_listed_members_of_every_source_and_an_atespace_only_its_substrate_actors():
    """A pool's `members` may be of any source; its `atespaces` admit Substrate actors only, never the service
    accounts of a namespace of the same name (`system:serviceaccount:agents:*` is no `actor/agents/*`)."""
    pool = {"name": "team", "tokens": 9000, "per": "Day", "members": [SA, KEY], "atespaces": ["agents"]}
    config = identities(budgetPolicy={"classSlots": 1})
    config["budgets"]["pools"] = [pool]
    settings = parse_settings(config)
    policy = settings.budget_policy
    rules = compile_budget_rules(settings.budgets, policy.exclusion_slots, policy.limit_slots, policy.class_slots)
    model = PolicyModel("agent-budgets", "agent-budgets", rules.specs())
    [pool_rule] = rules.rules_of_pool(0)
    charged = {
        actor
        for actor in settings.actors
        if pool_rule.index in {rule.index for rule in model.for_actor(actor_header_value(actor))}
    }
    assert charged == {"agents/actor-a", "agents/actor-b", SA, KEY}
    assert "serviceaccount:agents/helper" not in charged and "apikey:nightly" not in charged


def test_every_manifest_of_every_jwks_mode_meets_its_schema():
    catalog = load_catalog()
    modes = {
        "configMap": {},
        "apiServer": {"jwks": "apiServer"},
        "publicUrl": {"jwks": "publicUrl", "jwksUri": "https://oidc.example.com/id/abc/keys"},
    }
    seen: set[str] = set()
    for kubernetes in modes.values():
        identity = {"sources": ["substrate", "kubernetes", "apiKeys"], "kubernetes": kubernetes}
        run = run_program(identities(identity=identity, suspended=["agents/actor-a", SA, KEY]))
        for resource in run.custom_resources():
            report = catalog.validate(resource.as_object())
            assert report.errors == [], (resource.kind, report.errors)
            seen.add(resource.kind)
        for obj in run.builtin_objects():  # secrets as the engine sends them, unwrapped
            assert kubernetes_schema.problems(obj) == [], (obj["kind"], obj["metadata"]["name"])
            seen.add(obj["kind"])
    assert {"SecurityPolicy", "Gateway", "Backend", "BackendTLSPolicy", "ClusterRoleBinding", "Secret"} <= seen


def test_api_server_mode_fetches_through_the_api_server_and_binds_anonymous_discovery():
    identity = {"sources": ["kubernetes"], "kubernetes": {"jwks": "apiServer"}}
    run = run_program(identities(identity=identity, actors=[SA], budgets={"default": {"tokens": 500, "per": "Day"}}))
    [provider] = spec(run, "SecurityPolicy", "agent-budgets-jwt")["jwt"]["providers"]
    assert provider["remoteJWKS"] == {
        "uri": "https://kubernetes.default.svc/openid/v1/jwks",
        "backendRefs": [{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "kubernetes-api", "port": 443}],
    }
    assert spec(run, "Backend", "kubernetes-api") == {
        "endpoints": [{"fqdn": {"hostname": "kubernetes.default.svc", "port": 443}}]
    }
    assert spec(run, "BackendTLSPolicy", "kubernetes-api")["validation"] == {
        "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "kube-root-ca.crt"}],
        "hostname": "kubernetes.default.svc",
    }
    binding = run.one("ClusterRoleBinding").inputs
    assert binding["roleRef"]["name"] == "system:service-account-issuer-discovery"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}
    ]
    assert any("system:unauthenticated" in warning or "unauthenticated clients" in warning for warning in run.warnings)
    # Without Substrate there is no IdP Backend and no egress policy.
    assert not run.of_kind("EgressPolicyShard") and all(
        (r.inputs.get("metadata") or {}).get("name") != "substrate-idp" for r in run.of_kind("Backend")
    )


def test_a_stack_of_api_keys_alone_has_only_the_api_key_listener():
    budgets = {"default": {"tokens": 500, "per": "Day"}}
    run = run_program(identities(identity={"sources": ["apiKeys"]}, actors=[KEY], budgets=budgets))
    assert [entry["name"] for entry in spec(run, "Gateway")["listeners"]] == ["apikeys"]
    assert [r.inputs["metadata"]["name"] for r in run.of_kind("SecurityPolicy")] == ["agent-budgets-api-keys"]
    assert "gatewayUrl" not in run.outputs and run.outputs["apiKeyGatewayUrl"].endswith(":8081")


def test_a_substrate_stack_is_exactly_as_before_the_identity_sources():
    """The default keeps an existing stack as it was: the same objects, one listener, one JWT provider, no API-key
    or service-account object, and the same manifests whether `identity` is left out or spelt out."""
    plain = run_program(stack_config("dev"))
    spelt = run_program({**stack_config("dev"), "identity": {"sources": ["substrate"]}})

    def objects(run: ProgramRun) -> list[str]:
        return sorted(json.dumps(r.as_object(), sort_keys=True) for r in run.custom_resources())

    assert objects(plain) == objects(spelt)
    assert [entry["name"] for entry in spec(plain, "Gateway")["listeners"]] == ["http"]
    [policy] = plain.of_kind("SecurityPolicy")
    assert set(policy.inputs["spec"]) == {"targetRefs", "jwt", "authorization"}
    assert [p["name"] for p in policy.inputs["spec"]["jwt"]["providers"]] == ["agent-substrate"]
    assert not plain.of_kind("ClusterRoleBinding") and not plain.of_kind("RandomPassword")[2:]


# ---------------------------------------------------------------------------------------------------------
# What each caller gets (the program's manifests through the model of Envoy's filters)


def listeners(run: ProgramRun) -> dict[str, Listener]:
    """The JWT and API-key listeners of a run, with the keys each provider accepts and the API keys it holds."""
    early = tuple(spec(run, "ClientTrafficPolicy")["headers"]["earlyRequestHeaders"]["remove"])
    overrides = spec(run, "BackendTrafficPolicy").get("responseOverride") or []
    signers = {"agent-substrate": "substrate-idp", "kubernetes-service-accounts": "cluster"}
    filter_order = spec(run, "EnvoyProxy").get("filterOrder") or []
    found: dict[str, Listener] = {}
    for policy in run.of_kind("SecurityPolicy"):
        identity = API_KEY_AUTH if "apiKeyAuth" in policy.inputs["spec"] else JWT_AUTHN
        chain = listener_chain(
            [f"{CUSTOM_RESPONSE}/budget", identity, RBAC, "envoy.filters.http.ratelimit/b"], filter_order
        )
        found[listener_of(policy)] = Listener(
            policy.inputs["spec"], early, overrides, signers, credentials(run, policy), chain
        )
    return found


def listener_of(policy: Registered) -> str:
    """The listener a SecurityPolicy of the program applies on."""
    return "apikeys" if "apiKeyAuth" in policy.inputs["spec"] else "http"


def credentials(run: ProgramRun, policy: Registered) -> dict[str, str]:
    """API key → client id, as Envoy Gateway reads them from the Secrets a SecurityPolicy's apiKeyAuth names."""
    found: dict[str, str] = {}
    for ref in (policy.inputs["spec"].get("apiKeyAuth") or {}).get("credentialRefs", []):
        data = secret_string_data(run.one("Secret", ref["name"]).inputs)
        found.update({key: client for client, key in data.items()})
    return found


def substrate(actor: str, audience: str = "agent-router", signer: str = "substrate-idp") -> str:
    return "Bearer " + Token(SUBSTRATE_ISSUER, actor_header_value(actor), (audience,), signer).encode()


def service_account(actor: str, audience: str = "agent-router", signer: str = "cluster") -> str:
    return "Bearer " + Token(CLUSTER_ISSUER, actor_header_value(actor), (audience,), signer).encode()


def api_key(run: ProgramRun, actor: str) -> str:
    return run.resolved_outputs["apiKeys"][actor]


def test_each_source_s_caller_is_admitted_as_itself_whatever_x_actor_id_it_sends(mixed):
    gateway = listeners(mixed)
    spoof = {"x-actor-id": "actor/agents/actor-b"}
    cases = [
        ("http", {"authorization": substrate("agents/actor-a"), **spoof}, "actor/agents/actor-a"),
        ("http", {"authorization": service_account(SA), **spoof}, "system:serviceaccount:agents:research-bot"),
        ("apikeys", {"authorization": f"Bearer {api_key(mixed, KEY)}", **spoof}, "apikey.ci-bot"),
        ("apikeys", {"x-api-key": api_key(mixed, KEY), **spoof}, "apikey.ci-bot"),
    ]
    for listener, headers, expected in cases:
        outcome = answer(gateway[listener], headers)
        assert (outcome.status, outcome.actor_id) == (200, expected), (listener, headers)
    # The API key never goes upstream: every key header is removed once verified.
    outcome = answer(gateway["apikeys"], {"x-api-key": api_key(mixed, KEY), "authorization": "Bearer other"})
    assert "x-api-key" not in outcome.upstream_headers and "authorization" not in outcome.upstream_headers


PROVIDER_KEYS = {"openaiApiKey": "sk-provider-openai-0123", "anthropicApiKey": "sk-ant-provider-4567"}


def with_providers(**identity: Any) -> ProgramRun:
    """The three sources with a mock, an OpenAI and an Anthropic provider, each behind a route of its own."""
    config = identities(identity={"sources": ["substrate", "kubernetes", "apiKeys"], **identity})
    config["providers"] = [
        {"name": "mock", "kind": "mock"},
        {"name": "openai", "kind": "openai"},
        {"name": "anthropic", "kind": "anthropic"},
    ]
    config["routes"] = [
        *config["routes"],
        {"name": "gpt", "models": ["gpt-4.1"], "provider": "openai"},
        {"name": "claude", "models": ["claude-sonnet-4-5"], "provider": "anthropic"},
    ]
    return run_program(config, secrets=PROVIDER_KEYS)


def test_no_gateway_credential_reaches_a_provider_from_either_listener():
    """An agent's gateway credential (its token, its API key, or an API key it sends beside a token on the JWT
    listener) never reaches a provider, whichever listener it called: the provider sees its own key only, and the
    verified x-actor-id. Each AIServiceBackend's remove list is checked against the pinned CRD (a set of at most 16:
    `authorization` is in the default key headers too, and listed once)."""
    run = with_providers()
    catalog = load_catalog()
    gateway = listeners(run)
    key = api_key(run, KEY)
    token = substrate("agents/actor-a")
    calls = {
        "a token with the agent's key beside it": ("http", {"authorization": token, "x-api-key": key}),
        "a service-account token with a key beside it": (
            "http",
            {"authorization": service_account(SA), "x-api-key": key},
        ),
        "the key as x-api-key": ("apikeys", {"x-api-key": key}),
        "the key as a bearer token": ("apikeys", {"authorization": f"Bearer {key}"}),
    }
    backends = run.of_kind("AIServiceBackend")
    assert sorted(b.inputs["metadata"]["name"] for b in backends) == ["anthropic", "mock", "openai"]
    for backend in backends:
        assert catalog.validate(backend.as_object()).errors == []
        name = backend.inputs["metadata"]["name"]
        security = spec(run, "BackendSecurityPolicy", f"{name}-key")
        own = {"openai": PROVIDER_KEYS["openaiApiKey"], "anthropic": PROVIDER_KEYS["anthropicApiKey"]}.get(name, "mk")
        for what, (listener, headers) in calls.items():
            outcome = answer(gateway[listener], headers)
            assert outcome.status == 200, (what, outcome)
            sent = provider_request(outcome, backend.inputs["spec"], security, own)
            leaked = {h: v for h, v in sent.items() if key in v or token.removeprefix("Bearer ") in v}
            assert leaked == {}, (name, what)
            assert sent.get("x-actor-id") == outcome.actor_id, (name, what)
            expected = (
                ("x-api-key", own) if security["type"] == "AnthropicAPIKey" else ("authorization", f"Bearer {own}")
            )
            assert sent[expected[0]] == expected[1] and not ({"authorization", "x-api-key"} - {expected[0]}) & set(sent)
        assert backend.inputs["spec"]["headerMutation"] == {"remove": ["authorization", "x-api-key"]}


def test_only_a_stack_with_api_keys_removes_their_headers_upstream():
    """A stack without API keys removes `authorization` alone, as before (no diff); one with API keys removes every
    key header it reads, in its order, after `authorization`."""
    substrate_only = run_program(stack_config("dev"))
    assert [b.inputs["spec"]["headerMutation"] for b in substrate_only.of_kind("AIServiceBackend")] == [
        {"remove": ["authorization"]}
    ]
    headers = ["x-goog-api-key", "authorization", "api-key"]
    identity = {"sources": ["substrate", "kubernetes", "apiKeys"], "apiKeys": {"headers": headers}}
    run = run_program(identities(identity=identity))
    assert [b.inputs["spec"]["headerMutation"] for b in run.of_kind("AIServiceBackend")] == [
        {"remove": ["authorization", "x-goog-api-key", "api-key"]}
    ]


def test_a_credential_of_the_wrong_kind_or_none_gets_401_on_either_listener(mixed):
    gateway = listeners(mixed)
    key = api_key(mixed, KEY)
    cases = [
        ("http", {}, JWT_MISSED),
        ("http", {"x-actor-id": "actor/agents/actor-a"}, JWT_MISSED),
        ("http", {"authorization": f"Bearer {key}"}, JWT_BAD_FORMAT),
        ("http", {"authorization": substrate("agents/actor-a", signer="attacker")}, JWT_VERIFICATION),
        ("http", {"authorization": service_account(SA, signer="attacker")}, JWT_VERIFICATION),
        ("apikeys", {}, API_KEY_REFUSED),
        ("apikeys", {"x-actor-id": "apikey.ci-bot"}, API_KEY_REFUSED),
        ("apikeys", {"authorization": substrate("agents/actor-a")}, API_KEY_REFUSED),
        ("apikeys", {"authorization": service_account(SA)}, API_KEY_REFUSED),
        ("apikeys", {"x-api-key": key[:-1] + ("x" if key[-1] != "x" else "y")}, API_KEY_REFUSED),
    ]
    for listener, headers, body in cases:
        outcome = answer(gateway[listener], headers)
        assert (outcome.status, outcome.body, outcome.actor_id) == (401, body, None), (listener, headers)


def test_the_hostile_calls_of_a_substrate_stack_get_the_same_answers_once_other_sources_are_on(mixed):
    before = listeners(run_program(stack_config("dev")))["http"]
    after = listeners(mixed)["http"]
    hostile = [
        {},
        {"x-actor-id": "actor/agents/actor-a"},
        {"authorization": "Bearer placeholder"},
        {"authorization": substrate("agents/actor-a", signer="attacker")},
        {"authorization": substrate("agents/actor-a", audience="kubernetes")},
    ]
    for headers in hostile:
        old, new = answer(before, headers), answer(after, headers)
        assert (old.status, old.actor_id, old.www_authenticate) == (new.status, new.actor_id, new.www_authenticate)
        assert new.status in (401, 403), headers


def test_a_service_account_token_is_refused_unless_its_source_is_on_and_it_is_listed(mixed):
    substrate_only = listeners(run_program(stack_config("dev")))["http"]
    outcome = answer(substrate_only, {"authorization": service_account(SA)})
    assert (outcome.status, outcome.body) == (401, JWT_UNKNOWN_ISSUER)
    gateway = listeners(mixed)["http"]
    unlisted = answer(gateway, {"authorization": service_account(OTHER_SA)})
    assert unlisted.status == 403 and not unlisted.www_authenticate
    assert "not in agent-budgets:actors" in refusal_message(unlisted.body)
    # A pod's default token (audience: the API server) is refused by the JWT filter for its audience (a 403 with
    # WWW-Authenticate), which the override names as such, never taken for a suspension.
    default_token = answer(gateway, {"authorization": service_account(SA, audience=CLUSTER_ISSUER)})
    assert (default_token.status, default_token.body, default_token.www_authenticate) == (
        403,
        SERVICE_ACCOUNT_TOKEN_REFUSED_BODY,
        True,
    )


def test_suspension_refuses_an_actor_of_each_source_and_only_it(suspended):
    gateway = listeners(suspended)
    key = {actor: api_key(suspended, actor) for actor in (KEY, "apikey:nightly")}
    refused = [
        answer(gateway["http"], {"authorization": substrate("agents/actor-a")}),
        answer(gateway["http"], {"authorization": service_account("serviceaccount:agents/helper")}),
        answer(gateway["apikeys"], {"x-api-key": key["apikey:nightly"]}),
    ]
    for outcome in refused:
        assert outcome.status == 403 and "suspended" in refusal_message(outcome.body), outcome
    admitted = [
        answer(gateway["http"], {"authorization": substrate("agents/actor-b")}),
        answer(gateway["http"], {"authorization": service_account(SA)}),
        answer(gateway["apikeys"], {"x-api-key": key[KEY]}),
    ]
    assert [outcome.status for outcome in admitted] == [200, 200, 200]
    rules = spec(suspended, "SecurityPolicy", "agent-budgets-api-keys")["authorization"]["rules"]
    assert rules == [
        one_actor_id_rule(),
        {
            "name": "suspended-api-keys-0",
            "action": "Deny",
            "principal": {"headers": [{"name": "x-actor-id", "values": ["apikey.nightly"]}]},
        },
    ]


def test_a_spoofed_x_actor_id_cannot_suspend_or_unsuspend_an_api_key(suspended):
    """The deny rule reads the header the API-key filter wrote: a client value is replaced before RBAC runs."""
    gateway = listeners(suspended)["apikeys"]
    allowed = answer(gateway, {"x-api-key": api_key(suspended, KEY), "x-actor-id": "apikey.nightly"})
    refused = answer(gateway, {"x-api-key": api_key(suspended, "apikey:nightly"), "x-actor-id": "apikey.ci-bot"})
    assert (allowed.status, refused.status) == (200, 403)


def test_the_program_s_outputs_for_the_dev_stack_keep_no_secret_but_the_keys(mixed):
    copied = copy.deepcopy({k: v for k, v in mixed.outputs.items() if k != "apiKeys"})
    assert json.loads(json.dumps(copied, default=str))["identitySources"] == ["substrate", "kubernetes", "apiKeys"]


def _listener_filters(run: ProgramRun) -> dict[str, dict[str, str]]:
    """Each listener's HTTP filters with their listener-level configuration (core.suspension's model)."""
    traffic = run.one("BackendTrafficPolicy")

    def plain(resource: Registered) -> dict[str, Any]:
        meta = resource.inputs["metadata"]
        return {
            "kind": resource.kind,
            "namespace": meta["namespace"],
            "name": meta["name"],
            "spec": resource.inputs["spec"],
        }

    return {
        listener_of(policy): listener_http_filters(plain(policy), plain(traffic), credentials(run, policy))
        for policy in run.of_kind("SecurityPolicy")
    }


def test_suspending_an_actor_of_any_source_never_changes_a_listener(mixed, suspended):
    """Only the RBAC rules inside each route change: Envoy drains no connection (core.suspension). A new or
    rotated API key, though, is in the API-key listener's own filter: that listener changes (docs/identity.md)."""
    before, after = _listener_filters(mixed), _listener_filters(suspended)
    assert before == after
    assert API_KEY_AUTH_FILTER in before["apikeys"] and RBAC_FILTER in before["apikeys"]
    assert {JWT_AUTHN_FILTER, RBAC_FILTER} <= set(before["http"]) and API_KEY_AUTH_FILTER not in before["http"]
    identity = {"sources": ["substrate", "kubernetes", "apiKeys"], "apiKeys": {"rotations": {KEY: 1}}}
    rotated = _listener_filters(run_program(identities(identity=identity)))
    assert rotated["http"] == before["http"] and rotated["apikeys"] != before["apikeys"]


@pytest.mark.parametrize("sources", [["substrate"], ["substrate", "kubernetes", "apiKeys"], ["apiKeys"]])
def test_no_route_is_created_before_the_policies_that_authenticate_and_meter_its_calls(mixed, sources):
    """Without its SecurityPolicy a listener answers anyone, and a call with no verified x-actor-id matches no budget
    rule: each AIGatewayRoute waits for every identity policy and the budget policy, so a first `pulumi up` never
    serves a route ahead of them, and a policy that fails to create leaves the models unreachable, not open."""
    if sources == ["substrate", "kubernetes", "apiKeys"]:
        run = mixed
    else:
        actors = ["apikey:ci-bot"] if sources == ["apiKeys"] else ["agents/actor-a"]
        budgets = {"default": {"tokens": 9, "per": "Day"}}
        run = run_program(identities(identity={"sources": sources}, actors=actors, budgets=budgets))
    guards = {r.urn for r in run.monitor.of_type(":SecurityPolicy")} | {run.monitor.one("BackendTrafficPolicy").urn}
    assert len(guards) == (3 if len(sources) == 3 else 2)
    routes = run.monitor.of_type("AIGatewayRoute")
    assert routes
    for route in routes:
        assert guards <= route.dependencies, route.name

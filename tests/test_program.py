"""The real `__main__.py` under Pulumi mocks: what a cluster would receive from each configuration."""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from core.budget_rules import compile_budget_rules
from core.egress import shard_of, shard_resource_name, shards
from core.validation import parse_settings
from tests.support.program import ProgramRun, RecordingMocks, Registered, run_program, stack_config

OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-abcdefghij"


@pytest.fixture(scope="module")
def dev() -> ProgramRun:
    return run_program(stack_config("dev"), stack="dev")


def real_config() -> dict[str, Any]:
    config = stack_config("dev")
    config["providers"] = [{"name": "openai", "kind": "openai"}, {"name": "anthropic", "kind": "anthropic"}]
    config["routes"] = [
        {"name": "gpt", "models": ["gpt-4o-mini", "gpt-4o"], "provider": "openai"},
        {"name": "claude", "models": ["claude-sonnet-4"], "provider": "anthropic"},
    ]
    config["budgets"] = {
        "default": {"tokens": 100_000, "per": "Day"},
        "classes": [{"name": "large", "tokens": 1_000_000, "per": "Day", "actors": ["agents/actor-b"]}],
    }
    return config


@pytest.fixture(scope="module")
def real() -> ProgramRun:
    return run_program(real_config(), secrets={"openaiApiKey": OPENAI_KEY, "anthropicApiKey": ANTHROPIC_KEY})


def spec(resource: Registered) -> dict[str, Any]:
    return resource.inputs["spec"]


def test_budget_policy_holds_exactly_the_compiled_rules(dev):
    btp = dev.one("BackendTrafficPolicy")
    assert btp.inputs["metadata"]["name"] == "agent-budgets"
    assert btp.inputs["metadata"]["namespace"] == "agent-budgets"
    assert spec(btp)["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "agent-router"}
    ]
    settings = parse_settings(stack_config("dev"))
    expected = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots).specs()
    rules = spec(btp)["rateLimit"]["global"]["rules"]
    assert json.loads(json.dumps(rules)) == json.loads(json.dumps(expected))
    [rule] = rules
    assert rule["limit"] == {"requests": 500, "unit": "Day"}
    assert rule["shared"] is True
    assert rule["cost"]["request"] == {"from": "Number", "number": 0}
    assert rule["cost"]["response"]["metadata"] == {"namespace": "io.envoy.ai_gateway", "key": "llm_total_token"}


def test_jwt_policy_verifies_substrate_tokens_and_copies_the_subject(dev):
    policy = spec(dev.one("SecurityPolicy"))
    [provider] = policy["jwt"]["providers"]
    assert provider["issuer"] == "https://idp.ate-system.svc"
    assert provider["audiences"] == ["agent-router"]
    assert provider["remoteJWKS"]["uri"] == "https://idp.ate-system.svc/openid/v1/jwks"
    assert provider["remoteJWKS"]["backendRefs"] == [
        {"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "substrate-idp", "port": 443}
    ]
    assert provider["claimToHeaders"] == [{"header": "x-actor-id", "claim": "sub"}]
    assert policy["targetRefs"][0]["kind"] == "Gateway"


def test_idp_backend_is_verified_with_the_cluster_trust_bundle_by_default(dev):
    backend = dev.one("Backend", "substrate-idp")
    assert spec(backend)["endpoints"] == [{"fqdn": {"hostname": "idp.ate-system.svc", "port": 443}}]
    assert "tls" not in spec(backend)
    tls = spec(dev.one("BackendTLSPolicy", "substrate-idp"))
    assert tls["targetRefs"] == [{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "substrate-idp"}]
    assert tls["validation"]["hostname"] == "idp.ate-system.svc"
    assert tls["validation"]["caCertificateRefs"][0]["kind"] == "ClusterTrustBundle"


def test_skipping_idp_verification_is_possible_but_loud():
    config = stack_config("dev")
    config["substrate"] = {"trust": {"mode": "insecureSkipVerify"}}
    run = run_program(config)
    assert spec(run.one("Backend", "substrate-idp"))["tls"] == {"insecureSkipVerify": True}
    assert not [r for r in run.of_kind("BackendTLSPolicy") if r.inputs["metadata"]["name"] == "substrate-idp"]
    assert any("WITHOUT verifying" in warning for warning in run.warnings)


def test_local_jwks_mode_reads_the_keys_from_a_config_map_beside_the_policy():
    """Mode localJwks: the SecurityPolicy's provider takes localJWKS by ValueRef to a ConfigMap, which Envoy
    Gateway looks up in the policy's own namespace (internal/gatewayapi/securitypolicy.go buildLocalJWKS
    @v1.9.0), and nothing of the remote path is declared: no Backend or BackendTLSPolicy for the IdP."""
    config = stack_config("dev")
    config["substrate"] = {"trust": {"mode": "localJwks", "jwksConfigMap": "actor-keys"}}
    run = run_program(config)
    policy = run.one("SecurityPolicy")
    [provider] = spec(policy)["jwt"]["providers"]
    assert provider["localJWKS"] == {
        "type": "ValueRef",
        "valueRef": {"group": "", "kind": "ConfigMap", "name": "actor-keys"},
    }
    assert "remoteJWKS" not in provider
    assert provider["issuer"] == "https://idp.ate-system.svc"
    assert provider["claimToHeaders"] == [{"header": "x-actor-id", "claim": "sub"}]
    assert policy.inputs["metadata"]["namespace"] == "agent-budgets"
    assert not [r for r in run.of_kind("Backend") if r.inputs["metadata"]["name"] == "substrate-idp"]
    assert not run.of_kind("BackendTLSPolicy")
    assert any("localJwks" in w and "agent-budgets/actor-keys" in w for w in run.warnings)
    # The SecurityPolicy waits for nothing of the IdP's (there is nothing), only for the CRDs and namespace.
    idp = run.monitor.one("agent-budgets:substrate:IdpTrust")
    assert run.monitor.outputs[idp.urn] == {"trustMode": "localJwks"}


def test_the_jwks_config_map_follows_the_gateway_namespace():
    config = stack_config("dev")
    config["gateway"] = {"namespace": "models"}
    config["substrate"] = {"trust": {"mode": "localJwks"}}
    run = run_program(config)
    policy = run.one("SecurityPolicy")
    assert policy.inputs["metadata"]["namespace"] == "models"
    [provider] = spec(policy)["jwt"]["providers"]
    assert provider["localJWKS"]["valueRef"]["name"] == "substrate-actor-jwks"


def test_gateway_has_a_fixed_service_name_and_strips_client_actor_and_timeout_headers(dev):
    proxy = spec(dev.one("EnvoyProxy"))
    assert proxy["provider"]["kubernetes"]["envoyService"] == {"name": "agent-router", "type": "ClusterIP"}
    gateway = spec(dev.one("Gateway"))
    assert gateway["gatewayClassName"] == dev.one("GatewayClass").inputs["metadata"]["name"]
    assert gateway["infrastructure"]["parametersRef"]["name"] == dev.one("EnvoyProxy").inputs["metadata"]["name"]
    assert [listener["port"] for listener in gateway["listeners"]] == [80]
    client = spec(dev.one("ClientTrafficPolicy"))
    assert client["connection"]["bufferLimit"] == "50Mi"
    # Only the JWT filter sets x-actor-id; no client may stretch its call past the route's timeout or make Envoy
    # retry it (envoy source/common/http/headers.h names; the router reads them from the request).
    assert client["headers"]["earlyRequestHeaders"]["remove"] == [
        "x-actor-id",
        "x-envoy-upstream-rq-timeout-ms",
        "x-envoy-upstream-rq-per-try-timeout-ms",
        "x-envoy-retry-on",
        "x-envoy-retry-grpc-on",
        "x-envoy-max-retries",
        "x-envoy-retriable-status-codes",
        "x-envoy-retriable-header-names",
        "x-envoy-hedge-on-per-try-timeout",
    ]
    assert dev.outputs["gatewayUrl"] == "http://agent-router.envoy-gateway-system.svc.cluster.local:80"


def test_every_route_reports_total_tokens_and_every_backend_drops_the_jwt(real):
    routes = {r.inputs["metadata"]["name"]: spec(r) for r in real.of_kind("AIGatewayRoute")}
    assert set(routes) == {"gpt", "claude"}
    for route in routes.values():
        assert route["llmRequestCosts"] == [{"metadataKey": "llm_total_token", "type": "TotalToken"}]
        assert route["parentRefs"] == [
            {"name": "agent-router", "kind": "Gateway", "group": "gateway.networking.k8s.io"}
        ]
    gpt_models = [m["headers"][0]["value"] for m in routes["gpt"]["rules"][0]["matches"]]
    assert gpt_models == ["gpt-4o-mini", "gpt-4o"]
    backends = {r.inputs["metadata"]["name"]: spec(r) for r in real.of_kind("AIServiceBackend")}
    assert set(backends) == {"openai", "anthropic"}
    for name, backend in backends.items():
        assert "authorization" in backend["headerMutation"]["remove"]
        assert backend["backendRef"] == {"name": name, "kind": "Backend", "group": "gateway.envoyproxy.io"}
    assert backends["anthropic"]["schema"] == {"name": "Anthropic"}
    assert backends["openai"]["schema"] == {"name": "OpenAI"}


def test_nothing_touches_x_actor_id_on_the_way_to_the_provider(real, dev):
    """The rate limit reads x-actor-id again to charge the response: removing it upstream charges nothing."""
    for run in (real, dev):
        for resource in run.of_kind("AIServiceBackend") + run.of_kind("AIGatewayRoute"):
            text = json.dumps(spec(resource).get("headerMutation", {})) + json.dumps(
                [ref.get("headerMutation") for rule in spec(resource).get("rules", []) for ref in rule["backendRefs"]]
            )
            assert "x-actor-id" not in text


def test_provider_credentials_match_their_api(real):
    policies = {r.inputs["metadata"]["name"]: spec(r) for r in real.of_kind("BackendSecurityPolicy")}
    assert policies["openai-key"]["type"] == "APIKey"
    assert policies["openai-key"]["apiKey"]["secretRef"] == {"name": "openai-api-key", "namespace": "agent-budgets"}
    assert policies["anthropic-key"]["type"] == "AnthropicAPIKey"
    assert policies["anthropic-key"]["anthropicAPIKey"]["secretRef"]["name"] == "anthropic-api-key"
    for name, policy in policies.items():
        assert policy["targetRefs"] == [
            {"group": "aigateway.envoyproxy.io", "kind": "AIServiceBackend", "name": name.removesuffix("-key")}
        ]
    tls = {r.inputs["metadata"]["name"]: spec(r) for r in real.of_kind("BackendTLSPolicy")}
    assert tls["openai"]["validation"] == {"wellKnownCACertificates": "System", "hostname": "api.openai.com"}
    assert tls["anthropic"]["validation"] == {"wellKnownCACertificates": "System", "hostname": "api.anthropic.com"}
    backends = {r.inputs["metadata"]["name"]: spec(r) for r in real.of_kind("Backend")}
    assert backends["openai"]["endpoints"] == [{"fqdn": {"hostname": "api.openai.com", "port": 443}}]


def test_provider_keys_appear_only_in_their_secrets(real):
    holders = []
    for resource in real.resources:
        text = json.dumps(resource.inputs, default=str)
        for key in (OPENAI_KEY, ANTHROPIC_KEY):
            if key in text:
                holders.append((resource.kind, resource.inputs.get("metadata", {}).get("name"), key))
    assert sorted(holders) == sorted(
        [("Secret", "openai-api-key", OPENAI_KEY), ("Secret", "anthropic-api-key", ANTHROPIC_KEY)]
    )
    secret = real.one("Secret", "openai-api-key")
    # The engine receives the data wrapped as a Pulumi secret: encrypted in state, masked in diffs.
    assert secret.inputs["stringData"] == {
        rpc._special_sig_key: rpc._special_secret_sig,
        "value": {"apiKey": OPENAI_KEY},
    }
    assert secret.inputs["metadata"]["namespace"] == "agent-budgets"


def test_stack_outputs_hold_no_secret(real):
    text = json.dumps(real.outputs, default=str)
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text
    for value in real.outputs.values():
        assert not isinstance(value, pulumi.Output), "outputs are plain, secret-free values"
    assert real.outputs["budgetRules"][1] == {
        "rule": 1,
        "budget": "class:large",
        "limit": 0,
        "unit": "tokens",
        "amount": 1_000_000,
        "per": "Day",
        "requests": 1_000_000,
        "members": 1,
    }


def test_mock_model_runs_our_server_and_reports_200_tokens(dev):
    config_map = dev.one("ConfigMap", "mock-model")
    assert "def main" in config_map.inputs["data"]["server.py"]
    deployment = spec(dev.one("Deployment", "mock-model"))
    [container] = deployment["template"]["spec"]["containers"]
    assert container["image"] == "python:3.12-alpine"
    env = {e["name"]: e for e in container["env"]}
    assert env["MOCK_TOTAL_TOKENS"]["value"] == "200"
    assert env["MOCK_EXPECTED_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "mock-api-key", "key": "apiKey"}
    service = spec(dev.one("Service", "mock-model"))
    assert service["ports"][0]["port"] == 8080
    backend = spec(dev.one("Backend", "mock"))
    assert backend["endpoints"] == [{"fqdn": {"hostname": "mock-model.agent-budgets.svc.cluster.local", "port": 8080}}]
    routes = {r.inputs["metadata"]["name"] for r in dev.of_kind("AIGatewayRoute")}
    assert routes == {"mock-small", "mock-large"}


def test_every_actor_has_its_egress_policy_in_its_shard(dev):
    shards = [r for r in dev.resources if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    actors = {ref: shard.name for shard in shards for ref in shard.inputs["actors"]}
    assert actors == {ref: shard_resource_name(shard_of(ref)) for ref in ("agents/actor-a", "agents/actor-b")}
    assert {shard.inputs["kube_context"] for shard in shards} == {"kind-agent-budgets"}


def test_every_kubernetes_resource_uses_the_explicit_provider(dev):
    [provider] = dev.of_kind("kubernetes")
    assert provider.type == "pulumi:providers:kubernetes"
    assert provider.inputs["context"] == "kind-agent-budgets"


COMPONENT_TYPES = {
    "agent-budgets:index:AgentBudgets",
    "agent-budgets:platform:Platform",
    "agent-budgets:platform:RateLimitStore",
    "agent-budgets:gateway:ModelGateway",
    "agent-budgets:substrate:IdpTrust",
    "agent-budgets:models:Models",
    "agent-budgets:models:MockModel",
    "agent-budgets:budgets:Budgets",
    "agent-budgets:substrate:ActorEgressPolicies",
}


def test_every_component_registers_its_outputs(dev):
    components = [r for r in dev.monitor.registrations if r.type.startswith("agent-budgets:")]
    assert {r.type for r in components} == COMPONENT_TYPES
    for component in components:
        assert component.urn in dev.monitor.outputs, f"{component.type} never called register_outputs"
    models = dev.monitor.one("agent-budgets:models:Models")
    assert dev.monitor.outputs[models.urn] == {"routes": ["mock-small", "mock-large"], "providers": ["mock"]}


def test_every_resource_is_a_child_of_a_component_and_only_agent_budgets_sits_at_the_root(dev):
    """Children get parent=self; the one AgentBudgets sits at the root, and holds the other components and the
    Kubernetes provider (tests/test_agent_budgets_urns.py proves that they keep their URNs through aliases)."""
    component_urns = {r.urn for r in dev.monitor.registrations if r.type.startswith("agent-budgets:")}
    [root] = [r for r in dev.monitor.registrations if r.parent.split("::")[2] == "pulumi:pulumi:Stack"]
    assert root.type == "agent-budgets:index:AgentBudgets"
    for registration in dev.monitor.registrations:
        if registration.type.startswith("agent-budgets:") or registration.type == "pulumi:providers:kubernetes":
            assert registration is root or registration.parent in component_urns
        else:
            assert registration.parent in component_urns, f"{registration.type} {registration.name} has no component"
    [generated] = [r for r in dev.monitor.registrations if r.name == "models-mock-generated-key"]
    assert generated.parent == dev.monitor.one("agent-budgets:models:Models").urn


def test_egress_policies_allow_the_gateway_port():
    config = stack_config("dev")
    config["gateway"] = {"port": 8080, "smallCluster": True}
    run = run_program(config)
    assert spec(run.one("Gateway"))["listeners"][0]["port"] == 8080
    shards = [r for r in run.resources if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    assert shards and {s.inputs["gateway_port"] for s in shards} == {8080}
    assert {s.inputs["rules"][0]["http"]["ports"]["numbers"][0] for s in shards} == {8080}


def test_the_kubeconfig_and_the_concurrency_reach_every_egress_shard():
    """kubectl ate is pointed at the cluster the Kubernetes provider uses, not at the ambient kubeconfig."""
    config = stack_config("dev")
    config["kubernetes"] = {"context": "kind-agent-budgets", "kubeconfig": "/etc/agent-budgets/kubeconfig"}
    config["substrate"] = {"egress": {"concurrency": 12}}
    run = run_program(config)
    [provider] = run.of_kind("kubernetes")
    shards = [r for r in run.resources if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    assert shards and provider.inputs["kubeconfig"] == "/etc/agent-budgets/kubeconfig"
    for shard in shards:
        assert (shard.inputs["kubeconfig"], shard.inputs["cluster"]) == (
            "/etc/agent-budgets/kubeconfig",
            "path:/etc/agent-budgets/kubeconfig",
        )
        assert (shard.inputs["kube_context"], shard.inputs["concurrency"]) == ("kind-agent-budgets", 12)


def test_kubeconfig_contents_name_the_cluster_of_every_egress_shard():
    contents = (
        "apiVersion: v1\nclusters:\n- name: prod\n  cluster: {server: 'https://prod.example:6443'}\n"
        "contexts:\n- name: kind-agent-budgets\n  context: {cluster: prod, user: ci}\n"
    )
    config = stack_config("dev")
    config["kubernetes"] = {"context": "kind-agent-budgets", "kubeconfig": contents}
    shards = [r for r in run_program(config).resources if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    assert shards and {s.inputs["cluster"] for s in shards} == {"server:https://prod.example:6443"}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"budgets": {"default": {"tokens": -1, "per": "Day"}}}, "agent-budgets:budgets.default.tokens"),
        ({"actors": ["not-an-actor"]}, "agent-budgets:actors"),
        ({"colour": "blue"}, "agent-budgets:colour: unknown key"),
        (
            {
                "providers": [{"name": "openai", "kind": "openai"}],
                "routes": [{"name": "gpt", "models": ["gpt"], "provider": "openai"}],
            },
            "agent-budgets:openaiApiKey: is not set",
        ),
    ],
)
def test_bad_configuration_stops_the_program_before_any_resource(change, fragment):
    config = copy.deepcopy(stack_config("dev"))
    config.update(change)
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as caught:
        run_program(config, mocks=mocks)
    assert fragment in str(caught.value)
    assert mocks.resources == []


def test_a_provider_key_in_plain_text_is_refused():
    config = real_config()
    with pytest.raises(pulumi.RunError, match="agent-budgets:anthropicApiKey: is stored in plain text"):
        run_program(config, secrets={"openaiApiKey": OPENAI_KEY}, plain={"anthropicApiKey": ANTHROPIC_KEY})


def test_a_platform_installed_elsewhere_gets_our_values_as_an_output():
    config = stack_config("dev")
    config["platform"] = {"install": False}
    run = run_program(config)
    assert run.of_kind("Release") == []
    values = run.outputs["envoyGatewayValues"]["config"]["envoyGateway"]
    assert values["extensionApis"]["enableBackend"] is True
    assert values["rateLimit"]["backend"]["redis"]["url"] == "redis.agent-budgets-redis.svc.cluster.local:6379"
    assert "REDIS_AUTH" in json.dumps(values) and "mock-random-" not in json.dumps(values)
    # The custom resources no longer wait for a release, but the budget policy still waits for Redis.
    btp = run.monitor.one("BackendTrafficPolicy")
    store = run.monitor.one("agent-budgets:platform:RateLimitStore")
    statefulset = run.monitor.one("StatefulSet")
    assert statefulset.urn in btp.dependencies
    assert store.type.endswith("RateLimitStore")


def test_both_ends_of_the_extension_message_get_the_limit_when_installed_elsewhere():
    """With platform.install false, Agent Router's values are an output too: its receive cap must equal Envoy
    Gateway's send cap (platform.extensionMessageLimit), or the preview's size check would not hold."""
    config = stack_config("dev")
    config["platform"] = {"install": False, "extensionMessageLimit": "32Mi"}
    outside = run_program(config).outputs
    sent = outside["envoyGatewayValues"]["config"]["envoyGateway"]["extensionManager"]["maxMessageSize"]
    router = outside["agentRouterValues"]["controller"]
    assert (sent, router["maxRecvMsgSize"]) == ("32Mi", str(32 * 1024 * 1024))
    assert router["metricsRequestHeaderAttributes"] == "x-actor-id:actor.id"
    config["platform"]["install"] = True
    installed = run_program(config)
    [release] = [r for r in installed.of_kind("Release") if r.inputs["name"] == "aieg"]
    assert release.inputs["values"] == outside["agentRouterValues"], "the output is what the release would get"
    assert "agentRouterValues" not in installed.outputs and "envoyGatewayValues" not in installed.outputs


KUBECONFIG_CONTENTS = json.dumps(
    {
        "apiVersion": "v1",
        "clusters": [{"name": "prod", "cluster": {"server": "https://prod.example:6443"}}],
        "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "deployer"}}],
        "users": [{"name": "deployer", "user": {"token": "kubeconfig-token-0123456789"}}],
    },
    indent=2,
)


def _unwrapped(value: Any) -> Any:
    """The inputs with every secret replaced by a marker: what would show in plain text."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return "<secret>"
        return {key: _unwrapped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrapped(item) for item in value]
    return value


def test_a_kubernetes_section_stored_as_a_secret_is_read_and_its_kubeconfig_stays_secret():
    """`pulumi config set --secret --path agent-budgets:kubernetes.kubeconfig ...` makes the whole section secret
    (Pulumi marks an object secret when a value inside it is): the program still reads it, and the contents
    reach the Kubernetes provider and the egress shards only as secrets, never an output."""
    config = stack_config("dev")
    del config["kubernetes"]
    run = run_program(
        config, secrets={"kubernetes": json.dumps({"context": "prod", "kubeconfig": KUBECONFIG_CONTENTS})}
    )
    [provider] = [r for r in run.resources if r.type == "pulumi:providers:kubernetes"]
    assert provider.inputs["context"] == "prod"
    secret = {rpc._special_sig_key: rpc._special_secret_sig, "value": KUBECONFIG_CONTENTS}
    assert provider.inputs["kubeconfig"] == secret
    shards = [r for r in run.resources if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    assert shards and all(r.inputs["kube_context"] == "prod" for r in shards)
    assert all(r.inputs["kubeconfig"] == secret for r in shards)
    plain = json.dumps([_unwrapped(r.inputs) for r in run.resources], default=str)
    assert "kubeconfig-token-0123456789" not in plain
    assert "kubeconfig-token-0123456789" not in json.dumps(run.outputs, default=str)


def test_a_bad_kubeconfig_in_a_secret_section_is_reported_without_its_value():
    config = stack_config("dev")
    del config["kubernetes"]
    secret_section = {"context": "prod", "kubeconfig": {"users": [{"token": "kubeconfig-token-0123456789"}]}}
    with pytest.raises(pulumi.RunError) as caught:
        run_program(config, secrets={"kubernetes": json.dumps(secret_section)})
    message = str(caught.value)
    assert (
        "agent-budgets:kubernetes.kubeconfig: got a value that is not text (not shown: it may hold credentials)"
        in message
    )
    assert "kubeconfig-token" not in message


def test_other_sections_stored_as_secrets_are_still_refused():
    config = stack_config("dev")
    budgets = config.pop("budgets")
    with pytest.raises(
        pulumi.RunError, match="agent-budgets:budgets: is stored as a secret, but it is plain configuration"
    ):
        run_program(config, secrets={"budgets": json.dumps(budgets)})


def test_one_program_run_checks_each_actor_for_its_egress_policy_once(monkeypatch):
    """core.validation checks the egress settings and hands the same checked object to the component, which
    does not check it again: one program run looks at each actor's name once (it was twice, quadratically)."""
    checked: list[str] = []
    original = shards.actor_ref_problems

    def counting(ref: str) -> list:
        checked.append(ref)
        return original(ref)

    monkeypatch.setattr(shards, "actor_ref_problems", counting)
    config = stack_config("dev")
    config["actors"] = [f"agents/actor-{n:04d}" for n in range(2000)]
    run = run_program(config, stack="count")
    assert checked == config["actors"]
    shard_actors = [actor for shard in run.of_kind("EgressPolicyShard") for actor in shard.inputs["actors"]]
    assert sorted(shard_actors) == config["actors"]

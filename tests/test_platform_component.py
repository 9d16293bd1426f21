"""The Platform component under Pulumi mocks, alone and inside the whole program (both stack files).

What is proven here: each release gets the right chart, version, namespace, options and values; the
ordering edges exist in what the engine receives (`dependencies` of each registration: explicit
`depends_on` plus every input that came from another resource); and the Redis password is never in
plain text in any input, output or log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

from components.platform_releases import Platform, PlatformDeps
from core import platform_values as pv
from core.ratelimit_deployment import pod_problems, read_redis_client, render_ratelimit_pod
from core.settings import StackSettings
from core.validation import parse_settings
from tests.support.monitor import RecordingMonitor, Registration
from tests.support.program import ProgramRun, run_program, stack_config
from tests.test_rate_limit_store import (
    MOCK_PASSWORD,
    plain_strings,
    run_under_mocks,
    secret_strings,
    settings_with,
)

RELEASE = "kubernetes:helm.sh/v3:Release"
REDIS_PASSWORD = "prod-redis-Passw0rd-secret"
OPENAI_KEY = "sk-test-openai-platform"
ANTHROPIC_KEY = "sk-ant-test-platform"
PROD_SECRETS = {"openaiApiKey": OPENAI_KEY, "anthropicApiKey": ANTHROPIC_KEY, "redisPassword": REDIS_PASSWORD}
EXTERNAL_REDIS = {"mode": "external", "url": "redis.prod.example.internal:6380", "tls": True}


def build_platform(settings: StackSettings) -> Any:
    return lambda opts: Platform("platform", settings, opts=opts)


def release(monitor: RecordingMonitor, release_name: str) -> Registration:
    [found] = [r for r in monitor.of_type(RELEASE) if r.inputs["name"] == release_name]
    return found


def plain_json(value: Any) -> Any:
    """What a value looks like after the wire (ints arrive as floats, which compare equal)."""
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def dev_settings() -> StackSettings:
    return parse_settings(stack_config("dev"))


@pytest.fixture(scope="module")
def dev(dev_settings) -> tuple[Platform, RecordingMonitor, Any]:
    return run_under_mocks(build_platform(dev_settings))


@pytest.fixture(scope="module")
def external() -> tuple[Platform, RecordingMonitor, Any]:
    settings = settings_with(redis=EXTERNAL_REDIS, rateLimit={"failClosed": True, "timeout": "250ms"})
    return run_under_mocks(build_platform(settings), secrets={"redisPassword": REDIS_PASSWORD})


# --- releases -------------------------------------------------------------------------------------------


def test_three_releases_with_pinned_charts_and_sensible_options(dev, dev_settings):
    _, monitor, _ = dev
    releases = monitor.of_type(RELEASE)
    assert sorted(r.inputs["name"] for r in releases) == ["aieg", "aieg-crd", "eg"]
    for spec in pv.release_specs(dev_settings):
        inputs = release(monitor, spec.release_name).inputs
        assert inputs["chart"] == spec.chart
        assert inputs["version"] == spec.version
        assert inputs["namespace"] == spec.namespace
        assert inputs["values"] == plain_json(spec.values)
        assert inputs["createNamespace"] is False
        assert inputs["atomic"] is True and inputs["cleanupOnFail"] is True and inputs["waitForJobs"] is True
        assert inputs["timeout"] == spec.timeout_seconds
        assert inputs["maxHistory"] == 10
        assert "skipAwait" not in inputs  # waits for the Deployments to be ready
    assert release(monitor, "eg").inputs["chart"] == "oci://docker.io/envoyproxy/gateway-helm"
    assert release(monitor, "eg").inputs["version"] == "v1.9.3"
    assert release(monitor, "aieg").inputs["version"] == "v1.2.1"


def test_envoy_gateway_release_gets_rate_limit_and_extension_values(dev):
    _, monitor, _ = dev
    config = release(monitor, "eg").inputs["values"]["config"]
    assert list(config) == ["envoyGateway"]
    envoy_gateway = config["envoyGateway"]
    assert envoy_gateway["rateLimit"] == {
        "backend": {"type": "Redis", "redis": {"url": "redis.agent-budgets-redis.svc.cluster.local:6379"}},
        "failClosed": False,
        "timeout": "100ms",
    }
    assert envoy_gateway["extensionApis"]["enableBackend"] is True
    assert envoy_gateway["extensionManager"]["service"]["fqdn"]["port"] == 1063
    env = envoy_gateway["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"]
    assert env == [
        {"name": "REDIS_AUTH", "valueFrom": {"secretKeyRef": {"name": "envoy-ratelimit-redis", "key": "password"}}},
        {"name": "NEAR_LIMIT_RATIO", "value": "0.8"},
    ]
    controller = release(monitor, "aieg").inputs["values"]
    assert controller["envoyGateway"] == {"namespace": "envoy-gateway-system"}
    assert controller["controller"]["metricsRequestHeaderAttributes"] == "x-actor-id:actor.id"


def test_external_fail_closed_values(external):
    _, monitor, _ = external
    rate_limit = release(monitor, "eg").inputs["values"]["config"]["envoyGateway"]["rateLimit"]
    assert rate_limit == {
        "backend": {"type": "Redis", "redis": {"url": "redis.prod.example.internal:6380"}},
        "failClosed": True,
        "timeout": "250ms",
    }


def test_namespaces_are_ours_and_the_releases_install_into_them(dev):
    platform, monitor, _ = dev
    names = sorted(r.object_name for r in monitor.of_type(":Namespace"))
    assert names == ["agent-budgets-redis", "envoy-ai-gateway-system", "envoy-gateway-system"]
    eg_namespace = monitor.one("Namespace", "envoy-gateway-system")
    ai_namespace = monitor.one("Namespace", "envoy-ai-gateway-system")
    assert eg_namespace.urn in release(monitor, "eg").dependencies
    assert ai_namespace.urn in release(monitor, "aieg-crd").dependencies
    assert ai_namespace.urn in release(monitor, "aieg").dependencies
    assert platform.envoy_gateway_namespace is not None


# --- ordering -------------------------------------------------------------------------------------------


def test_envoy_gateway_waits_for_the_secret_envoy_ratelimit_reads(dev):
    _, monitor, _ = dev
    client_secret = monitor.one("Secret", "envoy-ratelimit-redis")
    assert client_secret.object_namespace == "envoy-gateway-system"
    assert client_secret.urn in release(monitor, "eg").dependencies
    # ...and that Secret is created in the Namespace we own.
    assert monitor.one("Namespace", "envoy-gateway-system").urn in client_secret.dependencies


def test_controller_comes_after_envoy_gateway_and_its_crds(dev):
    _, monitor, _ = dev
    controller = release(monitor, "aieg")
    assert release(monitor, "eg").urn in controller.dependencies
    assert release(monitor, "aieg-crd").urn in controller.dependencies
    # The CRD chart has nothing to wait for but its namespace: it installs alongside Envoy Gateway.
    assert release(monitor, "eg").urn not in release(monitor, "aieg-crd").dependencies


def test_deps_hand_out_the_releases_and_the_store(dev):
    platform, monitor, _ = dev
    assert isinstance(platform.deps, PlatformDeps)
    assert platform.deps.envoy_gateway == (platform.envoy_gateway_release,)
    assert platform.deps.agent_router_crds == (platform.agent_router_crds_release,)
    assert platform.deps.agent_router_controller == (platform.agent_router_release,)
    assert platform.deps.rate_limit_store == platform.store.ready
    assert platform.store.stateful_set in platform.deps.rate_limit_store
    # Each exposed object is the registration we think it is.
    for resource, release_name in (
        (platform.envoy_gateway_release, "eg"),
        (platform.agent_router_crds_release, "aieg-crd"),
        (platform.agent_router_release, "aieg"),
    ):
        assert resource is not None
        assert release(monitor, release_name).name == resource._name


def test_platform_installed_elsewhere_still_brings_the_store():
    settings = settings_with(platform={"install": False})
    platform, monitor, _ = run_under_mocks(build_platform(settings))
    assert monitor.of_type(RELEASE) == []
    assert [r.object_name for r in monitor.of_type(":Namespace")] == ["agent-budgets-redis"]
    assert platform.deps.envoy_gateway == ()
    assert platform.deps.agent_router_crds == ()
    assert platform.deps.agent_router_controller == ()
    assert platform.deps.rate_limit_store == platform.store.ready != ()
    assert monitor.one("Secret", "envoy-ratelimit-redis").object_namespace == "envoy-gateway-system"
    # Whoever installs Envoy Gateway gets the same values.
    assert platform.envoy_gateway_values == pv.envoy_gateway_values(settings)


# --- provider, parenting, outputs -------------------------------------------------------------------------


def test_every_kubernetes_object_uses_the_explicit_provider_and_is_a_child(dev):
    _, monitor, _ = dev
    provider = monitor.one("pulumi:providers:kubernetes")
    platform = monitor.one("agent-budgets:platform:Platform")
    # A top-level component: its parent is the stack's root resource (whose name depends on test order).
    assert "::pulumi:pulumi:Stack::agent-budgets-" in platform.parent
    parents = {r.urn: r.parent for r in monitor.registrations}
    for registration in monitor.registrations:
        if registration in (provider, platform):
            continue
        ancestors, urn = [], registration.urn
        while urn in parents:
            urn = parents[urn]
            ancestors.append(urn)
        assert platform.urn in ancestors, registration.name
        if registration.type.startswith("kubernetes:"):
            assert registration.provider == f"{provider.urn}::k8s-id", registration.name


def test_platform_outputs(dev):
    _, monitor, _ = dev
    platform = monitor.one("agent-budgets:platform:Platform")
    assert monitor.outputs[platform.urn] == {
        "installed": True,
        "envoyGatewayVersion": "v1.9.3",
        "agentRouterVersion": "v1.2.1",
        "redisMode": "in-cluster",
        "redisUrl": "redis.agent-budgets-redis.svc.cluster.local:6379",
        "failClosed": False,
    }


# --- the password ---------------------------------------------------------------------------------------


def assert_never_plain(monitor: RecordingMonitor, messages: list[str], password: str) -> None:
    for registration in monitor.registrations:
        assert password not in " ".join(plain_strings(registration.inputs)), registration.name
    assert password not in json.dumps(monitor.outputs, default=str)
    assert not any(password in message for message in messages)
    carriers = sorted(r.object_name or r.name for r in monitor.registrations if password in secret_strings(r.inputs))
    assert carriers, "the password must be somewhere (as a secret), or this check proves nothing"


def test_in_cluster_password_is_never_plain_text(dev, capsys):
    _, monitor, capture = dev
    assert_never_plain(monitor, capture.messages, MOCK_PASSWORD)
    carriers = {r.object_name for r in monitor.registrations if MOCK_PASSWORD in secret_strings(r.inputs)}
    assert carriers == {"redis-auth", "envoy-ratelimit-redis"}
    out, err = capsys.readouterr()
    assert MOCK_PASSWORD not in out + err


def test_external_password_is_never_plain_text(external):
    _, monitor, capture = external
    assert_never_plain(monitor, capture.messages, REDIS_PASSWORD)
    carriers = {r.object_name for r in monitor.registrations if REDIS_PASSWORD in secret_strings(r.inputs)}
    assert carriers == {"envoy-ratelimit-redis"}
    assert not monitor.of_type("RandomPassword")


def test_missing_external_password_stops_before_the_platform_registers():
    settings = settings_with(redis=EXTERNAL_REDIS)
    monitors_before = len(RecordingMonitor.instances)
    with pytest.raises(pulumi.RunError, match=r"pulumi config set --secret agent-budgets:redisPassword <value>"):
        run_under_mocks(build_platform(settings))
    [monitor] = RecordingMonitor.instances[monitors_before:]
    assert [r.type for r in monitor.registrations] == ["pulumi:providers:kubernetes"]


# --- the whole program, both stack files -------------------------------------------------------------------


def run_stack(stack: str, secrets: dict[str, str] | None = None) -> tuple[ProgramRun, RecordingMonitor]:
    """Run `__main__.py` with Pulumi.<stack>.yaml through the shared harness (which records dependencies)."""
    run = run_program(stack_config(stack), secrets=secrets, stack=stack)
    return run, run.monitor


@pytest.fixture(scope="module")
def dev_stack() -> tuple[ProgramRun, RecordingMonitor]:
    return run_stack("dev")


@pytest.fixture(scope="module")
def prod_stack() -> tuple[ProgramRun, RecordingMonitor]:
    return run_stack("prod", PROD_SECRETS)


@pytest.fixture(params=["dev", "prod"])
def stack(request, dev_stack, prod_stack) -> tuple[str, ProgramRun, RecordingMonitor]:
    run, monitor = dev_stack if request.param == "dev" else prod_stack
    return request.param, run, monitor


# Which release installs the CRD of each API group.
CRD_RELEASE = {
    "gateway.networking.k8s.io": "eg",
    "gateway.envoyproxy.io": "eg",
    "aigateway.envoyproxy.io": "aieg-crd",
}


def custom_resources(monitor: RecordingMonitor) -> Iterator[Registration]:
    for registration in monitor.registrations:
        if registration.type.startswith("kubernetes:") and "." in registration.type.split(":")[1].split("/")[0]:
            group = registration.type.split(":")[1].split("/")[0]
            if group not in {"helm.sh", "apps", "networking.k8s.io"}:
                yield registration


def test_stack_files_produce_the_expected_releases_and_values(stack):
    name, _, monitor = stack
    settings = parse_settings(stack_config(name))
    for spec in pv.release_specs(settings):
        inputs = release(monitor, spec.release_name).inputs
        assert (inputs["chart"], inputs["version"], inputs["namespace"]) == (spec.chart, spec.version, spec.namespace)
        assert inputs["values"] == plain_json(spec.values)
    rate_limit = release(monitor, "eg").inputs["values"]["config"]["envoyGateway"]["rateLimit"]
    if name == "dev":
        assert rate_limit["failClosed"] is False
        assert rate_limit["backend"]["redis"] == {"url": "redis.agent-budgets-redis.svc.cluster.local:6379"}
        assert monitor.one("StatefulSet", "redis").object_namespace == "agent-budgets-redis"
    else:
        assert rate_limit["failClosed"] is True
        assert rate_limit["backend"]["redis"] == {"url": "redis.prod.example.internal:6380"}
        # TLS Redis: the rate-limit pod Envoy Gateway renders from these values has a volume for every mount
        # and turns TLS on (issue 22: the old `tls: {}` mounted `redis-certs` with no such volume).
        pod = render_ratelimit_pod(release(monitor, "eg").inputs["values"]["config"]["envoyGateway"])
        assert pod_problems(pod) == []
        assert {m["name"] for m in pod.volume_mounts} <= {v["name"] for v in pod.volumes}
        assert read_redis_client(pod).tls is True
        assert not [r for r in monitor.of_type(":StatefulSet") if r.object_name == "redis"]
        assert monitor.one("Secret", "envoy-ratelimit-redis").object_namespace == "envoy-gateway-system"


def test_every_custom_resource_depends_on_the_release_that_installs_its_crd(stack):
    _, _, monitor = stack
    checked = 0
    for registration in custom_resources(monitor):
        group = registration.type.split(":")[1].split("/")[0]
        installer = release(monitor, CRD_RELEASE[group])
        assert installer.urn in registration.dependencies, f"{registration.type} {registration.name}"
        checked += 1
    kinds = {r.type.rsplit(":", 1)[-1] for r in custom_resources(monitor)}
    assert {"Gateway", "BackendTrafficPolicy", "SecurityPolicy", "AIGatewayRoute", "AIServiceBackend"} <= kinds
    assert checked >= 8


def test_gateway_waits_for_the_agent_router_controller(stack):
    _, _, monitor = stack
    [gateway] = [r for r in custom_resources(monitor) if r.type.endswith(":Gateway")]
    assert release(monitor, "aieg").urn in gateway.dependencies


def test_agent_routers_kinds_go_before_its_controller(stack):
    """Agent Router's controller puts its finalizer (`aigateway.envoyproxy.io/finalizer`) on AIServiceBackends and
    BackendSecurityPolicies: `pulumi destroy` must delete them while the controller runs, so each depends on the
    controller's release. The real engine on the rig showed the hang without it: the release went first, and the
    two objects waited for a finalizer nothing would remove (envoyproxy/ai-gateway v1.1.0
    internal/controller/controller.go `handleFinalizer`)."""
    _, _, monitor = stack
    controller = release(monitor, "aieg").urn
    agent_router = [r for r in custom_resources(monitor) if r.type.split(":")[1].startswith("aigateway.envoyproxy.io/")]
    assert {r.type.rsplit(":", 1)[-1] for r in agent_router} >= {"AIGatewayRoute", "AIServiceBackend"}
    for registration in agent_router:
        assert controller in registration.dependencies, f"{registration.type} {registration.name}"


def test_budget_policy_waits_for_the_rate_limit_store(stack):
    name, _, monitor = stack
    [policy] = [r for r in custom_resources(monitor) if r.type.endswith(":BackendTrafficPolicy")]
    client_secret = monitor.one("Secret", "envoy-ratelimit-redis")
    assert client_secret.urn in policy.dependencies
    if name == "dev":
        assert monitor.one("StatefulSet", "redis").urn in policy.dependencies
        assert monitor.one("NetworkPolicy").urn in policy.dependencies


def test_stack_runs_never_show_the_redis_password(stack):
    name, run, monitor = stack
    if name == "dev":
        [password] = [value for value in run.mocks.random_results if "rate-limit-store-password" in value]
    else:
        password = REDIS_PASSWORD
    assert_never_plain(monitor, run.warnings, password)
    assert password not in json.dumps(run.outputs, default=str)


def test_prod_without_its_secrets_names_each_missing_one():
    with pytest.raises(pulumi.RunError) as error:
        run_program(stack_config("prod"), stack="prod")
    message = str(error.value)
    for key in ("openaiApiKey", "anthropicApiKey", "redisPassword"):
        assert f"pulumi config set --secret agent-budgets:{key}" in message, message

"""The rate-limit store under Pulumi mocks: what the cluster receives, and where the Redis password goes.

The mock monitor here records what the engine would get for each resource: its inputs (with secrets still
wrapped as secrets), its parent, provider, dependencies and resource options, and every component's
registered outputs. The platform tests reuse it.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime import rpc

from components.rate_limit_store import RateLimitStore
from core import platform_values as pv
from core.settings import PROJECT, RedisSettings, StackSettings
from core.validation import parse_settings
from tests.support.monitor import RecordingMonitor

RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"
MOCK_PASSWORD = "Zq7RedisMockPassword0123456789ab"  # what the mocked RandomPassword returns
EXTERNAL_PASSWORD = "ext-Redis-Passw0rd-from-config"
SECRET_SIG = rpc._special_secret_sig

BASE: dict[str, Any] = {
    "actors": ["agents/actor-a", "agents/actor-b"],
    "budgets": {"default": {"tokens": 500, "per": "Day"}},
}
EXTERNAL_REDIS = {"mode": "external", "url": "redis.prod.example.internal:6380", "tls": True}


# --- recording ------------------------------------------------------------------------------------------


class Recorder(pulumi.runtime.Mocks):
    """Mocks that return inputs as state and a fixed, recognisable RandomPassword result."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == RANDOM_PASSWORD:
            state["result"] = MOCK_PASSWORD
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


def plain_strings(value: Any) -> Iterator[str]:
    """Every string in a registered value that is NOT inside a secret (dict keys included)."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == SECRET_SIG:
            return
        for key, item in value.items():
            yield str(key)
            yield from plain_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from plain_strings(item)
    elif isinstance(value, str):
        yield value


def secret_strings(value: Any, inside: bool = False) -> Iterator[str]:
    """Every string in a registered value that IS inside a secret."""
    if isinstance(value, dict):
        now_inside = inside or value.get(rpc._special_sig_key) == SECRET_SIG
        for key, item in value.items():
            if key != rpc._special_sig_key:
                yield from secret_strings(item, now_inside)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from secret_strings(item, inside)
    elif isinstance(value, str) and inside:
        yield value


class LogCapture(logging.Handler):
    """The engine log the mocks receive (pulumi.log.*)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def settings_with(**changes: Any) -> StackSettings:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return parse_settings(raw)


def run_under_mocks(
    build: Callable[[pulumi.ResourceOptions], Any],
    secrets: dict[str, str] | None = None,
    plain: dict[str, str] | None = None,
) -> tuple[Any, RecordingMonitor, LogCapture]:
    """Set config and mocks, create an explicit Kubernetes provider, run `build(opts)`, wait for it all."""
    config = {f"{PROJECT}:{key}": value for key, value in {**(secrets or {}), **(plain or {})}.items()}
    pulumi.runtime.set_all_config(config, secret_keys=[f"{PROJECT}:{key}" for key in (secrets or {})])
    mocks = Recorder()
    monitor = RecordingMonitor(mocks)
    capture = LogCapture()
    logger = logging.getLogger(f"agent-budgets-test-{id(capture)}")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(capture)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="test", preview=False, monitor=monitor, logger=logger)
    built: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> None:
        provider = k8s.Provider("k8s", context="test-context")
        built["value"] = build(pulumi.ResourceOptions(providers={"kubernetes": provider}))

    program()
    return built.get("value"), monitor, capture


def build_store(redis: RedisSettings, **kwargs: Any) -> Callable[[pulumi.ResourceOptions], RateLimitStore]:
    return lambda opts: RateLimitStore("store", redis, opts=opts, **kwargs)


# --- in-cluster -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def in_cluster() -> tuple[RateLimitStore, RecordingMonitor, LogCapture]:
    return run_under_mocks(build_store(settings_with().redis))


def test_in_cluster_store_declares_the_redis_objects(in_cluster):
    _, monitor, _ = in_cluster
    kinds = sorted((r.type, r.object_name) for r in monitor.registrations if r.type.startswith("kubernetes:"))
    assert kinds == sorted(
        [
            ("kubernetes:apps/v1:StatefulSet", "redis"),
            ("kubernetes:core/v1:ConfigMap", "redis-config"),
            ("kubernetes:core/v1:Namespace", "agent-budgets-redis"),
            ("kubernetes:core/v1:Secret", "envoy-ratelimit-redis"),
            ("kubernetes:core/v1:Secret", "redis-auth"),
            ("kubernetes:core/v1:Service", "redis"),
            ("kubernetes:core/v1:Service", "redis-headless"),
            ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "redis-ratelimit-only"),
        ]
    )
    for registration in monitor.registrations:
        if not registration.type.startswith("kubernetes:") or registration.type.endswith(":Namespace"):
            continue
        client = registration.object_name == "envoy-ratelimit-redis"
        expected = "envoy-gateway-system" if client else "agent-budgets-redis"
        assert registration.object_namespace == expected, registration.name


def test_password_is_generated_with_fixed_inputs(in_cluster):
    _, monitor, _ = in_cluster
    password = monitor.one(RANDOM_PASSWORD)
    assert password.inputs == {"length": 32.0, "special": False}  # no keepers: stable across `pulumi up`s


def test_statefulset_is_the_pure_spec_with_a_retained_claim(in_cluster):
    store, monitor, _ = in_cluster
    stateful_set = monitor.one("StatefulSet")
    spec = stateful_set.inputs["spec"]
    assert spec == json.loads(json.dumps(pv.redis_stateful_set_spec(store.redis)))
    assert spec["replicas"] == 1 and spec["serviceName"] == "redis-headless"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    [claim] = spec["volumeClaimTemplates"]
    assert claim["metadata"] == {"name": "data"}
    assert claim["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    assert stateful_set.delete_before_replace is True
    assert stateful_set.protect is False
    # It starts only once its Secret, config and governing Service exist.
    for name in ("redis-auth", "redis-config", "redis-headless"):
        [dependency] = [r for r in monitor.registrations if r.object_name == name]
        assert dependency.urn in stateful_set.dependencies


def test_services_select_the_redis_pod_on_6379(in_cluster):
    _, monitor, _ = in_cluster
    labels = pv.redis_labels()
    pod_labels = monitor.one("StatefulSet").inputs["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == labels
    service = monitor.one("Service", "redis").inputs["spec"]
    assert service["selector"] == labels and service["type"] == "ClusterIP"
    assert service["ports"] == [{"name": "redis", "port": 6379.0, "targetPort": "redis", "protocol": "TCP"}]
    headless = monitor.one("Service", "redis-headless").inputs["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"] == labels


def test_network_policy_admits_only_envoy_ratelimit(in_cluster):
    _, monitor, _ = in_cluster
    spec = monitor.one("NetworkPolicy").inputs["spec"]
    assert spec["podSelector"] == {"matchLabels": pv.redis_labels()}
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
            # Envoy Gateway v1.9.0 rateLimitLabels: every envoy-ratelimit pod has all three, other pods of the
            # namespace (a component labelled `ratelimit` included) are not admitted.
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "envoy-ratelimit",
                    "app.kubernetes.io/component": "ratelimit",
                    "app.kubernetes.io/managed-by": "envoy-gateway",
                }
            },
        }
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379.0}]


def test_redis_config_is_mounted_and_holds_no_password(in_cluster):
    _, monitor, _ = in_cluster
    config = monitor.one("ConfigMap", "redis-config").inputs["data"]["redis.conf"]
    assert config == pv.redis_server_config()
    assert "appendonly yes" in config and "requirepass" not in config


def test_password_only_ever_travels_as_a_secret(in_cluster):
    _, monitor, capture = in_cluster
    for registration in monitor.registrations:
        assert MOCK_PASSWORD not in " ".join(plain_strings(registration.inputs)), registration.name
    for urn, outputs in monitor.outputs.items():
        assert MOCK_PASSWORD not in json.dumps(outputs, default=str), urn
    assert not any(MOCK_PASSWORD in message for message in capture.messages)
    # ...and it is really there, in both Secrets, as a secret (so the scan above can fail).
    for name in ("redis-auth", "envoy-ratelimit-redis"):
        secret = monitor.one("Secret", name)
        assert list(secret_strings(secret.inputs["stringData"])) == [MOCK_PASSWORD]
    assert sum(MOCK_PASSWORD in list(secret_strings(r.inputs)) for r in monitor.registrations) == 2


def test_redis_and_probes_take_the_password_by_reference(in_cluster):
    _, monitor, _ = in_cluster
    [container] = monitor.one("StatefulSet").inputs["spec"]["template"]["spec"]["containers"]
    by_name = {item["name"]: item for item in container["env"]}
    reference = {"secretKeyRef": {"name": "redis-auth", "key": "password"}}
    assert by_name["REDIS_PASSWORD"] == {"name": "REDIS_PASSWORD", "valueFrom": reference}
    assert by_name["REDISCLI_AUTH"] == {"name": "REDISCLI_AUTH", "valueFrom": reference}
    assert all("value" not in item for item in container["env"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = " ".join(container[probe]["exec"]["command"])
        assert "redis-cli" in command and " -a " not in command and "PASSWORD" not in command


def test_children_are_parented_to_the_store_and_use_the_explicit_provider(in_cluster):
    _, monitor, _ = in_cluster
    provider = monitor.one("pulumi:providers:kubernetes")
    store = monitor.one("agent-budgets:platform:RateLimitStore")
    for registration in monitor.registrations:
        if registration is provider or registration is store:
            continue
        assert registration.parent == store.urn, registration.name
        assert "::agent-budgets:platform:RateLimitStore$" in registration.urn
        if registration.type.startswith("kubernetes:"):
            assert registration.provider == f"{provider.urn}::k8s-id", registration.name


def test_ready_is_what_the_budget_policy_must_wait_for(in_cluster):
    store, _, _ = in_cluster
    assert store.ready == (store.stateful_set, store.service, store.network_policy, store.client_secret)
    assert store.url == "redis.agent-budgets-redis.svc.cluster.local:6379"
    assert store.tls is False


def test_component_outputs_name_the_store_but_never_the_password(in_cluster):
    _, monitor, _ = in_cluster
    store = monitor.one("agent-budgets:platform:RateLimitStore")
    assert monitor.outputs[store.urn] == {
        "mode": "in-cluster",
        "url": "redis.agent-budgets-redis.svc.cluster.local:6379",
        "tls": False,
        "clientSecret": "envoy-ratelimit-redis",
    }


def test_a_second_run_registers_exactly_the_same_inputs():
    """`pulumi up` twice with nothing changed: same names, same specs, so the volume and counters stay."""
    redis = settings_with().redis
    _, first, _ = run_under_mocks(build_store(redis))
    _, second, _ = run_under_mocks(build_store(redis))

    def snapshot(monitor: RecordingMonitor) -> dict[str, Any]:
        return {r.urn: (r.inputs, r.protect, r.delete_before_replace) for r in monitor.registrations}

    assert snapshot(first) == snapshot(second)
    # Fixed Kubernetes names (no auto-naming): a new name would be a new, empty volume.
    for registration in first.registrations:
        if registration.type.startswith("kubernetes:") and registration.custom and "providers" not in registration.type:
            assert registration.object_name, registration.name


def test_storage_class_size_and_protect_come_from_settings():
    redis = settings_with(redis={"storageSize": "5Gi", "storageClass": "fast-ssd", "protect": True}).redis
    _, monitor, _ = run_under_mocks(build_store(redis))
    stateful_set = monitor.one("StatefulSet")
    [claim] = stateful_set.inputs["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert stateful_set.protect is True
    assert monitor.one("Namespace").protect is True
    assert monitor.one("Secret", "redis-auth").protect is False


def test_custom_namespace_moves_every_redis_object_and_the_url():
    redis = settings_with(redis={"namespace": "budgets-store"}).redis
    store, monitor, _ = run_under_mocks(build_store(redis))
    assert monitor.one("Namespace").object_name == "budgets-store"
    assert monitor.one("StatefulSet").object_namespace == "budgets-store"
    assert store.url == "redis.budgets-store.svc.cluster.local:6379"


# --- external -------------------------------------------------------------------------------------------


def test_external_store_is_only_a_secret_for_envoy_ratelimit():
    redis = settings_with(redis=EXTERNAL_REDIS).redis
    store, monitor, capture = run_under_mocks(build_store(redis), secrets={"redisPassword": EXTERNAL_PASSWORD})
    kinds = [r.type for r in monitor.registrations if r.type.startswith("kubernetes:")]
    assert kinds == ["kubernetes:core/v1:Secret"]
    secret = monitor.one("Secret")
    assert secret.object_name == "envoy-ratelimit-redis" and secret.object_namespace == "envoy-gateway-system"
    assert list(secret_strings(secret.inputs["stringData"])) == [EXTERNAL_PASSWORD]
    assert not monitor.of_type(RANDOM_PASSWORD)
    for registration in monitor.registrations:
        assert EXTERNAL_PASSWORD not in " ".join(plain_strings(registration.inputs))
    assert EXTERNAL_PASSWORD not in json.dumps(monitor.outputs, default=str)
    assert not any(EXTERNAL_PASSWORD in message for message in capture.messages)
    assert store.ready == (store.client_secret,)
    assert store.url == "redis.prod.example.internal:6380" and store.tls is True


def test_external_password_key_follows_password_config():
    redis = settings_with(redis={**EXTERNAL_REDIS, "passwordConfig": "budgetRedisAuth"}).redis
    _, monitor, _ = run_under_mocks(build_store(redis), secrets={"budgetRedisAuth": EXTERNAL_PASSWORD})
    assert list(secret_strings(monitor.one("Secret").inputs["stringData"])) == [EXTERNAL_PASSWORD]


def test_external_without_its_password_stops_before_registering_the_store():
    redis = settings_with(redis=EXTERNAL_REDIS).redis
    with pytest.raises(pulumi.RunError) as error:
        run_under_mocks(build_store(redis))
    message = str(error.value)
    assert "agent-budgets:redisPassword must be set as a secret" in message
    assert "pulumi config set --secret agent-budgets:redisPassword <value>" in message


def test_external_password_in_plain_text_is_refused():
    redis = settings_with(redis=EXTERNAL_REDIS).redis
    with pytest.raises(pulumi.RunError) as error:
        run_under_mocks(build_store(redis), plain={"redisPassword": EXTERNAL_PASSWORD})
    message = str(error.value)
    assert "agent-budgets:redisPassword must be set as a secret" in message
    assert EXTERNAL_PASSWORD not in message


def test_external_sentinel_password_and_private_ca_reach_envoy_ratelimit_s_namespace():
    """REDIS_SENTINEL_AUTH from its own secret config key, REDIS_TLS_CACERT from a ConfigMap (issue 10, defect 11)."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmg\n-----END CERTIFICATE-----\n"
    redis = settings_with(
        redis={
            "mode": "external",
            "type": "sentinel",
            "url": "mymaster,sentinel-0.example:26379",
            "tls": True,
            "tlsCaCertificate": pem,
            "sentinelPasswordConfig": "redisSentinelPassword",
        }
    ).redis
    store, monitor, _ = run_under_mocks(
        build_store(redis), secrets={"redisPassword": EXTERNAL_PASSWORD, "redisSentinelPassword": "s3ntinel-pw"}
    )
    secret = monitor.one("Secret")
    assert sorted(secret_strings(secret.inputs["stringData"])) == sorted([EXTERNAL_PASSWORD, "s3ntinel-pw"])
    assert set(secret.inputs["stringData"]["value"]) == {"password", "sentinelPassword"}  # wrapped as a secret
    for registration in monitor.registrations:
        assert "s3ntinel-pw" not in " ".join(plain_strings(registration.inputs))
    ca = monitor.one("ConfigMap")
    assert (ca.object_name, ca.object_namespace) == ("envoy-ratelimit-redis-ca", "envoy-gateway-system")
    assert ca.inputs["data"] == {"ca.crt": pem}
    assert store.ready == (store.client_secret, store.client_ca)

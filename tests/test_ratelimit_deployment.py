"""The `envoy-ratelimit` pod Envoy Gateway renders from our values, for every Redis mode (issue 22).

The model (`core/ratelimit_deployment.py`) follows envoyproxy/gateway v1.9.0
`internal/infrastructure/kubernetes/ratelimit/resource.go` and envoyproxy/ratelimit f2fb157
`src/settings/settings.go`. First the model is held to those files (an empty `tls` block mounts a volume
nobody creates; a `certificateRef` creates it; user env replaces by name), then every Redis mode the settings
allow is rendered from the real values and checked: each mount has its volume, and the TLS, CA, password and
Sentinel variables are the ones the rate-limit service reads, with the values the settings ask for.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core import platform_values as pv
from core import ratelimit_deployment as rd
from core.settings import StackSettings
from core.validation import parse_settings
from tests.support.program import stack_config

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQk9P\nbm90IGEgcmVhbCBjZXJ0\n-----END CERTIFICATE-----\n"
BASE: dict[str, Any] = {"actors": ["agents/actor-a"], "budgets": {"default": {"tokens": 500, "per": "Day"}}}
SINGLE = "redis.prod.example.internal:6380"
SENTINEL = "mymaster,sentinel-0.example.internal:26379,sentinel-1.example.internal:26379"
CLUSTER = "node-0.example.internal:6379,node-1.example.internal:6379"
AUTH = {"secretKeyRef": {"name": "envoy-ratelimit-redis", "key": "password"}}
SENTINEL_AUTH = {"secretKeyRef": {"name": "envoy-ratelimit-redis", "key": "sentinelPassword"}}

# Every Redis mode the settings allow: (id, redis settings, expected REDIS_TYPE).
MODES: list[tuple[str, dict[str, Any], str]] = [
    ("in-cluster", {}, "SINGLE"),
    ("single", {"mode": "external", "url": SINGLE}, "SINGLE"),
    ("single-tls", {"mode": "external", "url": SINGLE, "tls": True}, "SINGLE"),
    ("single-tls-private-ca", {"mode": "external", "url": SINGLE, "tls": True, "tlsCaCertificate": PEM}, "SINGLE"),
    ("sentinel", {"mode": "external", "url": SENTINEL, "type": "sentinel"}, "SENTINEL"),
    ("sentinel-auth", {"mode": "external", "url": SENTINEL, "type": "sentinel",
                       "sentinelPasswordConfig": "redisSentinelPassword"}, "SENTINEL"),
    ("sentinel-tls-ca-auth", {"mode": "external", "url": SENTINEL, "type": "sentinel", "tls": True,
                              "tlsCaCertificate": PEM, "sentinelPasswordConfig": "redisSentinelPassword"}, "SENTINEL"),
    ("cluster", {"mode": "external", "url": CLUSTER, "type": "cluster"}, "CLUSTER"),
    ("cluster-tls", {"mode": "external", "url": CLUSTER, "type": "cluster", "tls": True}, "CLUSTER"),
    ("cluster-tls-private-ca", {"mode": "external", "url": CLUSTER, "type": "cluster", "tls": True,
                                "tlsCaCertificate": PEM}, "CLUSTER"),
]  # fmt: skip


def settings(redis: dict[str, Any], **changes: Any) -> StackSettings:
    raw = copy.deepcopy(BASE)
    raw["redis"] = redis
    raw.update(changes)
    return parse_settings(raw)


def pod_of(stack: StackSettings) -> rd.RateLimitPod:
    return rd.render_ratelimit_pod(pv.envoy_gateway_config(stack))


def minimal_config(redis: dict[str, Any], **deployment: Any) -> dict[str, Any]:
    """A `config.envoyGateway` with only what the rate-limit pod depends on."""
    return {
        "rateLimit": {"backend": {"type": "Redis", "redis": redis}},
        "provider": {"type": "Kubernetes", "kubernetes": {"rateLimitDeployment": deployment}},
    }


def names(items: tuple[dict[str, Any], ...]) -> list[str]:
    return [str(item["name"]) for item in items]


# --- the model, held to upstream -------------------------------------------------------------------------


def test_an_empty_tls_block_renders_a_mount_without_a_volume():
    """The defect: resource.go mounts `redis-certs` for any non-nil tls, creates it only with certificateRef."""
    pod = rd.render_ratelimit_pod(minimal_config({"url": SINGLE, "tls": {}}))
    assert {"name": "redis-certs", "mountPath": "/redis-certs", "readOnly": True} in pod.volume_mounts
    assert "redis-certs" not in names(pod.volumes)
    assert pod.env_value("REDIS_TLS") == {"name": "REDIS_TLS", "value": "true"}
    assert rd.pod_problems(pod) == ['spec.template.spec.containers[0].volumeMounts[2].name: Not found: "redis-certs"']


def test_a_client_certificate_creates_the_volume_and_names_its_files():
    pod = rd.render_ratelimit_pod(minimal_config({"url": SINGLE, "tls": {"certificateRef": {"name": "redis-client"}}}))
    assert pod.volumes[0] == {"name": "redis-certs", "secret": {"secretName": "redis-client", "defaultMode": 420}}
    assert rd.pod_problems(pod) == [] and rd.ratelimit_problems(pod) == []
    client = rd.read_redis_client(pod)
    assert client.tls is True
    assert client.client_certificate == ("/redis-certs/tls.crt", "/redis-certs/tls.key")
    assert rd.mounted_file(pod, "/redis-certs/tls.key") == (pod.volumes[0], "tls.key")


def test_without_tls_there_is_neither_the_mount_nor_the_variable():
    pod = rd.render_ratelimit_pod(minimal_config({"url": SINGLE}))
    assert names(pod.volume_mounts) == ["certs", "statsd-exporter-config"]
    assert names(pod.volumes) == ["certs", "statsd-exporter-config"]
    assert pod.env_value("REDIS_TLS") is None
    assert rd.read_redis_client(pod).tls is False
    assert names(pod.env)[:3] == ["RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_IGNOREDOTFILES"]
    assert names(pod.env)[-5:] == ["REDIS_SOCKET_TYPE", "REDIS_URL", "USE_PROMETHEUS", "PROMETHEUS_ADDR",
                                   "PROMETHEUS_MAPPER_YAML"]  # fmt: skip


def test_user_entries_replace_by_name_in_place_or_are_appended():
    """resource.go ExpectedContainerEnv / ExpectedVolumes / ExpectedContainerVolumeMounts."""
    pod = rd.render_ratelimit_pod(
        minimal_config(
            {"url": SINGLE},
            container={
                "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "REDIS_AUTH", "value": "x"}],
                "volumeMounts": [{"name": "certs", "mountPath": "/other", "readOnly": True}],
            },
            pod={"volumes": [{"name": "extra", "emptyDir": {}}]},
        )
    )
    assert names(pod.env).index("LOG_LEVEL") == 4 and pod.env_value("LOG_LEVEL")["value"] == "debug"
    assert names(pod.env)[-1] == "REDIS_AUTH"
    assert pod.volume_mounts[0]["mountPath"] == "/other"
    assert names(pod.volumes) == ["certs", "statsd-exporter-config", "extra"]


def test_prometheus_can_be_turned_off_and_the_metrics_port_goes_with_it():
    config = minimal_config({"url": SINGLE})
    assert [port["name"] for port in rd.render_ratelimit_pod(config).container_ports] == ["grpc", "metrics"]
    config["rateLimit"]["telemetry"] = {"metrics": {"prometheus": {"disable": True}}}
    pod = rd.render_ratelimit_pod(config)
    assert [port["name"] for port in pod.container_ports] == ["grpc"]
    assert "statsd-exporter-config" not in names(pod.volumes) + names(pod.volume_mounts)
    assert pod.env_value("USE_PROMETHEUS") is None


def test_a_url_from_a_secret_is_passed_by_reference():
    ref = {"name": "redis-url", "key": "url"}
    pod = rd.render_ratelimit_pod(minimal_config({"urlRef": {"secretKeyRef": ref}}))
    assert pod.env_value("REDIS_URL") == {"name": "REDIS_URL", "valueFrom": {"secretKeyRef": ref}}


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ([{"name": "REDIS_TLS_CA_CERT", "value": "/x"}], "REDIS_TLS_CA_CERT: envoyproxy/ratelimit reads no such"),
        ([{"name": "REDIS_TLS", "value": "yes"}], "REDIS_TLS: 'yes' is not a Go bool"),
        ([{"name": "REDIS_TLS", "value": "true"}, {"name": "REDIS_TLS_CACERT", "value": "/etc/ca/ca.crt"}],
         "REDIS_TLS_CACERT: no volume provides /etc/ca/ca.crt"),
        ([{"name": "REDIS_TYPE", "value": "CLUSTER"}], "REDIS_PIPELINE_WINDOW: unset"),
        ([{"name": "REDIS_TYPE", "value": "REPLICA"}], "REDIS_TYPE: 'REPLICA' is none of"),
    ],
)  # fmt: skip
def test_what_the_rate_limit_service_would_refuse_is_reported(env, problem):
    pod = rd.render_ratelimit_pod(minimal_config({"url": SINGLE}, container={"env": env}))
    assert any(found.startswith(problem) for found in rd.ratelimit_problems(pod)), rd.ratelimit_problems(pod)


def test_the_api_server_checks_are_the_ones_it_makes():
    pod = rd.RateLimitPod(
        env=({"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},),
        volumes=({"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}, {"name": "w"}),
        volume_mounts=({"name": "v", "mountPath": "/a"}, {"name": "w", "mountPath": "/a"}),
        container_ports=(),
    )
    assert rd.pod_problems(pod) == [
        'spec.template.spec.volumes[1].name: Duplicate value: "v"',
        "spec.template.spec.volumes[2]: must specify exactly one volume type, got none",
        'spec.template.spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/a": must be unique',
        "spec.template.spec.containers[0].env[0].valueFrom: Invalid value: may not be specified when `value` is "
        "not empty",
    ]


# --- every Redis mode, from the real values --------------------------------------------------------------


@pytest.mark.parametrize(("redis", "redis_type"), [m[1:] for m in MODES], ids=[m[0] for m in MODES])
def test_every_redis_mode_renders_a_pod_that_runs_and_connects_as_configured(redis, redis_type):
    stack = settings(redis)
    pod = pod_of(stack)
    assert set(names(pod.volume_mounts)) <= set(names(pod.volumes))
    assert rd.pod_problems(pod) == []
    assert rd.ratelimit_problems(pod) == []

    client = rd.read_redis_client(pod)
    assert client.socket_type == "tcp"
    assert client.url == pv.redis_url(stack.redis)
    assert client.redis_type == redis_type
    assert client.auth == AUTH
    assert client.tls is bool(redis.get("tls"))
    assert client.client_certificate is None
    assert client.sentinel_auth == (SENTINEL_AUTH if "sentinelPasswordConfig" in redis else None)
    assert client.pipeline_window == ("150us" if redis_type == "CLUSTER" else None)
    if "tlsCaCertificate" in redis:
        volume, key = rd.mounted_file(pod, client.ca_file)
        assert volume["configMap"]["name"] == pv.RATELIMIT_REDIS_CA and key == pv.REDIS_CA_KEY
    else:
        assert client.ca_file is None
    assert pod.env_value("NEAR_LIMIT_RATIO") == {"name": "NEAR_LIMIT_RATIO", "value": "0.8"}


def test_the_prod_stack_has_a_volume_for_every_mount_and_talks_tls():
    """The issue's case: the prod stack's TLS Redis (the old `tls: {}` took every envoy-ratelimit pod down)."""
    prod = parse_settings(stack_config("prod"))
    config = pv.envoy_gateway_config(prod)
    assert "tls" not in config["rateLimit"]["backend"]["redis"]
    pod = rd.render_ratelimit_pod(config)
    assert rd.pod_problems(pod) == [] and rd.ratelimit_problems(pod) == []
    assert rd.read_redis_client(pod).tls is True
    old = copy.deepcopy(config)
    old["rateLimit"]["backend"]["redis"]["tls"] = {}
    assert rd.pod_problems(rd.render_ratelimit_pod(old)) != []

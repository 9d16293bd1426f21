"""The platform layer's pure decisions: release specs, Helm values, Redis URL/env, the Redis server, bad input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from core import platform_values as pv
from core.settings import ConfigError, StackSettings
from core.validation import parse_settings
from tests.support.program import ROOT, stack_config

BASE: dict[str, Any] = {
    "actors": ["agents/actor-a", "agents/actor-b"],
    "budgets": {"default": {"tokens": 500, "per": "Day"}},
}
EXTERNAL = {"mode": "external", "url": "redis.prod.example.internal:6380"}


def settings(**changes: Any) -> StackSettings:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return parse_settings(raw)


def eg_config(value: StackSettings) -> dict[str, Any]:
    return pv.envoy_gateway_values(value)["config"]["envoyGateway"]


def key_paths(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every dict key path in a nested value."""
    paths: list[tuple[str, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            paths.append((*path, key))
            paths.extend(key_paths(item, (*path, key)))
    elif isinstance(value, list):
        for item in value:
            paths.extend(key_paths(item, path))
    return paths


# --- releases -------------------------------------------------------------------------------------------


def test_three_releases_in_install_order_at_the_default_versions():
    eg, crds, controller = pv.release_specs(settings())
    assert (eg.release_name, eg.chart, eg.version, eg.namespace) == (
        "eg", "oci://docker.io/envoyproxy/gateway-helm", "v1.9.3", "envoy-gateway-system",
    )  # fmt: skip
    assert (crds.release_name, crds.chart, crds.version, crds.namespace) == (
        "aieg-crd", "oci://docker.io/envoyproxy/ai-gateway-crds-helm", "v1.2.1", "envoy-ai-gateway-system",
    )  # fmt: skip
    assert (controller.release_name, controller.chart, controller.version, controller.namespace) == (
        "aieg", "oci://docker.io/envoyproxy/ai-gateway-helm", "v1.2.1", "envoy-ai-gateway-system",
    )  # fmt: skip
    assert [spec.timeout_seconds for spec in (eg, crds, controller)] == [600, 300, 600]
    assert crds.values == {}


def test_release_versions_follow_config():
    eg, crds, controller = pv.release_specs(
        settings(platform={"envoyGatewayVersion": "v1.9.5", "agentRouterVersion": "v1.2.3"})
    )
    assert eg.version == "v1.9.5"
    assert crds.version == controller.version == "v1.2.3"


def test_each_release_takes_its_chart_from_the_source_platform_charts_names():
    """`platform.charts`: an oci:// mirror gets the chart's name appended and the pinned version (or its own); an
    https:// repository is `repositoryOpts.repo` with the chart's name; a path is the chart itself, with no version
    (pulumi-kubernetes Release: `chart` "a path may be used", `repositoryOpts.repo`). Broken once by appending the
    name to an https repository: the second assertion failed."""
    eg, crds, controller = pv.release_specs(
        settings(
            platform={
                "charts": {
                    "envoyGateway": {"repository": "oci://registry.example.internal/envoyproxy/"},
                    "agentRouterCrds": {"repository": "https://charts.example.internal", "version": "v1.2.2"},
                    "agentRouter": {"path": "vendor/charts/ai-gateway-helm-v1.2.1.tgz"},
                }
            }
        )
    )
    assert (eg.chart, eg.version, eg.repository) == (
        "oci://registry.example.internal/envoyproxy/gateway-helm", "v1.9.3", None,
    )  # fmt: skip
    assert (crds.chart, crds.version, crds.repository) == (
        "ai-gateway-crds-helm", "v1.2.2", "https://charts.example.internal",
    )  # fmt: skip
    assert (controller.chart, controller.version, controller.repository) == (
        "vendor/charts/ai-gateway-helm-v1.2.1.tgz", None, None,
    )  # fmt: skip


def test_agent_router_knows_where_envoy_gateway_runs_the_proxies_and_labels_metrics_by_actor():
    assert pv.agent_router_values(settings()) == {
        "controller": {
            "fullnameOverride": "ai-gateway-controller",
            "maxRecvMsgSize": "16777216",
            # chart values.yaml `controller.metricsRequestHeaderAttributes` ("header:attribute,...").
            "metricsRequestHeaderAttributes": "x-actor-id:actor.id",
        },
        "envoyGateway": {"namespace": "envoy-gateway-system"},
    }
    renamed = pv.agent_router_values(settings(monitoring={"actorAttribute": "gen_ai.agent.id"}))
    assert renamed["controller"]["metricsRequestHeaderAttributes"] == "x-actor-id:gen_ai.agent.id"
    off = pv.agent_router_values(settings(monitoring={"actorMetrics": False}))
    assert off["controller"] == {"fullnameOverride": "ai-gateway-controller", "maxRecvMsgSize": "16777216"}


@pytest.mark.parametrize(("limit", "size"), [("16Mi", "16777216"), ("40M", "40000000"), ("8388608", "8388608")])
def test_both_ends_of_the_extension_server_get_the_same_message_cap(limit, size):
    """Envoy Gateway extensionManager.maxMessageSize (v1.9.0 internal/extension/grpc.go: send and receive) and
    Agent Router controller.maxRecvMsgSize (ai-gateway v1.1.0 cmd/controller/main.go), issue 10 defect 10."""
    stack = settings(platform={"extensionMessageLimit": limit})
    assert pv.envoy_gateway_config(stack)["extensionManager"]["maxMessageSize"] == limit
    assert pv.agent_router_values(stack)["controller"]["maxRecvMsgSize"] == size


# --- Envoy Gateway values ---------------------------------------------------------------------------------


def test_everything_for_envoy_gateway_is_under_config_envoy_gateway():
    """gateway-helm silently ignores values directly under `config:` (reference/envoy-gateway.md §5); every
    key below is checked against upstream's field names in tests/test_helm_values_schema.py."""
    for value in (settings(), settings(redis=EXTERNAL), parse_settings(stack_config("prod"))):
        values = pv.envoy_gateway_values(value)
        assert set(values) == {"config", "deployment"}
        assert set(values["config"]) == {"envoyGateway"}
        rate_limit_paths = [path for path in key_paths(values) if path[-1] == "rateLimit"]
        assert rate_limit_paths == [("config", "envoyGateway", "rateLimit")]
        extension_paths = [path for path in key_paths(values) if path[-1] in {"extensionApis", "extensionManager"}]
        assert extension_paths == [
            ("config", "envoyGateway", "extensionApis"),
            ("config", "envoyGateway", "extensionManager"),
        ]


def test_agent_router_extension_manager_and_backend_api():
    config = eg_config(settings())
    assert config["gateway"] == {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}
    assert config["provider"]["type"] == "Kubernetes"
    assert config["extensionApis"] == {"enableBackend": True, "enableEnvoyPatchPolicy": True}
    manager = config["extensionManager"]
    assert manager["hooks"] == {
        "xdsTranslator": {
            "post": ["Translation", "Cluster", "Route"],
            "translation": {
                "listener": {"includeAll": True},
                "route": {"includeAll": True},
                "cluster": {"includeAll": True},
                "secret": {"includeAll": True},
            },
        }
    }
    assert manager["service"] == {
        "fqdn": {"hostname": "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local", "port": 1063}
    }


def test_extension_server_host_is_the_agent_router_controller_service():
    controller = pv.agent_router_values(settings())
    host = eg_config(settings())["extensionManager"]["service"]["fqdn"]["hostname"]
    service, namespace, *_ = host.split(".")
    assert service == controller["controller"]["fullnameOverride"]
    assert namespace == pv.release_specs(settings())[2].namespace


def test_in_cluster_rate_limit_defaults_fail_open():
    rate_limit = eg_config(settings())["rateLimit"]
    assert rate_limit == {
        "backend": {"type": "Redis", "redis": {"url": "redis.agent-budgets-redis.svc.cluster.local:6379"}},
        "failClosed": False,
        "timeout": "100ms",
    }


@pytest.mark.parametrize(("fail_closed", "timeout"), [(True, "250ms"), (False, "1s"), (True, "1m30s")])
def test_fail_closed_and_timeout_come_from_config(fail_closed, timeout):
    rate_limit = eg_config(settings(rateLimit={"failClosed": fail_closed, "timeout": timeout}))["rateLimit"]
    assert rate_limit["failClosed"] is fail_closed
    assert rate_limit["timeout"] == timeout


def test_ratelimit_gets_the_password_by_reference_only():
    deployment = eg_config(settings())["provider"]["kubernetes"]["rateLimitDeployment"]
    assert deployment == {
        "replicas": 1,
        "container": {
            "env": [
                {
                    "name": "REDIS_AUTH",
                    "valueFrom": {"secretKeyRef": {"name": "envoy-ratelimit-redis", "key": "password"}},
                },
                {"name": "NEAR_LIMIT_RATIO", "value": "0.8"},
            ]
        },
    }
    assert "rateLimitPDB" not in eg_config(settings())["provider"]["kubernetes"]


@pytest.mark.parametrize(
    ("percent", "ratio"), [(80, "0.8"), (90, "0.9"), (75.5, "0.755"), (5, "0.05"), (99.9, "0.999")]
)
def test_the_near_limit_share_reaches_the_rate_limit_service(percent, ratio):
    """envoyproxy/ratelimit `src/settings/settings.go`: NEAR_LIMIT_RATIO, a float32, default 0.8."""
    deployment = eg_config(settings(monitoring={"nearLimitPercent": percent}))["provider"]["kubernetes"]
    env = deployment["rateLimitDeployment"]["container"]["env"]
    assert env[-1] == {"name": "NEAR_LIMIT_RATIO", "value": ratio}
    assert abs(float(ratio) - percent / 100) < 1e-12


def test_external_redis_url_tls_and_type():
    """TLS is REDIS_TLS in the container env, never a `tls` block: Envoy Gateway (v0.5.0 to v1.9.0 and main,
    ratelimit/resource.go) mounts a `redis-certs` volume for any `tls` block but creates it only with a
    certificateRef, so `tls: {}` left the rate-limit Deployment invalid (issue 22; tests/test_ratelimit_deployment.py
    renders the pod)."""
    single = eg_config(settings(redis={**EXTERNAL, "tls": True}))
    assert single["rateLimit"]["backend"]["redis"] == {"url": "redis.prod.example.internal:6380"}
    env = single["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"]
    # REDIS_TYPE defaults to SINGLE (envoyproxy/ratelimit src/settings/settings.go).
    assert [item["name"] for item in env] == ["REDIS_AUTH", "REDIS_TLS", "NEAR_LIMIT_RATIO"]
    assert env[1] == {"name": "REDIS_TLS", "value": "true"}

    no_tls = eg_config(settings(redis=EXTERNAL))
    assert "tls" not in no_tls["rateLimit"]["backend"]["redis"]
    no_tls_env = no_tls["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"]
    assert "REDIS_TLS" not in [item["name"] for item in no_tls_env]


def test_sentinel_and_cluster_set_redis_type():
    url = "mymaster, s-0.internal:26379,s-1.internal:26379"
    sentinel = settings(redis={**EXTERNAL, "type": "sentinel", "url": url})
    assert pv.redis_url(sentinel.redis) == "mymaster,s-0.internal:26379,s-1.internal:26379"
    env = pv.ratelimit_container_env(sentinel.redis)
    assert env[1:] == [{"name": "REDIS_TYPE", "value": "SENTINEL"}]

    cluster = settings(redis={**EXTERNAL, "type": "cluster", "url": "n-0.internal:6379,n-1.internal:6379"})
    env = pv.ratelimit_container_env(cluster.redis)
    assert env[1:] == [
        {"name": "REDIS_TYPE", "value": "CLUSTER"},
        {"name": "REDIS_PIPELINE_WINDOW", "value": "150us"},
    ]
    assert eg_config(cluster)["rateLimit"]["backend"]["redis"]["url"] == "n-0.internal:6379,n-1.internal:6379"


def test_more_ratelimit_replicas_get_a_disruption_budget():
    kubernetes = eg_config(settings(rateLimit={"replicas": 3}))["provider"]["kubernetes"]
    assert kubernetes["rateLimitDeployment"]["replicas"] == 3
    assert kubernetes["rateLimitPDB"] == {"minAvailable": 1}


def test_config_checksum_rolls_envoy_gateway_only_when_the_config_changes():
    def annotation(value: StackSettings) -> str:
        return pv.envoy_gateway_values(value)["deployment"]["pod"]["annotations"][pv.CONFIG_CHECKSUM_ANNOTATION]

    assert annotation(settings()) == annotation(settings())
    assert annotation(settings()) == pv.checksum(eg_config(settings()))
    assert annotation(settings()) != annotation(settings(rateLimit={"failClosed": True}))
    # Budgets are not part of the platform: changing them does not restart Envoy Gateway.
    assert annotation(settings()) == annotation(settings(budgets={"default": {"tokens": 9, "per": "Hour"}}))


def test_values_are_plain_json():
    """No Outputs, no secrets: the whole values tree is visible in `pulumi preview`."""
    for spec in pv.release_specs(parse_settings(stack_config("prod"))):
        assert json.loads(json.dumps(spec.values)) == spec.values


# --- the in-cluster Redis ----------------------------------------------------------------------------------


def test_redis_server_persists_every_write_and_never_evicts():
    lines = pv.redis_server_config().splitlines()
    for line in (
        "appendonly yes", "appendfsync everysec", "save 3600 1 300 100 60 10000",
        "maxmemory-policy noeviction", "dir /data", "port 6379",
    ):  # fmt: skip
        assert line in lines
    assert not any(line.startswith("requirepass") for line in lines)


def test_redis_start_script_feeds_the_password_on_stdin():
    script = pv.redis_start_script()
    assert "exec redis-server /etc/redis/redis.conf - <<EOF" in script
    assert 'requirepass "${REDIS_PASSWORD}"' in script
    assert "--requirepass" not in script and "echo $REDIS_PASSWORD" not in script
    assert 'echo "REDIS_PASSWORD is empty' in script  # refuses to start without a password


def test_statefulset_spec_uses_settings_and_stays_non_root():
    redis = settings(redis={"image": "redis:8.2.5-alpine", "storageSize": "2Gi", "storageClass": "fast"}).redis
    spec = pv.redis_stateful_set_spec(redis)
    [container] = spec["template"]["spec"]["containers"]
    assert container["image"] == "redis:8.2.5-alpine"
    assert spec["volumeClaimTemplates"][0]["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}},
        "storageClassName": "fast",
    }
    pod_security = spec["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] == 999
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert {mount["mountPath"] for mount in container["volumeMounts"]} == {"/data", "/etc/redis", "/tmp"}
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations == {pv.REDIS_CONFIG_ANNOTATION: pv.checksum(pv.redis_server_config())}
    assert pv.redis_stateful_set_spec(redis) == spec  # deterministic


def test_probes_authenticate_through_rediscli_auth():
    spec = pv.redis_stateful_set_spec(settings().redis)
    [container] = spec["template"]["spec"]["containers"]
    assert {"name": "REDISCLI_AUTH", "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}}} in (
        container["env"]
    )
    assert container["readinessProbe"]["exec"]["command"][-1].endswith("grep -Eq '^(PONG)'")
    assert container["livenessProbe"]["exec"]["command"][-1].endswith("grep -Eq '^(PONG|LOADING)'")


def test_redis_namespace_enforces_restricted_pod_security():
    assert pv.redis_namespace_labels()["pod-security.kubernetes.io/enforce"] == "restricted"


# --- stack files ------------------------------------------------------------------------------------------


def test_dev_stack_stays_kind_mock_500_per_day_in_cluster_fail_open():
    dev = parse_settings(stack_config("dev"))
    assert dev.kubernetes.context == "kind-agent-budgets"
    assert [p.kind for p in dev.providers] == ["mock"]
    assert (dev.budgets.default.tokens, dev.budgets.default.per) == (500, "Day")
    assert dev.redis.mode == "in-cluster" and dev.rate_limit.fail_closed is False
    eg, _, _ = pv.release_specs(dev)
    assert eg.values["config"]["envoyGateway"]["rateLimit"]["failClosed"] is False
    assert pv.redis_url(dev.redis) == "redis.agent-budgets-redis.svc.cluster.local:6379"


def test_prod_stack_is_a_real_environment():
    prod = parse_settings(stack_config("prod"))
    assert {(p.name, p.kind) for p in prod.providers} == {("openai", "openai"), ("anthropic", "anthropic")}
    assert {r.provider for r in prod.routes} == {"openai", "anthropic"}
    assert prod.redis.mode == "external" and prod.redis.tls is True and prod.redis.url
    assert prod.rate_limit.fail_closed is True and prod.rate_limit.replicas >= 2
    assert len(prod.budgets.classes) >= 2
    assert prod.budgets.default.limit_list()[0].tokens > 500
    assert [limit.calls for limit in prod.budgets.default.limit_list()] == [None, 20, None], "a calls limit bounds it"
    assert prod.budgets.default.limit_list()[2].models == ["claude-sonnet-4-5"], "Sonnet at most $2 a day"
    assert all(r.max_output_tokens and r.context_window and r.request_timeout for r in prod.routes)
    assert all(actor.startswith("agents/") for actor in prod.actors)
    assert prod.gateway.small_cluster is False
    assert prod.substrate.trust.mode == "clusterTrustBundle"
    assert prod.kubernetes.context != "kind-agent-budgets"
    eg, crds, controller = pv.release_specs(prod)
    redis = eg.values["config"]["envoyGateway"]["rateLimit"]["backend"]["redis"]
    assert redis == {"url": "redis.prod.example.internal:6380"}
    env = eg.values["config"]["envoyGateway"]["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"]
    assert {"name": "REDIS_TLS", "value": "true"} in env
    assert (eg.version, crds.version, controller.version) == ("v1.9.3", "v1.2.1", "v1.2.1")


def test_prod_stack_file_never_holds_a_secret_in_plain_text():
    """As committed the file has none; `pulumi config set --secret` may add them, only ever encrypted."""
    document = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    config = document["config"]
    for key in ("openaiApiKey", "anthropicApiKey", "redisPassword"):
        value = config.get(f"agent-budgets:{key}")
        assert value is None or (isinstance(value, dict) and set(value) == {"secure"}), key


# --- bad input ------------------------------------------------------------------------------------------

BAD: list[tuple[str, dict[str, Any], list[str]]] = [
    ("version that is not a version", {"platform": {"agentRouterVersion": "1.2"}},
     ["agent-budgets:platform.agentRouterVersion", "'1.2'", "v1.9.3"]),
    ("incompatible pair", {"platform": {"envoyGatewayVersion": "v1.9.1", "agentRouterVersion": "v1.2.1"}},
     ["agent-budgets:platform", "needs Envoy Gateway v1.9.2 or newer", "v1.9.1"]),
    ("external without url", {"redis": {"mode": "external"}}, ["agent-budgets:redis", "url is missing"]),
    ("zero timeout", {"rateLimit": {"timeout": "0s"}}, ["agent-budgets:rateLimit.timeout", "'0s'", "positive"]),
    ("negative timeout", {"rateLimit": {"timeout": "-100ms"}}, ["agent-budgets:rateLimit.timeout", "'-100ms'"]),
    ("timeout without unit", {"rateLimit": {"timeout": "100"}}, ["agent-budgets:rateLimit.timeout", "'100'"]),
    ("unknown redis mode", {"redis": {"mode": "sidecar"}}, ["agent-budgets:redis.mode", "'sidecar'"]),
    ("unknown redis type", {"redis": {**EXTERNAL, "type": "replica"}}, ["agent-budgets:redis.type", "'replica'"]),
    ("sentinel without master name", {"redis": {**EXTERNAL, "type": "sentinel", "url": "s-0:26379,s-1:26379"}},
     ["agent-budgets:redis", "<master name>,<sentinel host>:<port>"]),
    ("single with two hosts", {"redis": {**EXTERNAL, "url": "a.internal:6379,b.internal:6379"}},
     ["agent-budgets:redis", "type is single"]),
    ("port out of range", {"redis": {**EXTERNAL, "url": "redis.internal:70000"}},
     ["agent-budgets:redis", "'redis.internal:70000'", "1 to 65535"]),
    ("url without port", {"redis": {**EXTERNAL, "url": "redis.internal"}}, ["agent-budgets:redis", "host:port"]),
    ("in-cluster with url", {"redis": {"url": "redis.internal:6379"}},
     ["agent-budgets:redis.url: applies only to mode external"]),
    ("external with in-cluster storage", {"redis": {**EXTERNAL, "storageSize": "5Gi", "protect": True}},
     ["agent-budgets:redis.storageSize: applies only to mode in-cluster",
      "agent-budgets:redis.protect: applies only to mode in-cluster"]),
    ("bad password key", {"redis": {**EXTERNAL, "passwordConfig": "redis password"}},
     ["agent-budgets:redis.passwordConfig", "'redis password'"]),
    ("bad storage size", {"redis": {"storageSize": "lots"}}, ["agent-budgets:redis.storageSize", "'lots'"]),
    ("bad storage class", {"redis": {"storageClass": "Fast_SSD"}}, ["agent-budgets:redis.storageClass", "'Fast_SSD'"]),
    ("zero ratelimit replicas", {"rateLimit": {"replicas": 0}}, ["agent-budgets:rateLimit.replicas", "0"]),
    ("fail closed as text", {"rateLimit": {"failClosed": "sometimes"}}, ["agent-budgets:rateLimit.failClosed"]),
    ("unknown rate limit key", {"rateLimit": {"failOpen": True}}, ["agent-budgets:rateLimit.failOpen", "unknown key"]),
    ("unknown platform key", {"platform": {"eg": "v1.9.3"}}, ["agent-budgets:platform.eg", "unknown key"]),
    ("a chart source with both", {"platform": {"charts": {"agentRouter": {"repository": "oci://m/e", "path": "c"}}}},
     ["agent-budgets:platform.charts.agentRouter", "give exactly one of repository"]),
    ("a chart source with neither", {"platform": {"charts": {"envoyGateway": {"version": "v1.9.3"}}}},
     ["agent-budgets:platform.charts.envoyGateway", "give exactly one of repository"]),
    ("a version for a local chart", {"platform": {"charts": {"envoyGateway": {"path": "c", "version": "v1.9.3"}}}},
     ["agent-budgets:platform.charts.envoyGateway", "version applies to a repository only"]),
    ("a repository that is no URL", {"platform": {"charts": {"envoyGateway": {"repository": "docker.io/eg"}}}},
     ["agent-budgets:platform.charts.envoyGateway.repository", "is not an oci://, https:// or http:// URL"]),
    ("a chart source for no release", {"platform": {"charts": {"redis": {"path": "c"}}}},
     ["agent-budgets:platform.charts.redis", "unknown key"]),
]  # fmt: skip


@pytest.mark.parametrize(("config", "fragments"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_platform_input_is_refused_with_a_clear_message(config, fragments):
    with pytest.raises(ConfigError) as error:
        settings(**config)
    message = str(error.value)
    for fragment in fragments:
        assert fragment in message, message

"""The platform layer's decisions as plain data: Helm values, Redis URL and env, the Redis server config.

Pure functions over the validated settings, with no Pulumi import, so the tests can check every value a
release or the rate-limit store receives without running a program. `components/platform_releases.py` and
`components/rate_limit_store.py` turn these into resources.

Facts behind the values (reference/agent-router.md §2, reference/envoy-gateway.md §5 and §7):

* gateway-helm reads only `config.envoyGateway`; anything directly under `config:` is silently ignored.
* Envoy Gateway hands the `envoy-ratelimit` container only `REDIS_URL`: the password (`REDIS_AUTH`),
  `REDIS_TYPE`, the cluster pipelining window and TLS (`REDIS_TLS`, `REDIS_TLS_CACERT`) go into
  `provider.kubernetes.rateLimitDeployment.container.env`, which Envoy Gateway merges into its own env.
  `core.ratelimit_deployment` renders the resulting pod as Envoy Gateway does, and the tests check it for
  every Redis mode.
* Agent Router's extension server is the `ai-gateway-controller` Service on port 1063; its chart must
  know where Envoy Gateway runs the Envoy pods (`envoyGateway.namespace`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from core.body_guard import guard_enabled
from core.image_reference import mirrored
from core.manifests import common_labels
from core.monitoring import metrics_header_attributes, near_limit_ratio
from core.ratelimit_deployment import RATELIMIT_POD_LABELS
from core.settings import (
    ENVOY_GATEWAY_NAMESPACE,
    GATEWAY_CONTROLLER_NAME,
    PROJECT,
    RedisSettings,
    StackSettings,
)
from core.settings.platform import ChartSource

# --- charts and releases ---------------------------------------------------------------------------------

ENVOY_GATEWAY_CHART = "oci://docker.io/envoyproxy/gateway-helm"
AGENT_ROUTER_CRDS_CHART = "oci://docker.io/envoyproxy/ai-gateway-crds-helm"
AGENT_ROUTER_CHART = "oci://docker.io/envoyproxy/ai-gateway-helm"
ENVOY_GATEWAY_RELEASE = "eg"
AGENT_ROUTER_CRDS_RELEASE = "aieg-crd"
AGENT_ROUTER_RELEASE = "aieg"
AGENT_ROUTER_NAMESPACE = "envoy-ai-gateway-system"

# --- Envoy Gateway configuration -------------------------------------------------------------------------

AGENT_ROUTER_CONTROLLER = "ai-gateway-controller"
AGENT_ROUTER_CONTROLLER_IMAGE = "docker.io/envoyproxy/ai-gateway-controller"
AGENT_ROUTER_EXTPROC_IMAGE = "docker.io/envoyproxy/ai-gateway-extproc"
"""The repositories Agent Router's chart names (ai-gateway-helm values.yaml `controller.image`, `extProc.image`)."""
EXTENSION_SERVER_PORT = 1063
EXTENSION_SERVER_HOST = f"{AGENT_ROUTER_CONTROLLER}.{AGENT_ROUTER_NAMESPACE}.svc.cluster.local"
# Pod annotation that rolls the envoy-gateway Deployment when its configuration changes.
CONFIG_CHECKSUM_ANNOTATION = "agent-budgets.dev/envoy-gateway-config-sha256"
# radix needs implicit pipelining for Redis Cluster (older ratelimit images refuse to start without it).
CLUSTER_PIPELINE_WINDOW = "150us"

# --- the rate-limit store --------------------------------------------------------------------------------

REDIS_NAME = "redis"
REDIS_HEADLESS_NAME = "redis-headless"
REDIS_PORT = 6379
REDIS_AUTH_SECRET = "redis-auth"
"""The Secret in the Redis namespace that Redis reads its `requirepass` from."""
RATELIMIT_REDIS_SECRET = "envoy-ratelimit-redis"
"""The Secret in envoy-gateway-system that envoy-ratelimit reads REDIS_AUTH (and REDIS_SENTINEL_AUTH) from."""
PASSWORD_KEY = "password"
SENTINEL_PASSWORD_KEY = "sentinelPassword"
RATELIMIT_REDIS_CA = "envoy-ratelimit-redis-ca"
"""The ConfigMap in envoy-gateway-system holding a private Redis CA (key ca.crt), mounted into envoy-ratelimit."""
REDIS_CA_KEY = "ca.crt"
REDIS_CA_DIR = "/etc/agent-budgets/redis-ca"
REDIS_CA_VOLUME = "agent-budgets-redis-ca"
REDIS_CONFIG_MAP = "redis-config"
REDIS_CONFIG_FILE = "redis.conf"
REDIS_CONFIG_DIR = "/etc/redis"
REDIS_DATA_DIR = "/data"
REDIS_VOLUME_CLAIM = "data"
REDIS_UID = 999  # the redis user of the official image
REDIS_GID = 1000
REDIS_MEMORY_LIMIT = "512Mi"
REDIS_MAXMEMORY = "384mb"  # below the container limit: Redis refuses writes instead of being OOM-killed
REDIS_CONFIG_ANNOTATION = "agent-budgets.dev/redis-config-sha256"


@dataclass(frozen=True)
class ReleaseSpec:
    """Everything a `helm.v3.Release` is given, decided from settings."""

    resource_suffix: str
    release_name: str
    chart: str
    """An OCI reference, a chart name in `repository`, or a local path."""
    version: str | None
    """None for a local chart: it installs its own version."""
    namespace: str
    values: dict[str, Any]
    timeout_seconds: int
    repository: str | None = None
    """A Helm chart repository URL (`repositoryOpts.repo`), for a chart named by its name."""


def chart_location(
    public_chart: str, pinned_version: str, source: ChartSource | None
) -> tuple[str, str | None, str | None]:
    """(chart, version, repository) of one release: the public OCI chart at the pinned version, or `source`.

    pulumi-kubernetes' Release hands these to Helm's install (`chart` "a chart name ... a path may be used", and
    `repositoryOpts.repo`, provider/pkg/provider/helm_release.go): an `oci://` chart reference is pulled from that
    registry, a name is looked up in the repository's index, and a path is loaded as it is.
    """
    name = public_chart.rstrip("/").rsplit("/", 1)[-1]
    if source is None:
        return public_chart, pinned_version, None
    if source.path is not None:
        return source.path, None, None
    assert source.repository is not None  # the settings require one of the two
    version = source.version or pinned_version
    if source.repository.startswith("oci://"):
        return f"{source.repository}/{name}", version, None
    return name, version, source.repository


# --- Redis URL and the envoy-ratelimit env ----------------------------------------------------------------


def in_cluster_redis_host(redis: RedisSettings) -> str:
    """The ClusterIP Service of the in-cluster Redis."""
    return f"{REDIS_NAME}.{redis.namespace}.svc.cluster.local"


def redis_url(redis: RedisSettings) -> str:
    """What Envoy Gateway gets as `rateLimit.backend.redis.url` (and passes on as REDIS_URL)."""
    if redis.mode == "external":
        assert redis.url is not None  # settings refuse external without url
        return ",".join(part.strip() for part in redis.url.split(","))
    return f"{in_cluster_redis_host(redis)}:{REDIS_PORT}"


def redis_type_env(redis: RedisSettings) -> str | None:
    """`REDIS_TYPE` for envoyproxy/ratelimit, or None for a single node (its default)."""
    if redis.mode == "external" and redis.type != "single":
        return redis.type.upper()
    return None


def redis_uses_tls(redis: RedisSettings) -> bool:
    """TLS toward Redis: only an external Redis, when configured."""
    return redis.mode == "external" and redis.tls


def ratelimit_container_env(
    redis: RedisSettings,
    secret_name: str = RATELIMIT_REDIS_SECRET,
    secret_key: str = PASSWORD_KEY,
) -> list[dict[str, Any]]:
    """The env added to the envoy-ratelimit container: the password by reference, never by value."""
    env: list[dict[str, Any]] = [
        {"name": "REDIS_AUTH", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": secret_key}}},
    ]
    redis_type = redis_type_env(redis)
    if redis_type is not None:
        env.append({"name": "REDIS_TYPE", "value": redis_type})
    if redis_type == "CLUSTER":
        env.append({"name": "REDIS_PIPELINE_WINDOW", "value": CLUSTER_PIPELINE_WINDOW})
    if redis_sentinel_password_config(redis) is not None:
        # envoyproxy/ratelimit src/settings/settings.go REDIS_SENTINEL_AUTH: the Sentinels' own password.
        sentinel = {"secretKeyRef": {"name": secret_name, "key": SENTINEL_PASSWORD_KEY}}
        env.append({"name": "REDIS_SENTINEL_AUTH", "valueFrom": sentinel})
    if redis_uses_tls(redis):
        # Set here, never through `rateLimit.backend.redis.tls`: see envoy_gateway_config.
        env.append({"name": "REDIS_TLS", "value": "true"})
    if redis_private_ca(redis) is not None:
        # REDIS_TLS_CACERT is a file path (settings.go, utils.TlsConfigFromFiles): the CA is mounted there.
        env.append({"name": "REDIS_TLS_CACERT", "value": f"{REDIS_CA_DIR}/{REDIS_CA_KEY}"})
    return env


def redis_sentinel_password_config(redis: RedisSettings) -> str | None:
    """The secret config key of the Sentinels' own password, when envoy-ratelimit must send one."""
    if redis_type_env(redis) == "SENTINEL" and redis.sentinel_password_config:
        return redis.sentinel_password_config
    return None


def redis_private_ca(redis: RedisSettings) -> str | None:
    """The private CA (PEM) envoy-ratelimit must trust for the external Redis, when one is configured."""
    if redis_uses_tls(redis) and redis.tls_ca_certificate:
        return redis.tls_ca_certificate
    return None


def ratelimit_ca_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod volume and container mount that put the private Redis CA at REDIS_TLS_CACERT's path."""
    volume = {
        "name": REDIS_CA_VOLUME,
        "configMap": {"name": RATELIMIT_REDIS_CA, "items": [{"key": REDIS_CA_KEY, "path": REDIS_CA_KEY}]},
    }
    mount = {"name": REDIS_CA_VOLUME, "mountPath": REDIS_CA_DIR, "readOnly": True}
    return volume, mount


# --- Helm values ----------------------------------------------------------------------------------------


def envoy_gateway_config(settings: StackSettings) -> dict[str, Any]:
    """The `config.envoyGateway` map: Agent Router's extension manager and global rate limiting."""
    redis = settings.redis
    # No `tls` block, even with redis.tls: Envoy Gateway mounts a `redis-certs` volume whenever `tls` is set
    # but creates that volume only with `tls.certificateRef` (a client certificate, which we do not use), so
    # `tls: {}` renders a Deployment the API server refuses and no envoy-ratelimit pod runs. Every release
    # from v0.5.0 through v1.9.0 and main (d32f282) does this (internal/infrastructure/kubernetes/ratelimit/
    # resource.go). REDIS_TLS=true in the container env (ratelimit_container_env) turns TLS on instead, with
    # the same effect on the service, on every Envoy Gateway version.
    redis_backend: dict[str, Any] = {"url": redis_url(redis)}
    rate_limit_deployment: dict[str, Any] = {
        "replicas": settings.rate_limit.replicas,
        # NEAR_LIMIT_RATIO: where the rate-limit service starts counting `near_limit` (the near-limit alert).
        "container": {
            "env": [
                *ratelimit_container_env(redis),
                {"name": "NEAR_LIMIT_RATIO", "value": near_limit_ratio(settings.monitoring)},
            ]
        },
    }
    if redis_private_ca(redis) is not None:
        # Envoy Gateway merges these into the envoy-ratelimit pod (v1.9.0 internal/infrastructure/kubernetes/
        # ratelimit/resource.go expectedDeploymentVolumes / expectedContainerVolumeMounts).
        volume, mount = ratelimit_ca_volume()
        rate_limit_deployment["pod"] = {"volumes": [volume]}
        rate_limit_deployment["container"]["volumeMounts"] = [mount]
    kubernetes: dict[str, Any] = {"rateLimitDeployment": rate_limit_deployment}
    if settings.rate_limit.replicas > 1:
        kubernetes["rateLimitPDB"] = {"minAvailable": 1}
    return {
        "gateway": {"controllerName": GATEWAY_CONTROLLER_NAME},
        "provider": {"type": "Kubernetes", "kubernetes": kubernetes},
        # Lua only for the duplicate-key guard's EnvoyExtensionPolicy (core.body_guard): off by default in Envoy
        # Gateway, since a Lua policy runs its script in the controller and in every Envoy it reaches.
        "extensionApis": {
            "enableBackend": True,
            "enableEnvoyPatchPolicy": True,
            **({"enableLua": True} if guard_enabled(settings) else {}),
        },
        "extensionManager": {
            "hooks": {
                "xdsTranslator": {
                    "post": ["Translation", "Cluster", "Route"],
                    "translation": {kind: {"includeAll": True} for kind in ("listener", "route", "cluster", "secret")},
                }
            },
            "service": {"fqdn": {"hostname": EXTENSION_SERVER_HOST, "port": EXTENSION_SERVER_PORT}},
            # Every budget rule is copied into each model route, and all routes travel in one message
            # (docs/message-size.md); core.validation refuses budgets that would not fit this cap.
            "maxMessageSize": settings.platform.extension_message_limit,
        },
        "rateLimit": {
            "backend": {"type": "Redis", "redis": redis_backend},
            "failClosed": settings.rate_limit.fail_closed,
            "timeout": settings.rate_limit.timeout,
        },
    }


def checksum(value: Any) -> str:
    """A stable sha256 of a JSON-able value (key order does not matter)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def envoy_gateway_values(settings: StackSettings) -> dict[str, Any]:
    """Values of the `eg` release. Only `config.envoyGateway` is read by the chart's config template.

    With `platform.images.registry`, the chart's `global.imageRegistry`: it swaps the registry of the controller's
    image, the certgen Job's and the shutdown manager's (both the controller's image) and the rate-limit service's,
    keeping each repository path and tag (gateway-helm v1.9.0 templates/_helpers.tpl `eg.image`,
    `eg.ratelimit.image`). The proxy's Envoy image is the Gateway's EnvoyProxy's to set (core.manifests), since
    that EnvoyProxy replaces the chart's default one."""
    config = envoy_gateway_config(settings)
    values: dict[str, Any] = {
        "config": {"envoyGateway": config},
        # The chart has no checksum of its ConfigMap: roll envoy-gateway when our configuration changes.
        "deployment": {"pod": {"annotations": {CONFIG_CHECKSUM_ANNOTATION: checksum(config)}}},
    }
    registry = settings.platform.images.registry
    if registry is not None:
        values["global"] = {"imageRegistry": registry}
    return values


def agent_router_crds_values(settings: StackSettings) -> dict[str, Any]:
    """The CRD chart has no values."""
    del settings
    return {}


def agent_router_values(settings: StackSettings) -> dict[str, Any]:
    """Values of the `aieg` release: the controller Service EG calls, where EG runs the Envoy pods, the
    extension server's receive cap (the same number as Envoy Gateway's send cap), and (unless
    `monitoring.actorMetrics` is off) `x-actor-id` as an attribute of the GenAI metrics."""
    controller: dict[str, Any] = {
        "fullnameOverride": AGENT_ROUTER_CONTROLLER,
        # The chart passes it as `--maxRecvMsgSize={{ .Values.controller.maxRecvMsgSize }}`, an int flag
        # (envoyproxy/ai-gateway v1.1.0 templates/deployment.yaml, cmd/controller/main.go): a string, so
        # Helm does not render a large number in float notation.
        "maxRecvMsgSize": str(settings.platform.extension_message_bytes),
    }
    attributes = metrics_header_attributes(settings.monitoring)
    if attributes is not None:
        controller["metricsRequestHeaderAttributes"] = attributes
    values: dict[str, Any] = {
        "controller": controller,
        "envoyGateway": {"namespace": ENVOY_GATEWAY_NAMESPACE},
    }
    registry = settings.platform.images.registry
    if registry is not None:
        # The chart's repositories with the registry swapped; the tag stays the chart's appVersion
        # (envoyproxy/ai-gateway v1.1.0 manifests/charts/ai-gateway-helm/values.yaml).
        controller["image"] = {"repository": mirrored(AGENT_ROUTER_CONTROLLER_IMAGE, registry)}
        values["extProc"] = {"image": {"repository": mirrored(AGENT_ROUTER_EXTPROC_IMAGE, registry)}}
    return values


def release_specs(settings: StackSettings) -> tuple[ReleaseSpec, ReleaseSpec, ReleaseSpec]:
    """Envoy Gateway, the Agent Router CRDs and the Agent Router controller, in install order, each from its public
    chart or from the source `platform.charts` gives it."""
    platform = settings.platform
    charts = platform.charts
    eg = chart_location(ENVOY_GATEWAY_CHART, platform.envoy_gateway_version, charts.envoy_gateway)
    crds = chart_location(AGENT_ROUTER_CRDS_CHART, platform.agent_router_version, charts.agent_router_crds)
    aieg = chart_location(AGENT_ROUTER_CHART, platform.agent_router_version, charts.agent_router)
    return (
        ReleaseSpec(
            resource_suffix="envoy-gateway",
            release_name=ENVOY_GATEWAY_RELEASE,
            chart=eg[0],
            version=eg[1],
            namespace=ENVOY_GATEWAY_NAMESPACE,
            values=envoy_gateway_values(settings),
            timeout_seconds=600,
            repository=eg[2],
        ),
        ReleaseSpec(
            resource_suffix="agent-router-crds",
            release_name=AGENT_ROUTER_CRDS_RELEASE,
            chart=crds[0],
            version=crds[1],
            namespace=AGENT_ROUTER_NAMESPACE,
            values=agent_router_crds_values(settings),
            timeout_seconds=300,
            repository=crds[2],
        ),
        ReleaseSpec(
            resource_suffix="agent-router",
            release_name=AGENT_ROUTER_RELEASE,
            chart=aieg[0],
            version=aieg[1],
            namespace=AGENT_ROUTER_NAMESPACE,
            values=agent_router_values(settings),
            timeout_seconds=600,
            repository=aieg[2],
        ),
    )


# --- secrets the platform needs ---------------------------------------------------------------------------


# --- the in-cluster Redis server ---------------------------------------------------------------------------


def redis_server_config() -> str:
    """redis.conf for the rate-limit store. The password is not here: it arrives on stdin at start."""
    lines = [
        "# agent-budgets rate-limit store. Every key is an agent's spent budget in the current window:",
        "# persist every write, and never evict a key (an evicted counter hands the budget back).",
        "bind * -::*",
        f"port {REDIS_PORT}",
        "protected-mode yes",
        f"dir {REDIS_DATA_DIR}",
        "appendonly yes",
        "appendfsync everysec",
        'appenddirname "appendonlydir"',
        "aof-use-rdb-preamble yes",
        "save 3600 1 300 100 60 10000",
        "stop-writes-on-bgsave-error yes",
        f"maxmemory {REDIS_MAXMEMORY}",
        "maxmemory-policy noeviction",
    ]
    return "\n".join(lines) + "\n"


def redis_start_script() -> str:
    """The container command: the password goes from env to Redis on stdin, never on argv or in a log."""
    config = f"{REDIS_CONFIG_DIR}/{REDIS_CONFIG_FILE}"
    return (
        "set -eu\n"
        '[ -n "${REDIS_PASSWORD:-}" ] || { echo "REDIS_PASSWORD is empty: refusing to start" >&2; exit 1; }\n'
        f"exec redis-server {config} - <<EOF\n"
        'requirepass "${REDIS_PASSWORD}"\n'
        "EOF\n"
    )


def redis_probe_command(accept: tuple[str, ...] = ("PONG",)) -> list[str]:
    """An exec probe: redis-cli authenticates through REDISCLI_AUTH (no password on argv, no warning)."""
    pattern = "|".join(accept)
    return ["sh", "-c", f"redis-cli -h 127.0.0.1 -p {REDIS_PORT} ping | grep -Eq '^({pattern})'"]


def redis_labels() -> dict[str, str]:
    """Labels of the Redis pod (also the StatefulSet selector, which is immutable: never change them)."""
    return {
        "app.kubernetes.io/name": REDIS_NAME,
        "app.kubernetes.io/component": "rate-limit-store",
        "app.kubernetes.io/part-of": PROJECT,
    }


def redis_namespace_labels() -> dict[str, str]:
    """The Redis namespace: our labels, and the restricted Pod Security level (the pod meets it)."""
    return {**common_labels(), "pod-security.kubernetes.io/enforce": "restricted"}


def _password_from(secret_name: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": secret_name, "key": PASSWORD_KEY}}


def redis_stateful_set_spec(redis: RedisSettings, registry: str | None = None) -> dict[str, Any]:
    """One Redis pod (`redis-0`) on a PersistentVolumeClaim (`data-redis-0`) that outlives the StatefulSet.

    Everything here is deterministic: the same settings give the same spec, so a `pulumi up` that changes
    nothing else leaves the pod, its volume and every counter alone.
    """
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": redis.storage_size}},
    }
    if redis.storage_class is not None:
        claim_spec["storageClassName"] = redis.storage_class
    answers = {"exec": {"command": redis_probe_command(("PONG", "LOADING"))}}
    return {
        "serviceName": REDIS_HEADLESS_NAME,
        "replicas": 1,
        "selector": {"matchLabels": redis_labels()},
        "podManagementPolicy": "OrderedReady",
        "updateStrategy": {"type": "RollingUpdate"},
        # Deleting or replacing the StatefulSet keeps the claim (and so the counters).
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        "template": {
            "metadata": {
                "labels": redis_labels(),
                "annotations": {REDIS_CONFIG_ANNOTATION: checksum(redis_server_config())},
            },
            "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "terminationGracePeriodSeconds": 30,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": REDIS_UID,
                    "runAsGroup": REDIS_GID,
                    "fsGroup": REDIS_GID,
                    "fsGroupChangePolicy": "OnRootMismatch",
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": REDIS_NAME,
                        "image": mirrored(redis.image, registry),
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", redis_start_script()],
                        "env": [
                            {"name": "REDIS_PASSWORD", "valueFrom": _password_from(REDIS_AUTH_SECRET)},
                            {"name": "REDISCLI_AUTH", "valueFrom": _password_from(REDIS_AUTH_SECRET)},
                        ],
                        "ports": [{"name": "redis", "containerPort": REDIS_PORT, "protocol": "TCP"}],
                        # Started = answering at all (a large append-only file can take a while to load).
                        "startupProbe": {**answers, "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 60},
                        "livenessProbe": {**answers, "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 6},
                        "readinessProbe": {
                            "exec": {"command": redis_probe_command()},
                            "periodSeconds": 5,
                            "timeoutSeconds": 2,
                            "failureThreshold": 2,
                        },
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "128Mi"},
                            "limits": {"memory": REDIS_MEMORY_LIMIT},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": REDIS_VOLUME_CLAIM, "mountPath": REDIS_DATA_DIR},
                            {"name": "config", "mountPath": REDIS_CONFIG_DIR, "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "config", "configMap": {"name": REDIS_CONFIG_MAP}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
                ],
            },
        },
        "volumeClaimTemplates": [{"metadata": {"name": REDIS_VOLUME_CLAIM}, "spec": claim_spec}],
    }


def redis_service_spec(headless: bool) -> dict[str, Any]:
    """The ClusterIP Service envoy-ratelimit dials, or the headless one that governs the StatefulSet."""
    spec: dict[str, Any] = {
        "selector": redis_labels(),
        "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis", "protocol": "TCP"}],
    }
    if headless:
        spec.update({"clusterIP": "None", "publishNotReadyAddresses": True})
    else:
        spec["type"] = "ClusterIP"
    return spec


def redis_network_policy_spec() -> dict[str, Any]:
    """Admit only envoy-ratelimit pods in envoy-gateway-system (all of Envoy Gateway's labels on them, which no
    configuration can change), and only on the Redis port."""
    return {
        "podSelector": {"matchLabels": redis_labels()},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ENVOY_GATEWAY_NAMESPACE}},
                        "podSelector": {"matchLabels": dict(RATELIMIT_POD_LABELS)},
                    }
                ],
                "ports": [{"protocol": "TCP", "port": REDIS_PORT}],
            }
        ],
    }

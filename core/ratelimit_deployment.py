"""A model of the `envoy-ratelimit` pod Envoy Gateway renders from its configuration, and of what the API
server and envoyproxy/ratelimit make of that pod.

Envoy Gateway turns `config.envoyGateway.rateLimit` and `provider.kubernetes.rateLimitDeployment` into the
rate-limit Deployment itself (envoyproxy/gateway v1.9.0, 39763b1c,
`internal/infrastructure/kubernetes/ratelimit/resource.go`: `expectedRateLimitContainerEnv`,
`expectedContainerVolumeMounts`, `expectedDeploymentVolumes`; `resource_provider.go` `enablePrometheus`). Our
Helm values never see that Deployment, so a value that renders an invalid pod fails only in the cluster: no
`envoy-ratelimit` pod, and with `rateLimit.failClosed` every metered call gets 500. This module renders the
env, volumes and mounts the same way, so the tests can check every Redis mode before a cluster does:

* `render_ratelimit_pod`: Envoy Gateway's own lists, then the user's `container.env`,
  `container.volumeMounts` and `pod.volumes` merged by name, replacing an entry of the same name or appended
  (`internal/infrastructure/kubernetes/resource/resource.go` `ExpectedContainerEnv`, `ExpectedVolumes`,
  `ExpectedContainerVolumeMounts`).
* `pod_problems`: what the API server refuses in that pod (kubernetes `pkg/apis/core/validation/validation.go`:
  a mount naming no volume is `Not found`, a volume name or mount path used twice is a duplicate, a volume
  needs exactly one source, an env var takes `value` or `valueFrom`, not both).
* `read_redis_client`: the Redis client envoyproxy/ratelimit builds from that env (master f2fb157,
  `src/settings/settings.go`, `src/redis/cache_impl.go`, `src/utils/tls.go`), and `ratelimit_problems`: what
  it would refuse or never read (an unknown variable name, a bool Go cannot parse, a certificate path that
  no volume provides: `TlsConfigFromFiles` panics on an unreadable file, so the pod crash-loops).

Fixed points of the model (same in every version from v0.5.0 through v1.9.0 and main d32f282): a non-nil
`rateLimit.backend.redis.tls` mounts the volume `redis-certs` and sets `REDIS_TLS=true`, but only
`tls.certificateRef` adds the `redis-certs` volume, so `tls: {}` renders a mount without a volume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.plain import dig

# --- Envoy Gateway's side (envoyproxy/gateway v1.9.0 internal/infrastructure/kubernetes/ratelimit/resource.go)

RATELIMIT_CONTAINER_NAME = "envoy-ratelimit"
# `rateLimitLabels`: on the Deployment, its selector and every pod; copied over any user pod labels, so no
# configuration can change them (resource_provider.go `Deployment`).
RATELIMIT_POD_LABELS = {
    "app.kubernetes.io/name": RATELIMIT_CONTAINER_NAME,
    "app.kubernetes.io/component": "ratelimit",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
REDIS_CERTS_VOLUME = "redis-certs"
REDIS_CERTS_DIR = "/redis-certs"
GRPC_CERTS_VOLUME = "certs"
GRPC_CERTS_SECRET = "envoy-rate-limit"
STATSD_VOLUME = "statsd-exporter-config"
METRICS_PORT_NAME = "metrics"
METRICS_PORT = 19001
GRPC_PORT = 8081

# The env every envoy-ratelimit container starts with, in Envoy Gateway's order.
_BASE_ENV: tuple[tuple[str, str], ...] = (
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", RATELIMIT_CONTAINER_NAME),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
)

# --- envoyproxy/ratelimit's side (master f2fb157 src/settings/settings.go) --------------------------------

# Every variable name settings.go declares (`envconfig:"..."`); the service reads nothing else.
RATELIMIT_ENV_NAMES = frozenset(
    {
        "BACKEND_TYPE", "CACHE_KEY_PREFIX", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_NODE_ID",
        "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "CONFIG_GRPC_XDS_SERVER_URL",
        "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_TYPE", "DEBUG_HOST", "DEBUG_PORT", "DISABLE_STATS",
        "EXPIRATION_JITTER_MAX_SECONDS", "EXTRA_TAGS", "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN", "GRPC_HOST", "GRPC_MAX_CONNECTION_AGE",
        "GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_PORT", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY",
        "GRPC_SERVER_USE_TLS", "GRPC_UDS", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "HOST",
        "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "LIMIT_RESPONSE_HEADERS_ENABLED",
        "LOCAL_CACHE_SIZE_IN_BYTES", "LOG_FORMAT", "LOG_LEVEL", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS",
        "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT",
        "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "MERGE_DOMAIN_CONFIG",
        "NEAR_LIMIT_RATIO", "PORT", "PROMETHEUS_ADDR", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_PATH",
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "QUOTA_MODE", "REDIS_AUTH", "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_PERSECOND", "REDIS_PERSECOND_AUTH",
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_PIPELINE_LIMIT",
        "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_SIZE",
        "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TIMEOUT",
        "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PIPELINE_LIMIT",
        "REDIS_PIPELINE_WINDOW", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_SIZE", "REDIS_SENTINEL_AUTH",
        "REDIS_SOCKET_TYPE", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "REDIS_STARTUP_MAX_INTERVAL", "REDIS_TIMEOUT", "REDIS_TLS", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT",
        "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_TYPE", "REDIS_URL",
        "RESPONSE_DYNAMIC_METADATA", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT", "SHADOW_MODE", "STATSD_HOST", "STATSD_PORT",
        "STATS_FLUSH_INTERVAL", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "TRACING_ENABLED",
        "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SERVICE_NAME",
        "TRACING_SERVICE_NAMESPACE", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_PROMETHEUS", "USE_STATSD",
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    }
)  # fmt: skip
# Set by Envoy Gateway but not declared by settings.go: the OpenTelemetry SDK reads the first itself; the
# second has no reader (ratelimit's name for the client CA is GRPC_CLIENT_TLS_CACERT).
UNREAD_ENVOY_GATEWAY_ENV = frozenset({"OTEL_EXPORTER_OTLP_ENDPOINT", "GRPC_SERVER_TLS_CA_CERT"})
# Stats reach the Prometheus sink every STATS_FLUSH_INTERVAL (settings.go default).
STATS_FLUSH_INTERVAL = "10s"
# Go's strconv.ParseBool, which envconfig uses for every bool setting.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
# The volume sources the API server knows (k8s.io/api core/v1 VolumeSource json names).
_VOLUME_SOURCES = frozenset(
    {
        "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
        "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI",
        "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk",
        "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
    }
)  # fmt: skip


@dataclass(frozen=True)
class RateLimitPod:
    """The parts of the rendered `envoy-ratelimit` pod that the configuration decides."""

    env: tuple[dict[str, Any], ...]
    volumes: tuple[dict[str, Any], ...]
    volume_mounts: tuple[dict[str, Any], ...]
    container_ports: tuple[dict[str, Any], ...]

    def env_value(self, name: str) -> dict[str, Any] | None:
        """The env entry `name` (the last one wins, as in a running container), or None."""
        found = [item for item in self.env if item.get("name") == name]
        return found[-1] if found else None


@dataclass(frozen=True)
class RedisClient:
    """How envoyproxy/ratelimit connects to Redis, as it reads its env. A value is a literal string or the
    `valueFrom` reference the kubelet resolves (a Secret key)."""

    socket_type: str
    redis_type: str
    url: str | dict[str, Any] | None
    auth: str | dict[str, Any] | None
    tls: bool
    ca_file: str | None
    client_certificate: tuple[str, str] | None
    sentinel_auth: str | dict[str, Any] | None
    pipeline_window: str | None


def _merge_by_name(base: Sequence[Mapping[str, Any]], extra: Sequence[Mapping[str, Any]] | None) -> list[dict]:
    """Envoy Gateway's merge of user entries into its own: same name replaces in place, else appended."""
    merged = [dict(item) for item in base]
    for item in extra or ():
        for index, current in enumerate(merged):
            if current.get("name") == item.get("name"):
                merged[index] = dict(item)
                break
        else:
            merged.append(dict(item))
    return merged


def prometheus_enabled(owner: Mapping[str, Any]) -> bool:
    """Envoy Gateway's `enablePrometheus`, the same for the rate-limit service (`rateLimit`) and a proxy (an
    EnvoyProxy spec): on unless `telemetry.metrics.prometheus.disable` is true (v1.9.0
    `internal/infrastructure/kubernetes/ratelimit/resource_provider.go`, `proxy/resource.go`)."""
    prometheus = dig(owner, "telemetry", "metrics", "prometheus")
    if isinstance(prometheus, Mapping):
        return not bool(prometheus.get("disable", False))
    return True


def _tracing_url(rate_limit: Mapping[str, Any]) -> str | None:
    url = dig(rate_limit, "telemetry", "tracing", "provider", "url")
    return url if isinstance(url, str) and url else None


def _expected_env(rate_limit: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in _BASE_ENV]
    redis = dig(rate_limit, "backend", "redis")
    if isinstance(redis, Mapping):
        url: dict[str, Any] = {"name": "REDIS_URL"}
        if redis.get("urlRef") is not None:
            url["valueFrom"] = {"secretKeyRef": dict(dig(redis, "urlRef", "secretKeyRef") or {})}
        elif redis.get("url") is not None:
            url["value"] = redis["url"]
        env += [{"name": "REDIS_SOCKET_TYPE", "value": "tcp"}, url]
        tls = redis.get("tls")
        if tls is not None:
            env.append({"name": "REDIS_TLS", "value": "true"})
            if isinstance(tls, Mapping) and tls.get("certificateRef") is not None:
                env += [
                    {"name": "REDIS_TLS_CLIENT_CERT", "value": f"{REDIS_CERTS_DIR}/tls.crt"},
                    {"name": "REDIS_TLS_CLIENT_KEY", "value": f"{REDIS_CERTS_DIR}/tls.key"},
                ]
    if prometheus_enabled(rate_limit):
        env += [
            {"name": "USE_PROMETHEUS", "value": "true"},
            {"name": "PROMETHEUS_ADDR", "value": f":{METRICS_PORT}"},
            {"name": "PROMETHEUS_MAPPER_YAML", "value": "/etc/statsd-exporter/conf.yaml"},
        ]
    tracing_url = _tracing_url(rate_limit)
    if tracing_url is not None:
        rate = dig(rate_limit, "telemetry", "tracing", "samplingRate")
        endpoint = tracing_url if tracing_url.startswith("http://") else f"http://{tracing_url}"
        env += [
            {"name": "TRACING_ENABLED", "value": "true"},
            {"name": "TRACING_SERVICE_NAME", "value": RATELIMIT_CONTAINER_NAME},
            {"name": "TRACING_SERVICE_NAMESPACE", "value": namespace},
            {
                "name": "TRACING_SERVICE_INSTANCE_ID",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {"name": "TRACING_SAMPLING_RATE", "value": f"{(100 if rate is None else rate) / 100:.1f}"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": endpoint},
        ]
    return env


def _expected_mounts(rate_limit: Mapping[str, Any]) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": GRPC_CERTS_VOLUME, "mountPath": "/certs", "readOnly": True}]
    if prometheus_enabled(rate_limit):
        mounts.append({"name": STATSD_VOLUME, "mountPath": "/etc/statsd-exporter", "readOnly": True})
    # Only `tls != nil` is checked here: an empty tls block gets the mount (the defect of issue 22).
    if dig(rate_limit, "backend", "redis", "tls") is not None:
        mounts.append({"name": REDIS_CERTS_VOLUME, "mountPath": REDIS_CERTS_DIR, "readOnly": True})
    return mounts


def _expected_volumes(rate_limit: Mapping[str, Any]) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    certificate = dig(rate_limit, "backend", "redis", "tls", "certificateRef")
    if certificate is not None:  # ...while the volume needs certificateRef
        volumes.append(
            {"name": REDIS_CERTS_VOLUME, "secret": {"secretName": certificate.get("name"), "defaultMode": 420}}
        )
    volumes.append({"name": GRPC_CERTS_VOLUME, "secret": {"secretName": GRPC_CERTS_SECRET, "defaultMode": 420}})
    if prometheus_enabled(rate_limit):
        volumes.append(
            {"name": STATSD_VOLUME, "configMap": {"name": STATSD_VOLUME, "optional": True, "defaultMode": 420}}
        )
    return volumes


def render_ratelimit_pod(envoy_gateway: Mapping[str, Any], namespace: str = "envoy-gateway-system") -> RateLimitPod:
    """The env, volumes, mounts and ports Envoy Gateway gives `envoy-ratelimit` for this `config.envoyGateway`."""
    rate_limit = envoy_gateway.get("rateLimit")
    if not isinstance(rate_limit, Mapping):
        raise ValueError("config.envoyGateway has no rateLimit: Envoy Gateway deploys no envoy-ratelimit")
    deployment = dig(envoy_gateway, "provider", "kubernetes", "rateLimitDeployment") or {}
    ports = [{"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"}]
    if prometheus_enabled(rate_limit):
        ports.append({"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"})
    return RateLimitPod(
        env=tuple(_merge_by_name(_expected_env(rate_limit, namespace), dig(deployment, "container", "env"))),
        volumes=tuple(_merge_by_name(_expected_volumes(rate_limit), dig(deployment, "pod", "volumes"))),
        volume_mounts=tuple(_merge_by_name(_expected_mounts(rate_limit), dig(deployment, "container", "volumeMounts"))),
        container_ports=tuple(ports),
    )


# --- the API server -------------------------------------------------------------------------------------


def pod_problems(pod: RateLimitPod) -> list[str]:
    """What the API server would refuse in this pod, as `field: reason` lines (empty when it is valid)."""
    problems: list[str] = []
    volumes = "spec.template.spec.volumes"
    container = "spec.template.spec.containers[0]"
    seen: set[str] = set()
    for index, volume in enumerate(pod.volumes):
        name = str(volume.get("name", ""))
        if name in seen:
            problems.append(f'{volumes}[{index}].name: Duplicate value: "{name}"')
        seen.add(name)
        sources = [key for key in volume if key in _VOLUME_SOURCES]
        if len(sources) != 1:
            problems.append(f"{volumes}[{index}]: must specify exactly one volume type, got {sources or 'none'}")
    paths: set[str] = set()
    for index, mount in enumerate(pod.volume_mounts):
        name = str(mount.get("name", ""))
        if name not in seen:
            problems.append(f'{container}.volumeMounts[{index}].name: Not found: "{name}"')
        path = str(mount.get("mountPath", ""))
        if path in paths:
            problems.append(f'{container}.volumeMounts[{index}].mountPath: Invalid value: "{path}": must be unique')
        paths.add(path)
    for index, item in enumerate(pod.env):
        if not item.get("name"):
            problems.append(f"{container}.env[{index}].name: Required value")
        if item.get("value") and item.get("valueFrom") is not None:
            problems.append(
                f"{container}.env[{index}].valueFrom: Invalid value: may not be specified when `value` is not empty"
            )
    return problems


def mounted_file(pod: RateLimitPod, path: str) -> tuple[dict[str, Any], str] | None:
    """The volume that provides the file at `path` in the container, and the key it comes from; None when no
    mount covers `path` or the mounted ConfigMap/Secret lists `items` without it."""
    best: tuple[dict[str, Any], str] | None = None
    best_length = -1
    volumes = {str(volume.get("name")): volume for volume in pod.volumes}
    for mount in pod.volume_mounts:
        directory = str(mount.get("mountPath", "")).rstrip("/")
        if not path.startswith(directory + "/") or len(directory) <= best_length:
            continue
        volume = volumes.get(str(mount.get("name")))
        if volume is None:
            continue
        relative = path[len(directory) + 1 :]
        source = volume.get("configMap") or volume.get("secret") or {}
        items = source.get("items")
        if items is not None:
            keys = [item.get("key") for item in items if item.get("path") == relative]
            if not keys:
                continue
            relative = str(keys[0])
        best, best_length = (volume, relative), len(directory)
    return best


# --- envoyproxy/ratelimit -------------------------------------------------------------------------------


def _value(item: Mapping[str, Any] | None) -> str | dict[str, Any] | None:
    if item is None:
        return None
    if item.get("valueFrom") is not None:
        return dict(item["valueFrom"])
    return str(item.get("value", ""))


def _literal(pod: RateLimitPod, name: str, default: str) -> str:
    value = _value(pod.env_value(name))
    return value if isinstance(value, str) else default


def _go_bool(text: str) -> bool | None:
    return True if text in _GO_TRUE else False if text in _GO_FALSE else None


def read_redis_client(pod: RateLimitPod) -> RedisClient:
    """The Redis connection envoyproxy/ratelimit sets up from this env (settings.go defaults for the rest).

    The certificate files are read only when REDIS_TLS is true (`RedisTlsConfig`); the CA is added to the
    system pool (`TlsConfigFromFiles`), the client certificate needs both its cert and key."""
    tls = _go_bool(_literal(pod, "REDIS_TLS", "false")) is True
    ca_file = _literal(pod, "REDIS_TLS_CACERT", "") if tls else ""
    cert, key = _literal(pod, "REDIS_TLS_CLIENT_CERT", ""), _literal(pod, "REDIS_TLS_CLIENT_KEY", "")
    window = _value(pod.env_value("REDIS_PIPELINE_WINDOW"))
    return RedisClient(
        socket_type=_literal(pod, "REDIS_SOCKET_TYPE", "unix"),
        redis_type=_literal(pod, "REDIS_TYPE", "SINGLE").upper(),
        url=_value(pod.env_value("REDIS_URL")),
        auth=_value(pod.env_value("REDIS_AUTH")),
        tls=tls,
        ca_file=ca_file or None,
        client_certificate=(cert, key) if tls and cert and key else None,
        sentinel_auth=_value(pod.env_value("REDIS_SENTINEL_AUTH")),
        pipeline_window=window if isinstance(window, str) else None,
    )


def ratelimit_problems(pod: RateLimitPod) -> list[str]:
    """What envoyproxy/ratelimit would never read, refuse at start, or crash on in this env."""
    problems: list[str] = []
    for item in pod.env:
        name = str(item.get("name", ""))
        if name not in RATELIMIT_ENV_NAMES and name not in UNREAD_ENVOY_GATEWAY_ENV:
            problems.append(f"{name}: envoyproxy/ratelimit reads no such variable (src/settings/settings.go)")
    for name in ("REDIS_TLS", "USE_PROMETHEUS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"):
        text = _value(pod.env_value(name))
        if isinstance(text, str) and _go_bool(text) is None:
            problems.append(f"{name}: {text!r} is not a Go bool: the service panics at start (envconfig)")
    client = read_redis_client(pod)
    files = [("REDIS_TLS_CACERT", client.ca_file)]
    if client.client_certificate is not None:
        files += list(zip(("REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"), client.client_certificate, strict=True))
    for name, path in files:
        if path and mounted_file(pod, path) is None:
            problems.append(f"{name}: no volume provides {path}: the service panics reading it (utils/tls.go)")
    if client.redis_type not in {"SINGLE", "SENTINEL", "CLUSTER"}:
        problems.append(f"REDIS_TYPE: {client.redis_type!r} is none of SINGLE, SENTINEL, CLUSTER")
    if client.redis_type == "CLUSTER" and not client.pipeline_window:
        problems.append("REDIS_PIPELINE_WINDOW: unset, and settings.go calls it required for Redis Cluster")
    return problems

"""The rate-limit store: the Redis that holds every agent's spent budget, in-cluster or external.

In-cluster (dev, small installs): a one-pod StatefulSet with append-only persistence on a
PersistentVolumeClaim, a password from `pulumi_random.RandomPassword` that Redis requires, and a
NetworkPolicy that admits only Envoy Gateway's `envoy-ratelimit` pods. External (real environments):
only a URL from config and a password from secret config.

Either way the password reaches `envoy-ratelimit` through a Secret in its own namespace
(`envoy-gateway-system`), referenced from its container env (REDIS_AUTH): never through Helm values,
never in plain text in state.
"""

from __future__ import annotations

import pulumi
import pulumi.runtime.config as runtime_config
import pulumi_random as random
from pulumi_kubernetes.apps.v1 import StatefulSet
from pulumi_kubernetes.core.v1 import ConfigMap, Namespace, Secret, Service
from pulumi_kubernetes.networking.v1 import NetworkPolicy

from core.manifests import common_labels
from core.platform_values import (
    PASSWORD_KEY,
    RATELIMIT_REDIS_CA,
    RATELIMIT_REDIS_SECRET,
    REDIS_AUTH_SECRET,
    REDIS_CA_KEY,
    REDIS_CONFIG_FILE,
    REDIS_CONFIG_MAP,
    REDIS_HEADLESS_NAME,
    REDIS_NAME,
    SENTINEL_PASSWORD_KEY,
    redis_labels,
    redis_namespace_labels,
    redis_network_policy_spec,
    redis_private_ca,
    redis_sentinel_password_config,
    redis_server_config,
    redis_service_spec,
    redis_stateful_set_spec,
    redis_url,
    redis_uses_tls,
)
from core.settings import ENVOY_GATEWAY_NAMESPACE, PROJECT, RedisSettings, secret_set_command

PASSWORD_LENGTH = 32


def read_external_password(redis: RedisSettings, key: str | None = None) -> pulumi.Output[str]:
    """A secret of the external Redis from secret config (core.validation has refused a missing one): its
    password, or with `key` another one (the Sentinels' password)."""
    key = key or redis.password_config
    value = pulumi.Config(PROJECT).get_secret(key)
    if value is None or not runtime_config.is_config_secret(f"{PROJECT}:{key}"):
        # Only reachable when the component is used outside the program; never echo the value.
        raise pulumi.RunError(f"{PROJECT}:{key} must be set as a secret: run `{secret_set_command(key)}`")
    return value


class RateLimitStore(pulumi.ComponentResource):
    """Where envoy-ratelimit keeps its counters, and the Secret that lets it in."""

    redis: RedisSettings
    url: str
    tls: bool
    client_secret: Secret
    client_ca: ConfigMap | None
    namespace: Namespace | None
    password: random.RandomPassword | None
    auth_secret: Secret | None
    config_map: ConfigMap | None
    headless_service: Service | None
    service: Service | None
    stateful_set: StatefulSet | None
    network_policy: NetworkPolicy | None
    ready: tuple[pulumi.Resource, ...]

    def __init__(
        self,
        name: str,
        redis: RedisSettings,
        client_namespace: pulumi.Input[str] = ENVOY_GATEWAY_NAMESPACE,
        external_password: pulumi.Input[str] | None = None,
        sentinel_password: pulumi.Input[str] | None = None,
        image_registry: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        if redis.mode == "external" and external_password is None:
            external_password = read_external_password(redis)
        super().__init__("agent-budgets:platform:RateLimitStore", name, None, opts)
        self.redis = redis
        self.image_registry = image_registry
        self.url = redis_url(redis)
        self.tls = redis_uses_tls(redis)
        self.namespace = self.password = self.auth_secret = self.config_map = None
        self.headless_service = self.service = self.stateful_set = self.network_policy = None

        if redis.mode == "in-cluster":
            password = self._in_cluster(name, redis)
        else:
            assert external_password is not None
            password = pulumi.Output.secret(external_password)

        # envoy-ratelimit reads REDIS_AUTH (and REDIS_SENTINEL_AUTH) from this Secret, in its own namespace.
        secrets: dict[str, pulumi.Input[str]] = {PASSWORD_KEY: password}
        sentinel_key = redis_sentinel_password_config(redis)
        if sentinel_key is not None:
            if sentinel_password is None:
                sentinel_password = read_external_password(redis, sentinel_key)
            secrets[SENTINEL_PASSWORD_KEY] = pulumi.Output.secret(sentinel_password)
        self.client_secret = Secret(
            f"{name}-ratelimit-auth",
            metadata={
                "name": RATELIMIT_REDIS_SECRET,
                "namespace": client_namespace,
                "labels": common_labels(),
            },
            type="Opaque",
            string_data=secrets,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # A private CA for the external Redis: a public certificate, mounted into envoy-ratelimit
        # (core.platform_values.ratelimit_ca_volume) and named by REDIS_TLS_CACERT.
        self.client_ca = None
        private_ca = redis_private_ca(redis)
        if private_ca is not None:
            self.client_ca = ConfigMap(
                f"{name}-ratelimit-ca",
                metadata={"name": RATELIMIT_REDIS_CA, "namespace": client_namespace, "labels": common_labels()},
                data={REDIS_CA_KEY: private_ca},
                opts=pulumi.ResourceOptions(parent=self),
            )

        if redis.mode == "in-cluster":
            assert self.stateful_set and self.service and self.network_policy
            self.ready = (self.stateful_set, self.service, self.network_policy, self.client_secret)
        else:
            self.ready = (self.client_secret, *([self.client_ca] if self.client_ca else []))

        self.register_outputs(
            {
                "mode": redis.mode,
                "url": self.url,
                "tls": self.tls,
                "clientSecret": RATELIMIT_REDIS_SECRET,
            }
        )

    def _in_cluster(self, name: str, redis: RedisSettings) -> pulumi.Output[str]:
        """Declare the in-cluster Redis; return its password (secret)."""
        child = pulumi.ResourceOptions(parent=self)
        # The volume holding spent budgets dies with the namespace; `protect` keeps both from deletion.
        keep = pulumi.ResourceOptions(parent=self, protect=redis.protect)
        self.namespace = Namespace(
            f"{name}-namespace",
            metadata={"name": redis.namespace, "labels": redis_namespace_labels()},
            opts=keep,
        )
        namespace = self.namespace.metadata.name
        # Fixed inputs, no keepers: the same password on every `pulumi up` (replace it to rotate).
        self.password = random.RandomPassword(f"{name}-password", length=PASSWORD_LENGTH, special=False, opts=child)
        password = pulumi.Output.secret(self.password.result)
        self.auth_secret = Secret(
            f"{name}-auth",
            metadata={"name": REDIS_AUTH_SECRET, "namespace": namespace, "labels": common_labels()},
            type="Opaque",
            string_data={PASSWORD_KEY: password},
            opts=child,
        )
        self.config_map = ConfigMap(
            f"{name}-config",
            metadata={"name": REDIS_CONFIG_MAP, "namespace": namespace, "labels": common_labels()},
            data={REDIS_CONFIG_FILE: redis_server_config()},
            opts=child,
        )
        labels = {**common_labels(), **redis_labels()}
        self.headless_service = Service(
            f"{name}-headless",
            metadata={"name": REDIS_HEADLESS_NAME, "namespace": namespace, "labels": labels},
            spec=redis_service_spec(headless=True),
            opts=child,
        )
        self.service = Service(
            f"{name}-service",
            metadata={"name": REDIS_NAME, "namespace": namespace, "labels": labels},
            spec=redis_service_spec(headless=False),
            opts=child,
        )
        self.stateful_set = StatefulSet(
            f"{name}-redis",
            metadata={"name": REDIS_NAME, "namespace": namespace, "labels": labels},
            spec=redis_stateful_set_spec(redis, self.image_registry),
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=redis.protect,
                # A fixed name cannot exist twice: delete first. The claim is retained, so the new pod
                # mounts the same volume and finds the same counters.
                delete_before_replace=True,
                depends_on=[self.auth_secret, self.config_map, self.headless_service],
            ),
        )
        self.network_policy = NetworkPolicy(
            f"{name}-network-policy",
            metadata={"name": "redis-ratelimit-only", "namespace": namespace, "labels": common_labels()},
            spec=redis_network_policy_spec(),
            opts=child,
        )
        return password

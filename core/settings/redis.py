"""`agent-budgets:redis`: where the rate-limit counters live, and Redis addresses as ratelimit and Envoy
Gateway read them."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from core.names import is_dns_subdomain
from core.settings.base import CONFIG_KEY, QUANTITY, ConfigModel, check_dns_label, check_image_reference

RedisMode = Literal["in-cluster", "external"]
RedisType = Literal["single", "sentinel", "cluster"]
REDIS_IN_CLUSTER_ONLY = ("namespace", "image", "storage_size", "storage_class", "protect")
REDIS_EXTERNAL_ONLY = ("url", "type", "tls", "tls_ca_certificate", "sentinel_password_config")


class RedisSettings(ConfigModel):
    """Where rate-limit counters live. In-cluster persists to a volume; external for real environments."""

    mode: RedisMode = Field(default="in-cluster", description="`in-cluster` or `external`.")
    namespace: str = Field(default="agent-budgets-redis", description="In-cluster only: the Redis namespace.")
    image: str = Field(default="redis:8.2.4-alpine3.22", description="In-cluster only: the Redis image.")
    storage_size: str = Field(default="1Gi", description="In-cluster only: size of the volume claim.")
    storage_class: str | None = Field(
        default=None, description="In-cluster only: StorageClass; unset = cluster default."
    )
    # In-cluster only: Pulumi `protect` on the Redis namespace and StatefulSet, so neither a replacement
    # nor `pulumi destroy` can delete the volume that holds spent budgets.
    protect: bool = Field(
        default=False, description="In-cluster only: Pulumi `protect` on the namespace and StatefulSet."
    )
    url: str | None = Field(
        default=None,
        description=(
            "External only: `host:port`; sentinel `<master>,<host:port>,...`; cluster `host:port,host:port,...`."
        ),
    )
    type: RedisType = Field(default="single", description="External only: `single`, `sentinel` or `cluster`.")
    tls: bool = Field(
        default=False,
        description="External only: TLS, verified against the system roots or against `tlsCaCertificate`.",
    )
    password_config: str = Field(
        default="redisPassword",
        description=(
            "The **secret** config key holding the external Redis password, or `user:password` for an ACL user. "
            "The rate-limit service splits the value at its first `:`, so a password that contains `:` must be "
            "written with its user (`default:pa:ss`)."
        ),
    )
    tls_ca_certificate: str | None = Field(
        default=None,
        description=(
            "External with `tls: true` only: the PEM certificate(s) of a private CA that signed the Redis server "
            "certificate (mounted into `envoy-ratelimit` as `REDIS_TLS_CACERT`); unset = the system roots."
        ),
    )
    sentinel_password_config: str | None = Field(
        default=None,
        description=(
            "External `type: sentinel` only: the **secret** config key holding the password of the Sentinel nodes "
            "(`REDIS_SENTINEL_AUTH`); unset = the Sentinels need none."
        ),
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_dns_label(value, "namespace")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_reference(value, "image", "redis:8.2.4-alpine3.22")

    @field_validator("storage_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if not QUANTITY.match(value):
            raise ValueError(f"storageSize {value!r} is not a Kubernetes quantity such as 1Gi")
        if not re.search("[1-9]", value.rstrip("KiMGTPE")):
            # pkg/apis/core/validation ValidatePersistentVolumeClaimSpec: ValidatePositiveQuantityValue on storage.
            raise ValueError(
                f"storageSize {value!r} is zero: the API server refuses a volume claim of no storage. Give a size "
                "such as 1Gi"
            )
        return value

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        if value is not None and not is_dns_subdomain(value):
            raise ValueError(f"storageClass {value!r} is not a StorageClass name (a DNS subdomain) such as standard")
        return value

    @field_validator("password_config")
    @classmethod
    def _password_key(cls, value: str) -> str:
        if not CONFIG_KEY.match(value):
            raise ValueError(f"passwordConfig {value!r} is not a config key name such as redisPassword")
        return value

    @field_validator("sentinel_password_config")
    @classmethod
    def _sentinel_password_key(cls, value: str | None) -> str | None:
        if value is not None and not CONFIG_KEY.match(value):
            raise ValueError(f"sentinelPasswordConfig {value!r} is not a config key name such as redisSentinelPassword")
        return value

    @field_validator("tls_ca_certificate")
    @classmethod
    def _ca_pem(cls, value: str | None) -> str | None:
        if value is None:
            return value
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----", value)
        leftover = re.sub(r"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----", "", value)
        if not blocks or leftover.strip():
            raise ValueError(
                "tlsCaCertificate is not one or more PEM certificates (-----BEGIN CERTIFICATE----- ... "
                "-----END CERTIFICATE-----, nothing else): paste the CA's certificate, never a key"
            )
        return value


def redis_url_parts(url: str, redis_type: str) -> tuple[str | None, list[str]]:
    """`redis.url` as ratelimit reads it: the master name (sentinel only) and the `host:port` parts."""
    parts = [part.strip() for part in url.split(",")]
    if redis_type == "sentinel":
        return parts[0], parts[1:]
    return None, parts


def redis_url_problem(url: str, redis_type: str) -> str | None:
    """Why `url` is not a Redis address list of `redis_type`, with the fix; None when it is one."""
    parts = [part.strip() for part in url.split(",")]
    master, hosts = redis_url_parts(url, redis_type)
    if redis_type == "sentinel":
        if not hosts or not re.match(r"^[A-Za-z0-9._-]+\Z", str(master)):
            return (
                f"url {url!r} is not a sentinel list: with type sentinel write "
                "<master name>,<sentinel host>:<port>[,...], e.g. mymaster,sentinel-0.example:26379"
            )
    elif redis_type == "single" and len(parts) != 1:
        return (
            f"url {url!r} lists {len(parts)} hosts but type is single: give one host:port, "
            "or set type to sentinel or cluster"
        )
    for part in hosts:
        match = re.match(r"^[A-Za-z0-9.-]+:([0-9]{1,5})\Z", part)
        if not match or not 1 <= int(match.group(1)) <= 65535:
            return f"url part {part!r} must be host:port with a port from 1 to 65535"
    for part in parts:
        refused = go_url_parse_error(part)
        if refused:
            return (
                f"url part {part!r} is refused by Envoy Gateway, which checks each part with Go's url.Parse at "
                f"startup ({refused}), so the eg release would fail: name the host by a DNS name that starts with "
                "a letter (for an IP address, a Service of type ExternalName or a headless Service with an "
                "Endpoints object)"
            )
    return None


def go_url_parse_error(text: str) -> str | None:
    """The error Go's `net/url.Parse` returns for `text`, or None (the checks that matter for host:port).

    Go (src/net/url/url.go `Parse`, `getScheme`): an ASCII control character fails; a leading `:` is a
    missing scheme; a scheme is letters then letters, digits, `+`, `-` or `.` up to the first `:`. Without a
    scheme, a first path segment (up to the first `/`) that holds a `:` fails. So `redis.example:6379` parses
    (scheme `redis.example`) while `10.0.0.5:6379`, `-x:1` or `my_host:1` do not. Envoy Gateway v1.9.0 runs
    it on each comma-separated part (api/v1alpha1/validation/envoygateway_validate.go `ValidateRedisURL`).
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return "net/url: invalid control character in URL"
    scheme_end = None
    for index, ch in enumerate(text):
        if ch.isascii() and ch.isalpha():
            continue
        if ch.isascii() and (ch.isdigit() or ch in "+-."):
            if index == 0:
                break
            continue
        if ch == ":":
            if index == 0:
                return "missing protocol scheme"
            scheme_end = index
        break
    if scheme_end is not None:
        return None
    if ":" in text.split("/", 1)[0]:
        return "first path segment in URL cannot contain colon"
    return None

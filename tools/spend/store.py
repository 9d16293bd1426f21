"""Read the rate-limit counters from Redis: every key in one pipelined round trip, with errors that say what to fix.

The connection follows the stack's `redis` settings the way envoyproxy/ratelimit does (`src/redis/driver_impl.go`,
`src/settings/settings.go`, `src/utils/tls.go` at f2fb15770f7f): `single` is one `host:port`; `sentinel` is
`<master name>,<sentinel>,...`; `cluster` is a list of seed nodes. With `redis.tls`, every connection (the
Sentinels' too) is TLS and the server certificate is checked against the system roots plus, when set, the
stack's `redis.tlsCaCertificate` (ratelimit's `REDIS_TLS_CACERT` adds the CA to the system pool). Each secret
is split at its first `:` into user and password, as ratelimit splits `REDIS_AUTH` and `REDIS_SENTINEL_AUTH`,
so an ACL user (`user:password`) works the same here; the Sentinels' own password
(`redis.sentinelPasswordConfig`) is used for the Sentinels only.

Counters are plain Redis strings holding a decimal integer: ratelimit writes them with `INCRBY` and sets a TTL
of one window (plus jitter) with `EXPIRE` (`src/redis/fixed_cache_impl.go`). They are read with `MGET`: a key
that does not exist (nothing spent in this window yet) comes back as nil.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from core.settings import redis_url_parts

RedisKind = Literal["single", "sentinel", "cluster"]
# Keys per MGET: every chunk goes into the same pipeline, so this bounds one command's size, not the trips.
MGET_CHUNK = 10_000


class CounterReadError(RuntimeError):
    """The counters could not be read. `reason` is `unreachable`, `auth` or `protocol`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def split_auth(secret: str | None) -> tuple[str | None, str | None]:
    """`user:password` → (user, password); a bare password → (None, password). As ratelimit reads REDIS_AUTH."""
    if not secret:
        return None, None
    if ":" in secret:
        user, password = secret.split(":", 1)
        return (user or None), password
    return None, secret


def parse_host_port(text: str) -> tuple[str, int]:
    """`host:port` → (host, port); the settings have already checked the shape."""
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r} is not host:port")
    return host, int(port)


@dataclass(frozen=True)
class RedisEndpoint:
    """Where the counters are and how to log in. `where` names it in messages (never the password)."""

    kind: RedisKind
    nodes: tuple[tuple[str, int], ...]
    where: str
    master: str | None = None
    tls: bool = False
    ca_pem: str | None = None
    """PEM certificate(s) of a private CA trusted besides the system roots (TLS only)."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    password_source: str = ""
    sentinel_auth: bool = False
    """The Sentinels have their own password (`redis.sentinelPasswordConfig` is set)."""
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    sentinel_password_source: str = ""
    timeout: float = 10.0

    @classmethod
    def from_url(cls, kind: RedisKind, url: str, **options: Any) -> RedisEndpoint:
        """From `agent-budgets:redis.url` and `redis.type`."""
        master, parts = redis_url_parts(url, kind)
        return cls(kind=kind, nodes=tuple(parse_host_port(part) for part in parts), master=master, **options)


def _transport_options(endpoint: RedisEndpoint) -> dict[str, Any]:
    """TLS and timeouts: the same toward Redis and toward the Sentinels."""
    options: dict[str, Any] = {
        "ssl": endpoint.tls,
        "socket_timeout": endpoint.timeout,
        "socket_connect_timeout": endpoint.timeout,
    }
    if endpoint.tls and endpoint.ca_pem:
        # redis-py loads it with SSLContext.load_verify_locations(cadata=...) into a default context, which
        # already holds the system roots: the same trust as ratelimit's SystemCertPool plus REDIS_TLS_CACERT.
        options["ssl_ca_data"] = endpoint.ca_pem
    return options


def _connection_options(endpoint: RedisEndpoint) -> dict[str, Any]:
    return {
        "username": endpoint.username,
        "password": endpoint.password,
        **_transport_options(endpoint),
        # One try: a report should say at once that Redis is unreachable, not retry behind the user's back.
        "retry": Retry(NoBackoff(), 0),
    }


def _sentinel_options(endpoint: RedisEndpoint) -> dict[str, Any]:
    return {
        "username": endpoint.sentinel_username,
        "password": endpoint.sentinel_password,
        **_transport_options(endpoint),
        "retry": Retry(NoBackoff(), 0),
    }


def _sentinels_refused(endpoint: RedisEndpoint, text: str) -> CounterReadError:
    """The Sentinels, not Redis, refused the login (redis-py reports it inside MasterNotFoundError)."""
    where = f"{endpoint.where}: the Sentinels at {', '.join(f'{h}:{p}' for h, p in endpoint.nodes)}"
    source = endpoint.sentinel_password_source or "the Sentinels' password"
    if not endpoint.sentinel_auth:
        fix = (
            "they need a password of their own: set redis.sentinelPasswordConfig in the stack (envoy-ratelimit "
            "needs it too), then put the password in the environment variable --sentinel-password-env names"
        )
    elif endpoint.sentinel_password is None:
        fix = f"they need their own password: {source}"
    else:
        fix = f"check the Sentinels' password (from {source}); it is not the Redis password"
    return CounterReadError("auth", f"{where} refused the login: {text}. {fix}")


def _translate(endpoint: RedisEndpoint, error: Exception) -> CounterReadError:
    """A redis-py error as a message naming the endpoint, the cause and the fix."""
    text = str(error) or type(error).__name__
    if isinstance(error, MasterNotFoundError) and "AuthenticationError" in text:
        return _sentinels_refused(endpoint, text)
    if isinstance(error, redis.AuthenticationError) or any(
        marker in text for marker in ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password")
    ):
        source = f" (from {endpoint.password_source})" if endpoint.password_source else ""
        if endpoint.password is None:
            fix = f"it needs a password: {endpoint.password_source or 'set one'}"
        else:
            fix = f"check the password{source}"
        return CounterReadError(
            "auth", f"{endpoint.where} refused the login: {text}. The password is wrong or missing; {fix}"
        )
    if isinstance(error, MasterNotFoundError):
        return CounterReadError(
            "unreachable",
            f"{endpoint.where}: the sentinels at {', '.join(f'{h}:{p}' for h, p in endpoint.nodes)} know no healthy "
            f"master named {endpoint.master!r} ({text}). Check the master name, the first part of redis.url",
        )
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError)):
        tls = " (TLS is on: is the server speaking TLS, and is its certificate trusted?)" if endpoint.tls else ""
        return CounterReadError(
            "unreachable",
            f"{endpoint.where} is unreachable: {text}{tls}. Check that Redis runs and that this machine can reach it",
        )
    return CounterReadError("protocol", f"{endpoint.where} answered with an error: {text}")


class CounterStore:
    """An open connection; `read` fetches any number of counters in one pipelined round trip."""

    def __init__(self, endpoint: RedisEndpoint, client: Any) -> None:
        self.endpoint = endpoint
        self.client = client

    def read(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        """Each key's raw value (None when it does not exist)."""
        if not keys:
            return {}
        try:
            if self.endpoint.kind == "cluster":
                # Keys hash to slots on different nodes: redis-py groups them by node and pipelines each group.
                values = self.client.mget_nonatomic(list(keys))
            else:
                pipeline = self.client.pipeline(transaction=False)
                for start in range(0, len(keys), MGET_CHUNK):
                    pipeline.mget(list(keys[start : start + MGET_CHUNK]))
                values = [value for chunk in pipeline.execute() for value in chunk]
        except redis.RedisError as error:
            raise _translate(self.endpoint, error) from error
        if len(values) != len(keys):  # pragma: no cover - a protocol violation, not a state
            raise CounterReadError(
                "protocol", f"{self.endpoint.where} returned {len(values)} values for {len(keys)} keys"
            )
        return dict(zip(keys, values, strict=True))


@contextmanager
def connect(endpoint: RedisEndpoint) -> Iterator[CounterStore]:
    """Open a connection, log in and check it with PING; close it afterwards."""
    options = _connection_options(endpoint)
    client: Any = None
    try:
        if endpoint.kind == "cluster":
            client = RedisCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in endpoint.nodes],
                **options,
            )
        elif endpoint.kind == "sentinel":
            sentinel = Sentinel(list(endpoint.nodes), sentinel_kwargs=_sentinel_options(endpoint), **options)
            client = sentinel.master_for(str(endpoint.master), **options)
        else:
            host, port = endpoint.nodes[0]
            client = redis.Redis(host=host, port=port, **options)
        client.ping()
    except (redis.RedisError, OSError) as error:
        if client is not None:
            client.close()
        raise _translate(endpoint, error) from error
    try:
        yield CounterStore(endpoint, client)
    finally:
        client.close()

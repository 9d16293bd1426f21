"""Configuration the gateway would choke on, refused at preview (issue 10, defects 10 and 11).

* The extension-server message (docs/message-size.md, core/xds_size.py) must fit
  `platform.extensionMessageLimit` with headroom: a configuration just under the limit is accepted, one
  just over it is refused with the numbers and what to change.
* External Redis settings Envoy Gateway or envoyproxy/ratelimit would refuse or misread: Envoy Gateway
  v1.9.0 checks every URL part with Go's `url.Parse` (api/v1alpha1/validation/envoygateway_validate.go
  `ValidateRedisURL`); ratelimit reads `REDIS_TLS_CACERT` as a file and `REDIS_SENTINEL_AUTH` for the
  Sentinels (envoyproxy/ratelimit src/settings/settings.go, src/redis/driver_impl.go).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core import platform_values as pv
from core import xds_size
from core.problems import ConfigError
from core.settings import go_url_parse_error
from core.validation import stack_message_estimate, validate_stack

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQk9P\nbm90IGEgcmVhbCBjZXJ0\n-----END CERTIFICATE-----\n"


def _config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "actors": [f"agents/actor-{n:05d}" for n in range(2000)],
        "budgets": {
            "default": {"tokens": 500, "per": "Day"},
            "classes": [
                {
                    "name": f"c{c}",
                    "tokens": 5000,
                    "per": "Day",
                    "actors": [f"agents/actor-{n:05d}" for n in range(c * 40, c * 40 + 40)],
                }
                for c in range(50)
            ],
        },
        "routes": [{"name": "mock", "models": [f"model-{n}" for n in range(60)], "provider": "mock"}],
    }
    base.update(copy.deepcopy(changes))
    return base


def _validate(raw: dict[str, Any]):
    return validate_stack(raw, lambda key: (True, True))


def _needed_bytes(raw: dict[str, Any]) -> int:
    """The limit the configuration needs, computed the way validation does (with the default limit raised)."""
    stack = _validate({**raw, "platform": {"extensionMessageLimit": "512Mi"}})
    estimate = stack_message_estimate(stack)
    return estimate.required_limit()


def test_a_configuration_just_under_the_message_limit_is_accepted_and_one_just_over_is_refused():
    raw = _config()
    needed = _needed_bytes(raw)
    assert needed > xds_size.GRPC_DEFAULT_MAX_MESSAGE  # well past what the gateway accepts by default
    accepted = _validate({**raw, "platform": {"extensionMessageLimit": str(needed)}})
    assert accepted.settings.platform.extension_message_bytes == needed
    with pytest.raises(ConfigError) as caught:
        _validate({**raw, "platform": {"extensionMessageLimit": str(needed - 1)}})
    [problem] = caught.value.problems
    assert problem.key == "platform.extensionMessageLimit"
    message = problem.message
    assert f"is {needed - 1} ({needed - 1:,} bytes)" in message
    assert f"needs 1.25x that, {needed:,} bytes" in message
    assert "60 model route(s) x" in message
    assert f"Raise platform.extensionMessageLimit to {-(-needed // (1024 * 1024))}Mi or more" in message
    assert "fewer model names in routes" in message and "docs/message-size.md" in message


def test_the_message_check_joins_the_single_report():
    raw = _config(platform={"extensionMessageLimit": "4Mi"}, rateLimit={"timeout": "fast"})
    with pytest.raises(ConfigError) as caught:
        _validate(raw)
    assert {p.key for p in caught.value.problems} == {"platform.extensionMessageLimit", "rateLimit.timeout"}


def test_the_dev_stack_fits_the_default_limit_with_room_to_spare():
    stack = _validate({"actors": ["agents/actor-a"], "budgets": {"default": {"tokens": 500, "per": "Day"}}})
    assert stack.settings.platform.extension_message_limit == "16Mi"
    assert stack.settings.budget_policy.exclusion_slots == 32


@pytest.mark.parametrize(
    ("limit", "reason"),
    [
        ("16MiB", "is not a whole quantity: write e.g. 16Mi, 16M or 16777216"),
        ("1.5Gi", "is not a whole quantity"),
        ("1Mi", "use 4Mi to 512Mi"),
        ("1Gi", "use 4Mi to 512Mi"),
    ],
)
def test_a_message_limit_outside_what_makes_sense_is_refused(limit, reason):
    with pytest.raises(ConfigError) as caught:
        _validate(_config(platform={"extensionMessageLimit": limit}))
    assert any(p.key == "platform.extensionMessageLimit" and reason in p.message for p in caught.value.problems)


# --- Redis ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("redis.example.com:6379", None),  # scheme "redis.example.com", opaque "6379"
        ("redis-0.redis:6379", None),
        ("mymaster", None),
        ("10.0.0.5:6379", "first path segment in URL cannot contain colon"),
        ("-redis:6379", "first path segment in URL cannot contain colon"),
        ("my_host:6379", "first path segment in URL cannot contain colon"),
        ("[::1]:6379", "first path segment in URL cannot contain colon"),
        (":6379", "missing protocol scheme"),
        ("redis\n:6379", "net/url: invalid control character in URL"),
    ],
)
def test_go_url_parse_errors(text, error):
    """What Go's net/url.Parse says (src/net/url/url.go getScheme and Parse) for each host:port shape."""
    assert go_url_parse_error(text) == error


def _external(**redis: Any) -> dict[str, Any]:
    return {
        "actors": ["agents/actor-a"],
        "budgets": {"default": {"tokens": 500, "per": "Day"}},
        "redis": {"mode": "external", **redis},
    }


@pytest.mark.parametrize(
    ("redis", "key", "said"),
    [
        ({"url": "10.0.0.5:6379"}, "redis.url", "refused by Envoy Gateway, which checks each part with Go's url.Parse"),
        (
            {"url": "mymaster,10.0.0.7:26379", "type": "sentinel"},
            "redis.url",
            "'10.0.0.7:26379' is refused by Envoy Gateway",
        ),
        ({"url": "r.example:6379", "tlsCaCertificate": PEM}, "redis.tlsCaCertificate", "set redis.tls: true"),
        ({"url": "r.example:6379", "tls": True, "tlsCaCertificate": "not a pem"}, "redis.tlsCaCertificate", "PEM"),
        (
            {"url": "r.example:6379", "sentinelPasswordConfig": "sentinelPassword"},
            "redis.sentinelPasswordConfig",
            "applies only to type sentinel",
        ),
    ],
)
def test_redis_settings_the_gateway_would_refuse_or_misread(redis, key, said):
    with pytest.raises(ConfigError) as caught:
        _validate(_external(**redis))
    assert [p.key for p in caught.value.problems if p.key.startswith("redis")] == [key]
    assert any(said in p.message for p in caught.value.problems if p.key == key)


def test_an_ip_address_refusal_says_what_to_do():
    with pytest.raises(ConfigError) as caught:
        _validate(_external(url="10.0.0.5:6379"))
    [problem] = [p for p in caught.value.problems if p.key == "redis.url"]
    assert "the eg release would fail" in problem.message and "ExternalName" in problem.message


def test_private_ca_and_sentinel_auth_reach_envoy_ratelimit():
    stack = _validate(
        _external(
            url="mymaster,sentinel-0.example:26379",
            type="sentinel",
            tls=True,
            tlsCaCertificate=PEM,
            sentinelPasswordConfig="redisSentinelPassword",
        )
    ).settings
    env = {item["name"]: item for item in pv.ratelimit_container_env(stack.redis)}
    assert env["REDIS_TLS_CACERT"] == {"name": "REDIS_TLS_CACERT", "value": "/etc/agent-budgets/redis-ca/ca.crt"}
    assert env["REDIS_SENTINEL_AUTH"]["valueFrom"] == {
        "secretKeyRef": {"name": "envoy-ratelimit-redis", "key": "sentinelPassword"}
    }
    deployment = pv.envoy_gateway_config(stack)["provider"]["kubernetes"]["rateLimitDeployment"]
    assert deployment["pod"]["volumes"] == [
        {
            "name": "agent-budgets-redis-ca",
            "configMap": {"name": "envoy-ratelimit-redis-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
        }
    ]
    assert deployment["container"]["volumeMounts"] == [
        {"name": "agent-budgets-redis-ca", "mountPath": "/etc/agent-budgets/redis-ca", "readOnly": True}
    ]
    assert pv.redis_private_ca(stack.redis) == PEM


def test_the_sentinel_password_is_a_required_secret():
    raw = _external(url="mymaster,sentinel-0.example:26379", type="sentinel", sentinelPasswordConfig="sentinelPw")
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, lambda key: (key != "sentinelPw", True))
    [problem] = caught.value.problems
    assert problem.key == "sentinelPw" and "the password of the Redis Sentinel nodes" in problem.message


def test_without_a_private_ca_or_sentinel_auth_nothing_extra_is_mounted():
    stack = _validate(_external(url="r.example:6379", tls=True)).settings
    names = [item["name"] for item in pv.ratelimit_container_env(stack.redis)]
    assert names == ["REDIS_AUTH", "REDIS_TLS"]
    assert "pod" not in pv.envoy_gateway_config(stack)["provider"]["kubernetes"]["rateLimitDeployment"]


def test_parsed_settings_estimate_the_message_their_validation_computed():
    """rig/extension_message.py judges a deployed stack against the estimate of its file's settings alone."""
    from core.validation import parse_settings, settings_message_estimate

    raw = {**_config(), "platform": {"extensionMessageLimit": "512Mi"}}
    estimate = settings_message_estimate(parse_settings(raw))
    assert estimate == stack_message_estimate(_validate(raw))
    assert estimate.layout.model_routes == 60 and estimate.rate_limit_bytes_per_route > 10_000

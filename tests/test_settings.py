"""Configuration validation: good stacks load, every kind of bad value is refused with its own message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.settings import ConfigError
from core.validation import parse_settings, validate_stack
from tests.support.program import stack_config

BASE: dict[str, Any] = {
    "actors": ["agents/actor-a", "agents/actor-b", "agents/actor-c"],
    "budgets": {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}],
    },
}


def with_changes(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    config.update(changes)
    return config


def budgets(default: Any = None, classes: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"default": default or {"tokens": 500, "per": "Day"}}
    if classes is not None:
        value["classes"] = classes
    return value


def test_dev_stack_file_loads_with_the_documented_values():
    settings = parse_settings(stack_config("dev"))
    assert settings.actors == ["agents/actor-a", "agents/actor-b"]
    assert settings.budgets.default.tokens == 500
    assert settings.budgets.default.per == "Day"
    assert settings.budgets.classes == []
    assert settings.kubernetes.context == "kind-agent-budgets"
    assert [p.kind for p in settings.providers] == ["mock"]
    assert [r.name for r in settings.routes] == ["mock-small", "mock-large"]
    assert settings.redis.mode == "in-cluster"
    assert settings.rate_limit.fail_closed is False
    assert settings.mock_model.total_tokens == 200


def test_defaults_fill_everything_but_actors_and_budgets():
    settings = parse_settings(copy.deepcopy(BASE))
    assert settings.gateway.namespace == "agent-budgets"
    assert settings.substrate.issuer == "https://idp.ate-system.svc"
    assert settings.substrate.egress.expiration_seconds == 900
    assert settings.budget_policy.exclusion_slots == 32  # chosen by measurement: docs/message-size.md
    assert settings.platform.envoy_gateway_version == "v1.9.3"
    assert [c.actors for c in settings.budgets.classes] == [["agents/actor-b"]]


# Each case: (config, a fragment that must appear in the message). Every message names its key.
BAD_CONFIGS: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "tokens zero",
        with_changes(budgets=budgets({"tokens": 0, "per": "Day"})),
        ["agent-budgets:budgets.default.tokens", "at least 1"],
    ),
    (
        "tokens negative",
        with_changes(budgets=budgets({"tokens": -5, "per": "Day"})),
        ["agent-budgets:budgets.default.tokens", "got -5"],
    ),
    (
        "tokens quoted",
        with_changes(budgets=budgets({"tokens": "500", "per": "Day"})),
        ["agent-budgets:budgets.default.tokens", "'500'", "without quotes"],
    ),
    (
        "tokens fractional",
        with_changes(budgets=budgets({"tokens": 2.5, "per": "Day"})),
        ["agent-budgets:budgets.default.tokens", "2.5"],
    ),
    (
        "tokens above uint32",
        with_changes(budgets=budgets({"tokens": 4_294_967_296, "per": "Day"})),
        ["4294967296", "maximum of 4294967295"],
    ),
    (
        "unknown unit",
        with_changes(budgets=budgets({"tokens": 5, "per": "Fortnight"})),
        ["agent-budgets:budgets.default.per", "'Fortnight'", "Second, Minute, Hour, Day, Week, Month, Year"],
    ),
    (
        "lowercase unit",
        with_changes(budgets=budgets({"tokens": 5, "per": "day"})),
        ["agent-budgets:budgets.default.per", "'day'"],
    ),
    ("missing default", with_changes(budgets={"classes": []}), ["agent-budgets:budgets.default", "required"]),
    (
        "actor without atespace",
        with_changes(actors=["actor-a"]),
        ["agent-budgets:actors", "'actor-a'", "<atespace>/<name>"],
    ),
    ("actor with uppercase", with_changes(actors=["agents/Actor-A"]), ["'agents/Actor-A'", "<atespace>/<name>"]),
    ("actor label too long", with_changes(actors=["agents/" + "a" * 64]), ["agent-budgets:actors", "63"]),
    ("actor with three parts", with_changes(actors=["a/b/c"]), ["'a/b/c'"]),
    (
        "duplicate actor",
        with_changes(actors=["agents/actor-a", "agents/actor-a", "agents/actor-b"]),
        ["actors[1]", "listed twice"],
    ),
    (
        "class actor not listed",
        with_changes(
            budgets=budgets(classes=[{"name": "large", "tokens": 9, "per": "Day", "actors": ["agents/actor-z"]}])
        ),
        ["agent-budgets:budgets.classes[0].actors[0]", "'agents/actor-z'", "not in agent-budgets:actors"],
    ),
    (
        "actor in two classes",
        with_changes(
            budgets=budgets(
                classes=[
                    {"name": "large", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"]},
                    {"name": "huge", "tokens": 99, "per": "Day", "actors": ["agents/actor-b"]},
                ]
            )
        ),
        ["classes[1].actors[0]", "'large'", "'huge'", "at most one class"],
    ),
    (
        "duplicate class name",
        with_changes(
            budgets=budgets(
                classes=[
                    {"name": "large", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"]},
                    {"name": "large", "tokens": 99, "per": "Day", "actors": ["agents/actor-c"]},
                ]
            )
        ),
        ["classes[1].name", "'large'", "unique"],
    ),
    (
        "invalid class name",
        with_changes(
            budgets=budgets(classes=[{"name": "Large_Class", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"]}])
        ),
        ["agent-budgets:budgets.classes[0].name", "'Large_Class'", "DNS label"],
    ),
    (
        "unknown top-level key",
        with_changes(budget={"default": {"tokens": 1, "per": "Day"}}),
        ["agent-budgets:budget: unknown key", "did you mean `budgets`"],
    ),
    (
        "unknown nested key",
        with_changes(budgets={"default": {"tokens": 5, "per": "Day", "burst": 3}}),
        ["agent-budgets:budgets.default.burst", "unknown key"],
    ),
    (
        "unknown class key",
        with_changes(
            budgets=budgets(
                classes=[{"name": "large", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"], "priority": 1}]
            )
        ),
        ["agent-budgets:budgets.classes[0].priority", "unknown key"],
    ),
    ("missing actors", {"budgets": BASE["budgets"]}, ["agent-budgets:actors: is not set", "allowNoActors"]),
    (
        "route to unknown provider",
        with_changes(routes=[{"name": "r", "models": ["m"], "provider": "nope"}]),
        ["agent-budgets:routes[0].provider", "'nope'"],
    ),
    (
        "model on two routes",
        with_changes(
            routes=[
                {"name": "a", "models": ["m"], "provider": "mock"},
                {"name": "b", "models": ["m"], "provider": "mock"},
            ]
        ),
        ["'m'", "already served by route 'a'"],
    ),
    (
        "unknown provider kind",
        with_changes(providers=[{"name": "x", "kind": "gemini"}]),
        ["agent-budgets:providers[0].kind", "'gemini'"],
    ),
    (
        "mock with a hostname",
        with_changes(providers=[{"name": "mock", "kind": "mock", "hostname": "x.io"}]),
        ["agent-budgets:providers[0]", "kind mock"],
    ),
    (
        "extra hostname to a provider",
        with_changes(substrate={"egress": {"extraHostnames": ["*.openai.com"]}}),
        ["extraHostnames[0]", "'*.openai.com'", "api.openai.com"],
    ),
    (
        "egress expiration too short",
        with_changes(substrate={"egress": {"expirationSeconds": 60}}),
        ["agent-budgets:substrate.egress.expirationSeconds", "60"],
    ),
    (
        "egress concurrency out of range",
        with_changes(substrate={"egress": {"concurrency": 64}}),
        ["agent-budgets:substrate.egress.concurrency", "64", "32"],
    ),
    (
        "issuer not https",
        with_changes(substrate={"issuer": "http://idp.ate-system.svc"}),
        ["agent-budgets:substrate.issuer", "https://"],
    ),
    (
        "unknown trust mode",
        with_changes(substrate={"trust": {"mode": "trustMe"}}),
        ["agent-budgets:substrate.trust.mode", "'trustMe'", "localJwks"],
    ),
    (
        "jwks config map not a name",
        with_changes(substrate={"trust": {"mode": "localJwks", "jwksConfigMap": "Actor_Keys"}}),
        ["agent-budgets:substrate.trust.jwksConfigMap", "'Actor_Keys'", "is not a ConfigMap name"],
    ),
    (
        "exclusion slots out of range",
        with_changes(budgetPolicy={"exclusionSlots": 0}),
        ["agent-budgets:budgetPolicy.exclusionSlots", "got 0"],
    ),
    (
        "not a version",
        with_changes(platform={"envoyGatewayVersion": "latest"}),
        ["agent-budgets:platform.envoyGatewayVersion", "'latest'"],
    ),
    (
        "incompatible versions",
        with_changes(platform={"envoyGatewayVersion": "v1.9.1"}),
        ["agent-budgets:platform", "v1.9.2 or newer", "v1.9.1"],
    ),
    ("external redis without url", with_changes(redis={"mode": "external"}), ["agent-budgets:redis", "url is missing"]),
    ("unknown redis mode", with_changes(redis={"mode": "memcached"}), ["agent-budgets:redis.mode", "'memcached'"]),
    ("zero timeout", with_changes(rateLimit={"timeout": "0ms"}), ["agent-budgets:rateLimit.timeout", "'0ms'"]),
    ("negative timeout", with_changes(rateLimit={"timeout": "-5ms"}), ["agent-budgets:rateLimit.timeout"]),
    (
        "anthropic needs agent router 1.2",
        with_changes(
            providers=[{"name": "claude", "kind": "anthropic"}],
            routes=[{"name": "c", "models": ["claude"], "provider": "claude"}],
            platform={"agentRouterVersion": "v1.1.0", "envoyGatewayVersion": "v1.9.0"},
        ),
        ["agent-budgets:providers", "v1.1.0", "v1.2.0 or newer"],
    ),
    (
        "egress port is the gateway's",
        with_changes(substrate={"egress": {"port": 8080}}),
        ["agent-budgets:substrate.egress.port", "moved to `agent-budgets:gateway.port`"],
    ),
    (
        "bad buffer limit",
        with_changes(gateway={"requestBufferLimit": "lots"}),
        ["agent-budgets:gateway.requestBufferLimit", "'lots'"],
    ),
    (
        "calls zero",
        with_changes(budgets=budgets({"limits": [{"tokens": 5, "per": "Day"}, {"calls": 0, "per": "Minute"}]})),
        ["agent-budgets:budgets.default.limits[1].calls", "got 0", "at least 1 call"],
    ),
    (
        "calls written as prose",
        with_changes(budgets=budgets({"calls": "1k", "per": "Hour"})),
        ["agent-budgets:budgets.default.calls", "'1k'", "calls: 1000"],
    ),
    (
        "tokens and calls in one limit",
        with_changes(budgets=budgets({"limits": [{"tokens": 5, "calls": 9, "per": "Day"}]})),
        ["agent-budgets:budgets.default.limits[0]", "has both tokens (5) and calls (9)", "Split it into two limits"],
    ),
    (
        "a ceiling at the context window",
        with_changes(
            routes=[{"name": "m", "models": ["m"], "provider": "mock", "maxOutputTokens": 8, "contextWindow": 8}]
        ),
        ["agent-budgets:routes[0]", "maxOutputTokens 8 is not below contextWindow 8"],
    ),
    (
        "a ceiling of zero",
        with_changes(routes=[{"name": "m", "models": ["m"], "provider": "mock", "maxOutputTokens": 0}]),
        ["agent-budgets:routes[0].maxOutputTokens", "0"],
    ),
    (
        "a request timeout that disables the timeout",
        with_changes(routes=[{"name": "m", "models": ["m"], "provider": "mock", "requestTimeout": "0s"}]),
        ["agent-budgets:routes[0].requestTimeout", "'0s'", "would disable the timeout"],
    ),
    (
        "a request timeout in words",
        with_changes(routes=[{"name": "m", "models": ["m"], "provider": "mock", "requestTimeout": "5 minutes"}]),
        ["agent-budgets:routes[0].requestTimeout", "'5 minutes'", "Gateway API duration such as 60s"],
    ),
]


@pytest.mark.parametrize(
    ("config", "fragments"), [(c, f) for _, c, f in BAD_CONFIGS], ids=[name for name, _, _ in BAD_CONFIGS]
)
def test_bad_configuration_is_refused_with_a_message_naming_key_and_value(config, fragments):
    with pytest.raises(ConfigError) as caught:
        parse_settings(config)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


def test_every_bad_configuration_has_its_own_message():
    messages = []
    for _, config, _ in BAD_CONFIGS:
        with pytest.raises(ConfigError) as caught:
            parse_settings(config)
        messages.append(str(caught.value))
    assert len(BAD_CONFIGS) >= 20
    assert len(set(messages)) == len(messages)


def test_all_problems_are_reported_together():
    config = with_changes(actors=["bad"], budgets=budgets({"tokens": 0, "per": "Days"}), colour="blue")
    with pytest.raises(ConfigError) as caught:
        parse_settings(config)
    message = str(caught.value)
    assert "agent-budgets:colour" in message
    assert "agent-budgets:actors" in message
    assert "agent-budgets:budgets.default.tokens" in message
    assert "agent-budgets:budgets.default.per" in message


def test_a_class_may_be_emptied_to_retire_it_without_moving_later_classes():
    config = with_changes(
        budgets=budgets(
            classes=[
                {"name": "retired", "tokens": 9, "per": "Day", "actors": []},
                {"name": "large", "tokens": 99, "per": "Day", "actors": ["agents/actor-b"]},
            ]
        )
    )
    settings = parse_settings(config)
    assert [c.name for c in settings.budgets.classes] == ["retired", "large"]


def test_remote_providers_need_their_key_as_a_secret():
    config = with_changes(
        providers=[
            {"name": "openai", "kind": "openai"},
            {"name": "claude", "kind": "anthropic", "apiKeyConfig": "anthropicKey"},
        ],
        routes=[
            {"name": "gpt", "models": ["gpt-4o"], "provider": "openai"},
            {"name": "claude", "models": ["claude-sonnet"], "provider": "claude"},
        ],
        redis={
            "mode": "external",
            "type": "sentinel",
            "url": "mymaster,sentinel-0.example.internal:26379",
            "sentinelPasswordConfig": "sentinelKey",
        },
    )
    asked: list[str] = []
    state = {
        "openaiApiKey": (True, True),
        "anthropicKey": (True, False),
        "redisPassword": (False, False),
        "sentinelKey": (True, True),
    }

    def secret_state(key: str) -> tuple[bool, bool]:
        asked.append(key)
        return state[key]

    with pytest.raises(ConfigError) as caught:
        validate_stack(config, secret_state)
    assert sorted(asked) == sorted(state), "every needed secret, and only those, is looked up"
    problems = caught.value.problems
    assert [problem.key for problem in problems] == ["anthropicKey", "redisPassword"]
    assert problems[0].render().startswith("agent-budgets:anthropicKey: is stored in plain text")
    assert "pulumi config set --secret agent-budgets:anthropicKey" in problems[0].message
    assert problems[1].render().startswith("agent-budgets:redisPassword: is not set")
    assert "pulumi config set --secret agent-budgets:redisPassword" in problems[1].message


def test_load_refuses_a_missing_provider_key_before_anything_is_built():
    config = with_changes(
        providers=[{"name": "openai", "kind": "openai"}],
        routes=[{"name": "gpt", "models": ["gpt-4o"], "provider": "openai"}],
    )
    with pytest.raises(ConfigError, match=r"agent-budgets:openaiApiKey: is not set"):
        validate_stack(config, state=lambda key: (False, False))


def test_secrets_are_not_called_unknown_when_another_key_is_wrong():
    config = with_changes(
        providers=[{"name": "openai", "kind": "openai"}],
        routes=[{"name": "gpt", "models": ["gpt-4o"], "provider": "openai"}],
        budgets=budgets({"tokens": 5, "per": "Days"}),
        openaiApiKey="<secret>",
    )
    with pytest.raises(ConfigError) as caught:
        parse_settings(config)
    message = str(caught.value)
    assert "agent-budgets:budgets.default.per" in message
    assert "openaiApiKey" not in message

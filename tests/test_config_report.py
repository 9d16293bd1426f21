"""One report, every problem: field errors and cross-key errors of a stack file arrive together.

Each multi-mistake configuration below holds two or more unrelated mistakes; the single
`invalid stack configuration:` report must name every one of them by its full key, and nothing else.
The messages for the mistakes people actually make (YAML null, numbers written as text, a map for a
list, a flat dotted key, snake_case, a retired key, a negative number) are checked word by word where
the wording is the fix.
"""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pytest

from core.problems import REPORT_HEADER, ConfigError
from core.validation import parse_settings, validate_stack
from tests.support.program import run_program

ALL_SECRETS_SET = staticmethod(lambda key: (True, True))

BASE: dict[str, Any] = {
    "actors": ["agents/actor-a", "agents/actor-b", "agents/actor-c"],
    "budgets": {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}],
    },
}


def config(**changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(BASE)
    result.update(changes)
    return result


def report(raw: dict[str, Any], secrets: Any = lambda key: (True, True)) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, secrets)
    return caught.value


def keys_of(error: ConfigError) -> list[str]:
    return [problem.key for problem in error.problems]


# (name, configuration, every key the report must name — and nothing else)
MULTI_MISTAKE_CONFIGS: list[tuple[str, dict[str, Any], set[str]]] = [
    (
        "bad unit and a class member not in actors (the README's example)",
        config(
            budgets={
                "default": {"tokens": 500, "per": "Days"},
                "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-z"]}],
            }
        ),
        {"budgets.default.per", "budgets.classes[0].actors[0]"},
    ),
    (
        "two unknown class actors and a route to a missing provider",
        config(
            budgets={
                "default": {"tokens": 500, "per": "Day"},
                "classes": [{"name": "large", "tokens": 9, "per": "Day", "actors": ["agents/x", "agents/y"]}],
            },
            routes=[{"name": "gpt", "models": ["gpt-4o"], "provider": "openia"}],
        ),
        {"budgets.classes[0].actors[0]", "budgets.classes[0].actors[1]", "routes[0].provider"},
    ),
    (
        "null tokens, a snake_case key and an actor in two classes",
        config(
            budgets={
                "default": {"tokens": None, "per": "Day"},
                "classes": [
                    {"name": "a", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"]},
                    {"name": "b", "tokens": 9, "per": "Day", "actors": ["agents/actor-b"]},
                ],
            },
            gateway={"request_buffer_limit": "10Mi"},
        ),
        {"budgets.default.tokens", "gateway.request_buffer_limit", "budgets.classes[1].actors[0]"},
    ),
    (
        "a flat dotted key, a retired key and a bad trust mode",
        {**config(substrate={"egress": {"port": 80}, "trust": {"mode": "trustMe"}}), "budgets.default.tokens": 900},
        {"budgets.default.tokens", "substrate.egress.port", "substrate.trust.mode"},
    ),
    (
        "tokens with a separator, classes as a map and an unknown top-level key",
        config(
            budgets={
                "default": {"tokens": "5,000", "per": "Day"},
                "classes": {"large": {"tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}},
            },
            colour="blue",
        ),
        {"colour", "budgets.default.tokens", "budgets.classes"},
    ),
    (
        "a negative class budget, a duplicate class name and a bad actor id",
        config(
            actors=["agents/actor-a", "agents/actor-b", "Agents/Actor-C"],
            budgets={
                "default": {"tokens": 500, "per": "Day"},
                "classes": [
                    {"name": "large", "tokens": -5, "per": "Day", "actors": ["agents/actor-b"]},
                    {"name": "large", "tokens": 9, "per": "Day", "actors": []},
                ],
            },
        ),
        {"actors[2]", "budgets.classes[0].tokens", "budgets.classes[1].name"},
    ),
    (
        "a missing secret, a plain-text secret and a bad port",
        config(
            providers=[{"name": "openai", "kind": "openai"}, {"name": "claude", "kind": "anthropic"}],
            routes=[
                {"name": "gpt", "models": ["gpt-4o"], "provider": "openai"},
                {"name": "sonnet", "models": ["claude-sonnet"], "provider": "claude"},
            ],
            gateway={"port": 70000},
        ),
        {"openaiApiKey", "claudeApiKey", "gateway.port"},
    ),
    (
        "too many classes for Envoy Gateway and a bad redis mode",
        config(
            budgets={
                "default": {"tokens": 500, "per": "Day"},
                "classes": [{"name": f"c{i}", "tokens": 5, "per": "Day"} for i in range(256)],
            },
            redis={"mode": "memcached"},
        ),
        {"budgets.classes", "redis.mode"},
    ),
    (
        "too few exclusion slots and an extra hostname that is a provider",
        config(
            actors=[f"agents/member-{i:05d}" for i in range(400)],
            budgets={
                "default": {"tokens": 500, "per": "Day"},
                "classes": [
                    {
                        "name": f"big-{j}",
                        "tokens": 9,
                        "per": "Day",
                        "actors": [f"agents/member-{i:05d}" for i in range(j, j + 40)],
                    }
                    for j in range(0, 400, 40)
                ],
            },
            budgetPolicy={"exclusionSlots": 1},
            substrate={"egress": {"extraHostnames": ["api.openai.com"]}},
            providers=[{"name": "mock", "kind": "mock"}, {"name": "openai", "kind": "openai"}],
        ),
        {"budgetPolicy.exclusionSlots", "substrate.egress.extraHostnames[0]"},
    ),
    (
        "external redis without url mixed with in-cluster storage, and versions that do not fit",
        config(
            redis={"mode": "external", "storageSize": "5Gi"},
            platform={"envoyGatewayVersion": "v1.9.1"},
        ),
        {"redis.url", "redis.storageSize", "platform.envoyGatewayVersion"},
    ),
    (
        "no actors without allowNoActors, a model on two routes and a mock with a hostname",
        config(
            actors=[],
            budgets={"default": {"tokens": 500, "per": "Day"}},
            providers=[{"name": "mock", "kind": "mock", "hostname": "mock.example"}],
            routes=[
                {"name": "a", "models": ["m"], "provider": "mock"},
                {"name": "b", "models": ["m"], "provider": "mock"},
            ],
        ),
        {"actors", "routes[1].models[0]", "providers[0]"},
    ),
    (
        "tokens as 5k, a fractional mock token count and a string for a boolean",
        config(
            budgets={"default": {"tokens": "5k", "per": "Day"}},
            mockModel={"totalTokens": 2.5},
            rateLimit={"failClosed": "sometimes"},
        ),
        {"budgets.default.tokens", "mockModel.totalTokens", "rateLimit.failClosed"},
    ),
    (
        "a single actor instead of a list, and a duplicate provider name",
        config(
            actors="agents/actor-a",
            budgets={"default": {"tokens": 500, "per": "Day"}},
            providers=[{"name": "mock", "kind": "mock"}, {"name": "mock", "kind": "openai"}],
        ),
        {"actors", "providers[1].name"},
    ),
    (
        "anthropic on an old Agent Router, an unused secret and a misspelt key",
        config(
            providers=[{"name": "claude", "kind": "anthropic"}],
            routes=[{"name": "c", "models": ["claude"], "provider": "claude"}],
            platform={"agentRouterVersion": "v1.1.0", "envoyGatewayVersion": "v1.9.0"},
            substrate={"audiance": "agent-router"},
            claudeApiKey="<secret>",
            staleApiKey="<secret>",
        ),
        {"providers[0].kind", "staleApiKey", "substrate.audiance"},
    ),
]


def _secrets_for(name: str):
    if name.startswith("a missing secret"):
        return lambda key: {"openaiApiKey": (False, False), "claudeApiKey": (True, False)}[key]
    return lambda key: (True, True)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(raw, expected) for _, raw, expected in MULTI_MISTAKE_CONFIGS],
    ids=[name for name, _, _ in MULTI_MISTAKE_CONFIGS],
)
def test_every_mistake_appears_in_one_report_with_its_key(raw, expected, request):
    error = report(raw, _secrets_for(request.node.callspec.id))
    text = str(error)
    assert text.startswith(REPORT_HEADER) and text.count(REPORT_HEADER) == 1
    assert set(keys_of(error)) == expected, text
    for key in expected:
        assert f"\n  - agent-budgets:{key}: " in text


def test_at_least_twelve_multi_mistake_configurations_are_checked():
    assert len(MULTI_MISTAKE_CONFIGS) >= 12
    assert all(len(expected) >= 2 for _, _, expected in MULTI_MISTAKE_CONFIGS)


def test_nothing_is_registered_when_the_configuration_has_several_mistakes():
    raw = MULTI_MISTAKE_CONFIGS[1][1]
    with pytest.raises(pulumi.RunError) as caught:
        run_program(raw)
    assert "agent-budgets:routes[0].provider" in str(caught.value)
    assert "agent-budgets:budgets.classes[0].actors[1]" in str(caught.value)


# --- messages for common mistakes -------------------------------------------------------------------------


def message_for(raw: dict[str, Any], key: str) -> str:
    error = report(raw)
    found = [problem.message for problem in error.problems if problem.key == key]
    assert found, f"no problem for {key}: {error}"
    return found[0]


def test_yaml_null_says_it_is_empty_and_what_to_write():
    message = message_for(config(budgets={"default": {"tokens": None, "per": "Day"}}), "budgets.default.tokens")
    assert message == "is empty (YAML null): give a whole number of tokens, e.g. tokens: 500"


def test_yaml_null_for_a_list_with_a_default_names_the_default():
    raw = config(budgets={"default": {"tokens": 500, "per": "Day"}, "classes": None})
    assert message_for(raw, "budgets.classes") == (
        "is empty (YAML null: `~`, `null` or nothing after the colon): give a list, or remove the key to use "
        "the default ([])"
    )


@pytest.mark.parametrize(
    ("written", "fix"),
    [
        ("5,000", "write the number without separators or units, e.g. tokens: 5000"),
        ("5k", "write the number without separators or units, e.g. tokens: 5000"),
        ("2.5M", "write the number without separators or units, e.g. tokens: 2500000"),
        ("500", "write it without quotes, e.g. tokens: 500"),
        ("lots", "it is not a number: write a whole number, e.g. tokens: 500"),
    ],
)
def test_numbers_written_as_text_get_the_number_to_write(written, fix):
    message = message_for(config(budgets={"default": {"tokens": written, "per": "Day"}}), "budgets.default.tokens")
    assert message == f"got {written!r}: {fix}"


def test_numbers_written_as_text_in_other_fields_get_the_same_hint():
    message = message_for(config(gateway={"port": "8,080"}), "gateway.port")
    assert message == "got '8,080': write the number without separators or units, e.g. port: 8080"


def test_a_map_where_a_list_belongs_is_shown_in_list_form():
    raw = config(
        budgets={
            "default": {"tokens": 500, "per": "Day"},
            "classes": {"large": {"tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}},
        }
    )
    assert message_for(raw, "budgets.classes") == (
        "got a map where a list belongs: write it as a list: "
        "classes: [{name: large, tokens: 5000, per: Day, actors: [agents/actor-b]}]"
    )


def test_a_map_of_bare_names_where_a_list_belongs_becomes_a_list_of_names():
    raw = config(actors={"agents/actor-a": None, "agents/actor-b": None}, budgets=BASE["budgets"])
    assert message_for(raw, "actors") == (
        "got a map where a list belongs: write it as a list: actors: [agents/actor-a, agents/actor-b]"
    )


def test_a_flat_dotted_key_names_the_path_command():
    message = message_for({**BASE, "budgets.default.tokens": 900}, "budgets.default.tokens")
    assert message == (
        "is one flat key with dots in its name: `pulumi config set` without `--path` stores it that way. Run "
        "`pulumi config rm agent-budgets:budgets.default.tokens`, then "
        "`pulumi config set --path 'agent-budgets:budgets.default.tokens' 900`"
    )


def test_a_flat_key_under_a_snake_case_section_gets_the_camel_case_path():
    message = message_for({**BASE, "rate_limit.failClosed": True}, "rate_limit.failClosed")
    assert "`pulumi config set --path 'agent-budgets:rateLimit.failClosed' true`" in message


def test_a_snake_case_key_is_refused_with_its_camel_case_name():
    message = message_for(config(gateway={"request_buffer_limit": "10Mi"}), "gateway.request_buffer_limit")
    assert message == "keys are camelCase: write `requestBufferLimit` instead of `request_buffer_limit`"


def test_a_snake_case_top_level_key_is_refused_too():
    assert message_for(config(mock_model={"totalTokens": 5}), "mock_model") == (
        "keys are camelCase: write `mockModel` instead of `mock_model`"
    )


def test_a_retired_key_names_its_replacement():
    message = message_for(config(substrate={"egress": {"port": 8080}}), "substrate.egress.port")
    assert message.startswith("this key moved to `agent-budgets:gateway.port` (see CHANGELOG.md): ")


def test_a_misspelt_key_gets_the_closest_known_key():
    message = message_for(config(budgets={"default": {"tokens": 5, "per": "Day"}, "clases": []}), "budgets.clases")
    assert message.startswith("unknown key: did you mean `classes`?")


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        (
            config(budgets={"default": {"tokens": -5, "per": "Day"}}),
            "budgets.default.tokens",
            "got -5, a negative number: a budget is a count of tokens, at least 1",
        ),
        (config(gateway={"port": -80}), "gateway.port", "got -80, a negative number: use a value from 1 to 65,535"),
        (
            config(budgetPolicy={"exclusionSlots": -1}),
            "budgetPolicy.exclusionSlots",
            "got -1, a negative number: use a value from 1 to 1,023",
        ),
    ],
)
def test_a_negative_number_is_called_negative(raw, key, expected):
    assert message_for(raw, key) == expected


def test_zero_tokens_is_explained_as_zero_not_as_negative():
    message = message_for(config(budgets={"default": {"tokens": 0, "per": "Day"}}), "budgets.default.tokens")
    assert message == "got 0: a budget must be at least 1 token (0 would refuse every call)"


def test_envoy_gateway_cap_errors_share_the_report_header():
    raw = config(
        budgets={
            "default": {"tokens": 500, "per": "Day"},
            "classes": [{"name": f"c{i}", "tokens": 5, "per": "Day"} for i in range(256)],
        }
    )
    error = report(raw)
    assert str(error).startswith("invalid stack configuration:\n  - agent-budgets:budgets.classes: has 256 classes")


# --- no silent mass deletion -------------------------------------------------------------------------------


@pytest.mark.parametrize("actors", [[], None], ids=["empty", "missing"])
def test_no_actors_with_egress_policies_is_refused(actors):
    raw = {"budgets": BASE["budgets"] | {"classes": []}}
    if actors is not None:
        raw["actors"] = actors
    message = message_for(raw, "actors")
    written = "is empty" if actors == [] else "is not set"
    assert message.startswith(f"{written} while egress policies are enabled: the next `pulumi up` would delete")
    assert "`agent-budgets:allowNoActors: true`" in message


def test_no_actors_is_accepted_with_allow_no_actors_and_warns():
    raw = {"actors": [], "allowNoActors": True, "budgets": {"default": {"tokens": 5, "per": "Day"}}}
    validated = validate_stack(raw, lambda key: (True, True))
    assert validated.settings.actors == []
    [warning] = validated.warnings
    assert warning.key == "actors"
    assert "deletes every actor egress policy it created before" in warning.message


def test_no_actors_is_accepted_silently_when_egress_policies_are_off():
    raw = {
        "actors": [],
        "budgets": {"default": {"tokens": 5, "per": "Day"}},
        "substrate": {"egress": {"enabled": False}},
    }
    assert validate_stack(raw, lambda key: (True, True)).warnings == ()


def test_the_program_warns_and_registers_no_egress_policy_with_allow_no_actors():
    raw = {"actors": [], "allowNoActors": True, "budgets": {"default": {"tokens": 5, "per": "Day"}}}
    run = run_program(raw)
    assert [w for w in run.warnings if "allowNoActors is true" in w] != []
    assert [r for r in run.resources if r.type == "pulumi-python:dynamic:Resource"] == []
    assert run.outputs["actors"] == 0


def test_parse_settings_reports_field_and_cross_key_problems_together():
    raw = config(
        budgets={
            "default": {"tokens": 500, "per": "Days"},
            "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-z"]}],
        }
    )
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    assert caught.value.keys == ["agent-budgets:budgets.default.per", "agent-budgets:budgets.classes[0].actors[0]"]


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        (
            config(actors=["agents/actor-a", 7, "agents/actor-b", "agents/actor-c", "agents/actor-a"]),
            "actors[4]",
            "'agents/actor-a' is listed twice (also actors[0]): list each actor once",
        ),
        (
            config(
                budgets={
                    "default": {"tokens": 5, "per": "Day"},
                    "classes": [
                        {"name": "large", "tokens": 9, "per": "Day"},
                        "not a class",
                        {"name": "large", "tokens": 7, "per": "Day"},
                    ],
                }
            ),
            "budgets.classes[2].name",
            "'large' is used twice (also classes[0]): class names must be unique",
        ),
        (
            config(providers=[{"name": "mock", "kind": "mock"}, {"name": "mock", "kind": "openai"}]),
            "providers[1].name",
            "'mock' is used twice (also providers[0]): provider names must be unique",
        ),
        (
            config(
                routes=[
                    {"name": "r", "models": ["a"], "provider": "mock"},
                    {"name": "r", "models": ["b"], "provider": "mock"},
                ]
            ),
            "routes[1].name",
            "'r' is used twice (also routes[0]): route names must be unique",
        ),
        (
            config(suspended=["agents/actor-a", "agents/actor-a"]),
            "suspended[1]",
            "'agents/actor-a' is listed twice (also suspended[0]): list it once",
        ),
    ],
    ids=["actor", "class", "provider", "route", "suspended"],
)
def test_a_repeated_entry_names_its_own_index_and_the_first_one(raw, key, expected):
    """Entries that are not maps or strings keep their place: the indexes are those of the stack file."""
    assert message_for(raw, key) == expected


# --- messages that name the fix (review 1, S5) ----------------------------------------------------------------


def test_one_limit_written_as_a_map_is_shown_as_the_list_it_belongs_in():
    raw = config(budgets={"default": {"limits": {"tokens": 5, "per": "Day"}}})
    assert message_for(raw, "budgets.default.limits") == (
        "got a map where a list belongs: write it as a list: limits: [{tokens: 5, per: Day}]"
    )


def test_a_map_that_is_no_list_entry_gets_a_sentence_that_reads():
    raw = config(budgets={"default": {"limits": {"hourly": 5, "daily": 50}}})
    assert message_for(raw, "budgets.default.limits") == (
        "got a map where a list belongs: write it as a list, one `- ` line per entry"
    )


def test_a_null_price_names_the_price_fields_to_write():
    """`field_at` passes over the model name, so the message must not offer the default of `prices` ({})."""
    message = message_for(config(prices={"gpt-4o": None}), "prices.gpt-4o")
    assert message == (
        "is empty (YAML null: `~`, `null` or nothing after the colon): give gpt-4o its settings, input and "
        "output (required), cachedInput and cacheWrite (optional), e.g. gpt-4o: {input: <value>, output: <value>}"
    )


@pytest.mark.parametrize("written", [16777216, "16777216", "16Mi"])
def test_the_message_limit_may_be_a_yaml_integer_as_its_own_message_suggests(written):
    """Envoy Gateway's maxMessageSize is a quantity (int or string); a YAML int is a byte count."""
    validated = validate_stack(config(platform={"extensionMessageLimit": written}), lambda key: (True, True))
    assert validated.settings.platform.extension_message_bytes == 16 * 1024 * 1024
    message = message_for(config(platform={"extensionMessageLimit": "16MiB"}), "platform.extensionMessageLimit")
    assert message == (
        "extensionMessageLimit '16MiB' is not a whole quantity: write e.g. 16Mi, 16M or 16777216 (suffixes Ki, Mi, "
        "Gi, k, M, G)"
    )


def test_an_unused_secret_names_every_setting_that_can_use_one():
    message = message_for({**config(), "staleKey": "<secret>"}, "staleKey")
    assert message == (
        "is a secret that no setting uses: remove it (`pulumi config rm agent-budgets:staleKey`), or name it in "
        "providers[].apiKeyConfig, redis.passwordConfig or redis.sentinelPasswordConfig"
    )

"""The configuration mistakes the property-based tests (tests/test_config_properties.py) found, one test each.

Each once ended in a Python traceback, a resource that failed to register, a report line that was not one line
of text, or a message about the wrong thing. Each is now one line of the one `invalid stack configuration:`
report naming its key, with nothing registered.
"""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pytest

from core.problems import REPORT_HEADER, ConfigError
from core.validation import validate_stack
from tests.support.program import run_program, stack_config

PROD_SECRETS = {"openaiApiKey": "sk-mistakes-openai", "anthropicApiKey": "sk-ant-mistakes", "redisPassword": "pw"}


def refused(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, lambda key: (True, True))
    return caught.value


def messages(error: ConfigError) -> dict[str, str]:
    return {problem.key: problem.message for problem in error.problems}


def program_report(raw: dict[str, Any], secrets: dict[str, str] | None = None) -> tuple[str, int]:
    """The program's own report for `raw`, and how many resources it registered before it (must be 0)."""
    run: list[Any] = []

    class Counting(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            run.append(args.name)
            return f"{args.name}-id", dict(args.inputs)

        def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
            return {}

    with pytest.raises(pulumi.RunError) as caught:
        run_program(raw, secrets=secrets, mocks=Counting())  # type: ignore[arg-type]
    return str(caught.value), len(run)


def prod() -> dict[str, Any]:
    return copy.deepcopy(stack_config("prod"))


def test_a_provider_kind_written_as_a_list_is_reported_not_a_type_error():
    """`kind: [openai]` made the secret lookup hash a list (TypeError: unhashable type: 'list')."""
    raw = prod()
    raw["providers"][0]["kind"] = ["openai"]
    assert messages(refused(raw))["providers[0].kind"] == "got ['openai']: use one of 'mock', 'openai', 'anthropic'"
    report, registered = program_report(raw, PROD_SECRETS)
    assert report.startswith(REPORT_HEADER) and "agent-budgets:providers[0].kind: got ['openai']" in report
    assert registered == 0


def test_a_model_name_with_a_lone_surrogate_is_reported_once_before_anything_is_registered():
    """It passed validation and failed while a resource was registered ("surrogates not allowed"). The model
    name's own check says why (Agent Router's CEL parser refuses it), so the check of every string stays silent."""
    raw = stack_config("dev")
    raw["routes"][0]["models"] = ["mock-small\ud83d"]
    error = refused(raw)
    assert [problem.key for problem in error.problems] == ["routes[0].models"]
    assert "'mock-small\\ud83d' holds U+D83D at position 10, a lone surrogate" in error.problems[0].message
    report, registered = program_report(raw)
    assert "agent-budgets:routes[0].models: model name 'mock-small\\ud83d' holds U+D83D" in report
    report.encode("utf-8")  # the report itself is text the engine can carry
    assert registered == 0


def test_a_lone_surrogate_in_a_value_no_field_checks_is_reported_by_its_key():
    """A plain-text setting (the kube context) took any string; its resource would fail to register."""
    raw = stack_config("dev")
    raw["kubernetes"] = {"context": "kind-agent-budgets\udcff"}
    error = refused(raw)
    assert [problem.key for problem in error.problems] == ["kubernetes.context"]
    assert error.problems[0].message.startswith(
        "'kind-agent-budgets\\udcff' holds U+DCFF at character 19, half of a UTF-16 surrogate pair without its other"
    )
    report, registered = program_report(raw)
    assert "agent-budgets:kubernetes.context: 'kind-agent-budgets\\udcff' holds U+DCFF" in report
    assert registered == 0


def test_a_lone_surrogate_in_a_key_or_an_actor_is_named_by_its_key():
    raw = prod()
    raw["prices"]["gpt-4.1\udcff"] = raw["prices"].pop("gpt-4.1")
    raw["actors"][0] = "agents/support-1\udcff"
    error = refused(raw)
    found = messages(error)
    assert found["prices.gpt-4.1\udcff"].startswith("the key 'gpt-4.1\\udcff' holds U+DCFF at character 8")
    assert found["actors[0]"].startswith("'agents/support-1\\udcff' holds U+DCFF")
    assert "agent-budgets:prices.gpt-4.1\\udcff: the key" in str(error)
    str(error).encode("utf-8")


def test_a_value_with_a_newline_or_a_right_to_left_override_stays_on_its_report_line():
    """A message quotes the value; the report must still be one line per problem, read in order on screen."""
    raw = stack_config("dev")
    raw["gateway"] = {"requestBufferLimit": "50Mi\n  - agent-budgets:fake: injected", "namespace": "gw\u202eev"}
    error = refused(raw)
    lines = str(error).split("\n")
    assert len(lines) == 1 + len(error.problems) == 3
    assert "\\n  - agent-budgets:fake: injected" in lines[1] or "\\n  - agent-budgets:fake: injected" in lines[2]
    assert any("gw\\u202eev" in line for line in lines)


@pytest.mark.parametrize(
    ("key", "item", "expected"),
    [
        (
            "actors",
            None,
            "is empty (YAML null: `~`, `null` or nothing after the colon): give text, or remove the entry",
        ),
        ("actors", 7, "got 7: give text (quote it if YAML reads it as something else)"),
    ],
    ids=["an empty list item", "a number in a list of names"],
)
def test_a_bad_list_item_is_described_as_an_item_not_as_the_list(key, item, expected):
    """`actors: [agents/a, ~]` was told to "give a list, or remove the key to use the default ([])", and
    `actors: [7]` to "write a list, e.g. 0: [7]"."""
    raw = stack_config("dev")
    raw[key] = [raw[key][0], item]
    assert messages(refused(raw))[f"{key}[1]"] == expected


def test_a_model_name_written_as_a_number_is_told_to_be_text():
    raw = stack_config("dev")
    raw["routes"][0]["models"] = [3.5]
    assert (
        messages(refused(raw))["routes[0].models[0]"]
        == "got 3.5: give text (quote it if YAML reads it as something else)"
    )


def test_a_null_class_is_an_empty_entry_not_an_empty_list():
    raw = prod()
    raw["budgets"]["classes"][1] = None
    assert messages(refused(raw))["budgets.classes[1]"] == (
        "is empty (YAML null: `~`, `null` or nothing after the colon): give a map of settings, or remove the entry"
    )


@pytest.mark.parametrize("written", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_non_finite_tokens_are_reported_not_an_overflow(written):
    """YAML's `.inf` as tokens raised OverflowError (cannot convert float infinity to integer)."""
    raw = stack_config("dev")
    raw["budgets"]["default"]["tokens"] = written
    assert messages(refused(raw))["budgets.default.tokens"] == (
        f"got {written!r}: give a whole number of tokens, e.g. tokens: 500"
    )


def test_a_long_value_repeated_in_many_problems_is_quoted_short():
    """3,000 members of a class whose name is 70,000 characters made a report of 420 MB: every line quoted both."""
    raw = prod()
    raw["budgets"]["classes"][2]["name"] = "x" * 70_000
    raw["budgets"]["classes"][2]["actors"] = ["agents/research-1"] * 3_000
    error = refused(raw)
    members = [problem for problem in error.problems if problem.key.startswith("budgets.classes[2].actors[")]
    assert len(members) == 2_999  # every member after the first is in that class twice
    assert max(len(problem.render()) for problem in members) < 400
    assert len(str(error)) < 2_000_000


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("kubernetes", "context", "kind-agent-budgets\x00"), ("substrate", "egress", {"kubectl": "kubectl\n"})],
    ids=["a NUL in the kube context", "a newline in the kubectl path"],
)
def test_a_control_character_in_a_kubectl_argument_is_reported(section, key, value):
    """Accepted before, then `make spend` (and `kubectl ate` at `pulumi up`) failed with ValueError: embedded null
    byte, as no command line can carry one."""
    raw = stack_config("dev")
    raw[section] = {key: value}
    found = messages(refused(raw))
    [(where, message)] = [(k, m) for k, m in found.items() if k.startswith(section)]
    assert where in {"kubernetes.context", "substrate.egress.kubectl"}
    assert "holds the control character U+00" in message and "kubectl gets it on its command line" in message


def test_a_value_nested_deeper_than_json_goes_is_reported_not_a_recursion_error():
    """The program decodes each config value as JSON; a value of thousands of `[` raised RecursionError there."""
    raw = stack_config("dev")
    del raw["actors"]
    nested = "[" * 5_000 + "]" * 5_000
    with pytest.raises(pulumi.RunError) as caught:
        run_program(raw, plain={"actors": nested})
    assert str(caught.value).startswith(REPORT_HEADER)
    assert "agent-budgets:actors: got a single value '[[[[" in str(caught.value)

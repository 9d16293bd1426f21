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

from core.model_names import header_match_problem
from core.problems import REPORT_HEADER, ConfigError
from core.validation import validate_stack
from tests.support.crds import load_catalog
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
    # A price's key is a model name: its own check says why (Agent Router's CEL parser), on one line.
    assert [problem.key for problem in error.problems].count("prices.gpt-4.1\udcff") == 1
    assert found["prices.gpt-4.1\udcff"].startswith("model name 'gpt-4.1\\udcff' holds U+DCFF at position 7")
    assert found["actors[0]"].startswith("'agents/support-1\\udcff' holds U+DCFF")
    assert "agent-budgets:prices.gpt-4.1\\udcff: model name" in str(error)
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


# ---------------------------------------------------------------------------------------------------------
# Values that reach built-in Kubernetes objects (found once those were checked too: tests/support/kubernetes_schema.py)


@pytest.mark.parametrize(
    ("section", "image", "reason"),
    [
        ("mockModel", "", "is empty"),
        ("mockModel", "python:3.12 alpine", "holds U+0020 at character 12"),
        ("redis", "redis:8.2.4\x1b[0m", "holds U+001B at character 12"),
        ("redis", "Redis:8.2.4", "has upper-case letters in its repository name"),
        ("redis", "redis@sha256:abc", "does not match the image reference grammar"),
    ],
)
def test_an_image_the_kubelet_cannot_parse_is_reported(section, image, reason):
    """The API server took any image for the mock model's Deployment or Redis's StatefulSet; the kubelet refused it
    (InvalidImageName) and `pulumi up` waited for a rollout that never came."""
    raw = stack_config("dev")
    raw[section] = {"image": image}
    [problem] = refused(raw).problems
    assert problem.key == f"{section}.image"
    assert problem.message.startswith(f"image {image!r} {reason}")
    assert "The kubelet could not pull it and the pod would never start: write [registry[:port]/]name" in (
        problem.message
    )


def test_a_zero_storage_size_is_reported():
    """`storageSize: 0Gi` is a quantity, but the API server refuses a volume claim of no storage."""
    raw = stack_config("dev")
    raw["redis"] = {"storageSize": "0Gi"}
    assert messages(refused(raw)) == {
        "redis.storageSize": (
            "storageSize '0Gi' is zero: the API server refuses a volume claim of no storage. Give a size such as 1Gi"
        )
    }


def test_a_trailing_newline_or_a_foreign_digit_no_longer_passes_a_pattern():
    """Python's `$` also matches before a final newline and `\\d` any Unicode digit: a namespace, a label value, a
    storage size or a version with one passed its check and reached the cluster or Helm, which refuse them."""
    raw = stack_config("dev")
    raw["gateway"] = {"namespace": "agent-budgets\n", "requestBufferLimit": "50Mi\n"}
    raw["redis"] = {"storageSize": "1Gi\n", "storageClass": "standard\n"}
    raw["monitoring"] = {"dashboard": True, "dashboardLabels": {"grafana_dashboard": "1\n"}}
    raw["platform"] = {"envoyGatewayVersion": "v\u0661.\u0669.\u0663"}
    assert set(messages(refused(raw))) == {
        "gateway.namespace",
        "gateway.requestBufferLimit",
        "redis.storageSize",
        "redis.storageClass",
        "monitoring.dashboardLabels",
        "platform.envoyGatewayVersion",
    }


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("gpt-4.1\x00", "holds U+0000 at character 8, a control character"),
        ("gpt-4.1\x7f", "holds U+007F at character 8, a control character"),
        ("gpt-4.1\u202e", "holds U+202E (RIGHT-TO-LEFT OVERRIDE) at character 8, an invisible formatting character"),
        ("gpt\u200b-4.1", "holds U+200B (ZERO WIDTH SPACE) at character 4, an invisible formatting character"),
        ("gpt-4.1-\u00e9", "holds U+00E9 (LATIN SMALL LETTER E WITH ACUTE) at character 9, not printable US-ASCII"),
        ("gpt  4.1", "holds two spaces or tabs in a row at character 4"),
    ],
)
def test_a_model_name_no_header_match_can_hold_is_reported_once_per_key(name, reason):
    """Agent Router copies each route's model names into an HTTPRoute header match, which the Gateway API CRDs of
    Envoy Gateway refuse unless the name is printable US-ASCII with single inner spaces or tabs: the route never
    served a call. A modelNameOverride and a price's key name the same models and follow the same rule."""
    raw = prod()
    raw["routes"][0]["models"] = [name, "gpt-4.1-mini"]
    raw["routes"][1]["modelNameOverride"] = name
    raw["prices"][name] = raw["prices"].pop("gpt-4.1")
    found = messages(refused(raw))
    assert sorted(found) == sorted(["routes[0].models", "routes[1].modelNameOverride", f"prices.{name}"])
    assert found["routes[0].models"] == (
        f"model name {name!r} {reason}: Agent Router matches the names agents send in an HTTPRoute header, and the "
        "Gateway API CRDs Envoy Gateway installs accept only printable US-ASCII there, words separated by single "
        "spaces or tabs, so no call could reach this route. Write the name exactly as the provider expects it"
    )
    assert found["routes[1].modelNameOverride"].startswith(f"modelNameOverride {name!r} {reason}: a model name is")
    assert found[f"prices.{name}"].startswith(f"model name {name!r} {reason}: no route can serve or bill a model")


def test_the_header_match_rule_is_the_gateway_api_crds_own():
    """The rule is upstream's: an HTTPRoute as Agent Router's controller writes it from our AIGatewayRoute, with each
    refused name as its header value, fails the pinned Gateway API v1.6.1 CRD, and an accepted name passes it."""
    catalog = load_catalog()

    def http_route(value: str) -> dict[str, Any]:
        match = {"headers": [{"name": "x-ai-eg-model", "type": "Exact", "value": value}], "path": {"value": "/"}}
        return {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "mock", "namespace": "agent-budgets"},
            "spec": {"rules": [{"matches": [match]}]},
        }

    for name in ["gpt-4.1", "claude sonnet\t4", "a!~z", "gpt-4.1\x00", "gpt\u202e", "gpt-\u00e9", "gpt  4", " gpt"]:
        refused_by_crd = bool(catalog.validate(http_route(name)).errors)
        assert refused_by_crd == (header_match_problem(name) is not None), name


def test_a_control_character_in_the_kubeconfig_is_reported_without_showing_it():
    """A kubeconfig path holding a NUL reached `open()` in the egress check (ValueError: embedded null byte); contents
    with one are no YAML. The value may be credentials, so the message names the character, never the value."""
    raw = stack_config("dev")
    raw["kubernetes"]["kubeconfig"] = "~/.kube/con\x00fig-secret-token"
    assert messages(refused(raw)) == {
        "kubernetes.kubeconfig": (
            "the kubeconfig path holds the control character U+0000 at character 12 (the value is not shown: it may "
            "hold credentials): no file path can; remove it"
        )
    }
    raw["kubernetes"]["kubeconfig"] = "apiVersion: v1\nkind: Config\x01\nusers: [{name: secret-token}]\n"
    [problem] = refused(raw).problems
    assert problem.message.startswith("the kubeconfig contents hold the control character U+0001 at character 28")
    assert "secret-token" not in str(refused(raw))


@pytest.mark.parametrize("limit", ["4Gi", "1.5", "3.9Gi", "99E"])
def test_a_buffer_limit_envoy_gateway_cannot_take_is_reported(limit):
    """The CRD takes any quantity, but Envoy Gateway refuses a ClientTrafficPolicy whose buffer limit is not a whole
    number of bytes below 2^32, and the gateway then ran with Envoy's 32 KiB default."""
    raw = stack_config("dev")
    raw["gateway"]["requestBufferLimit"] = limit
    assert messages(refused(raw))["gateway.requestBufferLimit"].startswith(
        f"requestBufferLimit {limit!r} is not a whole number of bytes up to 4,294,967,295 (4Gi - 1)"
    )
    raw["gateway"]["requestBufferLimit"] = "4294967295"
    validate_stack(raw, lambda key: (True, True))

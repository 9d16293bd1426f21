"""No configuration crashes the program: property-based tests of the configuration edge.

Configurations are generated from the stack files in the repository (`Pulumi.*.yaml`, read as the program and
the spend report read them) by the mutations of tests/support/mutations.py: any value in any place, odd text
and numbers, keys and list items removed or duplicated, values wrapped in extra lists or maps, keys the models
know added, sections swapped between stack files, sections stored as secrets. Whatever the mutation:

- validation either accepts the configuration or raises the one `invalid stack configuration:` report, one line
  per problem, each naming a full key of the configuration, and encodable as UTF-8 (the engine carries it as
  protobuf text); nothing else escapes;
- a configuration validation accepts is buildable: the whole program runs under mocks, every custom resource it
  registers meets the pinned CRDs, and every built-in object (Namespace, ConfigMap, Secret, Deployment, Service,
  StatefulSet, NetworkPolicy, ...) meets the Kubernetes schemas and what the API server and the kubelet check
  beyond them (tests/support/kubernetes_schema.py). Anything that fails later is a validation gap.

The classes these tests found have example-based tests of their own (tests/test_config_mistakes.py); these runs are
seeded and bounded by example counts (tests/support/properties.py), and a failure is shrunk to a small document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, note, settings

from core.config_messages import aliases
from core.cross_checks import ConfigView
from core.problems import REPORT_HEADER, ConfigError
from core.settings import StackSettings
from core.validation import ValidatedStack, expected_secret_keys, validate_stack
from tests.support import kubernetes_schema
from tests.support.crds import load_catalog
from tests.support.program import run_program
from tests.support.properties import examples, explore_deadline
from tests.support.stack_files import PREFIX, STACK_DOCUMENTS, GeneratedStack, stack_files


def test_both_stack_files_are_the_seeds():
    """The generators start from every stack file in the repository, the dev and the prod example among them."""
    assert {"dev", "prod"} <= set(STACK_DOCUMENTS)
    assert all(isinstance(document.get("config"), Mapping) for document in STACK_DOCUMENTS.values())


def problem_roots(key: str) -> set[str]:
    """The top-level keys a problem's key may name: itself (a flat dotted key) and the part before `.` or `[`."""
    return {key, re.split(r"[.\[]", key, maxsplit=1)[0]}


def check_report(error: ConfigError, generated: GeneratedStack, asked: set[str]) -> None:
    """The report is the documented one: a header, one line per problem, each naming a key this configuration
    has, could have or needs (a secret), and all of it text the engine can carry."""
    report = str(error)
    report.encode("utf-8")  # strict: a lone surrogate would fail here, as it fails in the engine's protobuf
    lines = report.split("\n")
    assert lines[0] == REPORT_HEADER
    assert len(lines) == 1 + len(error.problems), "one line per problem"
    known = set(generated.raw) | set(aliases(StackSettings)) | asked
    for line, problem in zip(lines[1:], error.problems, strict=True):
        assert problem.key, f"a problem without a key: {problem}"
        assert line.startswith(f"  - {PREFIX}"), line
        assert problem_roots(problem.key) & known, f"{problem.key!r} is no key of this configuration"
        assert problem.message.strip(), f"{problem.key}: an empty message"


def validate(generated: GeneratedStack) -> ValidatedStack | None:
    """Validate; on refusal check the report and return None."""
    asked: set[str] = set()

    def state(key: str) -> tuple[bool, bool]:
        asked.add(key)
        return generated.secret_state(key)

    try:
        return validate_stack(generated.raw, state)
    except ConfigError as error:
        note(str(error)[:2000])
        check_report(error, generated, asked)
        return None


@settings(max_examples=examples(400), deadline=explore_deadline(5_000), suppress_health_check=[HealthCheck.too_slow])
@given(stack_files())
def test_every_generated_configuration_is_accepted_or_reported(generated: GeneratedStack) -> None:
    validated = validate(generated)
    if validated is not None:
        assert isinstance(validated.settings, StackSettings)
        assert validated.rules.specs(), "an accepted configuration compiles to budget rules"


# ---------------------------------------------------------------------------------------------------------
# Accepted means buildable


def program_inputs(generated: GeneratedStack) -> tuple[dict[str, Any], dict[str, str]]:
    """The plain config and the secrets to hand the program for this stack file."""
    config = {key: value for key, value in generated.raw.items() if key not in generated.secret_keys}
    secrets = {key: json.dumps(generated.raw[key]) for key in generated.secret_keys}
    for key in expected_secret_keys(ConfigView(generated.raw)):
        secrets.setdefault(key, f"property-test-secret-{key}")
    return config, secrets


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


# cel-python sets the recursion limit to 2500 whenever the CRD validator makes a CEL environment; Hypothesis
# warns that it will not restore its own setting then, which is harmless here.
@pytest.mark.filterwarnings("ignore:The recursion limit will not be reset")
@settings(
    max_examples=examples(10),
    deadline=explore_deadline(30_000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
@given(generated=stack_files())
def test_accepted_configurations_build_and_meet_the_cluster_checks(catalog, generated: GeneratedStack) -> None:
    assume(validate(generated) is not None)
    config, secrets = program_inputs(generated)
    run = run_program(config, secrets=secrets, stack=generated.stack)
    objects = [resource.as_object() for resource in run.custom_resources()]
    assert objects, "an accepted configuration registers custom resources"
    failures = [
        f"{obj['kind']}/{obj['metadata']['name']}: {errors}"
        for obj in objects
        if (errors := catalog.validate(obj).errors)
    ]
    builtin = run.builtin_objects()
    assert builtin, "an accepted configuration registers built-in objects"
    failures += [
        f"{obj['kind']}/{obj['metadata'].get('name')}: {problems}"
        for obj in builtin
        if (problems := kubernetes_schema.problems(obj))
    ]
    assert failures == []

"""Docs that cannot drift: the configuration reference and the README's error example are produced by code.

The reference table in docs/configuration.md is generated from the pydantic models (`make docs`,
scripts/gen_docs.py; tests/test_generated_docs.py fails while the page is stale); the README's error example
is the report the program prints for the stack file shown above it.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from core.config_reference import reference_rows, render_reference
from core.problems import ConfigError
from core.settings import StackSettings
from core.validation import validate_stack
from scripts.doc_blocks import block_names

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"


def test_the_reference_is_a_generated_block_of_the_configuration_page():
    assert block_names(CONFIGURATION_DOC.read_text(encoding="utf-8")) == ["config-reference"]


def _all_keys(model: type[BaseModel] = StackSettings, prefix: str = "") -> set[str]:
    """Every key a stack file can set, walked independently of the generator."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        alias = field.alias or name
        keys.add(prefix + alias)
        annotation = field.annotation
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(options) == 1:
            annotation = options[0]  # `list[Limit] | None` documents like `list[Limit]`
        if typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                keys |= _all_keys(item, f"{prefix}{alias}[].")
        elif typing.get_origin(annotation) is dict:
            _, item = typing.get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                keys |= _all_keys(item, f"{prefix}{alias}.<{field.json_schema_extra['mapKey']}>.")
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _all_keys(annotation, f"{prefix}{alias}.")
    return keys


def test_every_key_of_every_model_has_a_row_and_a_description():
    rows = list(reference_rows())
    assert {row.key for row in rows} == _all_keys()
    undocumented = [row.key for row in rows if not row.rule]
    assert undocumented == []


def test_the_reference_shows_types_defaults_and_ranges():
    table = render_reference()
    assert "| `budgets.default.tokens` | integer | unset | Tokens each actor may spend per window" in table
    assert "| `budgets.default.limits[].per` | string | required |" in table
    assert "| `budgets.classes[].limits[].usd` | number | unset |" in table
    assert "| `prices` | map of maps | `{}` |" in table
    assert "| `prices.<model>.input` | number | required | Fresh input tokens" in table
    assert "| `gateway.port` | integer | `80` | Listener port of the Gateway" in table
    assert "Range: 1 to 65,535." in table
    assert "| `redis.mode` | `in-cluster` \\| `external` | `in-cluster` |" in table
    assert "| `substrate.egress.port` | `gateway.port` |" in table


def _readme_example() -> tuple[dict, list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("<!-- BEGIN error-example -->") : readme.index("<!-- END error-example -->")]
    stack_yaml, output = re.findall(r"```(?:yaml)?\n(.*?)```", block, flags=re.DOTALL)
    document = yaml.safe_load(stack_yaml)["config"]
    raw = {key.removeprefix("agent-budgets:"): value for key, value in document.items()}
    return raw, output.strip().splitlines()


def test_the_readme_error_example_is_the_programs_real_output():
    raw, shown = _readme_example()
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, lambda key: (True, True))
    printed = ("error: " + str(caught.value)).splitlines()
    assert shown == printed
    assert len(caught.value.problems) >= 3


def test_the_secrets_section_names_every_setting_that_names_a_secret():
    """Each key whose value is the name of a secret config key (its description says **secret**) is in the
    Secrets section of docs/configuration.md, so a new one (like redis.sentinelPasswordConfig) is not missed."""
    document = CONFIGURATION_DOC.read_text(encoding="utf-8")
    secrets = document.split("## Secrets\n", 1)[1].split("\n## ", 1)[0]
    named = [row.key for row in reference_rows() if "**secret**" in row.rule]
    assert named == ["providers[].apiKeyConfig", "redis.passwordConfig", "redis.sentinelPasswordConfig"]
    for key in named:
        assert f"`{key}`" in secrets or f"`{key.rsplit('.', 1)[-1]}`" in secrets, key

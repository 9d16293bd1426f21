"""Docs that cannot drift: the configuration reference and the README's error example are produced by code.

The reference table in docs/configuration.md is generated from the pydantic models
(`scripts/gen_config_docs.py`, `make docs`); the README's error example is the report the program prints
for the stack file shown above it.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from core.config_reference import BEGIN_MARKER, END_MARKER, reference_rows, render_reference, replace_generated
from core.problems import ConfigError
from core.settings import StackSettings
from core.validation import validate_stack
from scripts import gen_config_docs

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"


def test_the_committed_reference_is_what_the_models_say():
    document = CONFIGURATION_DOC.read_text(encoding="utf-8")
    assert BEGIN_MARKER in document and END_MARKER in document
    assert replace_generated(document) == document, "docs/configuration.md is out of date: run `make docs`"


def test_the_check_mode_fails_on_a_stale_table(tmp_path, monkeypatch):
    stale = CONFIGURATION_DOC.read_text(encoding="utf-8").replace("| `gateway.port` |", "| `gateway.portal` |")
    doc = tmp_path / "configuration.md"
    doc.write_text(stale, encoding="utf-8")
    monkeypatch.setattr(gen_config_docs, "DOC", doc)
    monkeypatch.setattr(gen_config_docs, "ROOT", tmp_path)
    assert gen_config_docs.main(["--check"]) == 1
    assert gen_config_docs.main([]) == 0
    assert gen_config_docs.main(["--check"]) == 0
    assert "| `gateway.port` |" in doc.read_text(encoding="utf-8")


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
    assert "| `budgets.default.tokens` | integer | unset | Short form" in table
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

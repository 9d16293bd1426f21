"""docs/spend.md shows real output of the current code: its examples and tables are regenerated here and
must equal what is committed (`venv/bin/python scripts/spend_example.py` rewrites them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from core import monitoring

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "spend.md"


def _example_module():
    spec = importlib.util.spec_from_file_location("spend_example", ROOT / "scripts" / "spend_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_examples_and_tables_in_the_doc_are_what_the_code_prints(redis_db):
    example = _example_module()
    blocks = example.generate(redis_db.port, redis_db.password, redis_db.client())
    current = DOC.read_text(encoding="utf-8")
    assert example.replace_blocks(current, blocks) == current, "run `venv/bin/python scripts/spend_example.py`"
    assert "agents/support-2      default" in blocks["table"] and "100.7% 429" in blocks["table"]
    assert "0.0% 403" in blocks["table"] and "$5.00/Day" in blocks["research"]
    assert blocks["fail-over"].rstrip().endswith("$ echo $?\n1\n```")


def test_a_missing_block_is_an_error_not_a_silent_pass():
    example = _example_module()
    with pytest.raises(ValueError, match="metrics"):
        example.replace_blocks("<!-- GENERATED:table -->\nx<!-- /GENERATED:table -->\n", {"table": "", "metrics": ""})


def test_the_doc_names_the_facts_the_code_uses():
    text = DOC.read_text(encoding="utf-8")
    for fact in (
        monitoring.NEAR_LIMIT_METRIC,
        monitoring.OVER_LIMIT_METRIC,
        monitoring.NEAR_LIMIT_ALERT,
        monitoring.EXHAUSTED_ALERT,
        f"({monitoring.AGENT_ROUTER_METRICS_PORT})",
        f"({monitoring.RATELIMIT_METRICS_PORT})",
        "x-actor-id:actor.id",
        "`actor_id`",
    ):
        assert fact in text, fact

"""Docs that code writes: every GENERATED block in docs/ is what its generator produces now.

`make docs` (scripts/gen_docs.py) writes the configuration reference, the stack-output examples and the
message-size figures; these tests run the same generators and fail while a committed page differs, so an
example an operator copies (say, the Envoy Gateway values for `platform.install: false`) cannot go stale.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from core.budget_rules import BudgetSpec, LimitSpec, compile_rules
from core.manifests import BUDGET_POLICY_NAME
from core.platform_values import checksum
from core.xds_size import rate_limit_domains
from scripts import gen_docs, measure_exclusion_slots
from scripts.doc_blocks import block_names, replace_blocks, sync_document

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def outputs() -> dict:
    return gen_docs.stack_outputs()


def blocks_of(page: str, outputs: dict) -> dict[str, str]:
    return gen_docs.output_blocks(outputs) if page == "docs/outputs.md" else gen_docs.DOCS[page]()


@pytest.mark.parametrize("page", sorted(gen_docs.DOCS))
def test_every_generated_block_is_what_the_code_produces(page, outputs):
    current = (ROOT / page).read_text(encoding="utf-8")
    assert replace_blocks(current, blocks_of(page, outputs), page) == current, f"{page} is stale: run `make docs`"


def test_make_docs_runs_the_generator():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^docs: .*\n\t\$\(BIN\)/python scripts/gen_docs\.py$", makefile, re.M)


def test_the_check_mode_fails_on_a_stale_page_and_the_write_mode_repairs_it(tmp_path, monkeypatch, outputs):
    for page in [*gen_docs.DOCS, *gen_docs.FILES]:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    stale = tmp_path / "docs" / "outputs.md"
    stale.write_text(stale.read_text(encoding="utf-8").replace('"maxMessageSize": "16Mi"', '"x": 1'), "utf-8")
    monkeypatch.setattr(gen_docs, "stack_outputs", lambda: outputs)
    assert gen_docs.main(["--check"], root=tmp_path) == 1
    assert gen_docs.main([], root=tmp_path) == 0
    assert gen_docs.main(["--check"], root=tmp_path) == 0
    assert stale.read_text(encoding="utf-8") == (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")


# --- the helper every generator uses ------------------------------------------------------------------------


def test_blocks_are_replaced_and_their_markers_kept():
    text = (
        "a\n<!-- GENERATED:one -->\nold\n<!-- /GENERATED:one -->\nb\n<!-- GENERATED:two -->\n<!-- /GENERATED:two -->\n"
    )
    new = replace_blocks(text, {"one": "new", "two": "x\ny\n"})
    assert new == (
        "a\n<!-- GENERATED:one -->\nnew\n<!-- /GENERATED:one -->\nb\n<!-- GENERATED:two -->\nx\ny\n"
        "<!-- /GENERATED:two -->\n"
    )
    assert block_names(new) == ["one", "two"]


def test_a_block_the_page_lacks_or_nobody_generates_is_an_error():
    page = "<!-- GENERATED:one -->\n<!-- /GENERATED:one -->\n"
    with pytest.raises(ValueError, match=r"page.md lacks the GENERATED blocks \['two'\]"):
        replace_blocks(page, {"one": "", "two": ""}, "page.md")
    with pytest.raises(ValueError, match=r"nothing generates: \['one'\]"):
        replace_blocks(page, {}, "page.md")


def test_sync_document_names_the_command_when_stale(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("<!-- GENERATED:one -->\nold\n<!-- /GENERATED:one -->\n", encoding="utf-8")
    assert sync_document(page, {"one": "new"}, check=True, command="make docs") == 1
    assert "page.md is out of date: run `make docs`" in capsys.readouterr().err
    assert "old" in page.read_text(encoding="utf-8")
    assert sync_document(page, {"one": "new"}, check=False, command="make docs") == 0
    assert "new" in page.read_text(encoding="utf-8")


# --- what the pages say -------------------------------------------------------------------------------------


def test_every_output_of_the_program_has_a_section_in_the_outputs_page(outputs):
    page = (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[`(\w+)`\]\(#\w+\) \|", page, re.M))
    assert listed == set(outputs["outside"]) | set(outputs["dev"]) | set(outputs["dev-kubernetes"])
    assert all(f"\n## {name}\n" in page for name in listed)


def test_the_values_for_an_outside_install_carry_the_message_limit_on_both_ends(outputs):
    """The review's stale example lacked maxMessageSize: with it missing, Envoy Gateway keeps gRPC's 4 MiB."""
    eg = outputs["outside"]["envoyGatewayValues"]
    config = eg["config"]["envoyGateway"]
    assert config["extensionManager"]["maxMessageSize"] == "16Mi"
    assert outputs["outside"]["agentRouterValues"]["controller"]["maxRecvMsgSize"] == str(16 * 1024 * 1024)
    annotation = next(iter(eg["deployment"]["pod"]["annotations"].values()))
    assert annotation == checksum(config)
    page = (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    assert json.dumps(annotation) in page and '"maxRecvMsgSize": "16777216"' in page


def test_the_message_size_examples_show_what_each_limit_costs():
    """A default with three limits carries three copies of its rule (about three times one limit), and the
    dev stack's figure is the 32-slot row of the exclusion-slot table."""
    rows = {
        example.name: measure_exclusion_slots.route_bytes(example) for example in measure_exclusion_slots.examples()
    }
    assert rows["the dev stack (`Pulumi.dev.yaml`)"] == measure_exclusion_slots.exclusion_slot_cost(32).route_bytes
    one = compile_rules(BudgetSpec("default", (LimitSpec("tokens", 600, "Hour"),)), [], exclusion_slots=32)
    single = sum(rate_limit_domains("agent-budgets", BUDGET_POLICY_NAME, one.specs()).values())
    three = rows["the default budget with three limits (tokens per Hour and Day, usd per Month)"]
    assert 2.9 < three / single < 3.1
    page = (ROOT / "docs" / "message-size.md").read_text(encoding="utf-8")
    assert (
        f"| the dev stack (`Pulumi.dev.yaml`) | 1 | 1 | 1 | 32 | {rows['the dev stack (`Pulumi.dev.yaml`)']:,} B |"
        in page
    )


def test_generated_actor_descriptions_cover_every_identity_source():
    """The spend report's `actor` and `subject` fields and the metrics' `actor_id` label were once described for
    Substrate actors alone (core/spend.py, docs/spend.md). Each source's two forms come from core/identity.py and
    must appear in both field descriptions and, with an example actor, in the committed actor-id table.
    Broken once: with the old Substrate-only `actor` text in core/spend.py, the first assertion names
    `serviceaccount:<namespace>/<name>`."""
    from core.identity import SOURCES, placeholder_ref
    from core.spend import JSON_ROW_FIELDS
    from scripts import spend_example

    for source in SOURCES:
        ref = placeholder_ref(source)
        assert f"`{ref.actor_id}`" in JSON_ROW_FIELDS["actor"], ref.actor_id
        assert f"`{ref.header_value}`" in JSON_ROW_FIELDS["subject"], ref.header_value
    table = spend_example.actor_id_table()
    page = (ROOT / "docs" / "spend.md").read_text(encoding="utf-8")
    assert blocks_of_page(page)["actor-ids"].strip() == table.strip()
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:]] == [
        f"`{source}` ({title})" for source, title in spend_example.SOURCE_TITLES.items()
    ]


def blocks_of_page(page: str) -> dict[str, str]:
    """The committed body of each GENERATED block of a page."""
    pattern = re.compile(r"<!-- GENERATED:([\w-]+) -->\n(.*?)<!-- /GENERATED:\1 -->", re.DOTALL)
    return {name: body for name, body in pattern.findall(page)}

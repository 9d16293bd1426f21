"""The documentation stays navigable: a short front door, and no link that leads nowhere.

README.md is the front door (at most 250 lines); `docs/` is the manual. Every relative link in
README.md, CHANGELOG.md and docs/**/*.md must name a file or folder that exists, and every `#anchor`
must name a heading of its target, slugged the way GitHub renders them: lowercase, every character
dropped but letters, digits, `-`, `_` and spaces, each space made `-`, and a repeated slug suffixed
`-1`, `-2`, ... (GitHub's table-of-contents filter; github-slugger does the same).
Every page of the manual is listed in its index, docs/README.md. Every file of this repository that a page, a
requirements file, pyproject.toml or a stack file names exists, and every sentence that says which keys are
required names the ones the pydantic settings require (core/settings/).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target): the target is a run without spaces, or <...>.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _kept_in_slug(ch: str) -> bool:
    """GitHub keeps word characters (Ruby's `\\p{Word}`: letters, marks, decimal and letter numbers,
    connector punctuation such as `_`), `-` and spaces, and drops everything else."""
    return ch in "- " or unicodedata.category(ch)[0] in "LM" or unicodedata.category(ch) in {"Nd", "Nl", "Pc"}


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML is not part of the text
    return "".join(ch for ch in text.strip().lower() if _kept_in_slug(ch)).replace(" ", "-")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
                continue
            if marker == fence:
                fence = None
                continue
        if fence is None:
            yield number, line


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown document offers: its headings' slugs (de-duplicated) and HTML anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@dataclass(frozen=True)
class Link:
    """One link target as written, and where."""

    source: Path
    line: int
    target: str


def links(path: Path) -> list[Link]:
    """Every link target in a Markdown file, outside code blocks and inline code."""
    found: list[Link] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        prose = _INLINE_CODE.sub("", line)
        targets = [m.group(1) for m in _INLINE_LINK.finditer(prose)]
        definition = _REFERENCE_DEFINITION.match(prose)
        if definition:
            targets.append(definition.group(1))
        found.extend(Link(path, number, target.strip("<>")) for target in targets)
    return found


def broken_links(paths: list[Path], root: Path) -> list[str]:
    """Each relative link that names a missing file or folder, or a missing heading, with the reason."""
    anchor_cache: dict[Path, set[str]] = {}

    def anchors_of(target: Path) -> set[str]:
        if target not in anchor_cache:
            anchor_cache[target] = anchors(target.read_text(encoding="utf-8"))
        return anchor_cache[target]

    problems: list[str] = []
    for path in paths:
        for link in links(path):
            if _SCHEME.match(link.target) or link.target.startswith("//"):
                continue  # http(s), mailto: checked by nobody here
            file_part, _, fragment = link.target.partition("#")
            target = (path.parent / file_part).resolve() if file_part else path.resolve()
            where = f"{path.relative_to(root)}:{link.line}: {link.target}"
            if file_part.startswith("/"):
                problems.append(f"{where}: absolute path (write it relative to the file)")
                continue
            if not target.exists():
                problems.append(f"{where}: no such file or folder")
                continue
            if root.resolve() not in (target, *target.parents):
                problems.append(f"{where}: points outside the repository")
                continue
            if not fragment:
                continue
            if target.suffix != ".md" or not target.is_file():
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif fragment not in anchors_of(target):
                problems.append(f"{where}: no heading with anchor #{fragment} in {target.relative_to(root.resolve())}")
    return problems


def documentation_files(root: Path = ROOT) -> list[Path]:
    """README.md, CHANGELOG.md and every page under docs/."""
    pages = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").rglob("*.md"))]
    return [page for page in pages if page.is_file()]


# ---------------------------------------------------------------------------------------------------------
# The project's own documentation.


def test_readme_is_a_short_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail into a page under docs/"
    )


def test_the_documentation_files_exist():
    names = {path.relative_to(ROOT).as_posix() for path in documentation_files()}
    assert {"README.md", "CHANGELOG.md", "docs/README.md", "docs/configuration.md"} <= names


def test_every_relative_link_resolves_to_a_file_and_heading():
    problems = broken_links(documentation_files(), ROOT)
    assert problems == [], "broken links:\n" + "\n".join(problems)


def test_every_manual_page_is_in_the_index():
    index = ROOT / "docs" / "README.md"
    linked = {
        (index.parent / link.target.partition("#")[0]).resolve()
        for link in links(index)
        if not _SCHEME.match(link.target) and link.target.partition("#")[0]
    }
    pages = {page.resolve() for page in (ROOT / "docs").rglob("*.md") if page != index}
    missing = sorted(str(page.relative_to(ROOT)) for page in pages - linked)
    assert missing == [], f"pages not listed in docs/README.md: {missing}"


def test_the_changelog_has_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    sections = re.findall(r"^### (\w+)", text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0], re.MULTILINE)
    allowed = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert sections and set(sections) <= allowed, f"Keep a Changelog section names only, got {sections}"


def test_the_changelog_is_grouped_into_versions_each_with_its_upgrade_notes():
    """Unreleased on top, then each version newest first, the newest being agent_budgets/version.py's (the version
    is raised when a release is cut); every version says how to upgrade to it before its first section."""
    from agent_budgets.version import VERSION

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert len(headings) == len(re.findall(r"^## ", text, re.MULTILINE)), "a version heading is malformed"
    assert headings[0] == ("Unreleased", "")
    released = [name for name, _ in headings[1:]]
    assert released and released[0] == VERSION, f"newest release {released[:1]}, version.py says {VERSION}"
    assert released == sorted(released, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    for name, body in zip([n for n, _ in headings], re.split(r"^## .*$", text, flags=re.MULTILINE)[1:], strict=True):
        intro = body.split("\n### ", 1)[0]
        assert re.search(r"^\*\*Upgrading (?:from|to) ", intro, re.MULTILINE), f"[{name}] has no upgrade notes"


# Paths of this repository's own folders as the pages, the stack and project files and the requirements name them
# (`tests/test_spend_cli.py`); an upstream path (`internal/xds/...`) starts elsewhere and is not checked.
_OWN_PATH = re.compile(
    r"(?<![\w./<>-])((?:agent_budgets|components|core|docs|mock_model|plugin|policy|probe|scripts|tests|tools)/"
    r"[\w./-]*?\.(?:py|md|sh|ya?ml|txt|json|env|sha256|toml|tmpl))(?![\w/-]|\.\w)"
)
# Top-level files named without a folder (`Pulumi.prod.yaml`, `requirements-dev.txt`).
_OWN_FILE = re.compile(
    r"(?<![\w./<>-])((?:README|CHANGELOG|pyproject|requirements[\w-]*|Pulumi[\w.-]*)\.(?:md|yaml|txt|toml))"
    r"(?![\w/-]|\.\w)"
)
# Placeholders, not files: the development guide's "run one file" example.
_PLACEHOLDER_PATHS = frozenset({"tests/test_x.py"})


def files_that_name_files(root: Path = ROOT) -> list[Path]:
    """The pages, the requirements, pyproject.toml and the project and stack files."""
    named = [
        *documentation_files(root),
        *sorted(root.glob("requirements*.txt")),
        root / "policy" / "requirements.txt",
        root / "pyproject.toml",
        *sorted(root.glob("Pulumi*.yaml")),
    ]
    return [path for path in named if path.is_file()]


def missing_files(paths: list[Path], root: Path) -> list[str]:
    """`page:line: name` for every file of this repository a page names that does not exist."""
    basenames = {path.name for path in root.rglob("*") if "venv" not in path.parts and ".git" not in path.parts}
    problems = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for pattern, exists in (
            (_OWN_PATH, lambda name: (root / name).exists() or name in _PLACEHOLDER_PATHS),
            (_OWN_FILE, lambda name: (root / name).exists() or name in basenames),
        ):
            for match in pattern.finditer(text):
                if not exists(match.group(1)):
                    line = text.count("\n", 0, match.start()) + 1
                    problems.append(f"{path.relative_to(root)}:{line}: {match.group(1)}")
    return problems


def test_every_file_the_pages_and_requirements_name_exists():
    """requirements-dev.txt once named tests/test_config_fuzz.py, which was never written."""
    problems = missing_files(files_that_name_files(), ROOT)
    assert problems == [], "files named but missing:\n" + "\n".join(problems)


def test_the_file_checker_finds_a_missing_file_and_skips_upstream_paths(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text("", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "Run tests/test_real.py and tests/test_gone.py. Upstream: internal/xds/translator/ratelimit.go,\n"
        "cmd/ate-setup/README.md; the stack file Pulumi.gone.yaml; a template scripts/x.yaml.tmpl.\n",
        encoding="utf-8",
    )
    assert missing_files([page], tmp_path) == [
        "page.md:1: tests/test_gone.py",
        "page.md:2: scripts/x.yaml.tmpl",
        "page.md:2: Pulumi.gone.yaml",
    ]


def _required_keys() -> set[str]:
    from core.settings import StackSettings

    return {field.alias or name for name, field in StackSettings.model_fields.items() if field.is_required()}


def test_every_statement_of_the_required_keys_names_what_the_settings_require():
    """Three pages once disagreed (`budgets`; `budgets` and a non-empty `actors`). The statements are found by
    their wording, "Only ... is/are required", and must name exactly the keys the pydantic model requires."""
    required = _required_keys()
    statements = []
    for path in documentation_files():
        text = " ".join(path.read_text(encoding="utf-8").split())
        for match in re.finditer(r"\bOnly ((?:[^.]*?)) (?:is|are) required\b", text):
            named = {key.removeprefix("agent-budgets:") for key in re.findall(r"`([^`]+)`", match.group(1))}
            statements.append((path.relative_to(ROOT).as_posix(), named))
    assert {page for page, _ in statements} >= {"docs/configuration.md", "docs/use-from-your-program.md"}
    assert [(page, named) for page, named in statements if named != required] == [], f"the model requires {required}"


def test_the_reference_and_the_component_require_the_same_keys():
    from agent_budgets.package import package_schema

    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    top_level_required = set(re.findall(r"^\| `(\w+)` \| [^|]+ \| required \|", reference, re.MULTILINE))
    assert top_level_required == _required_keys()
    resource = package_schema()["resources"]["agent-budgets:index:AgentBudgets"]
    assert set(resource["requiredInputs"]) == _required_keys()


# Terms the pages once used without defining them (issue 32); the glossary defines each, in bold.
GLOSSARY_TERMS = ("Actor", "Atespace", "Sandbox", "Egress gateway", "Egress policy", "Identity source", "`x-actor-id`")


def test_the_glossary_defines_the_terms_the_pages_use_undefined():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    assert "\n## Glossary\n" in index
    glossary = index.split("\n## Glossary\n", 1)[1]
    defined = re.findall(r"^- \*\*([^*]+)\*\*", glossary, re.MULTILINE)
    missing = [term for term in GLOSSARY_TERMS if not any(entry.startswith(term) for entry in defined)]
    assert missing == []
    # "The example write-up" was a source outside the repository that no reader can open.
    offenders = [p.name for p in documentation_files() if "write-up" in p.read_text(encoding="utf-8").lower()]
    assert offenders == []


_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
_COUNTED = re.compile(r"\b(" + "|".join(_NUMBERS) + r")\b[^.:\n]*:\s*$", re.IGNORECASE)


def miscounted_lists(text: str) -> list[str]:
    """Each "... three cases:" line whose list or table that follows has another number of items."""
    lines = text.splitlines()
    problems = []
    for index, line in enumerate(lines):
        match = _COUNTED.search(line)
        if not match:
            continue
        rest = lines[index + 1 :]
        while rest and not rest[0].strip():
            rest = rest[1:]
        if rest and rest[0].startswith("- "):
            # Items, their indented continuation (code blocks with blank lines in them too), until other text.
            block = []
            for item in rest:
                if item.strip() and not item.startswith(("- ", " ")):
                    break
                block.append(item)
            found = sum(1 for item in block if item.startswith("- "))
        elif rest and rest[0].startswith("|"):
            found = len([item for item in rest[: rest.index("")] if item]) - 2 if "" in rest else len(rest) - 2
        else:
            continue  # a code block or prose follows: nothing to count
        if found != _NUMBERS[match.group(1).lower()]:
            problems.append(f"line {index + 1}: {line.strip()!r} is followed by {found} items")
    return problems


def test_a_counted_list_has_as_many_items_as_it_says():
    """troubleshooting.md once said "Two causes:" over three."""
    problems = [f"{p.relative_to(ROOT)} {x}" for p in documentation_files() for x in miscounted_lists(p.read_text())]
    assert problems == []


def test_the_list_counter_catches_a_wrong_count():
    assert miscounted_lists("Two causes:\n\n- a\n- b\n  more b\n- c\n") == [
        "line 1: 'Two causes:' is followed by 3 items"
    ]
    assert miscounted_lists("three ways:\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |\n") == []
    assert miscounted_lists("three mistakes:\n\n```yaml\nx: 1\n```\n") == []


def test_what_applies_to_classes_is_said_of_pools_too():
    """Pools share the classes' layout (after them, core/budget_rules.py), so what restarts or alerts for every
    class does so for every pool: a sentence about every class's rules, counters or alerts must name pools."""
    offenders = []
    for path in documentation_files():
        text = " ".join(path.read_text(encoding="utf-8").split())
        for sentence in re.split(r"(?<=[.;|])\s", text):
            if re.search(r"every class's|the default and each class", sentence) and "pool" not in sentence:
                offenders.append(f"{path.relative_to(ROOT)}: {sentence[:120]}")
    assert offenders == []


# ---------------------------------------------------------------------------------------------------------
# The checker itself: it must catch what it claims to.


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Budget semantics", "budget-semantics"),
        ("Egress policies: how agents reach the gateway", "egress-policies-how-agents-reach-the-gateway"),
        ("What `make up` does", "what-make-up-does"),
        ("Fail-open or fail-closed", "fail-open-or-fail-closed"),
        ("`substrate.egress.port` → `gateway.port`", "substrateegressport--gatewayport"),
        ("Redis persistence, counter resets (and rotation)", "redis-persistence-counter-resets-and-rotation"),
        ("The [policy pack](policy-pack.md)", "the-policy-pack"),
        ("snake_case keys", "snake_case-keys"),
        ("README ≤ 250 lines, x² and ½", "readme--250-lines-x-and-"),
        ("Überblick", "überblick"),
    ],
)
def test_slugs_follow_github(heading, slug):
    assert github_slug(heading) == slug


def test_the_checker_reports_each_kind_of_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "budgets.md").write_text(
        "# Budgets\n\n## Limits\n\ntext\n\n## Limits\n\n## Why: the `layout`\n", encoding="utf-8"
    )
    (tmp_path / "tool.py").write_text("print()\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "\n".join(
            [
                "# Front door",
                "",
                "[ok file](docs/budgets.md), [ok anchor](docs/budgets.md#limits),",
                "[ok duplicate](docs/budgets.md#limits-1), [ok punctuation](docs/budgets.md#why-the-layout)",
                "[ok same file](#front-door), [ok folder](docs/), [web](https://example.com/x.md#nope)",
                "[missing file](docs/nope.md)",
                "[missing anchor](docs/budgets.md#limit)",
                "[missing twice](docs/budgets.md#limits-2)",
                "[missing here](#back-door)",
                "[anchor into code](tool.py#L1)",
                "![missing image](docs/figure.png)",
                "[absolute](/docs/budgets.md)",
                "`[in code](docs/ignored.md)`",
                "```",
                "[in a block](docs/ignored-too.md)",
                "```",
                "[ref]: docs/gone.md",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    problems = broken_links([readme, tmp_path / "docs" / "budgets.md"], tmp_path)
    assert problems == [
        "README.md:6: docs/nope.md: no such file or folder",
        "README.md:7: docs/budgets.md#limit: no heading with anchor #limit in docs/budgets.md",
        "README.md:8: docs/budgets.md#limits-2: no heading with anchor #limits-2 in docs/budgets.md",
        "README.md:9: #back-door: no heading with anchor #back-door in README.md",
        "README.md:10: tool.py#L1: an anchor into a file that is not Markdown",
        "README.md:11: docs/figure.png: no such file or folder",
        "README.md:12: /docs/budgets.md: absolute path (write it relative to the file)",
        "README.md:17: docs/gone.md: no such file or folder",
    ]


def test_headings_in_code_blocks_are_not_anchors():
    text = "# Real\n\n```sh\n# not a heading\n```\n\n## Real\n"
    assert anchors(text) == {"real", "real-1"}

"""Generated blocks in the docs: the one way every generator rewrites its part of a page.

A page marks each block it does not write by hand:

    <!-- GENERATED:name -->
    ...text a script produces...
    <!-- /GENERATED:name -->

`replace_blocks` swaps every block's body for what the generator produced now; `sync_document` writes
the page (or, with `check`, only says whether it is current). scripts/gen_docs.py (`make docs`) and
scripts/spend_example.py both use them, and the tests call the same functions to fail on a stale page.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

BLOCK = re.compile(
    r"(?P<open><!-- GENERATED:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(?P<close><!-- /GENERATED:(?P=name) -->)",
    re.S,
)


def block_names(text: str) -> list[str]:
    """The names of the GENERATED blocks of a page, in order."""
    return [match.group("name") for match in BLOCK.finditer(text)]


def replace_blocks(text: str, blocks: Mapping[str, str], document: str = "the document") -> str:
    """`text` with every GENERATED block's body replaced by `blocks[name]` (a newline is added if missing).

    Raises ValueError when the page lacks a block the generator produces, or holds one it does not: either
    way the page and its generator no longer agree, and a silent pass would hide it.
    """
    present = block_names(text)
    missing = sorted(set(blocks) - set(present))
    if missing:
        raise ValueError(f"{document} lacks the GENERATED blocks {missing}")
    unknown = sorted(set(present) - set(blocks))
    if unknown:
        raise ValueError(f"{document} has GENERATED blocks that nothing generates: {unknown}")

    def body(match: re.Match[str]) -> str:
        new = blocks[match.group("name")]
        if new and not new.endswith("\n"):
            new += "\n"
        return match.group("open") + new + match.group("close")

    return BLOCK.sub(body, text)


def sync_document(
    path: Path,
    blocks: Mapping[str, str],
    *,
    check: bool,
    command: str,
    shown_as: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Rewrite the GENERATED blocks of `path`, or with `check` only compare; 0 when the page was current
    (or is now), 1 when `check` found it stale (the message names `command`, which regenerates it)."""
    name = shown_as or path.name
    current = path.read_text(encoding="utf-8")
    wanted = replace_blocks(current, blocks, name)
    if current == wanted:
        return 0
    if check:
        print(f"{name} is out of date: run `{command}`", file=out or sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"updated {name}", file=out or sys.stdout)
    return 0

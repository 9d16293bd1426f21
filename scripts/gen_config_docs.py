"""Regenerate the configuration reference in docs/configuration.md from the pydantic models.

    venv/bin/python scripts/gen_config_docs.py          # rewrite the table between the GENERATED markers
    venv/bin/python scripts/gen_config_docs.py --check  # exit 1 when the committed table is out of date

`make docs` runs the first form; tests/test_config_reference.py runs the check on every `make test`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config_reference import replace_generated  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the generated reference; the exit status says whether it was current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the committed table is current")
    args = parser.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    wanted = replace_generated(current)
    if args.check:
        if current != wanted:
            print(f"{DOC.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        DOC.write_text(wanted, encoding="utf-8")
        print(f"updated {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

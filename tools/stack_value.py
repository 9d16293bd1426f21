"""Print settings of a stack as the program sees them, for scripts: `python -m tools.stack_value KEY...`.

`make up` asks the dev stack which trust mode it uses, which ClusterTrustBundle or ConfigMap that mode names
and where the gateway's objects live, instead of restating the program's defaults in shell. The stack file is
read as the spend report reads it (tools/spend/stack.py) and checked with the program's own
`core.validation.parse_settings`, so defaults apply and a configuration `pulumi preview` refuses is refused
here with the same report. Keys are the dotted camelCase paths of the configuration reference
(`substrate.trust.mode`); each value is printed on its own line (maps and lists as JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.settings import ConfigError, StackSettings
from core.validation import parse_settings
from tools.spend.stack import StackError, find_project_dir, load_stack


class UnknownKeyError(LookupError):
    """A dotted key that names no setting."""


def setting(settings: StackSettings, dotted: str) -> Any:
    """The value of one dotted camelCase key, defaults applied."""
    value: Any = settings.model_dump(mode="json", by_alias=True)
    walked: list[str] = []
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            known = ", ".join(sorted(value)) if isinstance(value, dict) else "none (not a map)"
            where = ".".join(walked) or "the top level"
            raise UnknownKeyError(f"{dotted!r} is not a setting: {where} has {known}")
        value = value[part]
        walked.append(part)
    return value


def render(value: Any) -> str:
    """One line: strings as they are, booleans as true/false, maps and lists as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stack_value", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="the stack whose Pulumi.<stack>.yaml is read (default dev)")
    parser.add_argument("--project-dir", type=Path, default=None, help="the folder holding Pulumi.yaml")
    parser.add_argument("keys", nargs="+", metavar="KEY", help="dotted settings, e.g. substrate.trust.mode")
    args = parser.parse_args(argv)
    try:
        project = args.project_dir or find_project_dir(Path.cwd())
        settings = parse_settings(load_stack(project, args.stack).raw)
        lines = [render(setting(settings, key)) for key in args.keys]
    except (StackError, ConfigError, UnknownKeyError) as error:
        print(f"stack {args.stack}: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

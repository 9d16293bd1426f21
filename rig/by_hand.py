"""The pieces no registry here serves, which the rig takes by path: built by hand beside the project from upstream
source snapshots, never by the project (no code of theirs, no binary and no recipe for them is in the repository).

The rig expects one directory (`$AGENT_BUDGETS_BY_HAND`, else `<cache>/by-hand`) holding:

| file | what it is |
|---|---|
| `bin/pulumi-language-python` | Pulumi's Python language host (pulumi/pulumi `sdk/python/cmd/pulumi-language-python`) |
| `bin/pulumi-resource-random` | the random provider (pulumi/pulumi-random `provider/cmd/pulumi-resource-random`) |
| `bin/controller`, `bin/extproc` | Agent Router's controller and external processor (envoyproxy/ai-gateway `cmd/...`) |
| `charts/ai-gateway-crds-helm-<v>.tgz`, `charts/ai-gateway-helm-<v>.tgz` | Agent Router's two charts, packaged |
| `sources.json` | for each: the upstream repository and the snapshot commit it came from (quoted in the report) |

A user with internet would take the upstream release artifacts instead (docs/rig.md names them).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import cache
from rig.processes import StepError

PIECES = {
    "pulumi-language-python": "bin/pulumi-language-python",
    "pulumi-resource-random": "bin/pulumi-resource-random",
    "controller": "bin/controller",
    "extproc": "bin/extproc",
    "ai-gateway-crds-helm": "charts/ai-gateway-crds-helm-*.tgz",
    "ai-gateway-helm": "charts/ai-gateway-helm-*.tgz",
}


def default_directory() -> Path:
    value = os.environ.get("AGENT_BUDGETS_BY_HAND")
    return Path(value) if value else cache.root() / "by-hand"


@dataclass(frozen=True)
class ByHand:
    directory: Path

    def sources(self) -> dict[str, Any]:
        try:
            return json.loads((self.directory / "sources.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def path(self, name: str) -> Path:
        """The piece's file; StepError naming where it was expected when it is not there."""
        pattern = PIECES[name]
        found = sorted(self.directory.glob(pattern))
        if not found:
            raise StepError(
                f"{name} is not at {self.directory / pattern}: the rig takes it by path (rig/by_hand.py, docs/rig.md "
                "'Pieces given by path')"
            )
        return found[-1]

    def describe(self, name: str) -> dict[str, Any]:
        """Where a piece is and which snapshot it came from (sources.json), for the report."""
        return {"path": str(self.path(name)), **self.sources().get(name, {"source": "not recorded in sources.json"})}

    def missing(self) -> list[str]:
        return [name for name, pattern in PIECES.items() if not list(self.directory.glob(pattern))]

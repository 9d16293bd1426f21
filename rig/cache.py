"""Where the built pieces live, and how a test finds one: outside the repository, reused while current.

Layout under the root (`$AGENT_BUDGETS_CACHE`, else `$XDG_CACHE_HOME/agent-budgets`, else
`~/.cache/agent-budgets`):

- `go/mod`, `go/build`: GOMODCACHE and GOCACHE of every build, so a second build of anything reuses the modules
  and the compiled packages of the first;
- `bin/<piece>-<version>/`: a Go piece's binaries, `bin/<piece>-<version>.build.json` the inputs they were built
  from (module, version, packages, ldflags, tags, Go version, the wrapper's go.mod);
- `charts/<chart>-<version>/`: a chart ready for `helm template`, `charts/<chart>-<version>.build.json` likewise;
- `wrappers/<piece>-<version>/`: the generated wrapper modules; `logs/<piece>-<version>.log`: each build's log.

A piece is current when its files are there and its record holds exactly the inputs the versions file asks for
now: `tool()` and `chart()` answer None otherwise (a stale binary is never used), `rig.build` rebuilds it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rig.versions import ChartPiece, GoPiece, Versions, load

RECORD_SUFFIX = ".build.json"


def root(environ: Mapping[str, str] | None = None) -> Path:
    """`${AGENT_BUDGETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-budgets}` (an empty variable counts as unset, as
    in the shell)."""
    env = os.environ if environ is None else environ
    if env.get("AGENT_BUDGETS_CACHE"):
        return Path(env["AGENT_BUDGETS_CACHE"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "agent-budgets"


def module_cache(cache_root: Path | None = None) -> Path:
    """GOMODCACHE of every build, `go/mod` under the root: where the pinned modules' sources are (Envoy Gateway's chart
    and CRDs among them)."""
    return (cache_root or root()) / "go" / "mod"


def piece_dir(cache_root: Path, piece: GoPiece | ChartPiece) -> Path:
    """`bin/<piece>-<version>` or `charts/<chart>-<version>`."""
    kind = "charts" if isinstance(piece, ChartPiece) else "bin"
    return cache_root / kind / f"{piece.name}-{piece.version}"


def record_path(directory: Path) -> Path:
    """The build record beside a piece's directory (beside, not inside: a chart directory holds only the chart)."""
    return directory.with_name(directory.name + RECORD_SUFFIX)


def log_path(cache_root: Path, piece: GoPiece | ChartPiece) -> Path:
    return cache_root / "logs" / f"{piece.name}-{piece.version}.log"


def read_record(directory: Path) -> dict[str, Any] | None:
    """The recorded build inputs, or None when there is no readable record."""
    try:
        value = json.loads(record_path(directory).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_record(directory: Path, inputs: Mapping[str, Any]) -> None:
    """Written last, after the piece's files are in place: a build cut short leaves no record, so it is redone."""
    path = record_path(directory)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(inputs), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def declared_inputs(piece: GoPiece | ChartPiece) -> dict[str, Any]:
    """The build inputs the versions file alone decides (no Go needed to know them)."""
    if isinstance(piece, ChartPiece):
        chart_version, app_version = piece.filled_versions()
        return {
            "kind": "chart",
            "module": piece.module,
            "version": piece.version,
            "path": piece.path,
            "template": piece.template,
            "values": piece.filled_values(),
            "chart_version": chart_version,
            "app_version": app_version,
        }
    return {
        "kind": "go",
        "module": piece.module,
        "version": piece.version,
        "packages": {binary: piece.package(binary) for binary in sorted(piece.binaries)},
        "ldflags": list(piece.filled_ldflags()),
        "tags": list(piece.tags),
        "toolchain": piece.toolchain,
        "local_replace_version": piece.local_replace_version,
        # Named only where it is on, so the records of the static pieces built before the key existed stay current.
        **({"cgo": True} if piece.cgo else {}),
        **(
            {"generated": {path: file.model_dump() for path, file in piece.generated.items()}}
            if piece.generated
            else {}
        ),
    }


def files_present(piece: GoPiece | ChartPiece, directory: Path) -> bool:
    """Every binary is there and executable; for a chart, its Chart.yaml."""
    if isinstance(piece, ChartPiece):
        return (directory / "Chart.yaml").is_file()
    return all(os.access(directory / binary, os.X_OK) and (directory / binary).is_file() for binary in piece.binaries)


def is_current(piece: GoPiece | ChartPiece, directory: Path, expected: Mapping[str, Any]) -> bool:
    """The files are there and the record holds exactly `expected` (declared inputs plus what the build adds: the
    Go version, the wrapper's go.mod)."""
    return files_present(piece, directory) and read_record(directory) == dict(expected)


def _declared_current(piece: GoPiece | ChartPiece, directory: Path) -> bool:
    """For a test looking a piece up without Go: the record's declared inputs are the versions file's."""
    record = read_record(directory)
    if record is None or not files_present(piece, directory):
        return False
    declared = declared_inputs(piece)
    return {key: record.get(key) for key in declared} == declared


def _lookup(name: str, kind: type[GoPiece] | type[ChartPiece], versions: Versions | None) -> GoPiece | ChartPiece:
    pieces = versions or load()
    piece = pieces.provider(name)
    if not isinstance(piece, kind):
        what = "binary" if kind is GoPiece else "chart"
        raise KeyError(f"no Go piece of rig/versions.toml provides the {what} {name!r}")
    return piece


def tool(binary: str, cache_root: Path | None = None, versions: Versions | None = None) -> Path | None:
    """The built binary at its pinned version, or None when it is not built (or built from other inputs)."""
    piece = _lookup(binary, GoPiece, versions)
    assert isinstance(piece, GoPiece)
    directory = piece_dir(cache_root or root(), piece)
    return directory / binary if _declared_current(piece, directory) else None


def chart(name: str, cache_root: Path | None = None, versions: Versions | None = None) -> Path | None:
    """The prepared chart directory at its pinned version, or None when it is not prepared."""
    piece = _lookup(name, ChartPiece, versions)
    directory = piece_dir(cache_root or root(), piece)
    return directory if _declared_current(piece, directory) else None

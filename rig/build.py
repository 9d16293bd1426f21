"""`python -m rig.build [PIECE ...]`: build the pinned pieces of rig/versions.toml into the cache, once.

Without arguments it builds the tools the unit suite runs (the file's `default`); `all` builds every Go piece and
chart; `--list` prints every piece with its version and state. One progress line per piece, and one every 30 s
while a build runs; each build's output goes to `<cache>/logs/<piece>-<version>.log`, which a failure names.
A piece already built from the same inputs (module, version, packages, ldflags, tags, Go version, wrapper go.mod)
is skipped. One build runs at a time (a lock in the cache): two `make test` share the cache safely.

`--for-tests` is what `make test` runs: without `go` on the PATH, or when a build fails, it says so and exits 0
(the tests that need the tools skip), except on CI (`CI=true`), where either fails the run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rig import cache, chart, gomod
from rig.ci import on_ci
from rig.versions import ChartPiece, GoPiece, Versions, VersionsError, load

HEARTBEAT_SECONDS = 30.0
Say = Callable[[str], None]


class BuildError(Exception):
    """A piece did not build; the message says what failed, `log` where to read why."""

    def __init__(self, piece: GoPiece | ChartPiece, message: str, log: Path) -> None:
        super().__init__(f"{piece.name} {piece.version}: {message}; log: {log}")
        self.log = log


def _say(line: str) -> None:
    print(f"rig.build: {line}", flush=True)


def elapsed(seconds: float) -> str:
    """`42s`, `3m07s`."""
    whole = round(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


def go_environment(
    cache_root: Path, toolchain: str, base: Mapping[str, str] | None = None, *, cgo: bool = False
) -> dict[str, str]:
    """The environment of every go command: the cache's GOMODCACHE and GOCACHE, no cgo unless the piece needs it
    (static binaries, no C compiler needed; runc's seccomp filter is C), the piece's toolchain, and nothing from
    the caller's shell that would change what is built
    (GOOS, GOARCH, GOBIN, a go.work, GOFLAGS)."""
    env = dict(os.environ if base is None else base)
    for name in ("GOOS", "GOARCH", "GOBIN", "GOFLAGS", "GOWORK"):
        env.pop(name, None)
    env.update(
        GOMODCACHE=str(cache.module_cache(cache_root)),
        GOCACHE=str(cache_root / "go" / "build"),
        CGO_ENABLED="1" if cgo else "0",
        GOFLAGS="-mod=mod -buildvcs=false",
        GOTOOLCHAIN=toolchain,
        GOWORK="off",
    )
    return env


def default_binary_name(package: str) -> str:
    """The name `go install` gives a package's binary: its last path element, or the one before a major-version
    suffix (`go.etcd.io/etcd/server/v3` installs `server`)."""
    parts = package.split("/")
    if len(parts) > 1 and parts[-1][:1] == "v" and parts[-1][1:].isdigit():
        return parts[-2]
    return parts[-1]


def go_build_flags(ldflags: Sequence[str], tags: Sequence[str]) -> list[str]:
    """`-ldflags=...` and `-tags=...`, each one argument."""
    flags = [f"-ldflags={' '.join(ldflags)}"] if ldflags else []
    if tags:
        flags.append(f"-tags={','.join(tags)}")
    return flags


def install_command(piece: GoPiece) -> list[str]:
    """`go install` of every binary of a module without replace lines, at the pinned version."""
    packages = [f"{piece.package(binary)}@{piece.version}" for binary in sorted(piece.binaries)]
    return ["go", "install", *go_build_flags(piece.filled_ldflags(), piece.tags), *packages]


def run_logged(
    command: Sequence[str],
    env: Mapping[str, str],
    log: TextIO,
    label: str,
    say: Say = _say,
    cwd: Path | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> int:
    """Run a command with its output in the log, a line every `heartbeat` seconds while it runs; its exit status."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    started = time.monotonic()
    process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd)
    while True:
        try:
            status = process.wait(timeout=heartbeat)
        except subprocess.TimeoutExpired:
            say(f"{label}: still building ({elapsed(time.monotonic() - started)}, log: {log.name})")
            continue
        log.write(f"[exit {status} after {elapsed(time.monotonic() - started)}]\n")
        log.flush()
        return status


def _go_output(command: Sequence[str], env: Mapping[str, str], log: TextIO) -> str:
    """A quick go command's standard output (its errors in the log); CalledProcessError when it fails."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    result = subprocess.run(list(command), env=dict(env), stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    log.write(result.stdout)
    log.flush()
    if result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, list(command), result.stdout)
    return result.stdout


def go_platform(env: Mapping[str, str], log: TextIO) -> dict[str, str]:
    """The Go version and target the build uses (with GOTOOLCHAIN set, the one it switches to)."""
    version, goos, goarch = _go_output(["go", "env", "GOVERSION", "GOOS", "GOARCH"], env, log).split()
    return {"go": version, "platform": f"{goos}/{goarch}"}


def download_module(module: str, version: str, env: Mapping[str, str], log: TextIO) -> dict[str, Any]:
    """`go mod download -json`: the module's directory and go.mod in the module cache."""
    output = _go_output(["go", "mod", "download", "-json", f"{module}@{version}"], env, log)
    info = json.loads(output)
    if info.get("Error") or not info.get("Dir") or not info.get("GoMod"):
        raise subprocess.CalledProcessError(1, ["go", "mod", "download"], output)
    return info


def expected_go_inputs(piece: GoPiece, platform: Mapping[str, str], upstream: gomod.GoMod) -> dict[str, Any]:
    """Everything a Go piece's binaries depend on: the declared inputs, the Go version and target, and the wrapper's
    go.mod when the upstream go.mod needs one (None when the module installs as it is)."""
    wrapper = None
    if upstream.needs_wrapper or piece.generated:
        packages = [piece.package(binary) for binary in sorted(piece.binaries)]
        wrapper = gomod.wrapper_go_mod(
            piece.name, upstream, piece.version, packages, piece.local_replace_version, bool(piece.generated)
        )
    return {**cache.declared_inputs(piece), **platform, "wrapper_go_mod": wrapper}


@contextlib.contextmanager
def _fresh(directory: Path) -> Iterator[Path]:
    """A scratch directory beside `directory`, moved into its place when the block succeeds, removed otherwise."""
    scratch = directory.with_name(directory.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)
    cache.record_path(directory).unlink(missing_ok=True)
    scratch.replace(directory)


def up_to_date(piece: GoPiece | ChartPiece, cache_root: Path) -> bool:
    """Whether a piece is current, asked without the build lock and without writing its log: what `go env` and the
    module's go.mod say (reading the module cache is safe beside a build), against the piece's record."""
    directory = cache.piece_dir(cache_root, piece)
    if isinstance(piece, ChartPiece):
        return cache.is_current(piece, directory, cache.declared_inputs(piece))
    env = go_environment(cache_root, piece.toolchain, cgo=piece.cgo)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as scratch_log:
        try:
            platform = go_platform(env, scratch_log)
            info = download_module(piece.module, piece.version, env, scratch_log)
            upstream = gomod.parse(Path(info["GoMod"]).read_text(encoding="utf-8"))
        except (subprocess.CalledProcessError, OSError, ValueError):
            return False
    return cache.is_current(piece, directory, expected_go_inputs(piece, platform, upstream))


def build_go(piece: GoPiece, cache_root: Path, say: Say = _say) -> tuple[Path, bool]:
    """Build a Go piece unless it is current: (its directory, whether it was built now)."""
    directory = cache.piece_dir(cache_root, piece)
    log_file = cache.log_path(cache_root, piece)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    label = f"{piece.name} {piece.version}"
    env = go_environment(cache_root, piece.toolchain, cgo=piece.cgo)
    with log_file.open("w", encoding="utf-8") as log:
        try:
            platform = go_platform(env, log)
            info = download_module(piece.module, piece.version, env, log)
            upstream = gomod.parse(Path(info["GoMod"]).read_text(encoding="utf-8"))
            expected = expected_go_inputs(piece, platform, upstream)
        except (subprocess.CalledProcessError, OSError, ValueError) as error:
            raise BuildError(piece, f"cannot fetch {piece.module}@{piece.version} ({error})", log_file) from None
        if cache.is_current(piece, directory, expected):
            say(f"{label}: up to date ({directory})")
            return directory, False
        how = "through a wrapper module" if expected["wrapper_go_mod"] else "with go install"
        say(f"{label}: building {', '.join(sorted(piece.binaries))} {how} ({platform['go']}; log: {log_file})")
        started = time.monotonic()
        with _fresh(directory) as scratch:
            if expected["wrapper_go_mod"]:
                _build_wrapped(piece, cache_root, expected["wrapper_go_mod"], scratch, env, log, label, say, log_file)
            else:
                status = run_logged(install_command(piece), {**env, "GOBIN": str(scratch)}, log, label, say)
                if status != 0:
                    raise BuildError(piece, f"go install exited {status}", log_file)
                for binary in piece.binaries:
                    installed = scratch / default_binary_name(piece.package(binary))
                    if installed.name != binary:
                        installed.replace(scratch / binary)
            if not cache.files_present(piece, scratch):
                raise BuildError(piece, f"the build left no {', '.join(sorted(piece.binaries))}", log_file)
        cache.write_record(directory, expected)
        say(f"{label}: built in {elapsed(time.monotonic() - started)} ({directory})")
        return directory, True


def _build_wrapped(
    piece: GoPiece,
    cache_root: Path,
    go_mod: str,
    scratch: Path,
    env: Mapping[str, str],
    log: TextIO,
    label: str,
    say: Say,
    log_file: Path,
) -> None:
    """Write the wrapper module into the cache, tidy it, build each binary from it. `go mod tidy` rewrites go.mod
    (it adds the indirect requirements), so the generated text is kept beside it in go.mod.rig: while that is
    unchanged, the tidied go.mod and its go.sum are reused."""
    wrapper = cache_root / "wrappers" / f"{piece.name}-{piece.version}"
    wrapper.mkdir(parents=True, exist_ok=True)
    generated = wrapper / "go.mod.rig"
    if not generated.is_file() or generated.read_text(encoding="utf-8") != go_mod:
        (wrapper / "go.mod").write_text(go_mod, encoding="utf-8")
        (wrapper / "go.sum").unlink(missing_ok=True)
        generated.write_text(go_mod, encoding="utf-8")
    if piece.generated:
        write_source_copy(piece, cache_root, wrapper / gomod.SOURCE_COPY, env, log)
    status = run_logged(["go", "mod", "tidy"], env, log, label, say, cwd=wrapper)
    if status != 0:
        raise BuildError(piece, f"go mod tidy of the wrapper module {wrapper} exited {status}", log_file)
    flags = go_build_flags(piece.filled_ldflags(), piece.tags)
    for binary in sorted(piece.binaries):
        command = ["go", "build", *flags, "-o", str(scratch / binary), piece.package(binary)]
        status = run_logged(command, env, log, label, say, cwd=wrapper)
        if status != 0:
            raise BuildError(piece, f"go build of {binary} exited {status}", log_file)


def generated_text(source_text: str, version: str | None) -> str:
    """A generated JSON file as upstream's generate step writes it: the source parsed and written compact, with the
    package's `version` set when one is given (Go's json.Marshal of the parsed value; the key order may differ,
    which no reader of these files depends on)."""
    value = json.loads(source_text)
    if version is not None:
        value["version"] = version
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def write_source_copy(piece: GoPiece, cache_root: Path, destination: Path, env: Mapping[str, str], log: TextIO) -> None:
    """A writable copy of the module (module-cache files are read-only) with the piece's generated files in it."""
    info = download_module(piece.module, piece.version, env, log)
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(info["Dir"], destination)
    for path in [destination, *destination.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    for target, generated in piece.generated.items():
        text = (destination / generated.source).read_text(encoding="utf-8")
        (destination / target).write_text(generated_text(text, generated.version), encoding="utf-8")
        log.write(f"generated {target} from {generated.source} (version {generated.version})\n")
    del cache_root


def build_chart(piece: ChartPiece, cache_root: Path, say: Say = _say) -> tuple[Path, bool]:
    """Copy a chart out of its module and make it the release's, unless it is current."""
    directory = cache.piece_dir(cache_root, piece)
    log_file = cache.log_path(cache_root, piece)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    label = f"{piece.name} {piece.version}"
    expected = cache.declared_inputs(piece)
    if cache.is_current(piece, directory, expected):
        say(f"{label}: up to date ({directory})")
        return directory, False
    with log_file.open("w", encoding="utf-8") as log:
        try:
            info = download_module(piece.module, piece.version, go_environment(cache_root, "local"), log)
        except (subprocess.CalledProcessError, OSError, ValueError) as error:
            raise BuildError(piece, f"cannot fetch {piece.module}@{piece.version} ({error})", log_file) from None
        source = Path(info["Dir"]) / piece.path
        say(f"{label}: preparing the chart from {piece.module}@{piece.version} {piece.path}")
        chart_version, app_version = piece.filled_versions()
        try:
            with _fresh(directory) as scratch:
                chart.prepare(source, scratch, piece.template, piece.filled_values(), chart_version, app_version)
                log.write(f"prepared {source} -> {directory}\n")
        except (chart.ChartError, OSError) as error:
            log.write(f"{error}\n")
            raise BuildError(piece, str(error), log_file) from None
    cache.write_record(directory, expected)
    say(f"{label}: ready ({directory})")
    return directory, True


@contextlib.contextmanager
def build_lock(cache_root: Path, say: Say = _say) -> Iterator[None]:
    """One build at a time per cache (the machine has few cores; go itself keeps its caches consistent)."""
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / "build.lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another build to finish (lock: {cache_root / 'build.lock'})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def selected(names: Sequence[str], versions: Versions) -> list[GoPiece | ChartPiece]:
    """The pieces to build: the names given (`all`: every Go piece and chart), else the file's default."""
    if not names:
        names = versions.default
    elif "all" in names:
        names = [name for name, piece in versions.pieces.items() if isinstance(piece, (GoPiece, ChartPiece))]
    result: list[GoPiece | ChartPiece] = []
    for name in names:
        piece = versions.pieces.get(name) or versions.provider(name)
        if piece is None:
            raise VersionsError(f"{name!r} is no piece of rig/versions.toml (pieces: {', '.join(versions.pieces)})")
        if piece.kind == "unavailable":
            raise VersionsError(f"{name}: unavailable: {getattr(piece, 'reason', '')}")
        if not isinstance(piece, (GoPiece, ChartPiece)):
            raise VersionsError(f"{name}: a {piece.kind} piece: rig.build does not build it (the rig installs it)")
        if piece not in result:
            result.append(piece)
    return result


def listing(versions: Versions, cache_root: Path) -> list[str]:
    """One line per piece: name, version, state, what it provides."""
    lines = []
    for name, piece in versions.pieces.items():
        if isinstance(piece, GoPiece):
            state = "built" if cache.tool(next(iter(piece.binaries)), cache_root, versions) else "not built"
            what = ", ".join(piece.binaries)
        elif isinstance(piece, ChartPiece):
            state = "ready" if cache.chart(piece.name, cache_root, versions) else "not prepared"
            what = "chart"
        elif piece.kind == "wheel":
            state, what = "installed by the rig", ", ".join(getattr(piece, "binaries", {}))
        else:
            state, what = "UNAVAILABLE", ", ".join(getattr(piece, "provides", ()))
        default = " (default)" if name in versions.default else ""
        lines.append(f"{name:<20} {piece.version:<40} {state:<22} {what}{default}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rig.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("pieces", nargs="*", help="pieces, binaries or charts to build; `all`; default: the file's")
    parser.add_argument("--list", action="store_true", help="print every piece, its version and state")
    parser.add_argument("--for-tests", action="store_true", help="what `make test` runs (see the module docstring)")
    args = parser.parse_args(argv)
    try:
        versions = load()
        pieces = selected(args.pieces, versions)
    except VersionsError as error:
        _say(f"error: {error}")
        return 2
    cache_root = cache.root()
    if args.list:
        for line in listing(versions, cache_root):
            print(line)
        return 0
    strict = not args.for_tests or on_ci()
    if shutil.which("go") is None:
        names = ", ".join(piece.name for piece in pieces)
        if strict:
            _say(f"error: `go` is not on the PATH: cannot build {names} (Go >= 1.26 and its module proxy)")
            return 1
        _say(f"`go` is not on the PATH: not building {names}; the tests that need them skip (CI=true fails them)")
        return 0
    _say(f"{len(pieces)} piece(s) into {cache_root}: {', '.join(piece.name for piece in pieces)}")
    failures: list[BuildError] = []
    started = time.monotonic()
    # Nothing to build: say so without waiting for another build's lock (a long rig build must not hold up the
    # suite's `make tools`).
    if all(up_to_date(piece, cache_root) for piece in pieces):
        for piece in pieces:
            _say(f"{piece.name} {piece.version}: up to date ({cache.piece_dir(cache_root, piece)})")
        _say(f"done in {elapsed(time.monotonic() - started)}")
        return 0
    with build_lock(cache_root):
        for piece in pieces:
            try:
                if isinstance(piece, GoPiece):
                    build_go(piece, cache_root)
                else:
                    build_chart(piece, cache_root)
            except BuildError as failure:
                _say(f"FAILED: {failure}")
                failures.append(failure)
    if failures:
        for failure in failures:
            _say(f"failed: {failure}")
        if strict:
            return 1
        _say("the tests that need these skip (CI=true fails them)")
        return 0
    _say(f"done in {elapsed(time.monotonic() - started)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

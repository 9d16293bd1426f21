"""The real upstream tools and charts for a test (rig/versions.toml, built by `make tools`).

`real_tool("egctl")` is the built binary at its pinned version; `real_chart("gateway-helm")` the prepared chart. When
one is not built (no Go, a failed build) the test skips on a laptop and fails on CI (`CI` set), as the Redis tests do,
so CI never goes green without them.
"""

from __future__ import annotations

from pathlib import Path

from rig import cache
from rig.versions import load
from tests.support.ci import skip_or_fail


def _missing(name: str) -> None:
    piece = load().provider(name)
    version = piece.version if piece is not None else "?"
    skip_or_fail(
        f"{name} {version} is not built: `make tools` builds it into {cache.root()} (needs Go and its module proxy; "
        f"`venv/bin/python -m rig.build {piece.name if piece is not None else name}` says why it fails)"
    )


def real_tool(binary: str) -> Path:
    """The path of a pinned upstream binary; skips (laptop) or fails (CI) when it is not built."""
    path = cache.tool(binary)
    if path is None:
        _missing(binary)
    assert path is not None
    return path


def real_chart(name: str) -> Path:
    """The directory of a pinned upstream chart, ready for `helm template`; skips or fails when not prepared."""
    path = cache.chart(name)
    if path is None:
        _missing(name)
    assert path is not None
    return path

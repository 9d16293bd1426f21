"""The rig: pinned upstream pieces built from the Go module proxy into a cache outside the repository.

`rig/versions.toml` pins them, `python -m rig.build` builds them (`rig/build.py`), `rig.cache.tool()` and
`rig.cache.chart()` find them. Issue 31's real-tools tests use the tools today; the rig of issue 28 (the whole path on
real binaries) grows here. Not part of the published package (pyproject.toml lists its packages).
"""

"""The rig: pinned upstream pieces built from the Go module proxy into a cache outside the repository, and a real
single-node cluster on this machine built from them.

`rig/versions.toml` pins them, `python -m rig.build` builds them (`rig/build.py`), `rig.cache.tool()` and
`rig.cache.chart()` find them; the real-tools tests use the tools, and `python -m rig up` (`make rig`) brings up the
node (rig/node.py), its images (rig/images.py, rig/catalog.py) and its checks (rig/checks.py), `python -m rig down`
takes it apart (rig/teardown.py). Not part of the published package (pyproject.toml lists its packages).
"""

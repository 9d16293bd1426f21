"""The wire size of xDS resources given as JSON, with Envoy protos newer than the suite's own.

The suite's `xds-protos` (1.71, the newest line on protobuf 5, which pulumi-policy pins) lacks fields Envoy Gateway
v1.9.0 writes (`DirectResponseAction.body_format`, `CelExpression.cel_expr_parsed`), so a whole route configuration
cannot be serialized in the suite's own interpreter. This module runs as a script in a side virtualenv with
`xds-protos` `SIDE_XDS_PROTOS` (protobuf 7) that `side_python` makes once in the tools cache:

    python proto_size.py < {"routes": [RouteConfiguration JSON, ...], "clusters": [Cluster JSON, ...]}

prints `{"routes": <bytes>, "clusters": <bytes>}`. Listeners are not given to it: Envoy Gateway's custom_response
matcher names `HttpResponseLocalReplyMatchInput`, which no xds-protos release has (1.85.0 checked).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

SIDE_XDS_PROTOS = "1.85.0"


def import_types(value: Any) -> None:
    """Import the generated modules of every `@type` in `value`, so the JSON parser resolves each Any."""
    if isinstance(value, dict):
        type_url = value.get("@type")
        if isinstance(type_url, str):
            package = type_url.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            module = importlib.import_module(package)
            for found in pkgutil.iter_modules(module.__path__):
                if found.name.endswith("_pb2"):
                    importlib.import_module(f"{package}.{found.name}")
        for item in value.values():
            import_types(item)
    elif isinstance(value, list):
        for item in value:
            import_types(item)


def _main() -> None:
    from envoy.config.cluster.v3 import cluster_pb2
    from envoy.config.route.v3 import route_pb2
    from google.protobuf import json_format

    given = json.load(sys.stdin)
    sizes = {}
    for kind, message_class in (("routes", route_pb2.RouteConfiguration), ("clusters", cluster_pb2.Cluster)):
        total = 0
        for item in given[kind]:
            item = {key: value for key, value in item.items() if key != "@type"}
            import_types(item)
            total += json_format.ParseDict(item, message_class()).ByteSize()
        sizes[kind] = total
    json.dump(sizes, sys.stdout)


def side_python(cache_root: Path) -> Path:
    """The side virtualenv's python (made on first use: `xds-protos==SIDE_XDS_PROTOS` from PyPI)."""
    directory = cache_root / "venvs" / f"xds-protos-{SIDE_XDS_PROTOS}"
    python = directory / "bin" / "python"
    if not (directory / ".installed").is_file():
        venv.EnvBuilder(with_pip=True, clear=True).create(directory)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"xds-protos=={SIDE_XDS_PROTOS}"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:  # no PyPI here: skip on a laptop, fail on CI
            from tests.support.ci import skip_or_fail

            skip_or_fail(f"xds-protos {SIDE_XDS_PROTOS} could not be installed: {done.stderr.strip()[-500:]}")
        (directory / ".installed").write_text(SIDE_XDS_PROTOS, encoding="utf-8")
    return python


def wire_sizes(python: Path, routes: list[dict[str, Any]], clusters: list[dict[str, Any]]) -> dict[str, int]:
    """{"routes": bytes, "clusters": bytes} of these resources, serialized by the side virtualenv."""
    done = subprocess.run(
        [str(python), __file__],
        input=json.dumps({"routes": routes, "clusters": clusters}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"proto_size failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


if __name__ == "__main__":
    _main()

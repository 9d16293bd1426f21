"""Print the Envoy Gateway and Agent Router versions the program deploys by default (`make crds` fetches
their CRDs). Standard library only: reads the defaults of `PlatformSettings` in core/settings/platform.py with `ast`,
so it runs before any virtualenv exists (CI fetches the CRDs first). tests/test_crd_versions.py checks that
it agrees with the pydantic model.

    python3 scripts/deployed_versions.py   # prints: ENVOY_GATEWAY_VERSION=v1.9.3 AGENT_ROUTER_VERSION=v1.2.1
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SETTINGS = Path(__file__).resolve().parents[1] / "core" / "settings" / "platform.py"
FIELDS = {"envoy_gateway_version": "ENVOY_GATEWAY_VERSION", "agent_router_version": "AGENT_ROUTER_VERSION"}


def deployed_versions(source: str) -> dict[str, str]:
    """{ENVOY_GATEWAY_VERSION: ..., AGENT_ROUTER_VERSION: ...} from the `default=` of the two fields."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "PlatformSettings":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id in FIELDS:
                    call = item.value
                    if isinstance(call, ast.Call):
                        for keyword in call.keywords:
                            if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                                found[FIELDS[item.target.id]] = str(keyword.value.value)
    missing = sorted(set(FIELDS.values()) - set(found))
    if missing:
        raise ValueError(f"no literal default for {', '.join(missing)} in PlatformSettings")
    return found


if __name__ == "__main__":
    versions = deployed_versions(SETTINGS.read_text(encoding="utf-8"))
    print(" ".join(f"{key}={value}" for key, value in versions.items()))
    sys.exit(0)

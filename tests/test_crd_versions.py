"""Which CRD versions the schema tests validated against, named honestly (issue 10, defect 8).

The shared CRDs are pinned at Envoy Gateway v1.9.0 and Agent Router v1.1.0 (read-only); the program deploys
v1.9.3 and v1.2.1 by default. `make crds` fetches the deployed versions (scripts/fetch-crds.sh, versions
from scripts/deployed_versions.py); the test summary names what was validated and whether it differs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from core.settings import PlatformSettings, version_tuple
from tests.support.crds import crd_versions, deployed_versions, versions_line

ROOT = Path(__file__).resolve().parents[1]


def test_the_fetch_script_reads_the_deployed_versions_from_the_settings():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "deployed_versions.py")], capture_output=True, text=True, check=True
    )
    platform = PlatformSettings()
    assert done.stdout.split() == [
        f"ENVOY_GATEWAY_VERSION={platform.envoy_gateway_version}",
        f"AGENT_ROUTER_VERSION={platform.agent_router_version}",
    ]
    script = (ROOT / "scripts" / "fetch-crds.sh").read_text()
    assert 'python3 "${repo_root}/scripts/deployed_versions.py"' in script
    assert 'eg_tag="${EG_VERSION:-${eg_default}}"' in script and 'aigw_tag="${AR_VERSION:-${ar_default}}"' in script


def test_recorded_checksums_cover_the_shared_pinned_versions():
    lines = (ROOT / "scripts" / "crds.sha256").read_text().splitlines()
    gateway = [line for line in lines if "prometheus-operator/" not in line]
    assert len(gateway) == 11  # EnvoyExtensionPolicy since the duplicate-key guard (core/body_guard.py)
    assert all("@v1.9.0/" in line or "@v1.1.0/" in line for line in gateway)
    # The PrometheusRule and PodMonitor CRDs of the optional budget alerts (tests/test_monitoring.py,
    # tests/test_monitors.py), at their pinned tag.
    assert [line.split()[1] for line in lines if line not in gateway] == [
        "prometheus-operator/prometheus-operator@v0.93.0/example/prometheus-operator-crd/"
        "monitoring.coreos.com_prometheusrules.yaml",
        "prometheus-operator/prometheus-operator@v0.93.0/example/prometheus-operator-crd/"
        "monitoring.coreos.com_podmonitors.yaml",
    ]


def test_versions_are_read_from_the_folder_names(tmp_path):
    for name in ("envoy-gateway-v1.9.0", "ai-gateway-v1.1.0", ".fetch.x", "README.md-dir"):
        (tmp_path / name).mkdir()
    assert crd_versions(tmp_path) == {"Envoy Gateway": ["v1.9.0"], "Agent Router": ["v1.1.0"]}


def test_the_summary_says_when_the_validated_versions_differ_from_the_deployed_ones():
    shared = {"Envoy Gateway": ["v1.9.0"], "Agent Router": ["v1.1.0"]}
    line = versions_line(shared, {"Envoy Gateway": "v1.9.3", "Agent Router": "v1.2.1"})
    assert line == (
        "CRD versions: validated against Envoy Gateway v1.9.0 and Agent Router v1.1.0; the program deploys "
        "Envoy Gateway v1.9.3 and Agent Router v1.2.1 by default, whose CRDs were not used here (`make crds` "
        "fetches them; then export AGENT_BUDGETS_CRDS=.crds)"
    )
    same = versions_line({"Envoy Gateway": ["v1.9.3"], "Agent Router": ["v1.2.1"]}, deployed_versions())
    assert same.endswith("Agent Router v1.2.1, the versions the program deploys by default")


def _recorded_releases() -> dict[str, int]:
    """`<repo>@<tag>` → how many files scripts/crds.sha256 records for it."""
    counts: dict[str, int] = {}
    for line in (ROOT / "scripts" / "crds.sha256").read_text().splitlines():
        release = line.split()[1].split("/", 2)
        key = f"{release[0]}/{release[1]}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_ci_requires_pinned_crds_exactly_when_the_deployed_versions_have_recorded_sums():
    """The workflow must not call unpinned files pinned, nor demand pins that scripts/crds.sha256 lacks."""
    platform = PlatformSettings()
    eg, ar = platform.envoy_gateway_version, platform.agent_router_version
    agent_router_repo = "theagentrouter/agent-router" if version_tuple(ar) >= (1, 2, 0) else "envoyproxy/ai-gateway"
    recorded = _recorded_releases()
    pinned = recorded.get(f"envoyproxy/gateway@{eg}") == 6 and recorded.get(f"{agent_router_repo}@{ar}") == 4
    workflow = (ROOT / ".github" / "workflows" / "pull-request.yml").read_text()
    fetch_step = workflow[workflow.index("- name: Fetch the CRDs (make crds)") :].split("\n      - ", 1)[0]
    requires = 'AGENT_BUDGETS_CRDS_REQUIRE_PINNED: "1"' in fetch_step
    assert requires == pinned, "set (or drop) AGENT_BUDGETS_CRDS_REQUIRE_PINNED on the fetch step"
    if not pinned:
        comments = re.sub(r"\s*\n\s*#\s*", " ", workflow)
        assert f"Envoy Gateway {eg} and Agent Router {ar}, have no recorded sums yet" in comments
        assert "fetched UNPINNED" in comments

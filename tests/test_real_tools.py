"""The real upstream tools the suite runs are the pinned ones, stamped as their releases stamp them.

Built by `make tools` (rig/build.py) from rig/versions.toml; not built: skipped on a laptop, a failure on CI
(tests/support/real_tools.py). Expected values come from the versions file, so a bump of a pin is checked too.
"""

from __future__ import annotations

import re
import subprocess

import yaml

from rig.versions import GoPiece, load
from tests.support.real_tools import real_chart, real_tool


def _run(*command: object) -> str:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, check=True).stdout


def _piece(name: str) -> GoPiece:
    piece = load().pieces[name]
    assert isinstance(piece, GoPiece)
    return piece


def test_egctl_reports_the_pinned_envoy_gateway_version():
    """`egctl version --remote=false` prints the client version only (envoyproxy/gateway v1.9.0
    internal/cmd/egctl/version.go), which is the envoyGatewayVersion stamp (internal/cmd/version/version.go): unset,
    it prints an empty line. Broken once by building without ldflags: the line was empty."""
    assert _run(real_tool("egctl"), "version", "--remote=false").strip() == _piece("egctl").version


def test_helm_reports_the_pinned_version_and_commit():
    """helm v3.20.2 internal/version/version.go: `helm version` prints version (the Makefile's BINARY_VERSION), the
    commit, the tree state and the Go version. Broken once by building without the version and gitCommit stamps:
    it printed `Version:"v3.20", GitCommit:""`."""
    piece = _piece("helm")
    out = _run(real_tool("helm"), "version")
    assert f'Version:"{piece.version}"' in out
    assert f'GitCommit:"{piece.commit}"' in out
    assert 'GitTreeState:"clean"' in out


def test_promtool_reports_the_prometheus_release_of_its_module_version():
    """prometheus/common v0.72.1 version.Print (promtool --version): `promtool, version <Version> (branch: <Branch>,
    revision: <Revision>)`, then the build tags. The release of module v0.3MM.P is 3.MM.P (prometheus v0.316.0
    scripts/get_module_version.sh); the tags are .promu.yml's. Broken once by building without the ldflags:
    the first line read `promtool, version  (branch: , revision: unknown)`."""
    piece = _piece("promtool")
    minor, patch = re.fullmatch(r"v0\.3(\d\d)\.(\d+)", piece.version).groups()
    out = _run(real_tool("promtool"), "--version")
    assert out.splitlines()[0].startswith(f"promtool, version 3.{int(minor)}.{patch} (branch: HEAD, revision: ")
    assert re.search(rf"^\s*tags:\s+{','.join(piece.tags)}$", out, re.MULTILINE)
    assert piece.tags == ("netgo", "builtinassets")


def test_the_gateway_chart_renders_the_release_image_with_its_crds():
    """The prepared chart (rig/chart.py) renders with Helm as the released chart does: the control plane's image is
    docker.io/envoyproxy/gateway:<tag> (v1.9.0 .github/workflows/release.yaml), the chart label carries the pinned
    version, and the crds subchart is found locally (its CRDs come with --include-crds). Broken once by not setting
    Chart.yaml's versions (rig/chart.py): the label read gateway-helm-v0.0.0-latest."""
    version = load().pieces["gateway-helm"].version
    rendered = _run(
        real_tool("helm"), "template", "eg", real_chart("gateway-helm"), "-n", "envoy-gateway-system", "--include-crds"
    )
    documents = [document for document in yaml.safe_load_all(rendered) if document]
    deployments = {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == "Deployment"}
    deployment = deployments["envoy-gateway"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [container["image"] for container in containers] == [f"docker.io/envoyproxy/gateway:{version}"]
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == f"gateway-helm-{version}"
    crds = {doc["metadata"]["name"] for doc in documents if doc["kind"] == "CustomResourceDefinition"}
    assert {"envoyproxies.gateway.envoyproxy.io", "gateways.gateway.networking.k8s.io"} <= crds

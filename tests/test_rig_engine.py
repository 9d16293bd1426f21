"""The rig's use of the real Pulumi engine and its check of a deployment, without a node: how it reads the engine's
answers (the resource summary, a preview's steps), how it lays out the project copy and its overlay, how it finds
the pieces given by path, how it reads the controllers' conditions, and the plain-text secret scan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rig import engine, program
from rig.by_hand import PIECES, ByHand
from rig.processes import StepError

ROOT = Path(__file__).resolve().parents[1]

UP_OUTPUT = """\
Updating (dev-kubernetes):
     Type                                    Name                 Status
 +   pulumi:pulumi:Stack                     agent-budgets-dev    created (27s)

Outputs:
    gatewayUrl: "http://agent-router.envoy-gateway-system.svc.cluster.local:80"

Resources:
    + 45 created

Duration: 31s
"""


def test_the_resource_summary_is_read_from_the_engines_output():
    assert engine.preview_counts(UP_OUTPUT) == {"created": 45}
    preview = "Resources:\n    ~ 1 to update\n    44 unchanged\n\n"
    assert engine.preview_counts(preview) == {"to update": 1, "unchanged": 44}
    assert engine.preview_counts("no summary") == {}
    upgrade = "Resources:\n    ~ 5 updated\n    +-1 replaced\n    6 changes. 34 unchanged\n\nDuration: 10s\n"
    assert engine.preview_counts(upgrade) == {"updated": 5, "replaced": 1, "changes": 6, "unchanged": 34}


def test_a_previews_changes_are_its_steps_that_are_not_same():
    steps = {
        "steps": [
            {"op": "same", "urn": "urn:a"},
            {"op": "update", "urn": "urn:btp"},
            {"op": "read", "urn": "urn:r"},
            {"op": "create", "urn": "urn:new"},
        ]
    }
    assert engine.changed_resources(json.dumps(steps)) == [("update", "urn:btp"), ("create", "urn:new")]


def test_the_secret_scan_names_where_a_value_shows_and_never_the_value():
    found = engine.secrets_seen(
        {"state": "... redis-password-value-123 ...", "log": "nothing here", "outputs": "apikey-abcdefgh"},
        ["redis-password-value-123", "apikey-abcdefgh", "short"],
    )
    assert found == {"state": ["redi..."], "outputs": ["apik..."]}


def test_the_sdk_plugin_versions_are_what_the_virtualenv_holds():
    versions = engine.sdk_plugin_versions(ROOT)
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    assert set(versions) == {"kubernetes", "random"}
    assert f"pulumi-kubernetes>={versions['kubernetes']}" in requirements
    assert f"pulumi-random>={versions['random']}" in requirements


def test_the_project_copy_holds_the_tracked_files_and_the_overlay_merges_into_its_stack_file(tmp_path: Path):
    rig_engine = engine.Engine(run=tmp_path, project_root=ROOT, by_hand=ByHand(tmp_path / "none"))
    copy = rig_engine.copy_project()
    assert (copy / "__main__.py").read_text(encoding="utf-8") == (ROOT / "__main__.py").read_text(encoding="utf-8")
    assert (copy / "venv").resolve() == (ROOT / "venv").resolve()
    assert not (copy / ".git").exists()
    rig_engine.overlay(
        "dev-kubernetes",
        {
            "agent-budgets:kubernetes": {"context": "agent-budgets-rig", "kubeconfig": "/rig/admin.yaml"},
            "agent-budgets:platform": {"images": {"registry": "127.0.0.1:5000"}},
        },
    )
    config = yaml.safe_load((copy / "Pulumi.dev-kubernetes.yaml").read_text(encoding="utf-8"))["config"]
    assert config["agent-budgets:kubernetes"] == {"context": "agent-budgets-rig", "kubeconfig": "/rig/admin.yaml"}
    assert config["agent-budgets:platform"] == {"images": {"registry": "127.0.0.1:5000"}}
    original = yaml.safe_load((ROOT / "Pulumi.dev-kubernetes.yaml").read_text(encoding="utf-8"))["config"]
    assert config["agent-budgets:actors"] == original["agent-budgets:actors"]
    assert original["agent-budgets:kubernetes"]["context"] == "kind-agent-budgets-kubernetes"


def test_a_piece_given_by_path_that_is_missing_is_named_with_where_it_was_expected(tmp_path: Path):
    by_hand = ByHand(tmp_path)
    assert by_hand.missing() == list(PIECES)
    with pytest.raises(StepError, match=r"controller is not at .*bin/controller: the rig takes it by path"):
        by_hand.path("controller")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "controller").write_bytes(b"\0")
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "ai-gateway-helm-v1.1.0.tgz").write_bytes(b"\0")
    (tmp_path / "sources.json").write_text(json.dumps({"controller": {"commit": "c217da8a"}}), encoding="utf-8")
    assert by_hand.describe("controller") == {"path": str(tmp_path / "bin" / "controller"), "commit": "c217da8a"}
    assert by_hand.path("ai-gateway-helm").name == "ai-gateway-helm-v1.1.0.tgz"
    assert "controller" not in by_hand.missing() and "ai-gateway-helm" not in by_hand.missing()


def test_conditions_are_read_from_a_gateway_a_policy_and_a_route():
    gateway = {
        "status": {"conditions": [{"type": "Accepted", "status": "True"}, {"type": "Programmed", "status": "True"}]}
    }
    policy = {
        "status": {"ancestors": [{"conditions": [{"type": "Accepted", "status": "False", "message": "bad key"}]}]}
    }
    route = {"status": {"parents": [{"conditions": [{"type": "ResolvedRefs", "status": "True"}]}]}}
    assert [c["type"] for c in program.conditions_of(gateway)] == ["Accepted", "Programmed"]
    assert program.conditions_of(policy)[0]["message"] == "bad key"
    assert program.conditions_of(route)[0]["type"] == "ResolvedRefs"
    assert program.conditions_of({}) == []


def test_the_e2e_verdicts_are_read_from_what_the_suite_prints():
    from rig import e2e

    output = (
        "tests/e2e/test_e2e_01_metering.py::test_metering e2e: dev stack reachable\n"
        "[PASS] 1. Normal call is metered to the caller's own bucket\n"
        "      actor-a  200  tokens 200\n"
        "      counters: actor-a 0 -> 200\n"
        "PASSED\n"
        "[FAIL] 6. A streamed response is charged when it ends\n"
        "      why: expected 200, got 0\n"
        "===== 1 failed, 1 passed in 12.00s =====\n"
        # The closing report repeats every block: read once.
        "[PASS] 1. Normal call is metered to the caller's own bucket\n"
        "      actor-a  200  tokens 200\n"
    )
    assert e2e.verdicts(output) == [
        {
            "check": 1,
            "title": "Normal call is metered to the caller's own bucket",
            "ok": True,
            "evidence": ["actor-a  200  tokens 200", "counters: actor-a 0 -> 200"],
        },
        {
            "check": 6,
            "title": "A streamed response is charged when it ends",
            "ok": False,
            "evidence": ["why: expected 200, got 0"],
        },
    ]


def test_the_project_copy_is_pointed_at_the_rig_for_the_e2e_suite(tmp_path: Path):
    from rig import e2e
    from rig.layout import Layout

    rig_engine = engine.Engine(run=tmp_path, project_root=ROOT, by_hand=ByHand(tmp_path / "none"))
    rig_engine.copy_project()
    layout = Layout(state=tmp_path / "state", run_root=tmp_path / "run")
    setup = e2e.point_at_the_rig(rig_engine, layout, digest_of="sha256:" + "b" * 64)
    versions = (rig_engine.project / "scripts" / "versions.env").read_text(encoding="utf-8")
    assert "KUBERNETES_KUBE_CONTEXT=agent-budgets-rig" in versions.splitlines()
    assert (rig_engine.project / ".state").resolve() == rig_engine.backend.resolve()
    assert (rig_engine.project / "build" / "probe-image.ref").read_text(encoding="utf-8") == (
        "127.0.0.1:5000/agent-budgets/probe@sha256:" + "b" * 64 + "\n"
    )
    assert setup["probe_image"] == "127.0.0.1:5000/agent-budgets/probe@sha256:" + "b" * 64
    original = (ROOT / "scripts" / "versions.env").read_text(encoding="utf-8")
    assert "KUBERNETES_KUBE_CONTEXT=kind-agent-budgets-kubernetes" in original.splitlines()


def test_after_destroy_only_the_stacks_own_objects_count_as_left():
    """The probe agents `up.sh agent-pods` starts for the e2e suite carry the project's labels but are not the
    stack's (the rig's second run counted them as left after destroy)."""
    from rig import lifecycle

    items = [
        {"kind": "Deployment", "metadata": {"namespace": "agents", "name": "probe-actor-a"}},
        {"kind": "Secret", "metadata": {"namespace": "agent-budgets", "name": "mock-api-key"}},
        {"kind": "Namespace", "metadata": {"name": "agent-budgets"}},
    ]
    assert lifecycle.stack_objects_left(items) == ["Namespace//agent-budgets", "Secret/agent-budgets/mock-api-key"]
    assert lifecycle.stack_objects_left(items[:1]) == []

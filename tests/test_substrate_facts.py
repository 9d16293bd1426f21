"""scripts/substrate_facts.py against recorded upstream outputs (written here in the shapes upstream prints).

Shapes and the upstream files they follow (agent-substrate/substrate):
* kubectl-ate single objects: cmd/kubectl-ate/internal/printer/printer.go prints `get actors <name>`
  through ListActorsResponse (`{"actors": [...]}`) and a template as `{"actorTemplates": [...]}` (protojson,
  camelCase, enums as names); newer builds print the bare object.
* ActorTemplate snapshot blocks: demos/counter/counter-template.yaml.tmpl (onPause/onCommit), the
  preferredFidelity shape of other versions, and the oldest CRD form (spec.snapshotsConfig.location,
  demos/multi-template/multi-template.yaml.tmpl at 86e138f).
* Install manifests: manifests/ate-install/ate-api-server.yaml (ko:// images, a Service per component).
* WorkerPool: manifests/ate-install/generated/ate.dev_workerpools.yaml (status.replicas only);
  worker pods labelled ate.dev/worker-pool (cmd/atecontroller WorkerPoolLabelKey).
* EndpointSlices: Kubernetes discovery.k8s.io/v1 as `kubectl get endpointslices -o json` prints them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import substrate_facts as facts  # noqa: E402

SCRIPT = ROOT / "scripts" / "substrate_facts.py"

OLD_ACTOR = {
    "actors": [
        {
            "atespace": "agents",
            "actorTemplateNamespace": "agents",
            "actorTemplateName": "probe-agent",
            "actorId": "actor-a",
            "status": "STATUS_RUNNING",
            "ateomPodNamespace": "agent-budgets-actors",
            "ateomPodName": "probe-agents-7c9d-x",
            "version": "3",
        }
    ]
}
NEW_ACTOR = {
    "metadata": {"atespace": "agents", "name": "actor-a", "uid": "0b5e", "version": "7"},
    "spec": {"actorTemplate": {"atespace": "agents", "name": "probe-agent"}},
    "status": {"state": "ACTOR_STATE_SUSPENDED"},
}
TEMPLATE = {
    "metadata": {"atespace": "agents", "name": "probe-agent"},
    "containers": [{"name": "probe", "image": "localhost:5001/agent-budgets-probe@sha256:" + "b" * 64}],
    "status": {"goldenSnapshotStatus": {"goldenSnapshot": {"name": "probe-agent-golden-1"}}},
}


@pytest.mark.parametrize(
    ("doc", "state"),
    [
        (OLD_ACTOR, "RUNNING"),  # the wrapped shape: issue 10 defect 3
        (NEW_ACTOR, "SUSPENDED"),
        ([NEW_ACTOR], "SUSPENDED"),
        ({"actors": []}, "UNKNOWN"),
        ({}, "UNKNOWN"),
    ],
    ids=["wrapped", "bare-object", "bare-list", "wrapped-empty", "nothing"],
)
def test_actor_state_in_every_shape(doc, state):
    assert facts.actor_state(doc) == state


@pytest.mark.parametrize(
    "doc", [TEMPLATE, {"actorTemplates": [TEMPLATE]}, [TEMPLATE]], ids=["bare-object", "wrapped", "bare-list"]
)
def test_template_facts_in_every_shape(doc):
    assert facts.template_images(doc) == [TEMPLATE["containers"][0]["image"]]
    assert facts.golden_snapshot(doc) == "ready"


def test_golden_snapshot_pending_and_error():
    assert facts.golden_snapshot({"actorTemplates": [{"status": {}}]}) == "pending"
    failed = {"status": {"goldenSnapshotStatus": {"errorMessage": "runsc download failed"}}}
    assert facts.golden_snapshot(failed) == "error: runsc download failed"


def test_has_rules_and_flags():
    assert facts.has_rules({"metadata": {"name": "default"}, "rules": [{"http": {}}]})
    assert not facts.has_rules(facts.parse_json(""))  # "has no egress policy": nothing on stdout
    help_text = (
        "Usage:\n  kubectl-ate delete actor NAME [flags]\n\nFlags:\n      --any-state   delete whatever its state\n"
    )
    assert facts.has_flag(help_text, "--any-state")
    assert not facts.has_flag(help_text.replace("--any-state", "--uid"), "--any-state")
    assert not facts.has_flag("      --any-stateful   x\n", "--any-state")


# --- the snapshot block of the pinned checkout (defect 4) ---------------------------------------------------

SCOPES_TEMPLATE = """metadata:
  atespace: ate-demo-counter
  name: counter
containers:
- name: counter
  image: ko://go.ate.dev/substrate/demos/counter
snapshotConfig:
  onPause: SNAPSHOT_CONTENT_SCOPE_FULL
  # FULL, so a suspend captures memory too.
  onCommit: SNAPSHOT_CONTENT_SCOPE_FULL
  storageLocation: gs://${BUCKET_NAME}/ate-demo-counter/
sandboxConfig:
  sandboxClass: SANDBOX_CLASS_GVISOR
"""
FIDELITY_TEMPLATE = """metadata:
  atespace: ate-demo-counter
  name: counter
snapshotConfig:
  preferredFidelity: SNAPSHOT_FIDELITY_MEMORY
  storageLocation: "gs://${BUCKET_NAME}/ate-demo-counter/"
"""
LEGACY_TEMPLATE = """apiVersion: ate.dev/v1alpha1
kind: ActorTemplate
metadata:
  name: counter
spec:
  snapshotsConfig:
    location: gs://${BUCKET_NAME}/ate-demo-multi-template-counter/
"""


def _checkout(tmp_path, **templates):
    root = tmp_path / "substrate"
    for name, text in templates.items():
        path = root / "demos" / name / f"{name}-template.yaml.tmpl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_snapshot_block_follows_the_checkout_s_on_pause_shape(tmp_path):
    root = _checkout(tmp_path, counter=SCOPES_TEMPLATE)
    assert facts.snapshot_block(root, "gs://ate-snapshots/agent-budgets/") == (
        "snapshotConfig:\n"
        "  onPause: SNAPSHOT_CONTENT_SCOPE_FULL\n"
        "  onCommit: SNAPSHOT_CONTENT_SCOPE_FULL\n"
        "  storageLocation: gs://ate-snapshots/agent-budgets/"
    )


def test_snapshot_block_follows_the_checkout_s_fidelity_shape(tmp_path):
    root = _checkout(tmp_path, counter=FIDELITY_TEMPLATE, legacy=LEGACY_TEMPLATE)
    assert facts.snapshot_block(root, "gs://b/x/") == (
        "snapshotConfig:\n  preferredFidelity: SNAPSHOT_FIDELITY_MEMORY\n  storageLocation: gs://b/x/"
    )


@pytest.mark.parametrize(
    ("templates", "reason"),
    [
        ({"old": LEGACY_TEMPLATE}, "old shape (snapshotsConfig{location}"),
        ({"a": SCOPES_TEMPLATE, "b": FIDELITY_TEMPLATE}, "use two snapshot shapes"),
        ({}, "no ActorTemplate with a snapshotConfig block"),
    ],
)
def test_snapshot_block_refuses_a_ref_it_cannot_write_for(tmp_path, templates, reason):
    root = _checkout(tmp_path, **templates)
    with pytest.raises(facts.CheckoutError, match=reason.replace("(", r"\(").replace("{", r"\{")):
        facts.snapshot_block(root, "gs://b/x/", "v1.0.0-rc.1")


# --- does the checkout's installer deploy the IdP? (defect 1) ----------------------------------------------

IDP_MANIFEST = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: ate-idp-server
  namespace: ate-system
spec:
  template:
    spec:
      containers:
      - name: ate-idp-server
        image: ko://go.ate.dev/substrate/cmd/ate-idp-server
        args: ["--listen-address=:8443"]
---
apiVersion: v1
kind: Service
metadata:
  name: idp
  namespace: ate-system
spec:
  ports:
  - port: 443
    targetPort: 8443
"""
API_MANIFEST = """apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: ate-system
spec:
  clusterIP: None
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ate-api-server
spec:
  template:
    spec:
      containers:
      - name: ate-api-server
        image: ko://github.com/agent-substrate/substrate/cmd/ateapi
"""


def _install(tmp_path, **files):
    root = tmp_path / "substrate"
    for name, text in files.items():
        path = root / "manifests" / "ate-install" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_install_that_deploys_the_idp_passes(tmp_path):
    root = _install(tmp_path, **{"ate-api-server.yaml": API_MANIFEST, "idp/ate-idp-server.yaml": IDP_MANIFEST})
    assert facts.idp_install_problem(root) is None


@pytest.mark.parametrize(
    ("files", "missing"),
    [
        ({"ate-api-server.yaml": API_MANIFEST}, "no workload running cmd/ate-idp-server and no Service idp"),
        ({"x.yaml": IDP_MANIFEST.split("---")[0]}, "have no Service idp"),
        ({"x.yaml": IDP_MANIFEST.split("---")[1]}, "have no workload running cmd/ate-idp-server"),
        # A Service idp in a Deployment's labels is not a Service named idp.
        ({"x.yaml": IDP_MANIFEST.replace("  name: idp\n", "  name: idp-metrics\n")}, "have no Service idp"),
    ],
)
def test_an_install_without_the_idp_is_refused_with_what_to_do(tmp_path, files, missing):
    problem = facts.idp_install_problem(_install(tmp_path, **files), "v1.0.0-rc.1")
    assert problem is not None and missing in problem
    assert "every actor call would get 401" in problem and "SUBSTRATE_REF in scripts/versions.env" in problem


def test_ready_endpoints_counts_what_discovery_v1_calls_ready():
    slices = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "idp-abcde", "labels": {"kubernetes.io/service-name": "idp"}},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["10.244.0.7"], "conditions": {"ready": True, "serving": True}},
                    {"addresses": ["10.244.0.8"], "conditions": {"ready": False, "terminating": True}},
                    {"addresses": ["10.244.0.9"]},  # no conditions: an unknown state, treated as ready
                ],
            }
        ],
    }
    assert facts.ready_endpoints(slices) == 2
    assert facts.ready_endpoints({"items": [{"endpoints": None}]}) == 0


# --- WorkerPool readiness from its own status (defect 5) -----------------------------------------------------


def _pool(replicas, reported, generation=2, observed=None):
    status = {"replicas": reported}
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "apiVersion": "ate.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": "probe-agents", "namespace": "agent-budgets-actors", "generation": generation},
        "spec": {"replicas": replicas, "ateomImage": "localhost:5001/ateom-gvisor@sha256:" + "a" * 64},
        "status": status,
    }


def _pods(*ready):
    return {
        "items": [
            {
                "metadata": {"name": f"w{n}", "labels": {"ate.dev/worker-pool": "probe-agents"}},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ok else "False"}]},
            }
            for n, ok in enumerate(ready)
        ]
    }


@pytest.mark.parametrize(
    ("pool", "pods", "ready", "detail"),
    [
        (_pool(4, 4), _pods(True, True, True, True), True, "4/4 worker pods ready, WorkerPool status.replicas=4"),
        (_pool(4, 4), _pods(True, True, True, False), False, "3/4 worker pods ready"),
        (_pool(4, 2), _pods(True, True), False, "status.replicas=2"),
        (_pool(4, 4, generation=3, observed=2), _pods(*[True] * 4), False, "has not seen generation 3"),
        ({}, {}, False, "0/0 worker pods ready"),
    ],
)
def test_workerpool_progress(pool, pods, ready, detail):
    got_ready, got_detail = facts.workerpool_progress(pool, pods)
    assert got_ready is ready and detail in got_detail


def test_a_terminating_pod_is_not_a_ready_worker():
    pods = _pods(True)
    pods["items"][0]["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    assert facts.workerpool_progress(_pool(1, 1), pods) == (
        False,
        "0/1 worker pods ready, WorkerPool status.replicas=1",
    )


# --- the command line scripts/up.sh uses --------------------------------------------------------------------


def _run(*args, stdin=""):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=30, check=False
    )


def test_command_line_queries():
    assert _run("actor-state", stdin=json.dumps(OLD_ACTOR)).stdout == "RUNNING\n"
    assert _run("images", stdin=json.dumps({"actorTemplates": [TEMPLATE]})).stdout.strip().endswith("b" * 64)
    assert _run("has-rules", stdin="").stdout == "no\n"
    assert _run("has-flag", "--any-state", stdin="  --any-state  x\n").returncode == 0
    pool = _run("workerpool", stdin=json.dumps({"pool": _pool(1, 1), "pods": _pods(True)}))
    assert (pool.returncode, pool.stdout) == (0, "1/1 worker pods ready, WorkerPool status.replicas=1\n")
    assert _run("ready-endpoints", stdin=json.dumps({"items": []})).stdout == "0\n"
    unknown = _run("nonsense")
    assert unknown.returncode == 2 and "unknown query 'nonsense'" in unknown.stderr


def test_command_line_checkout_queries(tmp_path):
    root = _checkout(tmp_path, counter=SCOPES_TEMPLATE)
    block = _run("snapshot-block", str(root), "gs://ate-snapshots/agent-budgets/", "v9")
    assert block.returncode == 0 and block.stdout.splitlines()[0] == "snapshotConfig:"
    refused = _run("idp-install", str(root), "v9")
    assert refused.returncode == 1 and "Substrate v9's install manifests" in refused.stderr

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

import base64
import http.server
import importlib.util
import json
import shutil
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.support.tls_proxy import issue_server_certificate

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

# An install that deploys the IdP itself (a fixture: no Substrate version found does).
IDP_MANIFEST = (ROOT / "tests/fixtures/substrate/installer/manifests/ate-install/ate-idp-server.yaml").read_text()
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
    assert _run("idp-design", str(root)).stdout == "absent\tno cmd/ate-idp-server/main.go\n"
    missing = _run("go-module", str(root))
    assert missing.returncode == 1 and "no module line in" in missing.stderr  # no go.mod: not a checkout


# --- the IdP: which design the checkout has (issue 16) ------------------------------------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "substrate"


def _fixture_checkout(tmp_path, design):
    root = tmp_path / design
    shutil.copytree(FIXTURES / "common", root)
    shutil.copytree(FIXTURES / design, root, dirs_exist_ok=True)
    return root


@pytest.mark.parametrize(
    ("design", "module"),
    [
        ("pool", "github.com/agent-substrate/substrate"),
        ("jwks-file", "go.ate.dev/substrate"),
        ("absent", "go.ate.dev/substrate"),
    ],
)
def test_idp_design_and_module_of_each_fixture(tmp_path, design, module):
    root = _fixture_checkout(tmp_path, design)
    assert facts.idp_design(root)[0] == design
    assert facts.go_module(root) == module
    done = _run("idp-design", str(root))
    assert done.returncode == 0 and done.stdout.split("\t")[0] == design


def test_a_main_go_of_neither_design_is_unknown_and_says_what_it_declares(tmp_path):
    root = _fixture_checkout(tmp_path, "pool")
    main = root / "cmd/ate-idp-server/main.go"
    main.write_text(main.read_text().replace('"actor-id-jwt-pool"', '"keys-dir"'))
    design, why = facts.idp_design(root)
    assert design == "unknown"
    assert "declares --issuer, --keys-dir, --listen-address, --server-cred-bundle" in why
    main.write_text(
        main.read_text().replace('"keys-dir"', '"actor-id-jwt-pool"') + 'var j = pflag.String("jwks-file", "", "")\n'
    )
    assert facts.idp_design(root)[0] == "unknown"  # both designs at once: neither


@pytest.mark.parametrize(
    ("issuer", "path"),
    [
        ("https://idp.ate-system.svc", "/openid/v1/jwks"),
        ("https://idp.example.com/prod/", "/prod/openid/v1/jwks"),
        ("https://idp.example.com/a/../b", "/b/openid/v1/jwks"),
        ("https://idp.example.com/{tenant}", "/{tenant}/openid/v1/jwks"),
    ],
)
def test_the_jwks_route_under_the_issuer_s_path(issuer, path):
    """As ate-idp-server routes it: the cases of server_test.go TestServesDocumentsUnderIssuerPath @d172cb1d."""
    assert facts.issuer_jwks_path(issuer) == path
    done = _run("issuer-jwks-path", issuer)
    assert done.returncode == 0 and done.stdout.strip() == path


def test_log_attributes_are_not_flags(tmp_path):
    """main.go @d172cb1d logs slog.String("issuer", *issuer): the same shape as a flag declaration."""
    root = _fixture_checkout(tmp_path, "pool")
    main = root / "cmd/ate-idp-server/main.go"
    main.write_text(
        main.read_text()
        + 'func logged() { slog.Info("keys", slog.String("jwks-file", path), slog.String("version", v)) }\n'
    )
    assert facts.declared_flags(main.read_text()) == {
        "issuer",
        "actor-id-jwt-pool",
        "listen-address",
        "server-cred-bundle",
    }
    assert facts.idp_design(root)[0] == "pool"


def test_an_installer_that_deploys_the_idp_wins(tmp_path):
    root = _fixture_checkout(tmp_path, "absent")
    shutil.copytree(FIXTURES / "installer", root, dirs_exist_ok=True)
    assert facts.idp_design(root)[0] == "installer"


# --- actor signing keys: the pool's public half, as Substrate publishes it ---------------------------------


def _pkcs8(key):
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _b64url_int(text):
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def test_public_jwk_of_an_ec_and_an_rsa_authority_matches_the_key():
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwk = facts.public_jwk("1", "ES256", _pkcs8(ec_key))
    numbers = ec_key.public_key().public_numbers()
    assert {k: jwk[k] for k in ("kty", "kid", "use", "alg", "crv")} == {
        "kty": "EC",
        "kid": "1",
        "use": "sig",
        "alg": "ES256",
        "crv": "P-256",
    }
    assert (_b64url_int(jwk["x"]), _b64url_int(jwk["y"])) == (numbers.x, numbers.y)
    assert len(base64.urlsafe_b64decode(jwk["x"] + "=")) == 32  # padded to the coordinate size (jwks.go)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = facts.public_jwk("r", "RS256", _pkcs8(rsa_key))
    assert (jwk["kty"], jwk["e"]) == ("RSA", "AQAB")
    assert _b64url_int(jwk["n"]) == rsa_key.public_key().public_numbers().n
    assert set(jwk) == {"kty", "kid", "use", "alg", "n", "e"}  # never a private parameter
    with pytest.raises(ValueError, match="an EC key with algorithm 'RS256'"):
        facts.public_jwk("1", "RS256", _pkcs8(ec_key))


def _pool_secret(*authorities):
    pool = {
        "Authorities": [
            {"ID": kid, "Algorithm": "ES256", "SigningKeyPKCS8": base64.b64encode(_pkcs8(key)).decode()}
            for kid, key in authorities
        ],
        "ActiveForSigning": authorities[0][0],
    }
    return {"data": {"pool": base64.b64encode(json.dumps(pool).encode()).decode()}}


def test_pool_jwks_and_kids_from_the_secret_sorted_by_kid():
    secret = _pool_secret(
        ("b", ec.generate_private_key(ec.SECP256R1())), ("a", ec.generate_private_key(ec.SECP256R1()))
    )
    pool = facts.secret_value(secret, "pool")
    assert facts.pool_kids(pool) == ["a", "b"]
    jwks = facts.pool_jwks(pool)
    assert [key["kid"] for key in jwks["keys"]] == ["a", "b"] and facts.jwks_kids(jwks) == ["a", "b"]
    done = _run("pool-jwks", "pool", stdin=json.dumps(secret))
    assert done.returncode == 0 and "SigningKeyPKCS8" not in done.stdout and json.loads(done.stdout) == jwks
    assert _run("pool-kids", "pool", stdin=json.dumps(secret)).stdout == "a b\n"
    with pytest.raises(ValueError, match="has no key 'pool'"):
        facts.secret_value({"data": {}}, "pool")
    with pytest.raises(ValueError, match="no keys"):
        facts.jwks_kids({"keys": []})


def test_policy_accepted_reads_every_ancestor():
    def policy(status, message=""):
        condition = {"type": "Accepted", "status": status, "reason": "Accepted", "message": message}
        return {"metadata": {"name": "agent-budgets-jwt"}, "status": {"ancestors": [{"conditions": [condition]}]}}

    assert facts.policy_accepted({"items": [policy("True")]}) == (True, "agent-budgets-jwt: Accepted")
    refused = facts.policy_accepted({"items": [policy("False", "local JWKS ConfigMap a/b not found")]})
    assert refused == (False, "agent-budgets-jwt: Accepted=False local JWKS ConfigMap a/b not found")
    assert facts.policy_accepted({"items": []}) == (False, "no such policy")
    assert facts.policy_accepted({"items": [{"metadata": {"name": "p"}}]}) == (False, "p: no status yet")


# --- the smoke check's fetch, against a real HTTPS server ---------------------------------------------------

_fetch_spec = importlib.util.spec_from_file_location("fetch_jwks", ROOT / "scripts" / "idp" / "fetch_jwks.py")
fetch_jwks = importlib.util.module_from_spec(_fetch_spec)
_fetch_spec.loader.exec_module(fetch_jwks)
JWKS = {"keys": [{"kty": "EC", "kid": "1", "use": "sig", "alg": "ES256", "crv": "P-256", "x": "AA", "y": "AA"}]}


@pytest.fixture(scope="module")
def idp_server(tmp_path_factory):
    """An HTTPS server for `localhost` whose chain is signed by an Ed25519 CA (Substrate's service-DNS CA
    type), serving a JWKS at /openid/v1/jwks; yields (port, CA file, a CA file of another CA)."""
    folder = tmp_path_factory.mktemp("idp")
    issued = issue_server_certificate("localhost", ed25519_ca=True)
    other = issue_server_certificate("localhost")
    (folder / "ca.crt").write_text(issued.ca_pem)
    (folder / "other.crt").write_text(other.ca_pem)
    (folder / "tls.crt").write_text(issued.cert_pem)
    (folder / "tls.key").write_text(issued.key_pem)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(JWKS).encode() if self.path == "/openid/v1/jwks" else b"not found"
            self.send_response(200 if self.path == "/openid/v1/jwks" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], str(folder / "ca.crt"), str(folder / "other.crt")
    server.shutdown()
    server.server_close()


def test_fetch_verifies_the_chain_and_the_host_name(idp_server):
    port, ca, other = idp_server
    good = fetch_jwks.fetch(f"https://localhost:{port}/openid/v1/jwks", ca)
    assert good == {"ok": True, "kids": ["1"], "jwks": JWKS}
    wrong_name = fetch_jwks.fetch(f"https://127.0.0.1:{port}/openid/v1/jwks", ca)
    assert wrong_name["ok"] is False and wrong_name["stage"] == "tls"
    assert "certificate verify failed" in wrong_name["error"] and "127.0.0.1" in wrong_name["error"]
    untrusted = fetch_jwks.fetch(f"https://localhost:{port}/openid/v1/jwks", other)
    assert untrusted["stage"] == "tls" and "certificate verify failed" in untrusted["error"]
    missing = fetch_jwks.fetch(f"https://localhost:{port}/nope", ca)
    assert missing == {"ok": False, "stage": "http", "error": f"HTTP 404 Not Found from https://localhost:{port}/nope"}


def test_smoke_result_reads_the_fetch_line():
    assert facts.smoke_result('{"ok":true,"kids":["1","2"],"jwks":{}}') == (True, "1 2")
    failed = '{"ok":false,"stage":"tls","error":"SSLCertVerificationError: x"}'
    assert facts.smoke_result(failed) == (False, "tls: SSLCertVerificationError: x")
    assert facts.smoke_result("exec format error") == (
        False,
        "output: the smoke pod printed no result (exec format error)",
    )


def test_oidc_issuer_reads_the_api_server_s_discovery_document():
    """What `kubectl get --raw /.well-known/openid-configuration` prints on kind (kubeadm's issuer;
    kubernetes/kubernetes pkg/serviceaccount/openidmetadata.go `openIDMetadata`)."""
    document = {
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }
    assert facts.oidc_issuer(document) == "https://kubernetes.default.svc.cluster.local"
    done = _run("oidc-issuer", stdin=json.dumps(document))
    assert done.returncode == 0 and done.stdout == "https://kubernetes.default.svc.cluster.local\n"
    refused = _run("oidc-issuer", stdin="{}")
    assert refused.returncode == 2 and "names no issuer" in refused.stderr

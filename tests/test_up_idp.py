"""`make up` deploys Substrate's IdP itself (steps substrate-source, substrate-idp, pulumi-stack, jwks-sync).

The steps run for real (bash scripts/up.sh) on a copy of scripts/, with real git on fixture checkouts of each
IdP design (tests/fixtures/substrate) and tests/fake_devcluster.py standing in for kubectl, go, ko and pulumi
(the upstream behaviour it follows is in its docstring). The manifests the steps apply are validated against
the Kubernetes v1.36 JSON schemas of kubernetes-validate (strict: unknown fields refused): kind v0.32.0 and
v0.33.0-alpha default to node image kindest/node:v1.36.1 (kubernetes-sigs/kind
pkg/apis/config/defaults/image.go).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.kubernetes_schema import validate as validate_builtin

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "substrate"
FAKE = REPO / "tests" / "fake_devcluster.py"
VERSIONS = dict(
    re.findall(r"^([A-Z_]+)=(\S*)$", (REPO / "scripts" / "versions.env").read_text(), re.M),
)
CTB = "servicedns.podcert.ate.dev:identity:primary-bundle"
GIT = ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", "-c", "init.defaultBranch=main"]


def signing_pool(*kids: str) -> dict[str, Any]:
    """Secret actor-id-jwt-pool as ate-setup writes it (localjwtauthority.go @fa68a116: PKCS#8 as base64)."""
    authorities = []
    for kid in kids:
        der = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        authorities.append({"ID": kid, "Algorithm": "ES256", "SigningKeyPKCS8": base64.b64encode(der).decode()})
    pool = json.dumps({"Authorities": authorities, "ActiveForSigning": kids[0]})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "actor-id-jwt-pool", "namespace": "ate-system"},
        "data": {"pool": base64.b64encode(pool.encode()).decode()},
    }


def published_jwks(*kids: str) -> dict[str, Any]:
    """ConfigMap actor-id-jwks as ate-controller publishes it (actorjwks_controller.go @496948ed)."""
    keys = [
        {"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256", "x": "AA", "y": "AA"} for kid in kids
    ]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "actor-id-jwks", "namespace": "ate-system"},
        "data": {"jwks.json": json.dumps({"keys": keys})},
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"


class DevEnv:
    """A project copy whose build/substrate is a fixture checkout, and the fake cluster's state."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "project"
        shutil.copytree(REPO / "scripts", self.root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
            shutil.copy(REPO / name, self.root / name)
        for package in ("core", "tools"):
            (self.root / package).symlink_to(REPO / package)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        fake = self.bin / "fake_devcluster.py"
        fake.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        fake.chmod(0o755)
        for tool in ("kubectl", "go", "ko", "pulumi"):
            (self.bin / tool).symlink_to(fake)
        (self.bin / "python3").symlink_to(sys.executable)
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.src = self.root / "build" / "substrate"
        self.seed(namespace("ate-system"), namespace("agent-budgets"), signing_pool("1"), ctb=True)

    def seed(self, *objects: dict[str, Any], ctb: bool = False) -> None:
        path = self.state / "cluster.json"
        state = json.loads(path.read_text()) if path.exists() else {"objects": {}, "pods": {}}
        for obj in objects:
            state["objects"][_key(obj)] = obj
        if ctb:
            bundle = {"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle"}
            state["objects"][f"ClusterTrustBundle//{CTB}"] = {**bundle, "metadata": {"name": CTB}}
        path.write_text(json.dumps(state))
        (self.state / "calls.jsonl").write_text("")

    def cluster(self) -> dict[str, Any]:
        return json.loads((self.state / "cluster.json").read_text())

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        lines = (self.state / "calls.jsonl").read_text().splitlines()
        calls = [json.loads(line) for line in lines]
        return [call for call in calls if tool is None or call["tool"] == tool]

    def applied(self) -> list[dict[str, Any]]:
        """Every document applied, in order."""
        docs = []
        for call in self.calls("kubectl"):
            if "apply" in call["argv"]:
                docs.extend(doc for doc in yaml.safe_load_all(call["stdin"]) if doc)
        return docs

    def checkout(self, *designs: str) -> str:
        """build/substrate: common + the design folders, committed and tagged SUBSTRATE_REF, origin SUBSTRATE_REPO."""
        if self.src.exists():
            shutil.rmtree(self.src)
        shutil.copytree(FIXTURES / "common", self.src)
        for design in designs:
            shutil.copytree(FIXTURES / design, self.src, dirs_exist_ok=True)
        return self.commit("fixture", init=True)

    def commit(self, note: str, init: bool = False) -> str:
        def git(*args: str) -> str:
            return subprocess.run([*GIT, *args], cwd=self.src, check=True, capture_output=True, text=True).stdout

        if init:
            git("init", "-q")
            git("remote", "add", "origin", VERSIONS["SUBSTRATE_REPO"])
        (self.src / "NOTE").write_text(note + "\n")
        git("add", "-A")
        git("commit", "-q", "-m", note)
        git("tag", "-f", VERSIONS["SUBSTRATE_REF"])
        return git("rev-parse", "HEAD").strip()

    def run(self, *steps: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.root / "scripts" / "up.sh"), *steps],
            env={
                "PATH": f"{self.bin}:/usr/bin:/bin",
                "HOME": str(self.state),
                "FAKE_DEVCLUSTER": str(self.state),
                "AB_PYTHON": sys.executable,
                # The fake's IdP is ready at once or never: no test waits for a timeout.
                "IDP_READY_SECONDS": "0",
                **env,
            },
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )

    def stack_mode(self) -> str | None:
        config = yaml.safe_load((self.root / "Pulumi.dev.yaml").read_text())["config"]
        return ((config.get("agent-budgets:substrate") or {}).get("trust") or {}).get("mode")


@pytest.fixture
def env(tmp_path) -> DevEnv:
    return DevEnv(tmp_path)


def _validate(doc: dict[str, Any]) -> None:
    """Strict Kubernetes schema validation; raises with every problem."""
    validate_builtin(doc)


# --- make -n up -----------------------------------------------------------------------------------------


def test_make_n_up_lists_substrate_idp_after_the_install_and_jwks_sync_after_pulumi_up():
    done = subprocess.run(["make", "-n", "up"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    steps = re.findall(r"^bash scripts/up\.sh (\S+)", done.stdout, re.M)
    assert steps == [
        "check-prereqs",
        "kind-cluster",
        "substrate-source",
        "substrate-install",
        "substrate-idp",
        "probe-image",
        "demo-actors",
        "pulumi-stack",
        "pulumi-up",
        "jwks-sync",
        "resume-actors",
        "smoke",
    ]
    listed = re.search(r"^STEPS=\(([^)]*)\)", (REPO / "scripts" / "up.sh").read_text(), re.M).group(1).split()
    assert listed == steps


# --- substrate-source: the detector -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("design", "module", "said"),
    [
        (
            "pool",
            "github.com/agent-substrate/substrate",
            "IdP: pool design (cmd/ate-idp-server/main.go declares --actor-id-jwt-pool)",
        ),
        (
            "jwks-file",
            "go.ate.dev/substrate",
            "IdP: jwks-file design (cmd/ate-idp-server/main.go declares --jwks-file)",
        ),
    ],
)
def test_substrate_source_classifies_the_idp_and_names_the_commit_and_module(env, design, module, said):
    commit = env.checkout(design)
    done = env.run("substrate-source")
    assert done.returncode == 0, done.stderr
    prefix = VERSIONS["SUBSTRATE_EXPECTED_COMMIT_PREFIX"]
    assert f"{VERSIONS['SUBSTRATE_REF']} resolved to {commit} (expected {prefix}…: DIFFERENT)" in done.stdout
    assert f"Go module {module}" in done.stdout
    assert said in done.stdout
    assert "step substrate-idp does" in done.stdout


def test_substrate_source_uses_an_installer_that_deploys_the_idp(env):
    env.checkout("pool", "installer")
    done = env.run("substrate-source")
    assert done.returncode == 0, done.stderr
    assert "IdP: deployed by Substrate's own installer" in done.stdout


# --- substrate-idp: build, Service before Deployment, converge, smoke check -----------------------------


@pytest.mark.parametrize("design", ["pool", "jwks-file"])
def test_substrate_idp_applies_the_service_before_the_deployment_and_checks_the_jwks(env, design):
    env.checkout(design)
    if design == "jwks-file":
        env.seed(published_jwks("1"))
    done = env.run("substrate-idp")
    assert done.returncode == 0, done.stderr
    assert "FALLBACK" not in done.stderr
    # Built once, with the checkout's own ko, from the module go.mod names, into the kind registry.
    [build] = env.calls("ko")
    module = "github.com/agent-substrate/substrate" if design == "pool" else "go.ate.dev/substrate"
    assert build["argv"] == ["build", "--base-import-paths", f"{module}/cmd/ate-idp-server"]
    assert build["env"] == {"KO_DOCKER_REPO": "localhost:5001", "KO_DEFAULTPLATFORMS": "linux/amd64"}
    kinds = [f"{d['kind']}/{d['metadata']['name']}" for d in env.applied()]
    assert kinds.index("Service/idp") < kinds.index("Deployment/ate-idp-server")
    assert kinds.index("ServiceAccount/ate-idp-server") < kinds.index("Deployment/ate-idp-server")
    [deployment] = [d for d in env.applied() if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    keys_flag = (
        "--actor-id-jwt-pool=/run/actor-id-keys/pool.json"
        if design == "pool"
        else "--jwks-file=/run/actor-id-keys/jwks.json"
    )
    assert container["args"] == [
        "--issuer=https://idp.ate-system.svc",
        keys_flag,
        "--server-cred-bundle=/run/servicedns.podcert.ate.dev/credential-bundle.pem",
        "--listen-address=:8443",
    ]
    assert container["image"].startswith("localhost:5001/ate-idp-server@sha256:")
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert all(mount["readOnly"] for mount in container["volumeMounts"])
    volumes = {v["name"]: v["projected"]["sources"][0] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["servicedns"]["podCertificate"]["signerName"] == "servicedns.podcert.ate.dev/identity"
    if design == "pool":
        assert volumes["actor-id-keys"] == {
            "secret": {"name": "actor-id-jwt-pool", "optional": False, "items": [{"key": "pool", "path": "pool.json"}]}
        }
    else:
        assert volumes["actor-id-keys"]["configMap"]["name"] == "actor-id-jwks"
    # The smoke pod projects the ClusterTrustBundle substrate.trust names, and fetches the issuer's JWKS.
    [pod] = [d for d in env.applied() if d["kind"] == "Pod"]
    trust = next(v for v in pod["spec"]["volumes"] if v["name"] == "trust")["projected"]["sources"]
    assert trust == [{"clusterTrustBundle": {"name": CTB, "path": "ca.crt"}}]
    assert pod["spec"]["containers"][0]["command"][2:] == ["https://idp.ate-system.svc/openid/v1/jwks", "/trust/ca.crt"]
    assert "verified against ClusterTrustBundle" in done.stdout and "serves the signing keys [1]" in done.stdout
    assert not (env.root / "build" / "idp-trust-fallback").exists()
    for doc in env.applied():
        _validate(doc)


def test_substrate_idp_rebuilds_only_when_the_checkout_changes(env):
    env.checkout("pool")
    assert env.run("substrate-idp").returncode == 0
    env.seed()
    again = env.run("substrate-idp")
    assert again.returncode == 0, again.stderr
    assert "ate-idp-server is current" in again.stdout
    assert env.calls("ko") == []
    assert [d["kind"] for d in env.applied()] == ["ConfigMap", "Pod"]  # only the smoke check
    env.commit("a newer commit of the same ref")
    env.seed()
    third = env.run("substrate-idp")
    assert third.returncode == 0, third.stderr
    assert len(env.calls("ko")) == 1
    assert [d["kind"] for d in env.applied()][:3] == ["ServiceAccount", "Service", "Deployment"]


def test_a_certificate_signed_before_the_service_existed_fails_the_smoke_check_until_restarted(env):
    """The ordering the step exists for: a pod signed while no Service idp selected it has no
    idp.ate-system.svc name; the smoke check shows the handshake error and what to do, and make up falls
    back; FORCE_IDP_DEPLOY=1 restarts the pod, whose new certificate names the Service."""
    env.checkout("pool")
    assert env.run("substrate-idp").returncode == 0
    state = env.cluster()
    state["pods"]["ate-system/ate-idp-server"]["sans"] = []  # as if signed before Service idp existed
    (env.state / "cluster.json").write_text(json.dumps(state))
    done = env.run("substrate-idp")
    assert done.returncode == 0, done.stderr
    assert "Hostname mismatch, certificate is not valid for 'idp.ate-system.svc'" in done.stderr
    assert "FORCE_IDP_DEPLOY=1 bash scripts/up.sh substrate-idp" in done.stderr
    assert "FALLBACK: Envoy Gateway cannot use Substrate's IdP" in done.stderr
    assert (env.root / "build" / "idp-trust-fallback").read_text().startswith("the IdP's certificate does not verify")
    env.seed()
    fixed = env.run("substrate-idp", FORCE_IDP_DEPLOY="1")
    assert fixed.returncode == 0, fixed.stderr
    assert [c["argv"][4:] for c in env.calls("kubectl") if "restart" in c["argv"]] == [
        ["rollout", "restart", "deployment/ate-idp-server"]
    ]
    assert "serves the signing keys [1]" in fixed.stdout
    assert not (env.root / "build" / "idp-trust-fallback").exists()


def test_jwks_file_design_without_the_published_config_map_falls_back(env):
    env.checkout("jwks-file")
    done = env.run("substrate-idp")
    assert done.returncode == 0, done.stderr
    assert "ConfigMap ate-system/actor-id-jwks does not exist" in done.stderr
    assert "FALLBACK" in done.stderr


# --- the fallback: absent design → localJwks, the ConfigMap filled, switched back later -----------------


def test_without_an_idp_make_up_switches_to_local_jwks_and_fills_the_config_map(env):
    env.checkout("absent")
    done = env.run("substrate-source", "substrate-idp", "pulumi-stack")
    assert done.returncode == 0, done.stderr
    assert "IdP: none make up can deploy (no cmd/ate-idp-server/main.go)" in done.stderr
    assert "switch the dev stack to substrate.trust.mode localJwks" in done.stderr
    assert "FALLBACK: Envoy Gateway cannot use Substrate's IdP: Substrate v" in done.stderr
    assert "SWITCHED stack dev from substrate.trust.mode clusterTrustBundle to localJwks" in done.stderr
    assert env.stack_mode() == "localJwks"
    assert env.calls("ko") == [] and not [d for d in env.applied() if d["kind"] == "Deployment"]
    sets = [c["argv"] for c in env.calls("pulumi") if c["argv"][:2] == ["config", "set"]]
    assert sets == [
        [
            "config",
            "set",
            "--path",
            "agent-budgets:substrate.trust.mode",
            "localJwks",
            "--stack",
            "dev",
            "--non-interactive",
        ]
    ]

    # jwks-sync (after pulumi up): the signing pool's public keys, into the SecurityPolicy's namespace.
    policy = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": {
            "name": "agent-budgets-jwt",
            "namespace": "agent-budgets",
            "labels": {"app.kubernetes.io/part-of": "agent-budgets"},
        },
        "status": {"ancestors": [{"conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]},
    }
    env.seed(policy)
    synced = env.run("jwks-sync")
    assert synced.returncode == 0, synced.stderr
    config_map = env.cluster()["objects"]["ConfigMap/agent-budgets/substrate-actor-jwks"]
    jwks = json.loads(config_map["data"]["jwks"])
    assert [(k["kid"], k["kty"], k["crv"], k["alg"]) for k in jwks["keys"]] == [("1", "EC", "P-256", "ES256")]
    assert "SigningKeyPKCS8" not in config_map["data"]["jwks"] and "d" not in jwks["keys"][0]
    assert "from the public keys of Secret ate-system/actor-id-jwt-pool" in synced.stdout
    assert "Envoy Gateway accepted the SecurityPolicy" in synced.stdout
    assert "bash scripts/up.sh jwks-sync" in synced.stderr
    _validate(config_map)

    # A published key set wins over deriving one from the pool.
    env.seed(published_jwks("7"))
    env.run("jwks-sync")
    assert (
        json.loads(env.cluster()["objects"]["ConfigMap/agent-budgets/substrate-actor-jwks"]["data"]["jwks"])["keys"][0][
            "kid"
        ]
        == "7"
    )


def test_once_the_idp_verifies_the_stack_is_switched_back(env):
    env.checkout("absent")
    assert env.run("substrate-idp", "pulumi-stack").returncode == 0
    assert env.stack_mode() == "localJwks"
    env.checkout("pool")
    env.seed()
    done = env.run("substrate-idp", "pulumi-stack")
    assert done.returncode == 0, done.stderr
    assert "SWITCHED stack dev back from substrate.trust.mode localJwks to clusterTrustBundle" in done.stderr
    assert env.stack_mode() is None
    assert [c["argv"][:4] for c in env.calls("pulumi") if c["argv"][:1] == ["config"]][-1] == [
        "config",
        "rm",
        "--path",
        "agent-budgets:substrate.trust.mode",
    ]


def test_jwks_sync_does_nothing_while_the_idp_is_trusted(env):
    env.checkout("pool")
    done = env.run("jwks-sync")
    assert done.returncode == 0, done.stderr
    assert "uses substrate.trust.mode clusterTrustBundle: Envoy Gateway fetches the keys from the IdP" in done.stdout
    assert env.applied() == []


def test_an_idp_deployed_separately_is_checked_not_deployed(env):
    env.checkout("absent")
    done = env.run("substrate-idp", SUBSTRATE_IDP_DEPLOYED_SEPARATELY="1")
    assert done.returncode == 1
    assert "no Service idp in ate-system" in done.stderr
    assert env.calls("ko") == []

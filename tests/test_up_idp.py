"""`make up` deploys Substrate's IdP itself (steps substrate-source, substrate-idp, pulumi-stack, jwks-sync).

The steps run for real (bash scripts/up.sh) on a copy of scripts/, with real git on fixture checkouts of each
IdP design (tests/fixtures/substrate) and tests/fake_devcluster.py standing in for kubectl, go, ko and pulumi
(the upstream behaviour it follows is in its docstring). Every manifest the steps apply is checked as the
dev cluster would check it (tests/support/kubernetes_schema.py: the strict Kubernetes 1.36 schemas, then the
API server's and the kubelet's own checks).

A run of a step costs a few dozen processes, so one dev environment's life (no IdP and the fallback, then
the pool-design IdP deployed, kept current, broken and mended) runs once per module, each stage on the
cluster the stage before left, and every test asserts on the stage it is about.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.kubernetes_schema import problems

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "substrate"
FAKE = REPO / "tests" / "fake_devcluster.py"
VERSIONS = dict(
    re.findall(r"^([A-Z_]+)=(\S*)$", (REPO / "scripts" / "versions.env").read_text(), re.M),
)
CTB = "servicedns.podcert.ate.dev:identity:primary-bundle"
GIT = ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", "-c", "init.defaultBranch=main"]
MODULES = {"pool": "github.com/agent-substrate/substrate", "jwks-file": "go.ate.dev/substrate"}


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


def security_policy(namespace_name: str, accepted: bool) -> dict[str, Any]:
    """The program's SecurityPolicy as Envoy Gateway reports it (Gateway API PolicyAncestorStatus)."""
    condition = {"type": "Accepted", "status": "True", "reason": "Accepted"}
    if not accepted:
        condition = {
            "type": "Accepted",
            "status": "False",
            "reason": "Invalid",
            "message": f"local JWKS ConfigMap {namespace_name}/actor-keys not found",
        }
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": {
            "name": "agent-budgets-jwt",
            "namespace": namespace_name,
            "labels": {"app.kubernetes.io/part-of": "agent-budgets"},
        },
        "status": {"ancestors": [{"conditions": [condition]}]},
    }


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"


@dataclass(frozen=True)
class Stage:
    """One run of `scripts/up.sh` and what it left: its output, the fake tools' calls, the cluster, build/."""

    done: subprocess.CompletedProcess[str]
    calls: list[dict[str, Any]]
    cluster: dict[str, Any]
    fallback: str | None
    stack_mode: str | None

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        return [call for call in self.calls if call["tool"] == tool]

    @property
    def applied(self) -> list[dict[str, Any]]:
        """Every document applied, in order."""
        docs = []
        for call in self.calls_of("kubectl"):
            if "apply" in call["argv"]:
                docs.extend(doc for doc in yaml.safe_load_all(call["stdin"]) if doc)
        return docs

    def one_applied(self, kind: str) -> dict[str, Any]:
        [doc] = [d for d in self.applied if d["kind"] == kind]
        return doc

    def object(self, kind: str, namespace_name: str, name: str) -> dict[str, Any]:
        return self.cluster["objects"][f"{kind}/{namespace_name}/{name}"]


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
        state = self.cluster() if (self.state / "cluster.json").exists() else {"objects": {}, "pods": {}}
        for obj in objects:
            state["objects"][_key(obj)] = obj
        if ctb:
            bundle = {"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle"}
            state["objects"][f"ClusterTrustBundle//{CTB}"] = {**bundle, "metadata": {"name": CTB}}
        self.save(state)

    def save(self, state: dict[str, Any]) -> None:
        (self.state / "cluster.json").write_text(json.dumps(state))

    def cluster(self) -> dict[str, Any]:
        return json.loads((self.state / "cluster.json").read_text())

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        lines = (self.state / "calls.jsonl").read_text().splitlines()
        calls = [json.loads(line) for line in lines]
        return [call for call in calls if tool is None or call["tool"] == tool]

    def checkout(self, *designs: str) -> str:
        """build/substrate: common + the design folders, committed and tagged SUBSTRATE_REF, origin SUBSTRATE_REPO."""
        if self.src.exists():
            shutil.rmtree(self.src)
        shutil.copytree(FIXTURES / "common", self.src)
        for design in designs:
            shutil.copytree(FIXTURES / design, self.src, dirs_exist_ok=True)
        self.git("init", "-q")
        self.git("remote", "add", "origin", VERSIONS["SUBSTRATE_REPO"])
        return self.commit("fixture")

    def git(self, *args: str) -> str:
        return subprocess.run([*GIT, *args], cwd=self.src, check=True, capture_output=True, text=True).stdout

    def commit(self, note: str) -> str:
        """A new commit, tagged SUBSTRATE_REF; its hash."""
        (self.src / "NOTE").write_text(note + "\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", note)
        self.git("tag", "-f", VERSIONS["SUBSTRATE_REF"])
        return self.git("rev-parse", "HEAD").strip()

    def functions(self, *calls: str) -> list[str]:
        """The last line each call of an up.sh function prints (scripts/up.sh sourced, not run)."""
        script = "\n".join(['source "$1"', *(f"{call} | tail -n1" for call in calls)])
        done = subprocess.run(
            ["bash", "-c", script, "up-functions", str(self.root / "scripts" / "up.sh")],
            env={"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.state), "FAKE_DEVCLUSTER": str(self.state)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        lines = done.stdout.splitlines()
        assert len(lines) == len(calls), done.stderr
        return lines

    def stack(self, **sections: Any) -> None:
        """Merge `agent-budgets:<section>` maps into the project copy's Pulumi.dev.yaml."""
        path = self.root / "Pulumi.dev.yaml"
        document = yaml.safe_load(path.read_text())
        for section, value in sections.items():
            document["config"][f"agent-budgets:{section}"] = value
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    def stack_mode(self) -> str | None:
        config = yaml.safe_load((self.root / "Pulumi.dev.yaml").read_text())["config"]
        return ((config.get("agent-budgets:substrate") or {}).get("trust") or {}).get("mode")

    def run(self, *steps: str, **env: str) -> Stage:
        """The steps, from a fresh call log; what they did and left."""
        (self.state / "calls.jsonl").write_text("")
        done = subprocess.run(
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
        fallback = self.root / "build" / "idp-trust-fallback"
        return Stage(
            done=done,
            calls=self.calls(),
            cluster=self.cluster(),
            fallback=fallback.read_text() if fallback.exists() else None,
            stack_mode=self.stack_mode(),
        )


@pytest.fixture
def env(tmp_path) -> DevEnv:
    return DevEnv(tmp_path)


def _validate(doc: dict[str, Any]) -> None:
    """Everything the cluster would refuse in the document: none."""
    assert problems(doc) == [], f"{doc['kind']}/{doc['metadata']['name']}"


def _ok(stage: Stage) -> None:
    assert stage.done.returncode == 0, stage.done.stderr


# --- the fake cluster ----------------------------------------------------------------------------------


def test_the_fake_applies_over_an_existing_pod_as_the_api_server_does(env):
    """ValidatePodUpdate: only a container's image, a lower activeDeadlineSeconds and added tolerations may
    change; anything else is refused, and an accepted change leaves a finished pod finished (never rerun)."""

    def apply(pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(env.bin / "kubectl"), "--context", "kind-x", "apply", "-f", "-"],
            input=json.dumps(pod),
            env={"PATH": f"{env.bin}:/usr/bin:/bin", "FAKE_DEVCLUSTER": str(env.state)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    container = {"name": "fetch", "image": "python:3.11-alpine", "command": ["python", "-V"]}
    spec = {"restartPolicy": "Never", "activeDeadlineSeconds": 120, "containers": [container]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job", "namespace": "ate-system"}, "spec": spec}
    assert apply(pod).stdout == "pods/job created\n"
    state = env.cluster()
    state["objects"]["Pod/ate-system/job"]["status"] = {"phase": "Succeeded"}
    env.save(state)
    assert apply(pod).stdout == "pod/job unchanged\n"
    newer = {**container, "image": "python:3.12-alpine"}
    changed = {**pod, "spec": {**spec, "containers": [newer], "activeDeadlineSeconds": 60, "tolerations": [{}]}}
    assert apply(changed).stdout == "pod/job configured\n"
    stored = env.cluster()["objects"]["Pod/ate-system/job"]
    assert (stored["spec"], stored["status"]) == (changed["spec"], {"phase": "Succeeded"})
    refused = [
        ({**changed["spec"], "containers": [{**newer, "command": ["python", "-c", "1"]}]}, "spec: Forbidden: pod"),
        ({**changed["spec"], "containers": [newer, {**newer, "name": "two"}]}, "may not add or remove containers"),
        ({**changed["spec"], "activeDeadlineSeconds": 600}, "must be less than or equal to previous value"),
        ({**changed["spec"], "activeDeadlineSeconds": None}, "must not update from a positive integer to nil"),
        ({**changed["spec"], "tolerations": []}, "existing toleration can not be modified"),
    ]
    for new_spec, said in refused:
        done = apply({**pod, "spec": {k: v for k, v in new_spec.items() if v is not None}})
        assert (done.returncode, done.stdout) == (1, ""), new_spec
        assert done.stderr.startswith('The Pod "job" is invalid: ') and said in done.stderr, done.stderr
    assert env.cluster()["objects"]["Pod/ate-system/job"] == stored


# --- make -n up -----------------------------------------------------------------------------------------


def test_make_n_up_lists_substrate_idp_after_the_install_and_jwks_sync_after_pulumi_up():
    env = {key: value for key, value in os.environ.items() if key != "IDENTITY"}
    done = subprocess.run(
        ["make", "-n", "up"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True, env=env
    )
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
    listed = re.search(r"^SUBSTRATE_STEPS=\(([^)]*)\)", (REPO / "scripts" / "up.sh").read_text(), re.M).group(1).split()
    assert listed == steps


# --- substrate-source: the detector -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("design", "said"),
    [
        ("pool", "IdP: pool design (cmd/ate-idp-server/main.go declares --actor-id-jwt-pool)"),
        ("jwks-file", "IdP: jwks-file design (cmd/ate-idp-server/main.go declares --jwks-file)"),
    ],
)
def test_substrate_source_classifies_the_idp_and_names_the_commit_and_module(env, design, said):
    commit = env.checkout(design)
    done = env.run("substrate-source").done
    assert done.returncode == 0, done.stderr
    prefix = VERSIONS["SUBSTRATE_EXPECTED_COMMIT_PREFIX"]
    assert f"{VERSIONS['SUBSTRATE_REF']} resolved to {commit} (expected {prefix}…: DIFFERENT)" in done.stdout
    assert f"Go module {MODULES[design]}" in done.stdout
    assert said in done.stdout
    assert "step substrate-idp does" in done.stdout


def test_substrate_source_uses_an_installer_that_deploys_the_idp(env):
    env.checkout("pool", "installer")
    done = env.run("substrate-source").done
    assert done.returncode == 0, done.stderr
    assert "IdP: deployed by Substrate's own installer" in done.stdout


# --- substrate-idp: what is built and applied ---------------------------------------------------------


def _assert_idp_deployed(stage: Stage, design: str, issuer_path: str = "") -> None:
    """Built once with the checkout's ko, applied Service first, in the detected design, for the stack's issuer
    (https://idp.ate-system.svc and `issuer_path`); every document valid."""
    _ok(stage)
    assert "FALLBACK" not in stage.done.stderr and stage.fallback is None
    [build] = stage.calls_of("ko")
    assert build["argv"] == ["build", "--base-import-paths", f"{MODULES[design]}/cmd/ate-idp-server"]
    assert build["env"] == {"KO_DOCKER_REPO": "localhost:5001", "KO_DEFAULTPLATFORMS": "linux/amd64"}
    kinds = [f"{d['kind']}/{d['metadata']['name']}" for d in stage.applied]
    assert kinds.index("Service/idp") < kinds.index("Deployment/ate-idp-server")
    assert kinds.index("ServiceAccount/ate-idp-server") < kinds.index("Deployment/ate-idp-server")

    deployment = stage.one_applied("Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    keys_flag = {"pool": "--actor-id-jwt-pool=/run/actor-id-keys/pool.json"}.get(
        design, "--jwks-file=/run/actor-id-keys/jwks.json"
    )
    assert container["args"] == [
        f"--issuer=https://idp.ate-system.svc{issuer_path}",
        keys_flag,
        "--server-cred-bundle=/run/servicedns.podcert.ate.dev/credential-bundle.pem",
        "--listen-address=:8443",
    ]
    assert container["image"].startswith("localhost:5001/ate-idp-server@sha256:")
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    # Ready once it serves the key set, on the route Envoy Gateway fetches (under the issuer's path).
    jwks_route = {"path": f"{issuer_path}/openid/v1/jwks", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == jwks_route
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    # Every file flag names a file a read-only volume puts there.
    volumes = {v["name"]: v["projected"] for v in pod["spec"]["volumes"]}
    files = {}
    for mount in container["volumeMounts"]:
        assert mount["readOnly"] is True
        for source in volumes[mount["name"]]["sources"]:
            for item in [*(next(iter(source.values())).get("items") or [])]:
                files[f"{mount['mountPath']}/{item['path']}"] = source
            if "podCertificate" in source:
                files[f"{mount['mountPath']}/{source['podCertificate']['credentialBundlePath']}"] = source
    flagged = [arg.split("=", 1)[1] for arg in container["args"] if arg.split("=", 1)[1].startswith("/")]
    assert set(flagged) == set(files)
    bundle = files["/run/servicedns.podcert.ate.dev/credential-bundle.pem"]["podCertificate"]
    assert bundle == {
        "signerName": "servicedns.podcert.ate.dev/identity",
        "keyType": "ECDSAP256",
        "credentialBundlePath": "credential-bundle.pem",
    }
    keys = volumes["actor-id-keys"]
    assert keys["defaultMode"] == 0o440  # the pool holds private signing keys: the pod's group only
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsGroup"]
    if design == "pool":
        assert keys["sources"] == [
            {
                "secret": {
                    "name": "actor-id-jwt-pool",
                    "optional": False,
                    "items": [{"key": "pool", "path": "pool.json"}],
                }
            }
        ]
    else:
        # Optional: the IdP starts (not ready) before ate-controller publishes the ConfigMap.
        assert keys["sources"] == [
            {
                "configMap": {
                    "name": "actor-id-jwks",
                    "optional": True,
                    "items": [{"key": "jwks.json", "path": "jwks.json"}],
                }
            }
        ]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False

    # Service idp: port 443 (the issuer has no port) to the container's https port; it selects the pod.
    service = stage.one_applied("Service")
    assert service["spec"]["ports"] == [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https"}]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]

    # The smoke pod projects the ClusterTrustBundle substrate.trust names, and fetches the issuer's JWKS.
    smoke = stage.one_applied("Pod")
    assert smoke["metadata"]["namespace"] == "ate-system"
    trust = next(v for v in smoke["spec"]["volumes"] if v["name"] == "trust")["projected"]["sources"]
    assert trust == [{"clusterTrustBundle": {"name": CTB, "path": "ca.crt"}}]
    assert smoke["spec"]["containers"][0]["command"][2:] == [
        f"https://idp.ate-system.svc{issuer_path}/openid/v1/jwks",
        "/trust/ca.crt",
    ]
    assert "verified against ClusterTrustBundle" in stage.done.stdout
    assert "serves the signing keys [1]" in stage.done.stdout
    for doc in stage.applied:
        _validate(doc)


# --- one dev environment's life: no IdP, then the pool design; a stage per run -----------------------------

GATEWAY_NAMESPACE = "models"
JWKS_CONFIG_MAP = "actor-keys"
ISSUER_PATH = "/actors"


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> dict[str, Stage]:
    """A stack whose gateway namespace, key ConfigMap and issuer are not the defaults. First a Substrate
    without an IdP (the fallback), then one with the pool design, which make up deploys and keeps current."""
    env = DevEnv(tmp_path_factory.mktemp("story"))
    issuer = f"https://idp.ate-system.svc{ISSUER_PATH}"
    env.stack(
        gateway={"smallCluster": True, "namespace": GATEWAY_NAMESPACE},
        substrate={
            "issuer": issuer,
            "jwksUri": f"{issuer}/openid/v1/jwks",
            "trust": {"jwksConfigMap": JWKS_CONFIG_MAP},
        },
    )
    env.checkout("absent")
    story = {"no-idp": env.run("substrate-source", "substrate-idp", "pulumi-stack")}
    # pulumi up created the namespace and the SecurityPolicy, which Envoy Gateway refuses: no ConfigMap yet.
    env.seed(namespace(GATEWAY_NAMESPACE), security_policy(GATEWAY_NAMESPACE, accepted=False))
    story["not-accepted"] = env.run("jwks-sync", POLICY_ACCEPT_SECONDS="0")
    env.seed(security_policy(GATEWAY_NAMESPACE, accepted=True))
    story["synced"] = env.run("jwks-sync")
    env.seed(published_jwks("7"))
    story["synced-published"] = env.run("jwks-sync")

    # A Substrate with the pool-design IdP: deployed, verified, and the stack switched back.
    env.checkout("pool")
    story["deployed"] = env.run("substrate-idp", "pulumi-stack")
    story["idle"] = env.run("jwks-sync")

    # The ClusterTrustBundle substrate.trust names does not exist: the smoke pod cannot start.
    state = env.cluster()
    del state["objects"][f"ClusterTrustBundle//{CTB}"]
    env.save(state)
    story["no-trust-bundle"] = env.run("substrate-idp", SMOKE_WAIT_SECONDS="0")
    env.seed(ctb=True)

    # A pod signed while no Service idp selected it (the order the step exists for): its stamp is current.
    state = env.cluster()
    state["pods"]["ate-system/ate-idp-server"]["sans"] = []
    env.save(state)
    # And a smoke pod left by an interrupted run: finished, its log claiming a success that is no longer true, and
    # made by an older make up (another image: a field the API server lets an apply change, leaving the pod
    # finished). A Pod's other fields are immutable and a finished one is not rerun, so the step must replace it.
    stale = story["no-trust-bundle"].one_applied("Pod")
    stale["spec"]["containers"][0]["image"] = "python:3.11-alpine"
    stale["status"] = {"phase": "Succeeded"}
    stale["log"] = json.dumps({"ok": True, "kids": ["1"], "jwks": {"keys": []}})
    env.seed(stale)
    story["stale-certificate"] = env.run("substrate-idp")
    story["forced"] = env.run("substrate-idp", FORCE_IDP_DEPLOY="1")

    # Substrate adds a signing key; the running IdP has not reread its pool yet.
    env.seed(signing_pool("1", "2"))
    story["rotated"] = env.run("substrate-idp")
    env.commit("a newer commit of the same ref")
    story["new-commit"] = env.run("substrate-idp")

    # substrate.trust.mode configMap: the CA is the user's to copy into the gateway namespace.
    env.stack(
        substrate={
            "issuer": issuer,
            "jwksUri": f"{issuer}/openid/v1/jwks",
            "trust": {"mode": "configMap", "configMap": "idp-ca"},
        }
    )
    story["ca-missing"] = env.run("substrate-idp", SMOKE_WAIT_SECONDS="0")
    ca = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "idp-ca", "namespace": GATEWAY_NAMESPACE},
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
    }
    env.seed(ca)
    story["ca-config-map"] = env.run("substrate-idp")
    return story


def test_without_an_idp_make_up_switches_the_stack_to_local_jwks_loudly(story):
    stage = story["no-idp"]
    _ok(stage)
    assert "IdP: none make up can deploy (no cmd/ate-idp-server/main.go)" in stage.done.stderr
    assert "switch the dev stack to substrate.trust.mode localJwks" in stage.done.stderr
    assert "FALLBACK: Envoy Gateway cannot use Substrate's IdP: Substrate v" in stage.done.stderr
    assert "SWITCHED stack dev from substrate.trust.mode clusterTrustBundle to localJwks" in stage.done.stderr
    assert stage.stack_mode == "localJwks"
    assert stage.calls_of("ko") == [] and stage.applied == []
    sets = [c["argv"] for c in stage.calls_of("pulumi") if c["argv"][:2] == ["config", "set"]]
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


def test_jwks_sync_fills_the_config_map_beside_the_policy_and_fails_until_the_policy_is_accepted(story):
    """The ConfigMap goes where the SecurityPolicy is (gateway.namespace) under the name the stack gives
    (substrate.trust.jwksConfigMap): Envoy Gateway reads localJWKS there (buildLocalJWKS @v1.9.0). No actor is
    resumed while the policy is refused, so the step fails until Envoy Gateway accepts it."""
    refused = story["not-accepted"]
    assert refused.done.returncode == 1
    assert f"waiting for Envoy Gateway to accept the SecurityPolicy in {GATEWAY_NAMESPACE}" in refused.done.stderr
    assert f"local JWKS ConfigMap {GATEWAY_NAMESPACE}/actor-keys not found" in refused.done.stderr

    stage = story["synced"]
    _ok(stage)
    config_map = stage.object("ConfigMap", GATEWAY_NAMESPACE, JWKS_CONFIG_MAP)
    assert list(config_map["data"]) == ["jwks"]
    jwks = json.loads(config_map["data"]["jwks"])
    assert [(k["kid"], k["kty"], k["crv"], k["alg"]) for k in jwks["keys"]] == [("1", "EC", "P-256", "ES256")]
    # The public half only: no PKCS#8 and no private scalar, in the ConfigMap or in anything the step printed.
    assert "SigningKeyPKCS8" not in config_map["data"]["jwks"] and "d" not in jwks["keys"][0]
    pool = json.loads(base64.b64decode(stage.object("Secret", "ate-system", "actor-id-jwt-pool")["data"]["pool"]))
    private = pool["Authorities"][0]["SigningKeyPKCS8"]
    assert private[-40:] not in stage.done.stdout + stage.done.stderr + json.dumps(
        stage.cluster["objects"][f"ConfigMap/{GATEWAY_NAMESPACE}/{JWKS_CONFIG_MAP}"]
    )
    assert f"into ConfigMap {GATEWAY_NAMESPACE}/{JWKS_CONFIG_MAP}, key jwks" in stage.done.stdout
    assert "from the public keys of Secret ate-system/actor-id-jwt-pool" in stage.done.stdout
    assert "Envoy Gateway accepted the SecurityPolicy" in stage.done.stdout
    assert "bash scripts/up.sh jwks-sync" in stage.done.stderr
    assert not [k for k in stage.cluster["objects"] if k.startswith("ConfigMap/agent-budgets/")]
    _validate(config_map)


def test_jwks_sync_prefers_the_key_set_substrate_publishes(story):
    stage = story["synced-published"]
    _ok(stage)
    jwks = json.loads(stage.object("ConfigMap", GATEWAY_NAMESPACE, JWKS_CONFIG_MAP)["data"]["jwks"])
    assert [key["kid"] for key in jwks["keys"]] == ["7"]
    assert "from ConfigMap ate-system/actor-id-jwks" in stage.done.stdout


def test_substrate_idp_builds_and_applies_the_service_before_the_deployment_and_checks_the_jwks(story):
    """In mode localJwks too, the smoke check trusts the ClusterTrustBundle: that is how the stack gets back."""
    _assert_idp_deployed(story["deployed"], "pool", ISSUER_PATH)


def test_once_the_idp_verifies_the_stack_is_switched_back_and_jwks_sync_rests(story):
    stage = story["deployed"]
    assert "SWITCHED stack dev back from substrate.trust.mode localJwks to clusterTrustBundle" in stage.done.stderr
    assert stage.stack_mode is None
    assert [c["argv"][:4] for c in stage.calls_of("pulumi") if c["argv"][:1] == ["config"]][-1] == [
        "config",
        "rm",
        "--path",
        "agent-budgets:substrate.trust.mode",
    ]
    idle = story["idle"]
    _ok(idle)
    assert "uses substrate.trust.mode clusterTrustBundle: Envoy Gateway fetches the keys from the IdP" in (
        idle.done.stdout
    )
    assert idle.applied == []


def test_a_smoke_pod_that_cannot_start_names_the_trust_it_projects_and_falls_back(story):
    stage = story["no-trust-bundle"]
    _ok(stage)
    assert "did not finish within 0s (last phase Pending)" in stage.done.stderr
    assert f"it cannot start while ClusterTrustBundle {CTB} cannot be mounted" in stage.done.stderr
    assert stage.fallback.startswith("the smoke pod ate-system/agent-budgets-idp-smoke did not finish")


def test_an_unchanged_idp_is_not_rebuilt_and_a_certificate_without_its_name_falls_back(story):
    """A pod signed while no Service idp selected it has no idp.ate-system.svc name: the smoke check shows the
    handshake error and what to do, and make up falls back. Nothing was rebuilt: the stamp is current. The
    result is the new smoke pod's, not the one a stale pod of an interrupted run still shows."""
    stage = story["stale-certificate"]
    _ok(stage)
    assert "ate-idp-server is current" in stage.done.stdout
    assert stage.calls_of("ko") == []
    assert [d["kind"] for d in stage.applied] == ["ConfigMap", "Pod"]  # only the smoke check
    # The stale pod was deleted (and waited for) before the new one was applied, which ran and failed.
    kubectl = [c["argv"][2:] for c in stage.calls_of("kubectl")]
    delete = ["-n", "ate-system", "delete", "pod", "agent-budgets-idp-smoke", "--ignore-not-found", "--wait=true"]
    apply_pod = next(i for i, c in enumerate(stage.calls_of("kubectl")) if "kind: Pod" in c["stdin"])
    assert delete in kubectl[:apply_pod]
    assert "serves the signing keys" not in stage.done.stdout
    assert "Hostname mismatch, certificate is not valid for 'idp.ate-system.svc'" in stage.done.stderr
    assert "FORCE_IDP_DEPLOY=1 bash scripts/up.sh substrate-idp" in stage.done.stderr
    assert "FALLBACK: Envoy Gateway cannot use Substrate's IdP" in stage.done.stderr
    assert stage.fallback.startswith("the IdP's certificate does not verify")


def test_force_idp_deploy_rebuilds_and_restarts_the_idp_with_a_certificate_naming_the_service(story):
    stage = story["forced"]
    _ok(stage)
    assert len(stage.calls_of("ko")) == 1
    assert [c["argv"][2:] for c in stage.calls_of("kubectl") if "restart" in c["argv"]] == [
        ["-n", "ate-system", "rollout", "restart", "deployment/ate-idp-server"]
    ]
    assert "serves the signing keys [1]" in stage.done.stdout
    assert stage.fallback is None


def test_an_idp_serving_other_key_ids_than_the_pool_signs_with_falls_back(story):
    stage = story["rotated"]
    _ok(stage)
    assert "the IdP serves key ids [1] but actor JWTs are signed with [1 2]" in stage.done.stderr
    assert stage.fallback.startswith("the IdP serves key ids [1]")


def test_substrate_idp_rebuilds_and_reapplies_when_its_stamp_changes(story):
    """A newer commit of the pinned ref changes the stamp (what else does is checked below)."""
    stage = story["new-commit"]
    _ok(stage)
    assert len(stage.calls_of("ko")) == 1
    assert [d["kind"] for d in stage.applied][:3] == ["ServiceAccount", "Service", "Deployment"]
    # A new pod: it reads the pool as it is now.
    assert "serves the signing keys [1 2]" in stage.done.stdout
    assert stage.fallback is None


def test_the_idp_stamp_covers_the_templates_the_design_the_issuer_and_the_checkout(env):
    """What deploy_idp compares with the Deployment's annotation: any input changed is a new stamp."""
    env.checkout("pool")
    current = "idp_stamp pool https://idp.ate-system.svc"
    base, again, other_design, other_issuer = env.functions(
        current, current, "idp_stamp jwks-file https://idp.ate-system.svc", "idp_stamp pool https://idp.example.svc"
    )
    assert base == again
    seen = [base, other_design, other_issuer]
    env.commit("a newer commit of the same ref")
    seen += env.functions(current)
    for template in ("service.yaml.tmpl", "deployment.yaml.tmpl"):
        path = env.root / "scripts" / "idp" / template
        path.write_text(path.read_text() + "# an edit\n")
        seen += env.functions(current)
    assert len(set(seen)) == len(seen) == 6


def test_in_config_map_mode_the_smoke_check_trusts_that_config_map_or_waits_for_it(story):
    missing = story["ca-missing"]
    _ok(missing)
    assert f"ConfigMap {GATEWAY_NAMESPACE}/idp-ca (the IdP's CA, yours to fill) does not exist yet" in (
        missing.done.stderr
    )
    assert not [d for d in missing.applied if d["kind"] == "Pod"] and missing.fallback is None

    stage = story["ca-config-map"]
    _ok(stage)
    smoke = stage.one_applied("Pod")
    assert smoke["metadata"]["namespace"] == GATEWAY_NAMESPACE
    trust = next(v for v in smoke["spec"]["volumes"] if v["name"] == "trust")["projected"]["sources"]
    assert trust == [{"configMap": {"name": "idp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    assert f"verified against the CA in ConfigMap {GATEWAY_NAMESPACE}/idp-ca" in stage.done.stdout
    _validate(smoke)


# --- the JWKS-file design ---------------------------------------------------------------------------------


def test_the_jwks_file_design_waits_for_the_config_map_ate_controller_publishes(env):
    """The IdP starts before its ConfigMap exists (the volume is optional) and is not ready: make up falls
    back and says why. Once Substrate publishes the key set, the IdP serves it and the fallback is lifted."""
    env.checkout("jwks-file")
    waiting = env.run("substrate-idp")
    _ok(waiting)
    assert "ConfigMap ate-system/actor-id-jwks does not exist" in waiting.done.stderr
    assert "FALLBACK" in waiting.done.stderr and waiting.fallback.startswith("ConfigMap ate-system/actor-id-jwks")
    env.seed(published_jwks("1"))
    serving = env.run("substrate-idp")
    # What the first run built and applied, and what the second verified.
    _assert_idp_deployed(replace(serving, calls=waiting.calls + serving.calls), "jwks-file")


@pytest.mark.parametrize(
    ("designs", "how"),
    [(("absent",), {"SUBSTRATE_IDP_DEPLOYED_SEPARATELY": "1"}), (("pool", "installer"), {})],
    ids=["deployed-separately", "installer"],
)
def test_an_idp_deployed_by_other_means_is_checked_not_deployed(env, designs, how):
    env.checkout(*designs)
    stage = env.run("substrate-idp", **how)
    assert stage.done.returncode == 1
    assert "no Service idp in ate-system" in stage.done.stderr
    assert stage.calls_of("ko") == [] and stage.applied == []


def test_switching_back_restores_the_mode_the_stack_had(env):
    """A stack that chose a mode of its own gets that mode back, not the default."""
    env.stack(substrate={"trust": {"mode": "insecureSkipVerify"}})
    fallback = env.root / "build" / "idp-trust-fallback"
    fallback.parent.mkdir(parents=True)
    fallback.write_text("the IdP is down\n")
    switched = env.run("pulumi-stack")
    _ok(switched)
    assert "SWITCHED stack dev from substrate.trust.mode insecureSkipVerify to localJwks" in switched.done.stderr
    assert switched.stack_mode == "localJwks"
    fallback.unlink()
    back = env.run("pulumi-stack")
    _ok(back)
    assert back.stack_mode == "insecureSkipVerify"
    assert "back from substrate.trust.mode localJwks to insecureSkipVerify" in back.done.stderr

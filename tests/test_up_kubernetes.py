"""`make up IDENTITY=kubernetes`: the Substrate-free dev environment (steps check-prereqs, kind-cluster,
probe-image, pulumi-stack, pulumi-up, service-account-keys, agent-pods, smoke).

`make -n` shows the sequence and no Substrate step; the steps that talk to the cluster run for real (bash
scripts/up.sh) on a copy of scripts/ with tests/fake_devcluster.py standing in for kubectl and pulumi, as in
tests/test_up_idp.py. What the API server serves is seeded as kind's would (kubeadm's issuer; kubernetes/kubernetes
pkg/serviceaccount/openidmetadata.go for the two discovery paths), and every object the steps apply is checked as
the cluster would check it (tests/support/kubernetes_schema.py).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.manifests import api_key_client_id, api_key_secret_name
from tests.support import kubernetes_schema
from tests.test_up_idp import REPO, VERSIONS, DevEnv, namespace

ISSUER = "https://kubernetes.default.svc.cluster.local"
JWKS = {"keys": [{"use": "sig", "kty": "RSA", "kid": "k8s-key-1", "alg": "RS256", "n": "AQAB", "e": "AQAB"}]}
KEY = "k" * 47 + "z"
GATEWAY_URL = "http://agent-router.envoy-gateway-system.svc.cluster.local:80"
API_KEY_URL = "http://agent-router.envoy-gateway-system.svc.cluster.local:8081"
PROBE_REF = "localhost:5001/agent-budgets-probe@sha256:" + "a" * 64
SUBSTRATE_WORDS = re.compile(
    r"substrate|kubectl-ate|ate-setup|\bate\b|demo-actors|resume-actors|jwks-sync|\bgo\b", re.I
)


def make_n(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "IDENTITY"}
    return subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def up_steps(variable: str) -> list[str]:
    text = (REPO / "scripts" / "up.sh").read_text()
    return re.search(rf"^{variable}=\(([^)]*)\)", text, re.M).group(1).split()


# --- make -n up IDENTITY=kubernetes -------------------------------------------------------------------


def test_make_n_up_identity_kubernetes_lists_its_steps_and_no_substrate_step():
    done = make_n("up", "IDENTITY=kubernetes")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "scripts/up.sh" in line]
    steps = [re.match(r"^IDENTITY=kubernetes bash scripts/up\.sh (\S+)", line).group(1) for line in commands]
    assert (
        steps
        == up_steps("KUBERNETES_STEPS")
        == [
            "check-prereqs",
            "kind-cluster",
            "probe-image",
            "pulumi-stack",
            "pulumi-up",
            "service-account-keys",
            "agent-pods",
            "smoke",
        ]
    )
    assert [line for line in commands if SUBSTRATE_WORDS.search(line)] == []


def test_identity_is_picked_on_the_make_command_line_only_and_checked():
    """Plain `=` and exported, like STACK: an IDENTITY left in the shell does not switch the environment."""
    env = {**os.environ, "IDENTITY": "kubernetes"}
    default = subprocess.run(["make", "-n", "up"], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert re.findall(r"^bash scripts/up\.sh (\S+)", default.stdout, re.M) == up_steps("SUBSTRATE_STEPS")
    wrong = make_n("up", "IDENTITY=docker")
    assert wrong.returncode != 0 and "IDENTITY=docker: use substrate (the default) or kubernetes" in wrong.stderr
    down = make_n("down", "IDENTITY=kubernetes")
    assert down.returncode == 0 and "down.sh pulumi-destroy" in down.stdout


# --- running the steps on the fake cluster ----------------------------------------------------------


class KubernetesEnv(DevEnv):
    """The project copy of tests/test_up_idp.py with the Substrate-free stack, and the cluster as kind serves it
    after `pulumi up` of that stack."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        shutil.copy(REPO / "Pulumi.dev-kubernetes.yaml", self.root / "Pulumi.dev-kubernetes.yaml")
        (self.root / "build").mkdir(exist_ok=True)
        (self.root / "build" / "probe-image.ref").write_text(PROBE_REF + "\n")
        program_secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": api_key_secret_name("apikey:actor-key"), "namespace": "agent-budgets"},
            "data": {api_key_client_id("apikey:actor-key"): base64.b64encode(KEY.encode()).decode()},
        }
        self.seed(namespace("agent-budgets"), program_secret, *(accepted_policy(n) for n in ("jwt", "api-keys")))
        self.serve(issuer=ISSUER)
        self.outputs(gatewayUrl=GATEWAY_URL, apiKeyGatewayUrl=API_KEY_URL)

    def _state(self) -> dict[str, Any]:
        return json.loads((self.state / "cluster.json").read_text())

    def _write(self, state: dict[str, Any]) -> None:
        (self.state / "cluster.json").write_text(json.dumps(state))

    def serve(self, issuer: str) -> None:
        """What the API server answers at the two discovery paths."""
        state = self._state()
        discovery = {"issuer": issuer, "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks"}
        state["raw"] = {"/.well-known/openid-configuration": json.dumps(discovery), "/openid/v1/jwks": json.dumps(JWKS)}
        self._write(state)

    def outputs(self, **outputs: str) -> None:
        state = self._state()
        state["outputs"] = outputs
        self._write(state)

    def applied(self) -> list[dict[str, Any]]:
        """Every object the last run applied, in order, the items of a `List` one by one (as kubectl applies
        them)."""
        docs: list[dict[str, Any]] = []
        for call in self.calls("kubectl"):
            if "apply" in call["argv"]:
                for doc in yaml.safe_load_all(call["stdin"]):
                    if doc:
                        docs.extend(doc["items"] if doc["kind"] == "List" else [doc])
        return docs

    def run_k8s(self, *steps: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run(*steps, **{"IDENTITY": "kubernetes", **env}).done


def accepted_policy(name: str) -> dict[str, Any]:
    condition = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "Policy has been accepted."}
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": {
            "name": f"agent-budgets-{name}",
            "namespace": "agent-budgets",
            "labels": {"app.kubernetes.io/part-of": "agent-budgets"},
        },
        "status": {"ancestors": [{"conditions": [condition]}]},
    }


@pytest.fixture
def k8s(tmp_path) -> KubernetesEnv:
    return KubernetesEnv(tmp_path)


def test_a_substrate_step_is_refused_in_the_substrate_free_environment(k8s):
    done = k8s.run_k8s("substrate-install")
    assert done.returncode == 1
    assert "step 'substrate-install' is not part of the IDENTITY=kubernetes environment" in done.stderr
    assert k8s.calls() == []
    wrong = k8s.run_k8s("smoke", IDENTITY="docker")
    assert wrong.returncode == 1 and "IDENTITY=docker: use substrate (the default) or kubernetes" in wrong.stderr


def test_check_prereqs_needs_no_go_git_or_buildx_without_substrate(k8s, tmp_path):
    """With only docker, kind, kubectl, pulumi and python3 on PATH the Substrate-free environment passes; the
    Substrate one names go and git as missing."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("docker", "kind", "kubectl", "pulumi"):
        (tools / name).write_text("#!/bin/sh\n[ \"$1\" = version ] && echo 'kind v0.31.0 go1.25 linux/amd64'\nexit 0\n")
        (tools / name).chmod(0o755)
    for name in ("python3", "bash", "dirname", "awk", "sort", "head", "cat", "sed", "grep", "tail"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    venv_python = k8s.root / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    env = {"PATH": str(tools), "HOME": str(k8s.state), "FAKE_DEVCLUSTER": str(k8s.state)}
    script = str(k8s.root / "scripts" / "up.sh")
    run = {"capture_output": True, "text": True, "timeout": 60, "check": False, "stdin": subprocess.DEVNULL}
    bare = subprocess.run([str(tools / "bash"), script, "check-prereqs"], env={**env, "IDENTITY": "kubernetes"}, **run)
    assert bare.returncode == 0, bare.stderr
    assert "no Substrate, nothing built from source" in bare.stdout
    substrate = subprocess.run([str(tools / "bash"), script, "check-prereqs"], env=env, **run)
    assert substrate.returncode == 1
    assert "missing: go" in substrate.stderr and "missing: git" in substrate.stderr


def test_service_account_keys_checks_the_issuer_and_copies_the_api_server_s_keys(k8s):
    done = k8s.run_k8s("service-account-keys")
    assert done.returncode == 0, done.stderr
    assert f"the cluster's service-account issuer is {ISSUER}, as identity.kubernetes.issuer says" in done.stdout
    [config_map] = [doc for doc in k8s.applied() if doc["kind"] == "ConfigMap"]
    assert config_map["metadata"] == {
        "creationTimestamp": None,
        "name": "kubernetes-service-account-jwks",
        "namespace": "agent-budgets",
    }
    assert json.loads(config_map["data"]["jwks"]) == JWKS
    assert kubernetes_schema.problems({**config_map, "metadata": {"name": "x", "namespace": "agent-budgets"}}) == []
    assert "key ids k8s-key-1" in done.stdout and "accepted the SecurityPolicy with these keys" in done.stdout
    assert "tokens signed with the new key get 401 until this copy is refreshed" in done.stderr
    raw = [call["argv"] for call in k8s.calls("kubectl") if "--raw" in call["argv"]]
    assert [argv[-1] for argv in raw] == ["/.well-known/openid-configuration", "/openid/v1/jwks"]


def test_service_account_keys_stops_when_the_cluster_s_issuer_is_not_the_stack_s(k8s):
    k8s.serve(issuer="https://oidc.eks.example.com/id/ABC")
    done = k8s.run_k8s("service-account-keys")
    assert done.returncode == 1
    assert (
        "the cluster's service-account issuer is https://oidc.eks.example.com/id/ABC, but stack dev-kubernetes "
        f"expects {ISSUER}: set agent-budgets:identity.kubernetes.issuer" in done.stderr
    )
    assert [doc for doc in k8s.applied() if doc["kind"] == "ConfigMap"] == []


def test_agent_pods_runs_a_probe_per_agent_and_hands_the_key_over_without_showing_it(k8s):
    done = k8s.run_k8s("agent-pods")
    assert done.returncode == 0, done.stderr
    applied = k8s.applied()
    names = sorted(f"{doc['kind']}/{doc['metadata']['name']}" for doc in applied)
    agents = [*versions_list("SERVICE_ACCOUNT_AGENTS"), VERSIONS["UNLISTED_AGENT"], VERSIONS["API_KEY_AGENT"]]
    assert sorted(name for name in names if name.startswith("Deployment/")) == sorted(
        f"Deployment/probe-{agent}" for agent in agents
    )
    assert [doc for doc in applied if kubernetes_schema.problems(doc)] == []
    deployments = {doc["metadata"]["name"]: doc for doc in applied if doc["kind"] == "Deployment"}
    for agent in agents:
        container = deployments[f"probe-{agent}"]["spec"]["template"]["spec"]["containers"][0]
        upstream = {e["name"]: e["value"] for e in container["env"]}["PROBE_UPSTREAM"]
        assert container["image"] == PROBE_REF
        assert upstream == (API_KEY_URL if agent == VERSIONS["API_KEY_AGENT"] else GATEWAY_URL), agent
    [secret] = [doc for doc in applied if doc["kind"] == "Secret"]
    assert secret["metadata"]["name"] == f"{VERSIONS['API_KEY_AGENT']}-api-key"
    assert base64.b64decode(secret["data"]["key"]).decode() == KEY
    assert all(KEY not in " ".join(call["argv"]) for call in k8s.calls()), "the key is never an argument"
    assert KEY not in done.stdout + done.stderr
    rollouts = [call["argv"][-2] for call in k8s.calls("kubectl") if "rollout" in call["argv"]]
    assert rollouts == [f"deployment/probe-{agent}" for agent in agents]


def test_agent_pods_says_what_is_missing_before_pulumi_up(k8s):
    k8s.outputs()
    done = k8s.run_k8s("agent-pods")
    assert done.returncode == 1
    assert (
        "stack dev-kubernetes has no output gatewayUrl: run IDENTITY=kubernetes bash scripts/up.sh pulumi-up first"
        in done.stderr
    )


def versions_list(key: str) -> list[str]:
    """A space-separated list of scripts/versions.env, quotes and all."""
    text = (REPO / "scripts" / "versions.env").read_text()
    return re.search(rf'^{key}="([^"]*)"$', text, re.M).group(1).split()

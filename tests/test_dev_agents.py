"""The agents of the Substrate-free dev environment (scripts/dev_agents.py): every object step agent-pods applies
is one the cluster accepts (Kubernetes v1.36 schemas, strict, and the API server's own checks: the name grammars and
a projected token's lifetime), each service-account agent calls the JWT listener with a projected token of the
gateway's audience, and the API-key agent calls the API-key listener with its key only."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.identity import actor_header_value
from core.manifests import api_key_secret_name
from core.validation import parse_settings
from scripts import dev_agents
from tests.support import kubernetes_schema
from tests.support.program import stack_config

ROOT = Path(__file__).resolve().parents[1]
JWT_URL = "http://agent-router.envoy-gateway-system.svc.cluster.local:80"
API_KEY_URL = "http://agent-router.envoy-gateway-system.svc.cluster.local:8081"
IMAGE = "localhost:5001/agent-budgets-probe@sha256:" + "0" * 64


def agents(**changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "namespace": "agents",
        "image": IMAGE,
        "token_audience": "agent-router",
        "token_seconds": 600,
        "jwt_url": JWT_URL,
        "api_key_url": API_KEY_URL,
        "service_accounts": ["actor-a", "actor-b", "actor-unlisted"],
        "api_key_agent": "actor-key",
        "api_key_secret": "actor-key-api-key",
    }
    return dev_agents.manifests(**{**arguments, **changes})


def by_kind(document: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in document["items"] if item["kind"] == kind}


def pod_env(pod: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry["value"] for entry in pod["containers"][0]["env"]}


def test_every_object_is_one_the_cluster_accepts():
    document = agents()
    assert [
        (item["kind"], kubernetes_schema.problems(item))
        for item in document["items"]
        if kubernetes_schema.problems(item)
    ] == []
    kinds = sorted({item["kind"] for item in document["items"]})
    assert kinds == ["Deployment", "Namespace", "Service", "ServiceAccount"]


def test_each_service_account_agent_calls_the_jwt_listener_with_a_projected_token_of_the_gateway_s_audience():
    deployments = by_kind(agents(), "Deployment")
    for agent in ("actor-a", "actor-b", "actor-unlisted"):
        pod = deployments[f"probe-{agent}"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == agent and pod["automountServiceAccountToken"] is False
        [volume] = pod["volumes"]
        [source] = volume["projected"]["sources"]
        assert source == {
            "serviceAccountToken": {"path": "token", "audience": "agent-router", "expirationSeconds": 600}
        }
        env = pod_env(pod)
        assert env["PROBE_UPSTREAM"] == JWT_URL
        assert env["PROBE_AUTHORIZATION_FILE"] == "/var/run/agent-router/token"
        assert env["PORT"] == "8080"


def test_the_api_key_agent_has_no_token_only_its_key_and_calls_the_api_key_listener():
    pod = by_kind(agents(), "Deployment")["probe-actor-key"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["volumes"] == [{"name": "gateway-credential", "secret": {"secretName": "actor-key-api-key"}}]
    env = pod_env(pod)
    assert env["PROBE_UPSTREAM"] == API_KEY_URL and env["PROBE_AUTHORIZATION_FILE"] == "/var/run/agent-router/key"


def test_the_agents_are_the_dev_kubernetes_stack_s_actors_and_one_that_is_not():
    """The stack lists actor-a, actor-b and the API key; actor-unlisted is the service account it must refuse."""
    settings = parse_settings(stack_config("dev-kubernetes"))
    listed = {f"serviceaccount:agents/{name}" for name in ("actor-a", "actor-b")} | {"apikey:actor-key"}
    assert set(settings.actors) == listed
    assert "serviceaccount:agents/actor-unlisted" not in settings.actors
    assert settings.identity.kubernetes.audience == "agent-router"


@pytest.mark.parametrize("seconds", [599, (1 << 32) + 1])
def test_a_token_lifetime_the_api_server_refuses_is_refused_here(seconds):
    """pkg/apis/core/validation/validation.go `validateProjectionSources`: 10 minutes to 2^32 seconds."""
    with pytest.raises(ValueError, match="600 s or more"):
        agents(token_seconds=seconds)


def test_an_agent_of_a_missing_listener_is_left_out_or_refused():
    keys_only = agents(jwt_url=None, service_accounts=[])
    assert sorted(by_kind(keys_only, "Deployment")) == ["probe-actor-key"]
    with pytest.raises(ValueError, match="need --jwt-url"):
        agents(jwt_url=None)
    with pytest.raises(ValueError, match="needs --api-key-url and --api-key-secret"):
        agents(api_key_url=None)


def test_the_api_key_secret_copies_the_one_key_under_key_and_nothing_else():
    """The program's Secret (one data key: the client id) becomes the agent's, the same bytes under `key`."""
    key = base64.b64encode(b"k" * 48).decode()
    client_id = actor_header_value("apikey:actor-key")
    gateway = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": api_key_secret_name("apikey:actor-key"), "namespace": "agent-budgets"},
        "data": {client_id: key},
    }
    copied = dev_agents.api_key_secret(gateway, "agents", "actor-key-api-key")
    assert kubernetes_schema.problems(copied) == []
    assert copied["data"] == {"key": key} and copied["metadata"]["namespace"] == "agents"
    with pytest.raises(ValueError, match="holds 2 keys"):
        dev_agents.api_key_secret({"data": {"a": key, "b": key}}, "agents", "x")


def test_the_command_line_prints_what_kubectl_applies_and_reads_the_secret_from_stdin():
    script = str(ROOT / "scripts" / "dev_agents.py")
    result = subprocess.run(
        [
            sys.executable,
            script,
            "manifests",
            "--namespace",
            "agents",
            "--image",
            IMAGE,
            "--token-audience",
            "agent-router",
            "--token-seconds",
            "600",
            "--jwt-url",
            JWT_URL,
            "--service-accounts",
            "actor-a",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    document = json.loads(result.stdout)
    assert [item["kind"] for item in document["items"]] == ["Namespace", "ServiceAccount", "Deployment", "Service"]
    key = base64.b64encode(b"secret-key").decode()
    copied = subprocess.run(
        [sys.executable, script, "api-key-secret", "--namespace", "agents", "--name", "actor-key-api-key"],
        input=json.dumps({"data": {"apikey.actor-key": key}}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(copied.stdout)["data"] == {"key": key}
    refused = subprocess.run(
        [sys.executable, script, "api-key-secret", "--namespace", "agents", "--name", "x"],
        input="{}",
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 1 and refused.stderr.startswith("dev_agents: the API-key Secret holds 0 keys")

"""The agents of the Substrate-free dev environment (`make up IDENTITY=kubernetes`, step agent-pods).

    python3 scripts/dev_agents.py manifests --namespace agents --image IMG --token-audience agent-router \\
        --token-seconds 600 --jwt-url URL --service-accounts actor-a actor-b actor-unlisted \\
        --api-key-url URL --api-key-agent actor-key --api-key-secret actor-key-api-key
    python3 scripts/dev_agents.py api-key-secret --namespace agents --name actor-key-api-key < gateway-secret.json

`manifests` prints one `kind: List` (JSON, which `kubectl apply -f -` takes): the namespace, and per agent a
ServiceAccount, a probe agent Deployment and its Service `probe-<name>`. Each service-account agent calls the JWT
listener with its projected service-account token; the API-key agent calls the API-key listener with its key.
`api-key-secret` reads the API-key Secret the program keeps in the gateway namespace (`kubectl get secret -o
json`) and prints the Secret the API-key agent mounts in its own namespace, the key under `key`: the key passes
through the pipe only, never an argument or a file.

Kubernetes facts this relies on (kubernetes/kubernetes): a projected `serviceAccountToken` source takes
`audience`, `expirationSeconds` and `path`, and the API server refuses a lifetime under 10 minutes or over 2^32
seconds (pkg/apis/core/validation/validation.go `validateProjectionSources`); the kubelet requests a new token once
the old one is 80 % through its life or 24 hours old (pkg/kubelet/token/token_manager.go `requiresRefresh`) and
rewrites the file, so the probe reads it on every call (`PROBE_AUTHORIZATION_FILE`).
`automountServiceAccountToken: false` keeps the default token (audience: the API server) out of the pod: the agent
needs no access to the API server. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from typing import Any

LABELS = {"app.kubernetes.io/part-of": "agent-budgets", "app.kubernetes.io/managed-by": "make-up"}
PROBE_PORT = 8080
TOKEN_DIR = "/var/run/agent-router"
API_KEY_FIELD = "key"
MIN_TOKEN_SECONDS = 600
"""The shortest projected-token lifetime the API server accepts (10 minutes)."""


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**LABELS, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def probe_name(agent: str) -> str:
    """The Deployment and Service of one agent's probe."""
    return f"probe-{agent}"


def _probe(
    namespace: str,
    agent: str,
    image: str,
    upstream: str,
    service_account: str,
    volume: dict[str, Any],
) -> list[dict[str, Any]]:
    selector = {"app.kubernetes.io/name": "probe-agent", "agent-budgets.dev/agent": agent}
    probe = {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5}
    container = {
        "name": "probe",
        "image": image,
        "ports": [{"name": "http", "containerPort": PROBE_PORT}],
        "env": [
            {"name": "PORT", "value": str(PROBE_PORT)},
            {"name": "PROBE_UPSTREAM", "value": upstream},
            {"name": "PROBE_AUTHORIZATION_FILE", "value": f"{TOKEN_DIR}/{volume['file']}"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "readinessProbe": probe,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "gateway-credential", "mountPath": TOKEN_DIR, "readOnly": True}],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(probe_name(agent), namespace, **selector),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**LABELS, **selector}},
                "spec": {
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "volumes": [{"name": "gateway-credential", **volume["source"]}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(probe_name(agent), namespace, **selector),
        "spec": {"selector": selector, "ports": [{"name": "http", "port": PROBE_PORT, "targetPort": "http"}]},
    }
    return [deployment, service]


def manifests(
    namespace: str,
    image: str,
    token_audience: str,
    token_seconds: int,
    jwt_url: str | None,
    api_key_url: str | None,
    service_accounts: Sequence[str],
    api_key_agent: str | None,
    api_key_secret: str | None,
) -> dict[str, Any]:
    """Everything step agent-pods applies, as one `List`."""
    if not MIN_TOKEN_SECONDS <= token_seconds <= 1 << 32:
        raise ValueError(f"a projected token lives {MIN_TOKEN_SECONDS} s or more (and at most 2^32 s)")
    if service_accounts and jwt_url is None:
        raise ValueError("service-account agents need --jwt-url (the stack's gatewayUrl)")
    items: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace)}]
    for agent in service_accounts:
        assert jwt_url is not None
        items.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(agent, namespace)})
        token = {
            "file": "token",
            "source": {
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "path": "token",
                                "audience": token_audience,
                                "expirationSeconds": token_seconds,
                            }
                        }
                    ]
                }
            },
        }
        items += _probe(namespace, agent, image, jwt_url, agent, token)
    if api_key_agent is not None:
        if api_key_url is None or api_key_secret is None:
            raise ValueError("an API-key agent needs --api-key-url and --api-key-secret")
        # Its own ServiceAccount, with no token mounted: the key is its only credential.
        items.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(api_key_agent, namespace)})
        key = {"file": API_KEY_FIELD, "source": {"secret": {"secretName": api_key_secret}}}
        items += _probe(namespace, api_key_agent, image, api_key_url, api_key_agent, key)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def api_key_secret(gateway_secret: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The agent's copy of its key: the one data value of the program's Secret, under `key`."""
    data = gateway_secret.get("data") or {}
    if len(data) != 1:
        raise ValueError(f"the API-key Secret holds {len(data)} keys, not one: is it the program's?")
    [encoded] = data.values()
    base64.b64decode(encoded, validate=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, namespace),
        "type": "Opaque",
        "data": {API_KEY_FIELD: encoded},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pods = commands.add_parser("manifests", help="the agents' objects, as one JSON List")
    pods.add_argument("--namespace", required=True)
    pods.add_argument("--image", required=True)
    pods.add_argument("--token-audience", required=True)
    pods.add_argument("--token-seconds", type=int, required=True)
    pods.add_argument("--jwt-url")
    pods.add_argument("--api-key-url")
    pods.add_argument("--service-accounts", nargs="*", default=[])
    pods.add_argument("--api-key-agent")
    pods.add_argument("--api-key-secret")
    secret = commands.add_parser("api-key-secret", help="the API-key agent's Secret, from the program's on stdin")
    secret.add_argument("--namespace", required=True)
    secret.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "manifests":
            document = manifests(
                args.namespace,
                args.image,
                args.token_audience,
                args.token_seconds,
                args.jwt_url,
                args.api_key_url,
                args.service_accounts,
                args.api_key_agent,
                args.api_key_secret,
            )
        else:
            document = api_key_secret(json.load(sys.stdin), args.namespace, args.name)
    except (ValueError, json.JSONDecodeError) as error:
        print(f"dev_agents: {error}", file=sys.stderr)
        return 1
    json.dump(document, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Envoy Gateway's own translator on the program's resources: `egctl x translate`, and what it answers.

`egctl experimental translate --from gateway-api --to gateway-api,xds` (envoyproxy/gateway v1.9.0
internal/cmd/egctl/translate.go) loads Gateway API and Envoy Gateway objects from a file, validates and defaults each
as the API server would (internal/gatewayapi/resource/load.go), runs the same translator the controller runs with
global rate limiting on, and prints every object with the status the controller would write, then the xDS
configuration dump (bootstrap, clusters, listeners, routes) of each Gateway.

What it cannot load is left out, and each test says what that leaves unchecked: Agent Router's kinds (the
HTTPRoutes its controller would make stand in for them: tests/support/agent_router_routes.py), Deployments,
StatefulSets, NetworkPolicies, Prometheus' kinds, and ClusterTrustBundles (load.go has no case for them, so a
Backend trusted through one is reported as such). Objects a cluster holds but the program does not create (the JWKS
ConfigMaps `make up` fills) are passed in as `cluster_objects`.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.agent_router_routes import envoy_gateway_objects
from tests.support.program import ProgramRun, plain
from tests.support.tokens import Signer, jwks_config_map

TRANSLATED_KINDS = frozenset(
    {
        "GatewayClass",
        "Gateway",
        "HTTPRoute",
        "HTTPRouteFilter",
        "EnvoyProxy",
        "ClientTrafficPolicy",
        "BackendTrafficPolicy",
        "SecurityPolicy",
        "EnvoyExtensionPolicy",
        "Backend",
        "BackendTLSPolicy",
        "Secret",
        "ConfigMap",
        "Service",
        "Namespace",
        "ReferenceGrant",
    }
)
"""The kinds egctl loads (load.go `switch gvk.Kind`) that the program writes."""


def whole_numbers(value: Any) -> Any:
    """`value` with every float that is a whole number made an int: the engine's mocks hand numbers back as floats,
    and the Gateway API's integer fields (a listener port) refuse `80.0`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the API server stores it, where that differs from what the program sends: a Secret's
    `stringData` is merged into `data`, base64-encoded (k8s.io/api core/v1 types.go `Secret.StringData`: "write-only
    ... merged into the data field on write"); egctl reads `data` only."""
    if obj.get("kind") != "Secret" or not obj.get("stringData"):
        return obj
    stored = {key: value for key, value in obj.items() if key != "stringData"}
    encoded = {key: base64.b64encode(str(value).encode()).decode() for key, value in obj["stringData"].items()}
    stored["data"] = {**(obj.get("data") or {}), **encoded}
    return stored


def gateway_inputs(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What egctl is given for the program's Kubernetes objects: the kinds it loads, as stored, plus for each
    AIGatewayRoute the HTTPRoute and HTTPRouteFilters Agent Router's controller makes."""
    plain = [as_stored(whole_numbers(dict(o))) for o in objects]
    return [o for o in plain if o.get("kind") in TRANSLATED_KINDS] + envoy_gateway_objects(plain)


@dataclass(frozen=True)
class Translation:
    """egctl's answer: the objects with their status, and the xDS of the one Gateway."""

    objects: list[dict[str, Any]]
    xds: dict[str, Any]

    def object(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o.get("kind") == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def conditions(self, kind: str, name: str) -> list[dict[str, Any]]:
        """Every status condition of one object: its own, its listeners', its parents' or its ancestors'."""
        return list(_conditions(self.object(kind, name).get("status") or {}))

    def refusals(self) -> list[str]:
        """`<kind>/<name>: <type> <reason>: <message>` for every condition that is not as the controller sets it on
        a working object (Accepted, ResolvedRefs, Programmed true; RouteRulesOverlap is informational)."""
        found = []
        for obj in self.objects:
            for condition in _conditions(obj.get("status") or {}):
                kind = condition.get("type")
                if kind in {"Accepted", "ResolvedRefs", "Programmed"} and condition.get("status") != "True":
                    found.append(
                        f"{obj['kind']}/{obj['metadata']['name']}: {kind} {condition.get('reason')}: "
                        f"{condition.get('message')}"
                    )
        return found

    def _dump(self, suffix: str) -> dict[str, Any]:
        [config] = [c for c in self.xds["configs"] if c["@type"].endswith(suffix)]
        return config

    def listeners(self) -> dict[str, dict[str, Any]]:
        return {
            entry["activeState"]["listener"]["name"]: entry["activeState"]["listener"]
            for entry in self._dump("ListenersConfigDump").get("dynamicListeners", [])
        }

    def route_configs(self) -> dict[str, dict[str, Any]]:
        return {
            entry["routeConfig"]["name"]: entry["routeConfig"]
            for entry in self._dump("RoutesConfigDump").get("dynamicRouteConfigs", [])
        }

    def clusters(self) -> dict[str, dict[str, Any]]:
        return {
            entry["cluster"]["name"]: entry["cluster"]
            for entry in self._dump("ClustersConfigDump").get("dynamicActiveClusters", [])
        }

    def bootstrap(self) -> dict[str, Any]:
        return self._dump("BootstrapConfigDump")["bootstrap"]

    def http_filters(self, listener: str) -> list[dict[str, Any]]:
        """The HTTP filters of a listener's connection manager, in the order Envoy runs them."""
        [manager] = [
            f["typedConfig"]
            for chain in _filter_chains(self.listeners()[listener])
            for f in chain["filters"]
            if f["name"] == "envoy.filters.network.http_connection_manager"
        ]
        return manager.get("httpFilters", [])

    def routes(self, route_config: str) -> list[dict[str, Any]]:
        """Every Envoy route of a route configuration, virtual host by virtual host."""
        return [route for host in self.route_configs()[route_config]["virtualHosts"] for route in host["routes"]]


def _filter_chains(listener: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from listener.get("filterChains", [])
    if "defaultFilterChain" in listener:
        yield listener["defaultFilterChain"]


def _conditions(status: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from status.get("conditions") or []
    for group in ("listeners", "parents", "ancestors"):
        for entry in status.get(group) or []:
            yield from entry.get("conditions") or []


def program_objects(run: ProgramRun) -> list[dict[str, Any]]:
    """Every Kubernetes object a program run registered, as a cluster would receive it (Helm releases left out: what
    they install is not the program's to translate)."""
    return [plain(r.as_object()) for r in run.resources if r.type.startswith("kubernetes:") and "helm.sh" not in r.type]


def ca_certificate_pem(name: str) -> str:
    """A self-signed CA certificate (PEM), as a CA bundle in a ConfigMap would hold."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _ca_config_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"ca.crt": ca_certificate_pem(name)},
    }


def cluster_objects(namespace: str, substrate: Signer, kubernetes: Signer) -> list[dict[str, Any]]:
    """What a cluster holds that the program does not create: the JWKS ConfigMaps `make up` fills (substrate.trust
    `localJwks`, identity.kubernetes `configMap`), signed for by `substrate` and `kubernetes`; the IdP's CA (trust
    mode `configMap`); and `kube-root-ca.crt`, which kube-controller-manager's root CA publisher puts in every
    namespace (identity.kubernetes `apiServer`)."""
    return [
        jwks_config_map("substrate-actor-jwks", namespace, substrate),
        jwks_config_map("kubernetes-service-account-jwks", namespace, kubernetes),
        _ca_config_map("substrate-idp-ca", namespace),
        _ca_config_map("kube-root-ca.crt", namespace),
    ]


class TranslateError(AssertionError):
    """egctl refused its input outright (a validation error): the message is egctl's."""


def translate(
    egctl: Path, objects: Sequence[Mapping[str, Any]], namespace: str, cluster_objects: Sequence[Mapping[str, Any]] = ()
) -> Translation:
    """egctl's translation of the program's objects (`gateway_inputs`) and `cluster_objects`, in `namespace`."""
    documents = gateway_inputs(objects) + [whole_numbers(dict(o)) for o in cluster_objects]
    with tempfile.TemporaryDirectory(prefix="egctl-") as directory:
        path = Path(directory) / "resources.yaml"
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
        done = subprocess.run(
            [
                *(str(egctl), "x", "translate", "--from", "gateway-api", "--to", "gateway-api,xds"),
                *("--type", "all", "--output", "json", "--namespace", namespace, "--file", str(path)),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise TranslateError(f"egctl x translate exited {done.returncode}: {done.stderr.strip()[:2000]}")
    answer = json.loads(done.stdout)
    xds = answer.pop("xds")
    [gateway_xds] = xds.values()
    translated = [obj for group in answer.values() for obj in (group if isinstance(group, list) else [group])]
    return Translation(translated, gateway_xds)

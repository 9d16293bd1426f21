#!/usr/bin/env python3
"""Fake `kubectl`, `go`, `ko` and `pulumi` for the steps of `make up` (tests/test_up_idp.py,
tests/test_up_kubernetes.py).

One script, dispatched on the name it is run as (the test links each tool name to it). Every run appends
`{"tool", "argv", "stdin", "env"}` to calls.jsonl in `$FAKE_DEVCLUSTER`, so a test sees the order of calls and
each applied document. What each tool answers, and what it follows:

* kubectl (k8s.io/kubectl v1.36 as `scripts/up.sh` calls it, always `--context C` first):
  `get KIND NAME [-o json|-o jsonpath={.status.phase}]` (a missing object: `Error from server (NotFound):
  <resource> "<name>" not found`, exit 1); `get KIND -l SELECTOR -o json` (a `List`); `apply -f -` of a YAML
  or JSON stream, one line `<resource>/<name> created|configured|unchanged` per document;
  `create configmap NAME --from-file=[KEY=]PATH --dry-run=client -o yaml` (prints the object, touches
  nothing); `delete KIND NAME --ignore-not-found [--wait=...]`; `rollout status deployment/NAME` (`deployment
  "NAME" successfully rolled out`, or `error: timed out waiting for the condition`, exit 1);
  `rollout restart deployment/NAME`; `logs NAME`; `get --raw PATH` (the body seeded under `raw` in the state, else
  `Error from server (NotFound): the server could not find the requested resource`); `get KIND -l SELECTOR -o
  name` (`<resource>/<name>` lines). A `List` document applies each of its items.
* The controllers behind it, as far as these steps see them: a Deployment's pod gets a serving certificate
  whose DNS names are `<svc>.<ns>.svc` for each Service selecting it *when the pod is created* (Substrate's
  service-DNS signer, cmd/podcertcontroller/internal/servicednssigner @19b684c2), so a Service applied after
  the Deployment is not in it until `rollout restart`. (The signer @18d1c266 refuses to sign while no Service
  selects the pod, so the pod waits instead; but a Service added later is still missing from a certificate
  signed for another one.) The pod is ready when its key material exists (Secret `actor-id-jwt-pool` for
  `--actor-id-jwt-pool`, ConfigMap `actor-id-jwks` for `--jwks-file`: ate-idp-server answers the JWKS route
  with an error until keys load, server.go @d22f2d94); a required Secret that is missing keeps the rollout
  from finishing (only the IdP's Deployment `ate-idp-server` loads keys; any other rolls out at once). The
  pool design rereads its pool at most once a minute (main.go @d172cb1d): the fake's pod serves the key ids
  of the pool it read when it started, as a pod within that minute of a rotation does.
  EndpointSlices follow (discovery.k8s.io/v1, label kubernetes.io/service-name).
* Pods: a Pod's spec is immutable but for a few fields, so applying a spec changed elsewhere over an existing Pod
  is refused (`The Pod "NAME" is invalid: spec: Forbidden: pod updates may not change fields other than ...`,
  exit 1; k8s.io/kubernetes pkg/apis/core/validation ValidatePodUpdate, `pod_update_problem` below), and one that
  changes only those fields (a container's image, say) or nothing is accepted and left as it was, finished or
  not: a finished pod is not rerun. The smoke
  pod (`scripts/idp/smoke-pod.yaml.tmpl`) runs when it is created: it finishes Succeeded with the line
  `scripts/idp/fetch_jwks.py` prints for the served key set when the URL's host is in the IdP's certificate
  and the trust it projects (a ClusterTrustBundle by name, or a ConfigMap) exists, and the URL's path is the
  IdP's JWKS route under its --issuer's path; else Failed with the line that script prints for Python's ssl
  error, a refused connection or a 404. A pod projecting a trust source that
  does not exist stays Pending (the kubelet cannot set up the volume), and `logs` says it is waiting to start.
* go: `env GOARCH` and `tool -n ko` (the path of the pinned tool's binary: this fake's `ko`).
* ko: `build --base-import-paths <module>/cmd/<name>` in a checkout whose go.mod declares <module>; prints
  `$KO_DOCKER_REPO/<name>@sha256:<digest of the checkout's HEAD and name>` (ko's --base-import-paths naming).
* pulumi: `login`, `stack select`, and `config get|set|rm --path KEY [VALUE] --stack S` on `Pulumi.<S>.yaml`
  in the working directory (a missing key: `error: configuration key 'KEY' not found for stack 'S'`, exit 255);
  `stack output NAME --stack S` from the state's `outputs` (a missing one: `error: current stack does not have
  output property 'NAME'`, exit 255).

State (`$FAKE_DEVCLUSTER/cluster.json`): `objects` keyed `<Kind>/<namespace>/<name>` (cluster-scoped: empty
namespace), and `pods` (the IdP's pod: its labels, certificate names, design and image).
"""

from __future__ import annotations

# Only what every call needs is imported here: the fake runs a few hundred times per test module, so each
# import left to the one verb that needs it is saved on every other call.
import fcntl
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

STATE = os.environ["FAKE_DEVCLUSTER"]
RESOURCES = {
    "service": "Service",
    "services": "Service",
    "svc": "Service",
    "deployment": "Deployment",
    "deployments": "Deployment",
    "deploy": "Deployment",
    "configmap": "ConfigMap",
    "configmaps": "ConfigMap",
    "cm": "ConfigMap",
    "secret": "Secret",
    "secrets": "Secret",
    "pod": "Pod",
    "pods": "Pod",
    "namespace": "Namespace",
    "namespaces": "Namespace",
    "ns": "Namespace",
    "endpointslices": "EndpointSlice",
    "endpointslice": "EndpointSlice",
    "securitypolicy": "SecurityPolicy",
    "securitypolicies": "SecurityPolicy",
    "serviceaccount": "ServiceAccount",
    "clustertrustbundle": "ClusterTrustBundle",
    "serviceaccounts": "ServiceAccount",
}
PLURAL = {
    "Service": "services",
    "Deployment": "deployments.apps",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Pod": "pods",
    "Namespace": "namespaces",
    "SecurityPolicy": "securitypolicies.gateway.envoyproxy.io",
    "ServiceAccount": "serviceaccounts",
}
SMOKE_POD = "agent-budgets-idp-smoke"


class ToolError(Exception):
    """The tool fails: this text on stderr, this exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def option(args: list[str], *names: str) -> str | None:
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


POD_UPDATABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def pod_update_problem(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the API server refuses to change a Pod's spec from `old` to `new`, or None (ValidatePodUpdate,
    k8s.io/kubernetes pkg/apis/core/validation/validation.go): the same containers, with only their images
    changed; activeDeadlineSeconds kept, set or lowered (never raised or removed); tolerations only added to;
    terminationGracePeriodSeconds set to 1 only from a negative value. Everything else is immutable (resources
    change only through the resize subresource, which `kubectl apply` does not use)."""
    for group in ("containers", "initContainers"):
        if len(new.get(group) or []) != len(old.get(group) or []):
            return f"spec.{group}: Forbidden: pod updates may not add or remove containers"
    old_deadline, new_deadline = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    deadline = "spec.activeDeadlineSeconds: Invalid value"
    if old_deadline is not None and new_deadline is None:
        return f'{deadline}: "null": must not update from a positive integer to nil value'
    if old_deadline is not None and new_deadline > old_deadline:
        return f"{deadline}: {new_deadline}: must be less than or equal to previous value"
    old_tolerations, new_tolerations = old.get("tolerations") or [], new.get("tolerations") or []
    if any(toleration not in new_tolerations for toleration in old_tolerations):
        return "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
    munged = {**new}
    for group in ("containers", "initContainers"):
        if group in new:
            munged[group] = [{**c, "image": o.get("image")} for c, o in zip(new[group], old[group], strict=True)]
    for name in ("activeDeadlineSeconds", "tolerations"):
        munged.pop(name, None)
        if name in old:
            munged[name] = old[name]
    grace = old.get("terminationGracePeriodSeconds")
    if grace is not None and grace < 0 and new.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = grace
    return None if munged == old else f"spec: Forbidden: {POD_UPDATABLE}"


class Cluster:
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.objects: dict[str, Any] = state.setdefault("objects", {})
        self.pods: dict[str, Any] = state.setdefault("pods", {})

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(key(kind, "" if kind in {"Namespace", "ClusterTrustBundle"} else namespace, name))

    # --- controllers ---------------------------------------------------------------------------------

    def _services_selecting(self, namespace: str, labels: dict[str, str]) -> list[str]:
        return [
            obj["metadata"]["name"]
            for k, obj in self.objects.items()
            if k.startswith(f"Service/{namespace}/") and selects((obj.get("spec") or {}).get("selector") or {}, labels)
        ]

    def start_pod(self, deployment: dict[str, Any]) -> None:
        """A new pod of the Deployment: its certificate names the Services selecting it right now."""
        meta = deployment["metadata"]
        namespace = meta["namespace"]
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"]
        args = template["spec"]["containers"][0].get("args") or []
        design = "jwks-file" if any(a.startswith("--jwks-file=") for a in args) else "pool"
        self.pods[f"{namespace}/{meta['name']}"] = {
            "labels": labels,
            "sans": [f"{svc}.{namespace}.svc" for svc in self._services_selecting(namespace, labels)],
            "design": design,
            "image": template["spec"]["containers"][0]["image"],
            "issuer": next((a.split("=", 1)[1] for a in args if a.startswith("--issuer=")), ""),
            # The pool design's keys as read at start (it rereads at most once a minute).
            "pool_kids": self._pool_kids(namespace) if design == "pool" else [],
        }

    def _pool_kids(self, namespace: str) -> list[str]:
        secret = self.get("Secret", namespace, "actor-id-jwt-pool")
        if secret is None:
            return []
        import base64

        pool = json.loads(base64.b64decode(secret["data"]["pool"]))
        return sorted(a["ID"] for a in pool["Authorities"])

    def keys_loaded(self, pod: dict[str, Any], namespace: str) -> bool:
        if pod["design"] == "jwks-file":
            return self.get("ConfigMap", namespace, "actor-id-jwks") is not None
        return bool(self._started_pool_kids(pod, namespace))

    def _started_pool_kids(self, pod: dict[str, Any], namespace: str) -> list[str]:
        """A pod whose Secret was missing has not started yet (the volume cannot mount): it reads the pool once
        the Secret exists, then keeps what it read."""
        if not pod["pool_kids"]:
            pod["pool_kids"] = self._pool_kids(namespace)
        return pod["pool_kids"]

    def endpoint_slices(self, namespace: str, service: str) -> dict[str, Any]:
        svc = self.get("Service", namespace, service)
        endpoints = []
        if svc is not None:
            selector = (svc.get("spec") or {}).get("selector") or {}
            for where, pod in self.pods.items():
                if where.startswith(f"{namespace}/") and selects(selector, pod["labels"]):
                    ready = self.keys_loaded(pod, namespace)
                    endpoints.append({"addresses": ["10.244.0.17"], "conditions": {"ready": ready}})
        items = []
        if svc is not None:
            items.append(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {"name": f"{service}-x7k2p", "labels": {"kubernetes.io/service-name": service}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                }
            )
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def served_kids(self, namespace: str, pod: dict[str, Any]) -> list[str]:
        if pod["design"] == "jwks-file":
            jwks = json.loads(self.get("ConfigMap", namespace, "actor-id-jwks")["data"]["jwks.json"])
            return sorted(k["kid"] for k in jwks["keys"])
        return self._started_pool_kids(pod, namespace)

    @staticmethod
    def jwks_route(issuer: str) -> str:
        """Where ate-idp-server serves the key set: under the issuer's path (server.go @d22f2d94 `New`); any
        other path answers 404."""
        after_scheme = issuer.split("://", 1)[-1]
        issuer_path = after_scheme[after_scheme.find("/") :] if "/" in after_scheme else ""
        return issuer_path.rstrip("/") + "/openid/v1/jwks"

    def run_smoke_pod(self, pod: dict[str, Any]) -> None:
        """What scripts/idp/fetch_jwks.py prints in the pod, given the cluster as it is now."""
        namespace = pod["metadata"]["namespace"]
        container = pod["spec"]["containers"][0]
        url = container["command"][2]
        host = url.split("://", 1)[1].split("/", 1)[0]
        trust = next(v for v in pod["spec"]["volumes"] if v["name"] == "trust")["projected"]["sources"][0]
        if "clusterTrustBundle" in trust:
            present = self.get("ClusterTrustBundle", "", trust["clusterTrustBundle"]["name"]) is not None
        else:
            present = self.get("ConfigMap", namespace, trust["configMap"]["name"]) is not None
        idp = self.pods.get("ate-system/ate-idp-server")
        service, svc_namespace = host.split(".")[0], host.split(".")[1]
        ready = [
            e
            for s in self.endpoint_slices(svc_namespace, service)["items"]
            for e in s["endpoints"]
            if e["conditions"]["ready"]
        ]
        if not present:
            # The kubelet cannot set up a projected volume whose (non-optional) source is missing: the pod
            # stays ContainerCreating and never runs the script.
            pod["status"] = {"phase": "Pending"}
            return
        if not ready or idp is None:
            line = {
                "ok": False,
                "stage": "connect",
                "error": "ConnectionRefusedError: [Errno 111] Connection refused",
            }
        elif host not in idp["sans"]:
            line = {
                "ok": False,
                "stage": "tls",
                "error": "SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                f"Hostname mismatch, certificate is not valid for '{host}'. (_ssl.c:1010)",
            }
        elif url.split("://", 1)[1][len(host) :] != self.jwks_route(idp["issuer"]):
            line = {"ok": False, "stage": "http", "error": f"HTTP 404 Not Found from {url}"}
        else:
            line = {"ok": True, "kids": self.served_kids(svc_namespace, idp), "jwks": {"keys": []}}
        pod["status"] = {"phase": "Succeeded" if line["ok"] else "Failed"}
        pod["log"] = json.dumps(line, separators=(",", ":"))

    # --- kubectl verbs -------------------------------------------------------------------------------

    def apply(self, text: str) -> str:
        import yaml  # only here and in `create --dry-run`: most calls need no YAML, and start faster

        lines = []
        documents = []
        for document in yaml.safe_load_all(text):
            if document and document.get("kind") == "List":
                documents.extend(document.get("items") or [])
            elif document:
                documents.append(document)
        for document in documents:
            kind, meta = document["kind"], document["metadata"]
            namespace = meta.get("namespace", "") if kind not in {"Namespace", "ClusterTrustBundle"} else ""
            if kind not in {"Namespace", "ClusterTrustBundle"} and not namespace:
                raise ToolError("error: the fake needs metadata.namespace in every namespaced document")
            if namespace and self.get("Namespace", "", namespace) is None:
                raise ToolError(f'Error from server (NotFound): namespaces "{namespace}" not found')
            k = key(kind, namespace, meta["name"])
            before = self.objects.get(k)
            if kind == "Pod" and before is not None:
                problem = pod_update_problem(before.get("spec") or {}, document.get("spec") or {})
                if problem:
                    raise ToolError(f'The Pod "{meta["name"]}" is invalid: {problem}')
                # Accepted: the mutable fields and metadata take the new values; a finished pod stays finished
                # with its log (the kubelet does not rerun a terminated pod of restartPolicy Never).
                updated = {**before, **{k: v for k, v in document.items() if k != "status"}}
                lines.append(f"pod/{meta['name']} {'unchanged' if updated == before else 'configured'}")
                self.objects[k] = updated
                continue
            stored = {key_: value for key_, value in document.items() if key_ != "status"}
            if before is not None and "status" in before:
                stored["status"] = before["status"]
            self.objects[k] = stored
            verb = "created" if before is None else ("unchanged" if before == stored else "configured")
            lines.append(f"{PLURAL.get(kind, kind.lower())}/{meta['name']} {verb}")
            if kind == "Deployment" and (before is None or before.get("spec") != stored.get("spec")):
                self.start_pod(stored)
            if kind == "Pod" and meta["name"] == SMOKE_POD:
                self.run_smoke_pod(stored)
        return "\n".join(lines)

    def kubectl(self, args: list[str], stdin: str) -> str:
        if args[:1] == ["--context"]:
            args = args[2:]
        namespace = option(args, "-n", "--namespace") or "default"
        words = [a for i, a in enumerate(args) if a not in ("-n", "--namespace") and args[i - 1 : i] != ["-n"]]
        verb = words[0]
        if verb == "apply":
            if option(args, "-f") != "-":
                raise ToolError("error: the fake applies stdin only (-f -)")
            return self.apply(stdin)
        if verb == "create" and words[1] == "configmap":
            if "--dry-run=client" not in args:
                raise ToolError("error: the fake creates ConfigMaps only with --dry-run=client")
            data = {}
            for arg in args:
                if arg.startswith("--from-file="):
                    spec = arg.split("=", 1)[1]
                    name, path = spec.split("=", 1) if "=" in spec else (os.path.basename(spec), spec)
                    with open(path, encoding="utf-8") as source:
                        data[name] = source.read()
            import yaml

            obj = {
                "apiVersion": "v1",
                "data": data,
                "kind": "ConfigMap",
                "metadata": {"creationTimestamp": None, "name": words[2], "namespace": namespace},
            }
            return yaml.safe_dump(obj, sort_keys=True).rstrip("\n")
        if verb == "rollout":
            action, target = words[1], words[2]
            name = target.split("/", 1)[1]
            deployment = self.get("Deployment", namespace, name)
            if deployment is None:
                raise ToolError(f'Error from server (NotFound): deployments.apps "{name}" not found')
            if action == "restart":
                self.start_pod(deployment)
                return f"deployment.apps/{name} restarted"
            pod = self.pods[f"{namespace}/{name}"]
            if name == "ate-idp-server" and pod["design"] == "pool" and not self.keys_loaded(pod, namespace):
                raise ToolError("error: timed out waiting for the condition")
            return f'deployment "{name}" successfully rolled out'
        if verb == "delete":
            kind, name = RESOURCES[words[1]], words[2]
            if self.objects.pop(key(kind, namespace, name), None) is None and "--ignore-not-found" not in args:
                raise ToolError(f'Error from server (NotFound): {PLURAL[kind].split(".")[0]} "{name}" not found')
            return "" if "--ignore-not-found" in args else f'{PLURAL[kind].split(".")[0]} "{name}" deleted'
        if verb == "logs":
            pod = self.get("Pod", namespace, words[1])
            if pod is None:
                raise ToolError(f'Error from server (NotFound): pods "{words[1]}" not found')
            if (pod.get("status") or {}).get("phase") == "Pending":
                container = pod["spec"]["containers"][0]["name"]
                raise ToolError(
                    f'Error from server (BadRequest): container "{container}" in pod "{words[1]}" is waiting to '
                    "start: ContainerCreating"
                )
            return pod.get("log", "")
        if verb == "get" and "--raw" in args:
            path = option(args, "--raw")
            raw = (self.state.get("raw") or {}).get(path)
            if raw is None:
                raise ToolError("Error from server (NotFound): the server could not find the requested resource")
            return raw
        if verb == "get":
            kind = RESOURCES[words[1]]
            output = option(args, "-o")
            if kind == "EndpointSlice":
                service = option(args, "-l").split("=", 1)[1]
                return json.dumps(self.endpoint_slices(namespace, service))
            selector = option(args, "-l")
            if selector is not None:
                name_key, value = selector.split("=", 1)
                items = [
                    obj
                    for k, obj in self.objects.items()
                    if k.startswith(f"{kind}/{namespace}/")
                    and (obj["metadata"].get("labels") or {}).get(name_key) == value
                ]
                if output == "name":
                    resource = PLURAL.get(kind, kind.lower()).split(".")[0].removesuffix("s")
                    return "\n".join(f"{resource}/{obj['metadata']['name']}" for obj in items)
                return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
            name = words[2]
            obj = self.get(kind, namespace, name)
            if obj is None:
                resource = PLURAL.get(kind, kind).split(".")[0]
                raise ToolError(f'Error from server (NotFound): {resource} "{name}" not found')
            if output == "json":
                return json.dumps(obj)
            if output == "jsonpath={.status.phase}":
                return (obj.get("status") or {}).get("phase", "")
            if output is None:
                return f"NAME   AGE\n{name}   1m"
            raise ToolError(f"error: the fake does not print -o {output}")
        raise ToolError(f"error: the fake kubectl does not know {' '.join(args)!r}")


def go(args: list[str]) -> str:
    if args == ["env", "GOARCH"]:
        return "amd64"
    if args == ["tool", "-n", "ko"]:
        return os.path.join(os.path.dirname(sys.argv[0]), "ko")
    raise ToolError(f"go: the fake does not know {' '.join(args)!r}")


def ko(args: list[str]) -> str:
    if args[:2] != ["build", "--base-import-paths"] or len(args) != 3:
        raise ToolError(f"ko: the fake builds only --base-import-paths <module>/cmd/<name>, not {args}")
    import hashlib
    import subprocess
    from pathlib import Path

    module_line = next(line for line in Path("go.mod").read_text().splitlines() if line.startswith("module "))
    module = module_line.split()[1]
    path = args[2]
    if not path.startswith(module + "/") or not Path(path.removeprefix(module + "/")).is_dir():
        raise ToolError(f'ko: package "{path}" is not in module {module} (or has no directory)')
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    digest = hashlib.sha256(f"{head} {path}".encode()).hexdigest()
    return f"{os.environ['KO_DOCKER_REPO']}/{Path(path).name}@sha256:{digest}"


def pulumi(args: list[str], state: dict[str, Any]) -> str:
    import yaml

    if args[:1] == ["login"] or args[:2] == ["stack", "select"]:
        return ""
    if args[:2] == ["stack", "output"]:
        name = args[2]
        value = (state.get("outputs") or {}).get(name)
        if value is None:
            raise ToolError(f"error: current stack does not have output property '{name}'", 255)
        return str(value)
    if args[:1] != ["config"]:
        raise ToolError(f"pulumi: the fake does not know {' '.join(args)!r}")
    stack = option(args, "--stack") or "dev"
    from pathlib import Path

    path = Path(f"Pulumi.{stack}.yaml")
    document = yaml.safe_load(path.read_text()) if path.exists() else {}
    config = document.setdefault("config", {}) or {}
    words = [a for i, a in enumerate(args[1:]) if not a.startswith("--") and args[i : i + 1] != ["--stack"]]
    action, dotted = words[0], words[1]
    project_key, _, rest = dotted.partition(".")
    parts = rest.split(".") if rest else []
    if action == "get":
        value: Any = config.get(project_key)
        for part in parts:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            raise ToolError(f"error: configuration key '{dotted}' not found for stack '{stack}'", 255)
        return str(value)
    if action == "set":
        if not parts:
            config[project_key] = words[2]
        else:
            node = config.setdefault(project_key, {})
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = words[2]
    elif action == "rm":
        node = config.get(project_key)
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    document["config"] = config
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return ""


def main() -> int:
    tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    with open(os.path.join(STATE, "cluster.json"), "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        state = json.load(handle)
        env = {name: os.environ[name] for name in ("KO_DOCKER_REPO", "KO_DEFAULTPLATFORMS") if name in os.environ}
        with open(os.path.join(STATE, "calls.jsonl"), "a", encoding="utf-8") as calls:
            calls.write(json.dumps({"tool": tool, "argv": args, "stdin": stdin, "env": env}) + "\n")
        try:
            if tool == "kubectl":
                out = Cluster(state).kubectl(args, stdin)
            elif tool == "go":
                out = go(args)
            elif tool == "ko":
                out = ko(args)
            elif tool == "pulumi":
                out = pulumi(args, state)
            else:
                raise ToolError(f"{tool}: not faked")
        except ToolError as failure:
            handle.seek(0)
            handle.truncate()
            json.dump(state, handle)
            sys.stderr.write(f"{failure}\n")
            return failure.status
        handle.seek(0)
        handle.truncate()
        json.dump(state, handle)
    if out:
        sys.stdout.write(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

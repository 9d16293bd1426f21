"""kubectl and kubectl-ate, always against the dev context, plus the pure parsing they need."""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from scripts import substrate_facts

from .runner import Result, Runner, check


def selector_string(selector: Mapping[str, str]) -> str:
    """A Service's spec.selector as a kubectl label selector (sorted, so it is stable)."""
    if not selector:
        raise ValueError("the Service has no selector")
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


def count_marker(text: str, marker: str) -> int:
    """How many log lines mention marker (each request carries its own marker in its query)."""
    if not marker:
        raise ValueError("empty marker")
    return sum(1 for line in text.splitlines() if marker in line)


def policy_is_accepted(doc: Mapping[str, Any]) -> bool:
    """True when every ancestor of a Gateway API policy reports Accepted=True for its current generation."""
    generation = (doc.get("metadata") or {}).get("generation")
    ancestors = (doc.get("status") or {}).get("ancestors") or []
    if not ancestors:
        return False
    for ancestor in ancestors:
        accepted = [c for c in ancestor.get("conditions") or [] if c.get("type") == "Accepted"]
        if not accepted or accepted[0].get("status") != "True":
            return False
        observed = accepted[0].get("observedGeneration")
        if generation is not None and observed is not None and observed < generation:
            return False
    return True


RLCONFIG_LIMIT = re.compile(r"^\S+: unit=(\w+) requests_per_unit=(\d+),", re.MULTILINE)
RATELIMIT_DEBUG_PORT = 6070
"""envoyproxy/ratelimit's debug listener (src/settings/settings.go `DEBUG_PORT`, on every address by default); its
`/rlconfig` prints the configuration the service holds (src/service_cmd/runner/runner.go)."""


def rlconfig_limits(text: str) -> set[tuple[int, str]]:
    """(requests per unit, unit) of every limit in a `/rlconfig` dump: one line a limit, `<full key>: unit=DAY
    requests_per_unit=500, shadow_mode: ...` (envoyproxy/ratelimit src/config/config_impl.go `dump`)."""
    return {(int(limit), unit) for unit, limit in RLCONFIG_LIMIT.findall(text)}


def policy_limits(doc: Mapping[str, Any]) -> set[tuple[int, str]]:
    """(requests, unit) of every global rule of a BackendTrafficPolicy, as ratelimit prints them: Envoy Gateway
    sends the unit upper-cased (envoyproxy/gateway v1.9.0 internal/xds/translator/ratelimit.go
    `buildRateLimitServiceDescriptors`)."""
    rules = (((doc.get("spec") or {}).get("rateLimit") or {}).get("global") or {}).get("rules") or []
    return {(int(rule["limit"]["requests"]), str(rule["limit"]["unit"]).upper()) for rule in rules}


def actor_state_from_json(doc: Any) -> str:
    """RUNNING, SUSPENDED, ... from `kubectl ate get actors <name> -o json`: the bare object, the list
    printer's `{"actors": [...]}` or a bare list, with either status shape (scripts/substrate_facts.py,
    shared with scripts/up.sh)."""
    return substrate_facts.actor_state(doc)


class Kube:
    def __init__(self, runner: Runner, context: str, kubectl: str = "kubectl") -> None:
        self.runner = runner
        self.context = context
        self.kubectl = kubectl

    def run(self, *args: str, input: str | None = None, timeout: float = 60.0) -> Result:
        return self.runner([self.kubectl, "--context", self.context, *args], input=input, timeout=timeout)

    def json(self, *args: str, timeout: float = 60.0) -> Any:
        return json.loads(check(self.run(*args, "-o", "json", timeout=timeout)).stdout)

    def context_exists(self) -> bool:
        result = self.runner([self.kubectl, "config", "get-contexts", "-o", "name"], timeout=15)
        return result.ok and self.context in result.stdout.split()

    def api_ready(self) -> bool:
        return self.run("get", "--raw", "/readyz", timeout=15).ok

    def exists(self, namespace: str, kind: str, name: str) -> bool:
        return self.run("-n", namespace, "get", kind, name, "-o", "name", timeout=20).ok

    def service_ports(self, namespace: str, service: str) -> set[int] | None:
        """The ports a Service serves (`spec.ports[].port`), or None when it cannot be read."""
        result = self.run("-n", namespace, "get", "service", service, "-o", "json", timeout=20)
        if not result.ok:
            return None
        return {int(entry["port"]) for entry in json.loads(result.stdout).get("spec", {}).get("ports") or []}

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        result = check(
            self.run("-n", namespace, "get", "secret", name, "-o", f"jsonpath={{.data.{key}}}", timeout=20),
            f"reading Secret {namespace}/{name}",
        )
        try:
            return base64.b64decode(result.stdout.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"Secret {namespace}/{name} key {key} is not valid base64 text") from exc

    def cluster_ip(self, namespace: str, service: str) -> str:
        ip = self.json("-n", namespace, "get", "service", service).get("spec", {}).get("clusterIP")
        if not ip or ip == "None":
            raise ValueError(f"Service {namespace}/{service} has no cluster IP")
        return str(ip)

    def service_pods_selector(self, namespace: str, service: str) -> str:
        return selector_string(
            self.json("-n", namespace, "get", "service", service).get("spec", {}).get("selector") or {}
        )

    def logs(self, namespace: str, selector: str, container: str, since: str = "10m") -> str:
        result = self.run(
            "-n",
            namespace,
            "logs",
            "-l",
            selector,
            "-c",
            container,
            f"--since={since}",
            "--tail=-1",
            "--max-log-requests=20",
            "--prefix=false",
            timeout=60,
        )
        return check(result, f"kubectl logs -l {selector}").stdout

    def rollout_status(self, namespace: str, deployment: str, timeout: float = 180.0) -> None:
        """Waits for the deployment's rollout to finish."""
        check(
            self.run(
                "-n",
                namespace,
                "rollout",
                "status",
                f"deployment/{deployment}",
                f"--timeout={int(timeout)}s",
                timeout=timeout + 30,
            ),
            f"rollout status deployment/{deployment}",
        )

    def wait_for(self, namespace: str, condition: str, resource: str, timeout: float) -> None:
        """`kubectl wait --for=<condition> <resource>`, failing after `timeout` seconds."""
        check(
            self.run(
                "-n",
                namespace,
                "wait",
                f"--for={condition}",
                resource,
                f"--timeout={int(timeout)}s",
                timeout=timeout + 30,
            ),
            f"waiting for {resource} in {namespace} ({condition})",
        )

    def wait_policy_accepted(
        self,
        namespace: str,
        resource: str,
        name: str,
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> bool:
        deadline = clock() + timeout
        while True:
            result = self.run("-n", namespace, "get", resource, name, "-o", "json", timeout=20)
            if result.ok and policy_is_accepted(json.loads(result.stdout)):
                return True
            if clock() >= deadline:
                return False
            sleep(2.0)

    def rate_limit_configs(self, namespace: str, selector: str, port: int = RATELIMIT_DEBUG_PORT) -> dict[str, str]:
        """Each running rate-limit pod's `/rlconfig`, read through the API server's pod proxy (the image has no
        shell); a pod that does not answer maps to ""."""
        pods = self.json("-n", namespace, "get", "pods", "-l", selector, timeout=20)
        found = {}
        for pod in pods.get("items") or []:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
                continue
            path = f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/rlconfig"
            result = self.run("get", "--raw", path, timeout=20)
            found[name] = result.stdout if result.ok else ""
        return found

    def wait_rate_limits_loaded(
        self,
        namespace: str,
        selector: str,
        expected: set[tuple[int, str]],
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> dict[str, set[tuple[int, str]]]:
        """Wait until every running rate-limit pod holds exactly the `expected` limits (Envoy Gateway pushes a
        policy change to them over xDS; nothing restarts them). Returns {} when they do, else what each pod held
        at the deadline."""
        deadline = clock() + timeout
        while True:
            held = {pod: rlconfig_limits(text) for pod, text in self.rate_limit_configs(namespace, selector).items()}
            if held and all(limits == expected for limits in held.values()):
                return {}
            if clock() >= deadline:
                return held
            sleep(1.0)


class Ate:
    """kubectl-ate built from the pinned Substrate checkout (build/bin/kubectl-ate)."""

    def __init__(self, runner: Runner, binary: str, context: str, atespace: str) -> None:
        self.runner = runner
        self.binary = binary
        self.context = context
        self.atespace = atespace

    def run(self, *args: str, timeout: float = 60.0) -> Result:
        return self.runner([self.binary, "--context", self.context, *args], timeout=timeout)

    def actor_state(self, actor: str) -> str | None:
        """The actor's state, or None when it does not exist."""
        result = self.run("get", "actors", actor, "-a", self.atespace, "-o", "json", timeout=30)
        if not result.ok:
            if "notfound" in result.stderr.lower().replace(" ", "").replace("_", ""):
                return None
            raise RuntimeError(f"kubectl ate get actors {actor}: {result.last_error_line()}")
        return actor_state_from_json(json.loads(result.stdout or "{}"))

    def has_egress_policy(self, actor: str) -> bool:
        """True when the actor has an egress policy with rules (a missing one prints nothing on stdout)."""
        result = check(
            self.run("get", "egress-policy", actor, "-a", self.atespace, "-o", "json", timeout=30),
            "kubectl ate get egress-policy",
        )
        return substrate_facts.has_rules(substrate_facts.parse_json(result.stdout))

    def ensure_running(
        self,
        actor: str,
        template: str,
        timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> str:
        """Creates the actor from template if missing, resumes it, waits for RUNNING; returns what it did."""
        done = "running"
        state = self.actor_state(actor)
        if state is None:
            check(self.run("create", "actor", actor, "-a", self.atespace, "--template", template), "create actor")
            done, state = "created and resumed", "SUSPENDED"
        if state != "RUNNING":
            check(self.run("resume", "actor", actor, "-a", self.atespace), "resume actor")
            done = "resumed" if done == "running" else done
        deadline = clock() + timeout
        while self.actor_state(actor) != "RUNNING":
            if clock() >= deadline:
                raise TimeoutError(f"actor {self.atespace}/{actor} did not reach RUNNING within {timeout:g}s")
            sleep(2.0)
        return done

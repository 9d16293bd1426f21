"""The live dev stack as the checks use it: port-forwards, probe agents, counters, Pulumi config."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.manifests import API_KEY_LISTENER, JWT_LISTENER
from core.ratelimit_deployment import RATELIMIT_CONTAINER_NAME, RATELIMIT_POD_LABELS

from .checks import call_from_reply
from .config import Settings
from .counters import Counters
from .httpcall import http_request
from .kube import Ate, Kube, count_marker, policy_limits, selector_string
from .portforward import PortForward
from .probe import Call, ProbeClient
from .runner import Runner, SubprocessRunner, check
from .stack import StackConfig, preflight, probe_service, probes_problem

PROBE_PORT = 8080
"""The probe agent's port (probe/probe_agent.py, and its Service in scripts/dev_agents.py)."""


EXTPROC_CONFIG_TICK_SECONDS = 5.0
"""How often Agent Router's processor re-reads its filter configuration (v1.1.0 cmd/extproc/mainlib/main.go)."""
EXTPROC_CONTAINER = "ai-gateway-extproc"
"""The processor's container in each Envoy pod (Agent Router's webhook adds it)."""
EXTPROC_RELOAD = re.compile(r'^time=(?P<time>\S+) .*\bmsg="(?P<msg>loading a new (?:bundled )?config)"')
"""The processor's line as it starts loading a changed filter configuration (slog's text handler): `loading a new
config` from the single-file watcher, `loading a new bundled config` from the bundle watcher, which the controller
picks when the bundle Secret exists as the pod is made (envoyproxy/ai-gateway v1.1.0 internal/filterapi/watcher.go,
internal/controller/gateway_mutator.go `-configBundlePath`; the rig's processors run the bundle watcher)."""


def first_reload_after(log_text: str, began: float) -> float | None:
    """The epoch time of the processor's first reload line at or after `began` in its log, or None."""
    for line in log_text.splitlines():
        match = EXTPROC_RELOAD.match(line.strip())
        if match is None:
            continue
        try:
            at = datetime.fromisoformat(match["time"]).timestamp()
        except ValueError:
            continue
        if at >= began:
            return at
    return None


def processor_reloads(
    kubectl: Callable[..., str], namespace: str, pods: Sequence[str], began: float
) -> dict[str, float | None]:
    """Each Envoy pod's processor's first reload of its filter configuration at or after `began` (epoch seconds),
    from its log (`kubectl(*args)` answers kubectl's output, "" when it failed), None where it logged none."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began - 1))
    return {
        pod: first_reload_after(
            kubectl("-n", namespace, "logs", pod, "-c", EXTPROC_CONTAINER, f"--since-time={since}"), began
        )
        for pod in pods
    }


class StackUnavailableError(RuntimeError):
    """No live dev stack: `make e2e` fails with this reason (a plain pytest run skips)."""


REQUIRE_STACK_ENV = "AGENT_BUDGETS_E2E_REQUIRE_STACK"
"""Set by `make e2e` and `make bench-e2e`: a missing stack is then a failure, never a skip."""


def unavailable_outcome(reason: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """("fail" | "skip", message) for a run that found no live dev stack. Through make the run must fail
    with the reason; a bare pytest run (a developer, the unit suite's collection) may skip."""
    message = f"no live dev stack: {reason}. Run `make up` first, then `make e2e`"
    return ("fail" if environ.get(REQUIRE_STACK_ENV) == "1" else "skip"), message


def cli_missing_outcome(
    check_number: int, which: Callable[[str], str | None], environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """None when the Pulumi CLI is on PATH; else ("fail" | "skip", message) for a check that changes the stack.

    Under `make e2e` a check that cannot run must fail, like a missing stack (issue 10, defect 2).
    """
    if which("pulumi") is not None:
        return None
    message = (
        f"check {check_number} changes the stack through the Pulumi CLI, which is not on PATH: install it "
        "(`make up` needs it too), then `make e2e`"
    )
    return ("fail" if environ.get(REQUIRE_STACK_ENV) == "1" else "skip"), message


class AgentProbes:
    """The probe agents of the Substrate-free environment: one Service each, each behind its own port-forward; the
    same calls as a ProbeClient, addressed by agent."""

    def __init__(self, clients: Mapping[str, ProbeClient]) -> None:
        self.clients = dict(clients)

    def _client(self, actor: str | None) -> ProbeClient:
        if actor not in self.clients:
            raise KeyError(f"no probe agent {actor!r} (have {', '.join(self.clients)})")
        return self.clients[actor]

    def call(self, actor: str | None, **spec: Any) -> Call:
        return self._client(actor).call(None, **spec)

    def ready(self, actor: str | None) -> tuple[bool, str]:
        return self._client(actor).ready(None)

    def bench(self, actor: str | None, count: int, **spec: Any) -> dict[str, Any]:
        return self._client(actor).bench(None, count, **spec)


@dataclass
class LiveEnv:
    settings: Settings
    runner: Runner
    kube: Kube
    ate: Ate | None  # Substrate's `kubectl ate`, in the Substrate environment only
    counters: Counters
    probe: ProbeClient | AgentProbes
    gateway: PortForward | None  # the JWT listener, when the stack has a JWT source (Settings.listeners)
    stack: StackConfig
    api_key_gateway: PortForward | None = None  # the API-key listener, when the stack has API keys
    cost_reloads: list[str] = field(default_factory=list)
    """What each `settle_costs` saw of the processors' reloads, for the check's verdict."""

    def subject(self, actor: str) -> str:
        return self.settings.subject(actor)

    def fresh_buckets(self) -> str:
        """Deletes every counter of the demo actors, so each check starts from empty buckets."""
        subjects = [self.subject(actor) for actor in self.settings.all_actors]
        deleted = self.counters.clear(subjects)
        return (
            f"fresh buckets: deleted {deleted} counter key(s) of "
            f"{', '.join(self.settings.actor_id(a) for a in self.settings.all_actors)} first"
        )

    def totals(self, *actors: str) -> dict[str, int]:
        """Each actor's spend, keyed by actor name."""
        totals = self.counters.totals(self.subject(actor) for actor in actors)
        return {actor: totals[self.subject(actor)] for actor in actors}

    def wait_totals(self, expected: Mapping[str, int], timeout: float = 10.0) -> dict[str, int]:
        """Waits for the charges (made at stream end) to land; keys are actor names."""
        totals = self.counters.wait_for({self.subject(a): v for a, v in expected.items()}, timeout=timeout)
        return {actor: totals[self.subject(actor)] for actor in expected}

    def spend_report(self) -> dict[str, Any]:
        """`make -s spend STACK=<dev> ARGS=--json`, exactly as a user runs it; its JSON document."""
        result = self.runner(
            ["make", "-s", "spend", f"STACK={self.settings.pulumi_stack}", "ARGS=--json"],
            timeout=120.0,
            cwd=str(self.settings.root),
        )
        return json.loads(check(result, "make spend ARGS=--json").stdout)

    def call(self, actor: str, **spec: Any) -> Call:
        return self.probe.call(actor, **spec)

    def run_calls(self, actor: str, count: int, charge_per_call: int | None = None, **spec: Any) -> list[Call]:
        """count calls in a row; after each admitted one, waits for its charge to land before the
        next, so a refusal is decided on the real spend and not on a charge still in flight.

        charge_per_call is how much an admitted call adds to the sum of the actor's counters (default:
        the tokens of one call, for an actor with one tokens limit)."""
        per_call = self.settings.tokens_per_call if charge_per_call is None else charge_per_call
        calls: list[Call] = []
        charged = self.totals(actor)[actor]
        for _ in range(count):
            call = self.call(actor, **spec)
            calls.append(call)
            if call.status == 200:
                charged += per_call
                self.wait_totals({actor: charged})
        return calls

    def gateway_call(
        self, headers: Mapping[str, str], path: str = "/v1/chat/completions", listener: str = "http"
    ) -> Call:
        """A model call straight to the gateway from outside any agent (not an actor), on the JWT listener or, with
        `listener="apikeys"`, on the API-key listener."""
        forward = listener_forward(self, listener)
        body = {"model": self.settings.models[0], "messages": [{"role": "user", "content": "hi"}]}
        reply = http_request(
            forward.port, "POST", path, headers=headers, body=body, host=self.settings.gateway_host, timeout=30.0
        )
        return call_from_reply(reply)

    def service_account_token(self, account: str, audience: str | None = None) -> str:
        """A token of a service account of the agents' namespace (`kubectl create token`; the API server's own
        audience unless `audience` is given), as an agent outside the gateway's rules would hold it."""
        s = self.settings
        args = ["-n", s.agent_namespace, "create", "token", account, "--duration", "10m"]
        if audience is not None:
            args += ["--audience", audience]
        return check(self.kube.run(*args), f"kubectl create token {account}").stdout.strip()

    def gateway_log_hits(
        self, markers: Mapping[str, str], wait_for: str | None = None, timeout: float = 20.0
    ) -> dict[str, int]:
        """How many agent-router access-log lines carry each marker. Envoy flushes its access log
        about once a second, so this polls until the marker named by wait_for shows up (or times out)."""
        s = self.settings
        selector = self.kube.service_pods_selector(s.gateway_namespace, s.gateway_service)
        deadline = time.monotonic() + timeout
        while True:
            text = self.kube.logs(s.gateway_namespace, selector, "envoy", since="10m")
            hits = {name: count_marker(text, marker) for name, marker in markers.items()}
            if wait_for is None or hits.get(wait_for, 0) > 0 or time.monotonic() >= deadline:
                return hits
            time.sleep(1.0)

    def settle_policy(self) -> None:
        """After `pulumi up` changed the budgets: wait for Envoy Gateway to accept the policy, then for every
        rate-limit pod to hold its limits. Envoy Gateway pushes them over xDS; no restart (a change took 1.5-2.5 s
        from policy to rate-limit service with the File provider: scripts/measure_budget_propagation.py)."""
        s = self.settings
        if not self.kube.wait_policy_accepted(s.policy_namespace, "backendtrafficpolicy", s.policy_name):
            raise RuntimeError(f"BackendTrafficPolicy {s.policy_namespace}/{s.policy_name} is not Accepted")
        policy = self.kube.json("-n", s.policy_namespace, "get", "backendtrafficpolicy", s.policy_name, timeout=20)
        expected = policy_limits(policy)
        selector = selector_string(RATELIMIT_POD_LABELS)
        held = self.kube.wait_rate_limits_loaded(s.gateway_namespace, selector, expected)
        if held:
            raise RuntimeError(
                f"the rate-limit pods do not hold the policy's limits {sorted(expected)}: {held} (a pod with "
                '"Error loading new configuration" in its log refused them)'
            )
        time.sleep(3.0)  # Envoy's part of the change (its routes' rate-limit actions) comes over its own xDS stream

    def settle_costs(self) -> None:
        """After `pulumi up` changed what a call costs (prices, a usd limit): the budget policy settled, then every
        Envoy pod's Agent Router processor seen loading its new filter configuration. The controller rewrites the
        Secret the processor reads at once (3.3 s after `up` began on the rig, the kubelet's copy in the Envoy pod
        with it), but the processor looks at that file every 5 s (envoyproxy/ai-gateway v1.1.0
        cmd/extproc/mainlib/main.go `startConfigWatcher(..., time.Second*5)`): a call before that is costed with the
        old configuration, and its usd is charged nothing. A processor that logs no reload line (another release)
        is given longer than its reload period instead."""
        self.settle_policy()
        began = self.stack.last_up_began
        reloads = None if began is None else self.wait_extproc_reloads(began)
        if reloads is None:
            seen = (
                f"not every Envoy pod's {EXTPROC_CONTAINER} logged a reload of its filter configuration since pulumi "
                f"up began; waited {EXTPROC_CONFIG_TICK_SECONDS + 2.0:g} s, longer than its reload period, instead"
            )
            time.sleep(EXTPROC_CONFIG_TICK_SECONDS + 2.0)
        else:
            seen = (
                "Agent Router's processor loaded its new filter configuration "
                + ", ".join(f"{pod} {seconds:.1f} s" for pod, seconds in sorted(reloads.items()))
                + " after pulumi up began"
            )
        print(seen)
        self.cost_reloads.append(seen)

    def wait_extproc_reloads(
        self, began: float, timeout: float = 4 * EXTPROC_CONFIG_TICK_SECONDS
    ) -> dict[str, float] | None:
        """Every running Envoy pod's processor's first reload since `began` (epoch seconds) -> seconds after it, from
        its log (`EXTPROC_RELOAD`, logged as it reads the changed file); None when some pod logs none within
        `timeout`."""
        s = self.settings
        selector = self.kube.service_pods_selector(s.gateway_namespace, s.gateway_service)
        deadline = time.monotonic() + timeout
        while True:
            pods = self.kube.json("-n", s.gateway_namespace, "get", "pods", "-l", selector, timeout=20)["items"]
            names = [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp") is None]
            seen = processor_reloads(self._kubectl_output, s.gateway_namespace, names, began)
            reloads = {name: at - began for name, at in seen.items() if at is not None}
            if names and len(reloads) == len(names):
                return reloads
            if time.monotonic() >= deadline:
                return None
            time.sleep(1.0)

    def _kubectl_output(self, *args: str) -> str:
        result = self.kube.run(*args)
        return result.stdout if result.returncode == 0 else ""

    def settle_policies(self) -> None:
        """After `pulumi up` changed the SecurityPolicy too (suspensions): wait for it to be accepted as
        well, then settle the budget policy; Envoy gets both in the same xDS update."""
        s = self.settings
        if not self.kube.wait_policy_accepted(s.policy_namespace, "securitypolicy", s.jwt_policy_name):
            raise RuntimeError(f"SecurityPolicy {s.policy_namespace}/{s.jwt_policy_name} is not Accepted")
        self.settle_policy()

    def settle_gateway(self) -> None:
        """After `pulumi up` changed Envoy Gateway's own configuration (e.g. rateLimit.failClosed): the eg
        release rolls envoy-gateway (our config checksum annotation); wait for it, then give the new
        translation a moment to reach Envoy."""
        self.kube.rollout_status(self.settings.gateway_namespace, "envoy-gateway", timeout=300)
        time.sleep(10.0)

    # --- the rate-limit store (checks 9 and 10) ------------------------------------------------------------

    def _redis_ready(self, timeout: float) -> None:
        s = self.settings
        self.kube.wait_for(s.redis_namespace, "condition=Ready", f"pod/{s.redis_pod}", timeout)
        self.counters.totals([])  # redis-cli PING with the password: the store answers again

    def restart_redis(self, timeout: float = 300.0) -> str:
        """Deletes the Redis pod (a graceful stop: Redis flushes its append-only file) and waits until the
        StatefulSet has brought it back and it answers."""
        s = self.settings
        check(
            self.kube.run("-n", s.redis_namespace, "delete", "pod", s.redis_pod, "--wait=true", timeout=timeout),
            f"deleting pod {s.redis_namespace}/{s.redis_pod}",
        )
        self._redis_ready(timeout)
        return f"deleted pod {s.redis_namespace}/{s.redis_pod}; the StatefulSet brought it back and it answers PING"

    def restart_rate_limit(self, timeout: float = 300.0) -> str:
        """Restarts the rate-limit service (`kubectl rollout restart` of Envoy Gateway's `envoy-ratelimit`) and waits
        for the rollout: its counters live in Redis, so none may change. After the store was away, this is also what
        renews the service's Redis connections: envoyproxy/ratelimit's pool (radix v4, src/redis/driver_impl.go)
        finds a dead connection only when a command fails on it, and that command is not retried, so a response-time
        charge made on one in the seconds after the store is back is lost (docs/operations.md)."""
        s = self.settings
        deployment = f"deployment/{RATELIMIT_CONTAINER_NAME}"
        check(self.kube.run("-n", s.gateway_namespace, "rollout", "restart", deployment), f"restarting {deployment}")
        self.kube.rollout_status(s.gateway_namespace, RATELIMIT_CONTAINER_NAME, timeout=timeout)
        self.settle_policy()  # the new pods load their limits from Envoy Gateway over xDS
        return f"restarted {s.gateway_namespace}/{deployment} and waited for its rollout and its limits"

    @contextmanager
    def redis_unreachable(self, timeout: float = 300.0) -> Iterator[str]:
        """The rate-limit store down: the Redis StatefulSet scaled to 0 (its volume kept); scaled back to 1 and
        waited for afterwards, then the rate-limit service restarted (its stale connections would lose the next
        charges: `restart_rate_limit`), also when the body fails."""
        s = self.settings
        statefulset = f"statefulset/{s.redis_statefulset}"
        check(self.kube.run("-n", s.redis_namespace, "scale", statefulset, "--replicas=0"), f"scale {statefulset} to 0")
        try:
            self.kube.wait_for(s.redis_namespace, "delete", f"pod/{s.redis_pod}", timeout)
            yield f"scaled {s.redis_namespace}/{statefulset} to 0 replicas (its volume is kept)"
        finally:
            check(
                self.kube.run("-n", s.redis_namespace, "scale", statefulset, "--replicas=1"),
                f"scale {statefulset} to 1",
            )
            self._redis_ready(timeout)
            self.restart_rate_limit(timeout)


def listener_forward(env: LiveEnv, listener: str) -> PortForward:
    """The port-forward to one listener of the Gateway, or RuntimeError naming why the stack has none."""
    forwards = {JWT_LISTENER: env.gateway, API_KEY_LISTENER: env.api_key_gateway}
    if listener not in forwards:
        raise ValueError(f"no listener {listener!r}: the Gateway's listeners are {JWT_LISTENER} and {API_KEY_LISTENER}")
    forward = forwards[listener]
    if forward is None:
        sources = ", ".join(env.settings.sources)
        raise RuntimeError(f"the stack has no {listener} listener (identity.sources: {sources})")
    return forward


def listener_forwards(
    stack: ExitStack, settings: Settings, popen: Callable[..., Any] = subprocess.Popen
) -> dict[str, PortForward]:
    """One port-forward to the gateway Service per listener the stack has (Settings.listeners), by listener name."""
    service = f"service/{settings.gateway_service}"
    return {
        name: stack.enter_context(
            PortForward(settings.kube_context, settings.gateway_namespace, service, port, popen=popen)
        )
        for name, port in settings.listeners
    }


def _forward_port(stack: ExitStack, settings: Settings, agent: str) -> Callable[[], int]:
    """The local port of a port-forward to one agent's probe Service (restarted when its pod went away)."""
    forward = stack.enter_context(
        PortForward(settings.kube_context, settings.agent_namespace, f"service/{probe_service(agent)}", PROBE_PORT)
    )
    return lambda: forward.port


def new_marker() -> str:
    return f"e2e-{uuid.uuid4().hex[:16]}"


@contextmanager
def live_env(settings: Settings, runner: Runner | None = None, log: Callable[[str], None] = print) -> Iterator[LiveEnv]:
    """Connects to the dev stack, or raises StackUnavailableError with the reason."""
    runner = runner or SubprocessRunner()
    kube = Kube(runner, settings.kube_context)
    reason = preflight(kube, settings)
    if reason:
        raise StackUnavailableError(reason)
    with ExitStack() as stack:
        try:
            forwards = listener_forwards(stack, settings)
            probe: ProbeClient | AgentProbes
            if settings.on_substrate:
                ingress = stack.enter_context(
                    PortForward(
                        settings.kube_context,
                        settings.substrate_namespace,
                        f"service/{settings.ingress_service}",
                        settings.ingress_port,
                    )
                )
                probe = ProbeClient(lambda: ingress.port, settings.target)
            else:
                probe = AgentProbes(
                    {agent: ProbeClient(_forward_port(stack, settings, agent)) for agent in settings.all_actors}
                )
        except RuntimeError as exc:
            raise StackUnavailableError(str(exc)) from exc
        via = "atenet-router" if settings.on_substrate else f"its port-forward (namespace {settings.agent_namespace})"
        problem = probes_problem(probe.ready, settings.listed_agents, via)
        if problem:
            raise StackUnavailableError(problem)
        env = LiveEnv(
            settings=settings,
            runner=runner,
            kube=kube,
            ate=Ate(runner, str(settings.kubectl_ate), settings.kube_context, settings.atespace)
            if settings.on_substrate
            else None,
            counters=Counters(
                kube, settings.redis_namespace, settings.redis_pod, settings.redis_secret, settings.redis_secret_key
            ),
            probe=probe,
            gateway=forwards.get(JWT_LISTENER),
            stack=StackConfig(runner, settings),
            api_key_gateway=forwards.get(API_KEY_LISTENER),
        )
        log(
            f"e2e: dev stack {settings.pulumi_stack} on {settings.kube_context} reachable (identity sources "
            f"{', '.join(settings.sources)}); probe agents of "
            f"{', '.join(settings.actor_id(a) for a in settings.listed_agents)} answer through {via}"
        )
        yield env

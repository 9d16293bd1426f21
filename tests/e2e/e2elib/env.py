"""The live dev stack as the checks use it: port-forwards, probe agents, counters, Pulumi config."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from .checks import call_from_reply
from .config import Settings
from .counters import Counters
from .httpcall import http_request
from .kube import Ate, Kube, count_marker
from .portforward import PortForward
from .probe import Call, ProbeClient
from .runner import Runner, SubprocessRunner
from .stack import StackConfig, preflight, probes_problem


class StackUnavailableError(RuntimeError):
    """No live dev stack: the checks are skipped with this reason."""


@dataclass
class LiveEnv:
    settings: Settings
    runner: Runner
    kube: Kube
    ate: Ate
    counters: Counters
    probe: ProbeClient
    gateway: PortForward
    stack: StackConfig

    def subject(self, actor: str) -> str:
        return self.settings.subject(actor)

    def fresh_buckets(self) -> str:
        """Deletes every counter of the demo actors, so each check starts from empty buckets."""
        subjects = [self.subject(actor) for actor in self.settings.all_actors]
        deleted = self.counters.clear(subjects)
        return (
            f"fresh buckets: deleted {deleted} counter key(s) of "
            f"{', '.join(self.settings.target(a) for a in self.settings.all_actors)} first"
        )

    def totals(self, *actors: str) -> dict[str, int]:
        """Each actor's spend, keyed by actor name."""
        totals = self.counters.totals(self.subject(actor) for actor in actors)
        return {actor: totals[self.subject(actor)] for actor in actors}

    def wait_totals(self, expected: Mapping[str, int], timeout: float = 10.0) -> dict[str, int]:
        """Waits for the charges (made at stream end) to land; keys are actor names."""
        totals = self.counters.wait_for({self.subject(a): v for a, v in expected.items()}, timeout=timeout)
        return {actor: totals[self.subject(actor)] for actor in expected}

    def call(self, actor: str, **spec: Any) -> Call:
        return self.probe.call(actor, **spec)

    def run_calls(self, actor: str, count: int, **spec: Any) -> list[Call]:
        """count calls in a row; after each admitted one, waits for its charge to land before the
        next, so a refusal is decided on the real spend and not on a charge still in flight."""
        calls: list[Call] = []
        charged = self.totals(actor)[actor]
        for _ in range(count):
            call = self.call(actor, **spec)
            calls.append(call)
            if call.status == 200:
                charged += self.settings.tokens_per_call
                self.wait_totals({actor: charged})
        return calls

    def gateway_call(self, headers: Mapping[str, str], path: str = "/v1/chat/completions") -> Call:
        """A model call straight to the gateway from outside any sandbox (not an actor)."""
        body = {"model": self.settings.models[0], "messages": [{"role": "user", "content": "hi"}]}
        reply = http_request(
            self.gateway.port, "POST", path, headers=headers, body=body, host=self.settings.gateway_host, timeout=30.0
        )
        return call_from_reply(reply)

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
        """After `pulumi up` changed the budgets: wait for Envoy Gateway to accept the policy, then
        restart the rate-limit service so it serves the new rules (what the upstream e2e does)."""
        s = self.settings
        if not self.kube.wait_policy_accepted(s.policy_namespace, "backendtrafficpolicy", s.policy_name):
            raise RuntimeError(f"BackendTrafficPolicy {s.policy_namespace}/{s.policy_name} is not Accepted")
        self.kube.rollout_restart(s.gateway_namespace, s.ratelimit_deployment)
        time.sleep(3.0)


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
            ingress = stack.enter_context(
                PortForward(
                    settings.kube_context,
                    settings.substrate_namespace,
                    f"service/{settings.ingress_service}",
                    settings.ingress_port,
                )
            )
            gateway = stack.enter_context(
                PortForward(
                    settings.kube_context,
                    settings.gateway_namespace,
                    f"service/{settings.gateway_service}",
                    settings.gateway_port,
                )
            )
        except RuntimeError as exc:
            raise StackUnavailableError(str(exc)) from exc
        probe = ProbeClient(lambda: ingress.port, settings.target)
        problem = probes_problem(probe.ready, settings.demo_actors)
        if problem:
            raise StackUnavailableError(problem)
        env = LiveEnv(
            settings=settings,
            runner=runner,
            kube=kube,
            ate=Ate(runner, str(settings.kubectl_ate), settings.kube_context, settings.atespace),
            counters=Counters(
                kube, settings.redis_namespace, settings.redis_pod, settings.redis_secret, settings.redis_secret_key
            ),
            probe=probe,
            gateway=gateway,
            stack=StackConfig(runner, settings),
        )
        log(
            f"e2e: dev stack {settings.kube_context} reachable; probe agents of "
            f"{', '.join(settings.target(a) for a in settings.demo_actors)} answer through atenet-router"
        )
        yield env

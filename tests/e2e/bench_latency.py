"""make bench-e2e: the latency the full path adds to a model call.

2,000 non-streamed calls (after a warm-up) through the full path — from actor-a's sandbox, through
Substrate's egress gateway (JWT injection), Envoy Gateway (JWT check, rate-limit check), Agent Router
and on to the mock model — and the same number straight to the mock model from a plain pod running
the same probe agent. Both are timed by the probe agent itself, per call, on one kept-alive
connection, so the port-forwards to the cluster are not part of any number. Reports the median and
p95 of each and the difference ("added").

So that 2,000 calls are not refused after three, actor-a gets a large budget class for the run
(stack config + `pulumi up`, restored afterwards, like check 8).

With `--concurrency 1 2 4 ...` it measures throughput instead: `--calls` calls through the full path at each
level (that many probe requests at once, each on its own kept-alive connection), the calls per second and the
busiest level whose p95 stays within twice the p95 at the lowest. The load comes from a probe agent on the same
machine, so the figure is the machine's, gateway and load together.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.e2e.e2elib.config import load_settings
from tests.e2e.e2elib.env import LiveEnv, StackUnavailableError, live_env
from tests.e2e.e2elib.portforward import PortForward
from tests.e2e.e2elib.probe import ProbeClient
from tests.e2e.e2elib.runner import check
from tests.e2e.e2elib.stack import budget_class
from tests.e2e.e2elib.stats import Level, report, summarize, throughput_lines

DIRECT_POD = "agent-budgets-bench-direct"
SUBSTRATE_DIRECT_NAMESPACE = "agent-budgets-actors"  # the demo's own namespace (scripts/versions.env WORKER_NAMESPACE)


def direct_namespace(settings: Any) -> str:
    """Where the direct probe runs: the Substrate demo's namespace, or the agents' namespace without Substrate (the
    Substrate-free environment has no `agent-budgets-actors`: the first run on the rig failed there)."""
    return SUBSTRATE_DIRECT_NAMESPACE if settings.on_substrate else settings.agent_namespace


def collect(client: ProbeClient, actor: str | None, calls: int, chunk: int, model: str) -> dict[str, Any]:
    """calls timed calls in requests of at most chunk calls each."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors = 0
    remaining = calls
    while remaining > 0:
        batch = client.bench(actor, min(chunk, remaining), model=model)
        latencies += batch["latencies_ms"]
        errors += batch["errors"]
        for status, count in batch["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
        remaining -= min(chunk, remaining)
    return {"latencies": latencies, "statuses": statuses, "errors": errors}


@contextmanager
def direct_probe(env: LiveEnv) -> Iterator[ProbeClient]:
    """A plain pod (not an actor) running the probe agent, pointed straight at the mock model."""
    s = env.settings
    namespace = direct_namespace(s)
    upstream = f"http://{s.mock_service}.{s.mock_namespace}.svc.cluster.local:{s.mock_port}"
    env.kube.run("-n", namespace, "delete", "pod", DIRECT_POD, "--ignore-not-found", "--wait=true", timeout=120)
    check(
        env.kube.run(
            "-n",
            namespace,
            "run",
            DIRECT_POD,
            f"--image={s.probe_image}",
            "--restart=Never",
            "--image-pull-policy=IfNotPresent",
            "--labels=app.kubernetes.io/name=agent-budgets-bench",
            "--env=PORT=8080",
            f"--env=PROBE_UPSTREAM={upstream}",
        ),
        "kubectl run the direct probe",
    )
    try:
        check(
            env.kube.run(
                "-n",
                namespace,
                "wait",
                "--for=condition=Ready",
                f"pod/{DIRECT_POD}",
                "--timeout=180s",
                timeout=200,
            ),
            "waiting for the direct probe pod",
        )
        with PortForward(s.kube_context, namespace, f"pod/{DIRECT_POD}", 8080) as forward:
            client = ProbeClient(lambda: forward.port)
            client.wait_ready(None)  # `kubectl run` sets no readiness probe: Ready comes before the server listens
            yield client
    finally:
        env.kube.run("-n", namespace, "delete", "pod", DIRECT_POD, "--ignore-not-found", "--wait=false")


def run(env: LiveEnv, calls: int, warmup: int, chunk: int, actor: str) -> int:
    s = env.settings
    model = s.models[0]
    tokens = max(1_000_000, 2 * (calls + warmup) * s.tokens_per_call)
    bench = {"name": "bench", "tokens": tokens, "per": s.default_per, "actors": [s.actor_id(actor)]}
    with budget_class(env.stack, bench, env.settle_policy):
        print(env.fresh_buckets())
        with direct_probe(env) as direct:
            direct.bench(None, warmup, model=model)
            straight = collect(direct, None, calls, chunk, model)
        env.probe.bench(actor, warmup, model=model)
        full = collect(env.probe, actor, calls, chunk, model)
        print(env.fresh_buckets())

    print(
        f"bench-e2e: {calls} non-streamed calls each way after {warmup} warm-up calls, timed per call by the "
        "probe agent on one kept-alive connection"
    )
    problems = []
    for name, result in (("straight to the mock", straight), (f"full path from {s.actor_id(actor)}", full)):
        if result["errors"] or set(result["statuses"]) != {"200"}:
            problems.append(f"{name}: statuses {result['statuses']}, connection errors {result['errors']}")
    for line in report(summarize(straight["latencies"]), summarize(full["latencies"])):
        print("  " + line)
    for problem in problems:
        print(f"  FAIL: not every call returned 200 ({problem})")
    return 1 if problems else 0


def run_throughput(env: LiveEnv, levels: list[int], calls: int, actor: str) -> int:
    """`calls` calls through the full path at each concurrency of `levels` (that many probe requests at once, each on
    its own kept-alive connection), timed as a whole and call by call: calls per second, and the busiest level whose
    p95 stays within twice the p95 at the lowest (the load comes from the same machine's probe agent)."""
    s = env.settings
    model = s.models[0]
    tokens = max(1_000_000, 2 * calls * len(levels) * s.tokens_per_call)
    bench = {"name": "bench", "tokens": tokens, "per": s.default_per, "actors": [s.actor_id(actor)]}
    measured: list[Level] = []
    with budget_class(env.stack, bench, env.settle_policy):
        print(env.fresh_buckets())
        env.probe.bench(actor, 50, model=model)
        for concurrency in levels:
            share = max(calls // concurrency, 1)
            began = time.monotonic()
            with ThreadPoolExecutor(concurrency) as pool:
                batches = list(pool.map(lambda _, n=share: env.probe.bench(actor, n, model=model), range(concurrency)))
            seconds = time.monotonic() - began
            latencies = [value for batch in batches for value in batch["latencies_ms"]]
            statuses = {code for batch in batches for code in batch["statuses"]}
            if statuses != {"200"} or any(batch["errors"] for batch in batches):
                print(f"  FAIL: at concurrency {concurrency} not every call returned 200: {sorted(statuses)}")
                return 1
            measured.append(Level(concurrency, len(latencies), seconds, summarize(latencies)))
        print(env.fresh_buckets())
    print(f"bench-e2e throughput: {calls} calls at each concurrency of {levels}, through the full path from {actor}")
    for line in throughput_lines(measured):
        print("  " + line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per path (default 2000)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls first (default 50)")
    parser.add_argument("--chunk", type=int, default=500, help="calls per request to a probe (default 500)")
    parser.add_argument("--actor", default=None, help="demo actor for the full path (default: the first)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=None, help="instead: calls per second at these concurrencies"
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 1 or args.chunk < 1:
        parser.error("--calls, --warmup and --chunk must be positive")
    settings = load_settings()
    try:
        with live_env(settings) as env:
            actor = args.actor or settings.demo_actors[0]
            if args.concurrency:
                return run_throughput(env, args.concurrency, args.calls, actor)
            return run(env, args.calls, args.warmup, args.chunk, actor)
    except StackUnavailableError as exc:
        # Only ever run live (`make bench-e2e`): no stack is a failure with its reason, never a pass.
        print(f"bench-e2e failed: no live dev stack: {exc}. Run `make up` first", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

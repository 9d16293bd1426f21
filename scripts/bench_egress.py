"""Benchmark (not a test): the egress-policy provider at 10,000 actors against a slow fake `kubectl ate`.

Drives the real provider code (components/egress_provider.py) the way Pulumi's Python dynamic-provider host
does: every shard's check, diff, create, update or read goes through a pool of four threads, the host's
`ThreadPoolExecutor(max_workers=4)` (pulumi/dynamic/__main__.py, SDK 3.272.0). The fake kubectl
(tests/fake_kubectl.py) sleeps a fixed time per call, standing in for the service-account token,
port-forward and gRPC call each real `kubectl ate` process makes.

Prints, for each latency, the five figures the scale targets name: first `up`, a shared-setting change,
refresh, preview / no-op `up` (processes) and adding or removing one actor (processes), each with its
target (the time targets are set at 300 ms per call; at 1 s the times are reported). Run with
`make bench-egress` (10,000 actors at 300 ms and 1 s per call; about half an hour on two cores), or
`venv/bin/python scripts/bench_egress.py --actors 1000 --latency 0.3` for a quick look.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.egress_provider import EgressShardProvider  # noqa: E402
from core import egress  # noqa: E402
from core.egress import EgressPolicySettings, ShardInputs  # noqa: E402
from tests.fake_ate import Engine, FakeAte, environ, make_fake  # noqa: E402

HOST_WORKERS = 4  # pulumi/dynamic/__main__.py: ThreadPoolExecutor(max_workers=4)
TARGET_LATENCY = 0.3  # the scale targets are set at this many seconds per kubectl ate call
NEWCOMER = "agents/bench-newcomer"


@dataclass
class Stack:
    """The engine's record of every shard (tests/fake_ate.py's :class:`Engine`), by shard index."""

    engines: dict[int, Engine] = field(default_factory=dict)

    def up(self, shards: Iterable[ShardInputs]) -> None:
        """`pulumi up`: check and diff every shard, then create or update those that changed; shards no
        longer declared are deleted."""
        declared = {s.shard: s for s in shards}

        def one(shard: ShardInputs) -> None:
            decision = self.engines.setdefault(shard.shard, Engine(EgressShardProvider())).up(shard)
            if decision is not None and decision.replaces:
                raise AssertionError("the benchmark changes no target")

        host(one, declared.values())
        host(lambda index: self.engines.pop(index).destroy(), [i for i in self.engines if i not in declared])

    def preview(self, shards: Iterable[ShardInputs]) -> int:
        """`pulumi preview`: check and diff only. Returns the number of shards that would change."""
        return sum(host(lambda shard: self.engines[shard.shard].preview(shard), shards))

    def refresh(self) -> None:
        host(Engine.refresh, list(self.engines.values()))


def host(call: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """Run ``call`` for each item through the dynamic-provider host's four workers."""
    with ThreadPoolExecutor(max_workers=HOST_WORKERS) as pool:
        return list(pool.map(call, items))


@dataclass
class Figure:
    name: str
    seconds: float
    processes: int
    target: str
    met: bool


def measure(
    fake: FakeAte, name: str, target: str, check: Callable[[float, int], bool], action: Callable[[], Any]
) -> Figure:
    fake.clear_calls()
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    processes = len(fake.calls())
    return Figure(name, seconds, processes, target, check(seconds, processes))


def run(actors: int, latency: float, concurrency: int) -> Iterator[Figure]:
    """Each figure as soon as it is measured."""
    refs = [f"agents/agent-{i:05d}" for i in range(actors)]
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as directory:
        fake = make_fake(Path(directory))
        os.environ.update(environ(fake))
        fake.add_actors([*refs, NEWCOMER])
        fake.set(sleep_seconds=latency)
        settings = EgressPolicySettings(
            actors=refs, kube_context="kind-test", substrate_ref="v1.0.0-rc.1", kubectl=fake.kubectl,
            concurrency=concurrency,
        )  # fmt: skip
        changed = replace(settings, expiration_seconds=1200)
        grown = replace(changed, actors=[*refs, NEWCOMER])
        stack = Stack()
        # The time targets are set at 300 ms per call; at other latencies the times are reported only.
        timed = latency <= TARGET_LATENCY

        def within(limit: float) -> Callable[[float, int], bool]:
            return lambda seconds, _: seconds <= limit or not timed

        def processes(most: int) -> Callable[[float, int], bool]:
            return lambda _, count: count <= most

        def label(text: str) -> str:
            return text if timed else f"reported ({text} at {TARGET_LATENCY:g} s)"

        yield measure(fake, "first up", label("<= 10 min"), within(600), lambda: stack.up(settings.shards()))
        yield measure(fake, "preview", "0 processes", processes(0), lambda: stack.preview(settings.shards()))
        yield measure(fake, "no-op up", "0 processes", processes(0), lambda: stack.up(settings.shards()))
        yield measure(
            fake, "shared-setting change", label("<= 10 min"), within(600), lambda: stack.up(changed.shards())
        )
        yield measure(fake, "refresh", label("<= 5 min"), within(300), stack.refresh)
        yield measure(fake, "add one actor", "<= 3 processes", processes(3), lambda: stack.up(grown.shards()))
        yield measure(fake, "remove one actor", "<= 3 processes", processes(3), lambda: stack.up(changed.shards()))
        stored = fake.policies()
        lifetimes = {
            p["rules"][0]["http"]["effects"]["replaceHeaders"][0]["actorJwt"]["expirationSeconds"]
            for p in stored.values()
        }
        if len(stored) != actors or lifetimes != {1200}:
            raise SystemExit(
                f"the fake holds {len(stored)} policies with lifetimes {lifetimes}, not {actors} with 1200"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=10_000)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.3, 1.0], help="seconds per kubectl ate call")
    parser.add_argument("--concurrency", type=int, default=egress.DEFAULT_CONCURRENCY, help="calls in flight per shard")
    args = parser.parse_args()
    today = datetime.date.today().isoformat()
    print(
        f"egress policies, {args.actors} actors in {egress.SHARD_COUNT} shards, concurrency {args.concurrency} per "
        f"shard, {HOST_WORKERS} provider calls at once (at most {HOST_WORKERS * args.concurrency} processes); "
        f"measured on {today} ({os.cpu_count()} cores)",
        flush=True,
    )
    failed = False
    for latency in args.latency:
        print(f"\n{latency:g} s per kubectl ate call", flush=True)
        print(f"  {'operation':<24}{'seconds':>9}{'processes':>11}   target", flush=True)
        for figure in run(args.actors, latency, args.concurrency):
            mark = ("ok" if figure.met else "MISSED") if not figure.target.startswith("reported") else ""
            print(
                f"  {figure.name:<24}{figure.seconds:>9.1f}{figure.processes:>11}   {figure.target} {mark}", flush=True
            )
            failed = failed or not figure.met
    if failed:
        raise SystemExit("a target was missed")


if __name__ == "__main__":
    main()

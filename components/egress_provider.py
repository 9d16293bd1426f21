"""Pulumi dynamic provider for Substrate actor egress policies, driven through ``kubectl ate``.

Substrate's API server (ateapi) stores an actor's egress policy; it is not a Kubernetes object, so
``pulumi_kubernetes`` cannot manage it. This provider shells out to the ``kubectl ate`` plugin:

    <kubectl> ate create egress-policy <actor> -a <atespace> --context <ctx> -f -
    <kubectl> ate get    egress-policy <actor> -a <atespace> --context <ctx> -o json
    <kubectl> ate update egress-policy <actor> -a <atespace> --context <ctx> -f -
    <kubectl> ate delete egress-policy <actor> -a <atespace> --context <ctx>

Only ``get`` is documented with ``-o``, so ``create`` and ``update`` are run without it and their
output is not read: after a successful write, a ``get -o json`` reads the uid, version and rules.

``--context`` goes after the plugin name: kubectl refuses global flags placed before a plugin
("flags cannot be placed before plugin name"), so the flag reaches kubectl-ate itself. A
kubectl-ate build without that flag answers ``unknown flag: --context``; that is reported as a
version skew with the instructions to rebuild kubectl-ate at the pinned Substrate ref.

Pulumi pickles the provider object (dill) into the state; it carries no attributes, and everything
it calls lives at the top level of this importable module.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from core import egress
from core.egress import PolicyInputs

UPDATE_ATTEMPTS = 5
"""How many times an upsert retries when the server answers Aborted (a stale uid/version)."""
RETRY_BACKOFF_SECONDS = 0.05
SUBSTRATE_REPO = "https://github.com/agent-substrate/substrate"
PROVIDER_KEY = "__provider"  # where Pulumi keeps the pickled provider among the properties

# --- failure classification ---------------------------------------------------------------------

ALREADY_EXISTS = "AlreadyExists"
NOT_FOUND = "NotFound"
ACTOR_NOT_FOUND = "ActorNotFound"
FAILED_PRECONDITION = "FailedPrecondition"
ABORTED = "Aborted"
UNKNOWN_FIELD = "UnknownField"
UNKNOWN_FLAG = "UnknownFlag"
INVALID_ARGUMENT = "InvalidArgument"
PLUGIN_MISSING = "PluginMissing"
UNAVAILABLE = "Unavailable"
PERMISSION_DENIED = "PermissionDenied"
UNKNOWN = "Unknown"

# gRPC code names as kubectl-ate prints them ("rpc error: code = AlreadyExists desc = ..."),
# matched case-insensitively and with or without underscores (ALREADY_EXISTS).
_GRPC_CODES = {
    "alreadyexists": ALREADY_EXISTS,
    "notfound": NOT_FOUND,
    "failedprecondition": FAILED_PRECONDITION,
    "aborted": ABORTED,
    "invalidargument": INVALID_ARGUMENT,
    "unavailable": UNAVAILABLE,
    "deadlineexceeded": UNAVAILABLE,
    "permissiondenied": PERMISSION_DENIED,
    "unauthenticated": PERMISSION_DENIED,
}
_CODE_RE = re.compile(r"code\s*=\s*([A-Za-z_]+)", re.IGNORECASE)
# Checked in order, before the gRPC code: the more specific wording wins.
_TEXT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (PLUGIN_MISSING, re.compile(r'unknown command "?ate"?|kubectl-ate: (command )?not found', re.IGNORECASE)),
    (UNKNOWN_FIELD, re.compile(r"unknown field", re.IGNORECASE)),
    (UNKNOWN_FLAG, re.compile(r"unknown (shorthand )?flag", re.IGNORECASE)),
    (FAILED_PRECONDITION, re.compile(r"failed[\s_]*precondition|parent actor does not exist", re.IGNORECASE)),
    (ACTOR_NOT_FOUND, re.compile(r'actor "[^"]*" in atespace "[^"]*" not found', re.IGNORECASE)),
    (NOT_FOUND, re.compile(r"has no egress policy", re.IGNORECASE)),
)
# Used only when the output carries no gRPC code.
_FALLBACK_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ALREADY_EXISTS, re.compile(r"already[\s_]*exists", re.IGNORECASE)),
    (ABORTED, re.compile(r"\baborted\b", re.IGNORECASE)),
    (NOT_FOUND, re.compile(r"not[\s_]*found", re.IGNORECASE)),
    (INVALID_ARGUMENT, re.compile(r"invalid[\s_]*argument", re.IGNORECASE)),
    (UNAVAILABLE, re.compile(r"unavailable|deadline[\s_]*exceeded|failed to connect", re.IGNORECASE)),
    (PERMISSION_DENIED, re.compile(r"permission[\s_]*denied|unauthenticated|forbidden", re.IGNORECASE)),
)


# cobra's wording: "unknown flag: --context", "unknown shorthand flag: 'o' in -o".
_UNKNOWN_FLAG_RE = re.compile(r"unknown (?:shorthand )?flag:\s*(?:'[^']*' in )?(-{1,2}[A-Za-z0-9][-A-Za-z0-9]*)")


def unknown_flag_of(output: str) -> str:
    """The flag a cobra CLI rejected as unknown (``--context``, ``-o``), or ``""``."""
    match = _UNKNOWN_FLAG_RE.search(output)
    return match.group(1) if match else ""


def classify_failure(output: str) -> str:
    """The failure class of a ``kubectl ate`` run from its stderr (and stdout) text."""
    for kind, pattern in _TEXT_PATTERNS:
        if pattern.search(output):
            return kind
    match = _CODE_RE.search(output)
    if match:
        return _GRPC_CODES.get(match.group(1).replace("_", "").lower(), UNKNOWN)
    for kind, pattern in _FALLBACK_PATTERNS:
        if pattern.search(output):
            return kind
    return UNKNOWN


# --- errors -------------------------------------------------------------------------------------


class EgressPolicyError(Exception):
    """A ``kubectl ate`` call for an egress policy failed; the message says what to do."""


class KubectlAteMissingError(EgressPolicyError):
    pass


class KubectlAteTimeoutError(EgressPolicyError):
    pass


class ActorMissingError(EgressPolicyError):
    pass


class VersionSkewError(EgressPolicyError):
    pass


class UpdateConflictError(EgressPolicyError):
    pass


class KubectlAteCommandError(EgressPolicyError):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def build_instructions(substrate_ref: str) -> str:
    ref = substrate_ref or "<the Substrate tag or commit the cluster runs>"
    return (
        f"build kubectl-ate from a Substrate checkout at the pinned version {ref}: "
        f"git clone {SUBSTRATE_REPO} && cd substrate && git checkout {ref} && "
        "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate, then put <dir> on PATH "
        "(kubectl finds the plugin as an executable named kubectl-ate on PATH; "
        "`kubectl plugin list` should show it)"
    )


# --- running kubectl ate ------------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    command: str
    returncode: int
    stdout: str
    stderr: str
    kind: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass(frozen=True)
class AteClient:
    """One actor's policy as seen through ``kubectl ate`` (plain values: picklable)."""

    kubectl: str
    kube_context: str
    atespace: str
    actor: str
    timeout_seconds: float
    substrate_ref: str

    @classmethod
    def for_inputs(cls, inputs: PolicyInputs) -> AteClient:
        return cls(
            kubectl=inputs.kubectl,
            kube_context=inputs.kube_context,
            atespace=inputs.atespace,
            actor=inputs.actor,
            timeout_seconds=float(inputs.timeout_seconds),
            substrate_ref=inputs.substrate_ref,
        )

    @property
    def ref(self) -> str:
        return f"{self.atespace}/{self.actor}"

    def argv(self, verb: str, *extra: str) -> list[str]:
        args = [self.kubectl, "ate", verb, "egress-policy", self.actor, "-a", self.atespace]
        if self.kube_context:
            args += ["--context", self.kube_context]
        return [*args, *extra]

    def run(self, verb: str, *extra: str, stdin: str | None = None) -> CliResult:
        argv = self.argv(verb, *extra)
        command = shlex.join(argv)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its own process group, so a timeout kills helpers too
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise KubectlAteMissingError(
                f"cannot run {self.kubectl!r} ({exc.strerror or exc}) for `{command}`: install kubectl "
                f"or set the kubectl path, and {build_instructions(self.substrate_ref)}"
            ) from exc
        try:
            stdout, stderr = proc.communicate(stdin, timeout=self.timeout_seconds)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            proc.communicate()
            raise KubectlAteTimeoutError(
                f"`{command}` did not finish within {self.timeout_seconds:g}s and was stopped: check that "
                f"the cluster of kube context {self.kube_context!r} is reachable and Substrate's API "
                "server (Service api in ate-system) is up, or raise the timeout"
            ) from exc
        result = CliResult(command, proc.returncode, stdout, stderr)
        if not result.ok:
            result = CliResult(command, proc.returncode, stdout, stderr, classify_failure(stderr + "\n" + stdout))
            if result.kind == PLUGIN_MISSING:
                raise KubectlAteMissingError(
                    f"`{command}` failed: the kubectl plugin `ate` is not installed "
                    f"({_first_line(stderr)}); {build_instructions(self.substrate_ref)}"
                )
            if result.kind == UNKNOWN_FLAG:
                raise VersionSkewError(self._unknown_flag_message(result))
            if result.kind == UNKNOWN_FIELD:
                raise VersionSkewError(
                    f"`{command}` failed: a field was rejected as unknown ({_last_line(stderr)}). "
                    "kubectl-ate, Substrate's API server and this program are out of step: "
                    f"{build_instructions(self.substrate_ref)}, and check that the cluster runs the same "
                    "Substrate version"
                )
        return result

    def _unknown_flag_message(self, result: CliResult) -> str:
        flag = unknown_flag_of(result.stderr + "\n" + result.stdout) or "a flag"
        detail = _first_line(result.stderr) or _first_line(result.stdout)
        if flag == "--context":
            why = (
                f"this kubectl-ate build has no --context flag, so it cannot be pointed at kube context "
                f"{self.kube_context!r} (kubectl passes flags after the plugin name to the plugin, and "
                "refuses them before it). It is not the kubectl-ate of the pinned Substrate version"
            )
        else:
            why = (
                f"this kubectl-ate build does not know {flag}, which the pinned Substrate version's "
                "kubectl-ate takes; kubectl-ate and this program are out of step"
            )
        return (
            f"`{result.command}` failed: kubectl-ate rejected {flag} as an unknown flag ({detail}): "
            f"{why}. Rebuild it: {build_instructions(self.substrate_ref)}"
        )

    # -- the four verbs

    def get(self) -> dict[str, Any] | None:
        """The stored policy, or None when there is none (the actor may be gone too)."""
        result = self.run("get", "-o", "json")
        if result.ok:
            if not result.stdout.strip():
                if re.search(r"has no egress policy", result.stderr, re.IGNORECASE):
                    return None
                raise KubectlAteCommandError(
                    f"`{result.command}` exited 0 but printed no policy and no reason "
                    f"(stderr: {_last_line(result.stderr)!r}); check the kubectl-ate version",
                    UNKNOWN,
                )
            return _parse_policy(result)
        if result.kind in (ACTOR_NOT_FOUND, NOT_FOUND):
            return None
        raise self.failure(result, "read")

    def create(self, document: Mapping[str, Any]) -> CliResult:
        """Write a new policy. Its output is not parsed (``-o`` is documented for ``get`` only)."""
        return self.run("create", "-f", "-", stdin=json.dumps(document))

    def update(self, document: Mapping[str, Any]) -> CliResult:
        """Overwrite the policy (``document`` carries uid and version). Its output is not parsed."""
        return self.run("update", "-f", "-", stdin=json.dumps(document))

    def delete(self) -> CliResult:
        return self.run("delete")

    def failure(self, result: CliResult, action: str) -> EgressPolicyError:
        detail = _last_line(result.stderr) or _last_line(result.stdout) or f"exit status {result.returncode}"
        if result.kind in (FAILED_PRECONDITION, ACTOR_NOT_FOUND):
            return ActorMissingError(
                f"cannot {action} the egress policy of actor {self.ref}: the actor does not exist yet "
                f"({detail}). Create the actor first (kubectl ate create actor {self.actor} -a "
                f"{self.atespace} --template <template>), then run `pulumi up` again"
            )
        hints = {
            UNAVAILABLE: "is the cluster reachable and is Substrate's API server running?",
            PERMISSION_DENIED: "does the kube context's user have access to Substrate's API server?",
            INVALID_ARGUMENT: "the server rejected the policy; check the Substrate version it runs",
            ABORTED: "the policy changed while it was being written; run `pulumi up` again",
            ALREADY_EXISTS: "a policy exists already; run `pulumi refresh` and `pulumi up` again",
        }
        hint = hints.get(result.kind, "see the message above")
        return KubectlAteCommandError(
            f"`{result.command}` failed ({result.kind or UNKNOWN}): {detail}; {hint}", result.kind
        )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _parse_policy(result: CliResult) -> dict[str, Any]:
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise KubectlAteCommandError(
            f"`{result.command}` printed something that is not JSON ({exc}); check the kubectl-ate version",
            UNKNOWN,
        ) from exc
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        raise KubectlAteCommandError(
            f"`{result.command}` printed JSON without metadata: {result.stdout[:200]!r}", UNKNOWN
        )
    return document


# --- the provider -------------------------------------------------------------------------------


def _outputs(inputs: PolicyInputs, live: Mapping[str, Any]) -> dict[str, Any]:
    metadata = live.get("metadata") or {}
    version = metadata.get("version")
    return {
        **inputs.to_props(),
        "uid": str(metadata.get("uid", "")),
        "version": "" if version is None else str(egress.as_int(version)),
        "rules": egress.normalize_rules(live.get("rules") or []),
    }


def _contains_unknown(value: Any) -> bool:
    unknown = pulumi.runtime.rpc.UNKNOWN
    if isinstance(value, str):
        return value == unknown
    if isinstance(value, Mapping):
        return any(_contains_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_contains_unknown(v) for v in value)
    return False


def _inputs_of(props: Mapping[str, Any], id_: str = "") -> PolicyInputs:
    inputs = PolicyInputs.from_props(props)
    if (not inputs.atespace or not inputs.actor) and id_.count("/") == 1:
        atespace, actor = id_.split("/")
        inputs = PolicyInputs.from_props({**props, "atespace": atespace, "actor": actor})
    return inputs


def upsert(client: AteClient, inputs: PolicyInputs, *, create_first: bool) -> dict[str, Any]:
    """Make the stored policy equal to ``inputs``; returns the live policy afterwards.

    ``create_first`` (Pulumi create): create; on AlreadyExists, get, compare and update only if
    different. Otherwise (Pulumi update): get first and update with the fresh uid and version.
    Either way, Aborted (a stale uid/version) and races with a concurrent create or delete are
    retried up to :data:`UPDATE_ATTEMPTS` times. After a successful write the policy is read back
    with ``get`` (create and update print nothing this relies on); if it is gone by then, the loop
    goes round again.
    """
    egress.require_valid(inputs)
    desired = egress.desired_rules(inputs)
    try_create = create_first
    aborted = 0
    for attempt in range(UPDATE_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_BACKOFF_SECONDS * attempt)
        if try_create:
            result = client.create(egress.build_policy(inputs))
            if result.ok:
                written = client.get()
                if written is not None:
                    return written
                continue  # deleted right after our create: create it again
            if result.kind != ALREADY_EXISTS:
                raise client.failure(result, "create")
        live = client.get()
        if live is None:
            try_create = True  # gone (or never there): create it on the next pass
            continue
        try_create = False
        if egress.normalize_rules(live.get("rules") or []) == desired:
            return live  # already as wanted: no write
        metadata = live.get("metadata") or {}
        document = egress.build_policy(inputs, uid=metadata.get("uid"), version=metadata.get("version"))
        result = client.update(document)
        if result.ok:
            written = client.get()
            if written is not None:
                return written
            try_create = True  # deleted right after our update
            continue
        if result.kind == ABORTED:
            aborted += 1
            continue
        if result.kind == NOT_FOUND:
            try_create = True  # deleted between our get and update
            continue
        raise client.failure(result, "update")
    if aborted:
        raise UpdateConflictError(
            f"the egress policy of actor {client.ref} was still changing after {UPDATE_ATTEMPTS} "
            "attempts (Aborted: its uid/version moved between get and update); something else is "
            "writing it. Stop the other writer, then run `pulumi up` again"
        )
    raise EgressPolicyError(
        f"the egress policy of actor {client.ref} kept appearing and disappearing over "
        f"{UPDATE_ATTEMPTS} attempts; something else is creating and deleting it"
    )


class ActorEgressPolicyProvider(dyn.ResourceProvider):
    """CRUD and diff of one actor's Substrate egress policy through ``kubectl ate``."""

    serialize_as_secret_always = False  # it captures nothing secret

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        """Validate and normalise the inputs, and add ``rules``: the normalised rules that will be
        sent, so that the engine (and the policy pack) see the document, not only its parameters.
        ``diff`` never reads ``rules`` from the inputs, so this adds no change of its own."""
        news = {k: v for k, v in news.items() if k != "rules"}
        if _contains_unknown(news):
            return dyn.CheckResult(news, [])
        inputs = PolicyInputs.from_props(news)
        failures = [dyn.CheckFailure(p.field or "rules", p.message) for p in egress.input_problems(inputs)]
        return dyn.CheckResult({**news, **inputs.to_props(), "rules": egress.desired_rules(inputs)}, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        unknown = [k for k, v in news.items() if k not in (PROVIDER_KEY, "rules") and _contains_unknown(v)]
        if unknown:
            replaces = [k for k in egress.REPLACE_KEYS if k in unknown or olds.get(k) != news.get(k)]
            delete_first = any(k in replaces for k in egress.DELETE_FIRST_KEYS)
            return dyn.DiffResult(changes=True, replaces=replaces, delete_before_replace=delete_first)
        decision = egress.diff_decision(olds, news)
        return dyn.DiffResult(
            changes=decision.changes,
            replaces=decision.replaces,
            delete_before_replace=decision.delete_before_replace,
        )

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        inputs = _inputs_of(props)
        live = upsert(AteClient.for_inputs(inputs), inputs, create_first=True)
        return dyn.CreateResult(inputs.ref, _outputs(inputs, live))

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        inputs = _inputs_of(props, id_)
        live = AteClient.for_inputs(inputs).get()
        if live is None:
            return dyn.ReadResult("", {})  # deleted out of band (or with its actor)
        return dyn.ReadResult(id_ or inputs.ref, _outputs(inputs, live))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        inputs = _inputs_of(news)
        live = upsert(AteClient.for_inputs(inputs), inputs, create_first=False)
        return dyn.UpdateResult(_outputs(inputs, live))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        inputs = _inputs_of(props, id_)
        client = AteClient.for_inputs(inputs)
        result = client.delete()
        if result.ok or result.kind in (NOT_FOUND, ACTOR_NOT_FOUND):
            return  # gone already; deleting the actor deletes its policy
        raise client.failure(result, "delete")


# --- the resource -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorEgressPolicyArgs:
    """Inputs of :class:`ActorEgressPolicy` (each may be a ``pulumi.Input``)."""

    atespace: pulumi.Input[str]
    actor: pulumi.Input[str]
    kube_context: pulumi.Input[str]
    substrate_ref: pulumi.Input[str]
    gateway_hostname: pulumi.Input[str] = egress.GATEWAY_HOSTNAME
    gateway_port: pulumi.Input[int] = egress.DEFAULT_GATEWAY_PORT
    audiences: pulumi.Input[Sequence[pulumi.Input[str]]] = egress.DEFAULT_AUDIENCES
    expiration_seconds: pulumi.Input[int] = egress.DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    provider_hosts: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    kubectl: pulumi.Input[str] = egress.DEFAULT_KUBECTL
    timeout_seconds: pulumi.Input[int] = egress.DEFAULT_TIMEOUT_SECONDS

    def to_props(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for name in (
            "atespace", "actor", "kube_context", "substrate_ref", "gateway_hostname", "gateway_port",
            "expiration_seconds", "kubectl", "timeout_seconds",
        ):  # fmt: skip
            props[name] = getattr(self, name)
        for name in ("audiences", "extra_hostnames", "provider_hosts"):
            value = getattr(self, name)
            props[name] = list(value) if isinstance(value, list | tuple) else value
        return props


class ActorEgressPolicy(dyn.Resource):
    """One actor's Substrate egress policy: the gateway ``http`` rule with the actor-JWT effect,
    plus a ``tlsPassthrough`` rule per extra hostname. Its id is ``<atespace>/<actor>``."""

    atespace: pulumi.Output[str]
    actor: pulumi.Output[str]
    kube_context: pulumi.Output[str]
    uid: pulumi.Output[str]
    version: pulumi.Output[str]
    rules: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self,
        resource_name: str,
        args: ActorEgressPolicyArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {**args.to_props(), "uid": None, "version": None, "rules": None}
        super().__init__(ActorEgressPolicyProvider(), resource_name, props, opts)

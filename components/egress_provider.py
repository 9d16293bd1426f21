"""Pulumi dynamic provider for Substrate actor egress policies, driven through ``kubectl ate``.

Substrate's API server (ateapi) stores an actor's egress policy; it is not a Kubernetes object, so
``pulumi_kubernetes`` cannot manage it. This provider runs the ``kubectl ate`` plugin, one process per
call (agent-substrate/substrate ``cmd/kubectl-ate/internal/cmd/egress_policy.go`` and ``root.go``):

    <kubectl> ate create egress-policy <actor> -a <atespace> --context <ctx> [--kubeconfig <file>] -f - -o json
    <kubectl> ate get    egress-policy <actor> -a <atespace> --context <ctx> [--kubeconfig <file>] -o json
    <kubectl> ate update egress-policy <actor> -a <atespace> --context <ctx> [--kubeconfig <file>] -f - -o json
    <kubectl> ate delete egress-policy <actor> -a <atespace> --context <ctx> [--kubeconfig <file>] --uid U --version V

* ``--context``, ``--kubeconfig`` and ``-o`` are persistent flags of the root command (``root.go`` @2e3e300),
  so every verb takes them; ``create`` and ``update`` print the stored policy (uid, version, rules) in the ``-o``
  format, so a write needs no ``get`` afterwards. ``-f`` exists on create and update only, ``--uid`` and
  ``--version`` on delete only (the guards; the server answers Aborted when they no longer match). The
  first egress-policy commands were get and create only (``egress_policy.go`` @d07c205); update and the
  guarded delete are there @18d1c266, and ``scripts/up.sh`` checks the pinned checkout for them.
* The flags go after the plugin name: kubectl refuses flags before it ("flags cannot be placed before plugin
  name"). A build without one of them answers ``unknown flag``: reported as a version skew.
* ``--kubeconfig`` is a path (``internal/ateclient/builder.go`` passes it to client-go as the explicit
  path). Kubeconfig *contents* from the stack config are written to a private temporary file for the
  duration of one operation and removed afterwards; the value stays a secret in the state.
* Every process requests a service-account token and opens a port-forward before its single gRPC call
  (``internal/ateclient/bearer_token.go``, ``portforward.go``), so a call costs about a second.

Scale: one Pulumi resource per *shard* of actors (:class:`EgressPolicyShard`, 64 stable shards by a hash of
the actor name), each running its actors' calls in a bounded thread pool (``substrate.egress.concurrency``).
Pulumi's Python dynamic-provider host serves at most four calls at once (``pulumi/dynamic/__main__.py``
in the pinned SDK 3.272.0: ``ThreadPoolExecutor(max_workers=4)``), whatever ``--parallel`` says, so one
resource per actor can never have more than four processes in flight. A shard records, per actor, the
fingerprint of the live rules and the policy's uid and version: a no-op preview or ``up`` compares
fingerprints and runs no process, a shared-setting change writes each policy once with the recorded
preconditions, adding or removing an actor is one call.

A create or update that fails deletes again, before it reports the failure, every policy it created itself
(:func:`write_each`): Pulumi records nothing of a failed create and keeps the previous state of a failed update,
so such a policy would belong to no state and outlive its actor's removal from the stack. Policies that existed
before the operation are left as they are; what the undo cannot delete is named in the failure.

Every call is safe to retry (get reads; create recovers through AlreadyExists; update and delete are
guarded by uid and version; delete treats NotFound as done): Unavailable, DeadlineExceeded, connection
failures and timeouts are retried with capped exponential backoff and full jitter. NotFound is taken only
from the server (``code = NotFound``, "has no egress policy", "actor ... not found"): a client that cannot
reach Substrate's API server ("failed to connect to ate-api-server: ...", whose Kubernetes "... not found"
is about the install, not the policy) is retried, then stops the shard, so a wrong cluster never makes a
refresh record policies absent or a delete count them gone.

Pulumi pickles each provider object (dill) into the state by reference to this module and class name:
``components.egress_provider.EgressShardProvider`` for the shards, and
``components.egress_provider.ActorEgressPolicyProvider`` in stacks created before the shards (one resource
per actor). Both names must stay importable here: refresh and destroy of existing stacks load them
(tests/test_egress_provider.py holds a blob from such a stack). The providers carry no attributes, and
everything they call lives at the top level of this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pulumi
import pulumi.dynamic as dyn

from core import egress
from core.egress import (
    ABORTED,
    ACTOR_NOT_FOUND,
    ALREADY_EXISTS,
    API_SERVER_UNREACHABLE,
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    KUBECONFIG,
    NOT_FOUND,
    PERMISSION_DENIED,
    PLUGIN_MISSING,
    RETRYABLE,
    UNAVAILABLE,
    UNKNOWN,
    UNKNOWN_FIELD,
    UNKNOWN_FLAG,
    PolicyInputs,
    Recorded,
    ShardInputs,
    classify_failure,
    unknown_flag_of,
)
from core.kubeconfig import is_contents
from tools.kubeconfig import kubeconfig_file, read_kubeconfig_file

RETRY_ATTEMPTS = 5
"""Runs of one ``kubectl ate`` call at most, when it fails in a way that may pass (Unavailable,
DeadlineExceeded, no connection, timeout)."""
RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 8.0
CONFLICT_ATTEMPTS = 5
"""Rounds of one policy write at most, when its preconditions keep going stale (Aborted) or the policy
keeps appearing and disappearing."""
REPORTED_FAILURES = 10
SUBSTRATE_REPO = "https://github.com/agent-substrate/substrate"
PROVIDER_KEY = "__provider"  # where Pulumi keeps the pickled provider among the properties

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


class KubeconfigError(EgressPolicyError):
    pass


class ApiServerUnreachableError(EgressPolicyError):
    """kubectl-ate found no Substrate API server through the kube context (wrong cluster, or no Substrate)."""


class ClusterMovedError(EgressPolicyError):
    """The kubeconfig file a shard recorded now names another cluster than the one its policies are on."""


class UpdateConflictError(EgressPolicyError):
    pass


class KubectlAteCommandError(EgressPolicyError):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


FATAL_ERRORS = (KubectlAteMissingError, VersionSkewError, KubeconfigError, ApiServerUnreachableError)
"""Failures that every other actor of the shard would meet too: the shard stops at the first one."""


class ShardError(EgressPolicyError):
    """Some actors of a shard failed; the others were done (and are found done by the next ``up``), except
    the policies a failed create or update had created, which it deletes again (:func:`write_each`)."""


def build_instructions(substrate_ref: str) -> str:
    ref = substrate_ref or "<the Substrate tag or commit the cluster runs>"
    return (
        f"build kubectl-ate from a Substrate checkout at the pinned version {ref}: "
        f"git clone {SUBSTRATE_REPO} && cd substrate && git checkout {ref} && "
        "go build -o <dir>/kubectl-ate ./cmd/kubectl-ate, then put <dir> on PATH "
        "(kubectl finds the plugin as an executable named kubectl-ate on PATH; "
        "`kubectl plugin list` should show it)"
    )


# --- where the calls go -------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The kubectl binary, cluster and limits every call of one operation uses (plain values)."""

    kubectl: str
    kube_context: str
    kubeconfig_path: str | None
    timeout_seconds: float
    substrate_ref: str

    @property
    def kubeconfig_source(self) -> str:
        """Where kubectl-ate reads the kube context from, as a message names it."""
        if self.kubeconfig_path:
            return f"kubeconfig file {self.kubeconfig_path!r}"
        return "the ambient kubeconfig ($KUBECONFIG or ~/.kube/config)"

    def flags(self) -> list[str]:
        flags = ["--context", self.kube_context]
        if self.kubeconfig_path:
            flags += ["--kubeconfig", self.kubeconfig_path]
        return flags


def target_of(shard: ShardInputs, kubeconfig_path: str | None) -> Target:
    return Target(
        kubectl=shard.kubectl,
        kube_context=shard.kube_context,
        kubeconfig_path=kubeconfig_path,
        timeout_seconds=float(shard.timeout_seconds),
        substrate_ref=shard.substrate_ref,
    )


# --- running kubectl ate ------------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    command: str
    returncode: int
    stdout: str
    stderr: str
    kind: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def backoff_seconds(attempt: int) -> float:
    """Full jitter over a capped exponential: up to 0.5 s, 1 s, 2 s, 4 s, then 8 s."""
    return random.uniform(0, min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class AteClient:
    """One actor's policy as seen through ``kubectl ate``."""

    target: Target
    atespace: str
    actor: str

    @property
    def ref(self) -> str:
        return f"{self.atespace}/{self.actor}"

    def argv(self, verb: str, *extra: str) -> list[str]:
        base = [self.target.kubectl, "ate", verb, "egress-policy", self.actor, "-a", self.atespace]
        return [*base, *self.target.flags(), *extra]

    def run(self, verb: str, *extra: str, stdin: str | None = None) -> CliResult:
        """Run one call, again after a failure that may pass, up to :data:`RETRY_ATTEMPTS` runs."""
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                result = replace(self.run_once(verb, *extra, stdin=stdin), attempts=attempt)
            except KubectlAteTimeoutError as exc:
                if attempt == RETRY_ATTEMPTS:
                    raise KubectlAteTimeoutError(f"{exc} ({RETRY_ATTEMPTS} attempts, each timed out)") from exc
            else:
                if result.kind == API_SERVER_UNREACHABLE and attempt == RETRY_ATTEMPTS:
                    raise ApiServerUnreachableError(self._unreachable_message(result))
                if result.ok or result.kind not in RETRYABLE or attempt == RETRY_ATTEMPTS:
                    return result
            time.sleep(backoff_seconds(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _unreachable_message(self, result: CliResult) -> str:
        said = _last_line(result.stderr) or _last_line(result.stdout)
        return (
            f"`{result.command}` failed {RETRY_ATTEMPTS} times: {said}. "
            f"kubectl-ate found no Substrate API server through kube context {self.target.kube_context!r} from "
            f"{self.target.kubeconfig_source}: is Substrate installed on this cluster (Service api and Deployment "
            "ate-api-server-deployment in namespace ate-system), and is it the cluster this stack's egress policies "
            "are on? Nothing was read, changed or recorded as gone. Point agent-budgets:kubernetes.context (and "
            "kubernetes.kubeconfig) at that cluster, or wait for Substrate to be back, then run the command again"
        )

    def run_once(self, verb: str, *extra: str, stdin: str | None = None) -> CliResult:
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
                f"cannot run {self.target.kubectl!r} ({exc.strerror or exc}) for `{command}`: install kubectl "
                f"or set the kubectl path, and {build_instructions(self.target.substrate_ref)}"
            ) from exc
        try:
            stdout, stderr = proc.communicate(stdin, timeout=self.target.timeout_seconds)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            proc.communicate()
            raise KubectlAteTimeoutError(
                f"`{command}` did not finish within {self.target.timeout_seconds:g}s and was stopped: check that "
                f"the cluster of kube context {self.target.kube_context!r} is reachable and Substrate's API "
                "server (Service api in ate-system) is up, or raise the timeout"
            ) from exc
        result = CliResult(command, proc.returncode, stdout, stderr)
        if result.ok:
            return result
        result = replace(result, kind=classify_failure(stderr + "\n" + stdout))
        if result.kind == PLUGIN_MISSING:
            raise KubectlAteMissingError(
                f"`{command}` failed: the kubectl plugin `ate` is not installed "
                f"({_first_line(stderr)}); {build_instructions(self.target.substrate_ref)}"
            )
        if result.kind == UNKNOWN_FLAG:
            raise VersionSkewError(self._unknown_flag_message(result, verb))
        if result.kind == UNKNOWN_FIELD:
            raise VersionSkewError(
                f"`{command}` failed: a field was rejected as unknown ({_last_line(stderr)}). "
                "kubectl-ate, Substrate's API server and this program are out of step: "
                f"{build_instructions(self.target.substrate_ref)}, and check that the cluster runs the same "
                "Substrate version"
            )
        if result.kind == KUBECONFIG:
            raise KubeconfigError(
                f"`{command}` failed: {_last_line(stderr)}. kubectl-ate could not use kube context "
                f"{self.target.kube_context!r} from {self.target.kubeconfig_source}: set "
                "agent-budgets:kubernetes.context and agent-budgets:kubernetes.kubeconfig to the cluster's"
            )
        return result

    def _unknown_flag_message(self, result: CliResult, verb: str) -> str:
        flag = unknown_flag_of(result.stderr + "\n" + result.stdout) or "a flag"
        detail = _first_line(result.stderr) or _first_line(result.stdout)
        if flag == "--context":
            why = (
                f"this kubectl-ate build has no --context flag, so it cannot be pointed at kube context "
                f"{self.target.kube_context!r} (kubectl passes flags after the plugin name to the plugin, and "
                "refuses them before it). It is not the kubectl-ate of the pinned Substrate version"
            )
        elif flag in ("--uid", "--version"):
            why = (
                "this kubectl-ate build's `delete egress-policy` has no --uid/--version guards, which the "
                "pinned Substrate version has; kubectl-ate and this program are out of step"
            )
        elif flag in ("-a", "-f", "--atespace", "--filename"):
            why = (
                f"this kubectl-ate build has no `{verb} egress-policy` command (the first egress-policy "
                "commands were get and create; update and delete came later), so it took the flags for "
                f"those of `{verb}` itself"
            )
        else:
            why = (
                f"this kubectl-ate build does not know {flag}, which the pinned Substrate version's "
                "kubectl-ate takes; kubectl-ate and this program are out of step"
            )
        return (
            f"`{result.command}` failed: kubectl-ate rejected {flag} as an unknown flag ({detail}): "
            f"{why}. Rebuild it: {build_instructions(self.target.substrate_ref)}"
        )

    # -- the four verbs

    def get(self) -> dict[str, Any] | None:
        """The stored policy, or None when there is none (the actor may be gone too)."""
        result = self.run("get", "-o", "json")
        if result.ok:
            if not result.stdout.strip():
                if classify_failure(result.stderr) == NOT_FOUND:
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
        """Write a new policy; on success stdout holds the stored policy (``-o json``)."""
        return self.run("create", "-f", "-", "-o", "json", stdin=json.dumps(document))

    def update(self, document: Mapping[str, Any]) -> CliResult:
        """Overwrite the policy (``document`` carries uid and version); stdout holds the stored policy."""
        return self.run("update", "-f", "-", "-o", "json", stdin=json.dumps(document))

    def delete(self, guard: Recorded | None) -> CliResult:
        """Delete the policy, only if it still has ``guard``'s uid and version (when given)."""
        extra = ["--uid", guard.uid] if guard and guard.uid else []
        if guard and guard.version:
            extra += ["--version", guard.version]
        return self.run("delete", *extra)

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
        tries = f" after {result.attempts} attempts" if result.attempts > 1 else ""
        return KubectlAteCommandError(
            f"`{result.command}` failed{tries} ({result.kind or UNKNOWN}): {detail}; {hint}", result.kind
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
            f"`{result.command}` printed something that is not JSON ({exc}): {result.stdout[:200]!r}; "
            "check the kubectl-ate version",
            UNKNOWN,
        ) from exc
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        raise KubectlAteCommandError(
            f"`{result.command}` printed JSON without metadata: {result.stdout[:200]!r}", UNKNOWN
        )
    return document


def recorded_of(live: Mapping[str, Any]) -> Recorded:
    metadata = live.get("metadata") or {}
    return Recorded.of(metadata.get("uid", ""), metadata.get("version"))


# --- one actor's policy -------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """A policy as stored after :func:`ensure_policy`; ``adopted`` when it existed before the create,
    ``created`` when this call created it (no policy existed when it began): what a failed shard operation
    deletes again before it reports the failure (:func:`write_each`)."""

    live: dict[str, Any]
    adopted: bool = False
    created: bool = False

    @property
    def recorded(self) -> Recorded:
        return recorded_of(self.live)

    @property
    def fingerprint(self) -> str:
        return egress.rules_fingerprint(self.live.get("rules") or [])


def ensure_policy(client: AteClient, inputs: PolicyInputs, recorded: Recorded | None) -> Written:
    """Make the stored policy equal to ``inputs`` and return it as stored.

    Without a record, create. On AlreadyExists the existing policy is *adopted*: read, then written
    with its fresh uid and version even when its rules are already right, so its version moves. That
    is what lets a delete guarded by an older record (a per-actor resource of an earlier version being
    removed in the same ``up``, or a copy of this stack's older state) see Aborted and leave the policy
    alone. With a record, update with its preconditions straight away (one call); on Aborted (changed
    since), read and write again only if the rules differ; on NotFound, create. Each round is bounded
    by :data:`CONFLICT_ATTEMPTS`.

    The result says whether this call *created* the policy: a create that succeeded, or one whose
    AlreadyExists came after a retried run of the same create (an earlier run may have made it unseen: a
    timeout or Unavailable after the commit). Such a policy existed before no one; an adopted one did.
    """
    egress.require_valid(inputs)
    desired = egress.desired_rules(inputs)
    guard = recorded if recorded and recorded.uid and recorded.version else None
    try_create = guard is None
    adopted = created = False
    aborted = 0
    for attempt in range(CONFLICT_ATTEMPTS):
        if attempt:
            time.sleep(backoff_seconds(attempt))
        if try_create:
            result = client.create(egress.build_policy(inputs))
            if result.ok:
                return Written(_parse_policy(result), adopted=False, created=True)
            if result.kind != ALREADY_EXISTS:
                raise client.failure(result, "create")
            live = client.get()
            if live is None:
                continue  # created and deleted again by someone else meanwhile: create again
            # an earlier attempt of this very create may have succeeded unseen (a timeout, Unavailable)
            lost_answer = result.attempts > 1
            adopted = adopted or not lost_answer
            created = created or (lost_answer and not adopted)
            guard, try_create = recorded_of(live), False
        result = client.update(egress.build_policy(inputs, uid=guard.uid, version=guard.version))
        if result.ok:
            return Written(_parse_policy(result), adopted=adopted, created=created)
        if result.kind == NOT_FOUND:
            try_create = True  # deleted since it was recorded or read
            continue
        if result.kind != ABORTED:
            raise client.failure(result, "update")
        aborted += 1
        live = client.get()
        if live is None:
            try_create = True
            continue
        if not adopted and egress.normalize_rules(live.get("rules") or []) == desired:
            return Written(live, created=created)  # someone (an interrupted run of ours, or by hand) wrote it
        guard = recorded_of(live)
    if aborted:
        raise UpdateConflictError(
            f"the egress policy of actor {client.ref} was still changing after {CONFLICT_ATTEMPTS} "
            "attempts (Aborted: its uid/version moved between read and write); something else is "
            "writing it. Stop the other writer, then run `pulumi up` again"
        )
    raise EgressPolicyError(
        f"the egress policy of actor {client.ref} kept appearing and disappearing over "
        f"{CONFLICT_ATTEMPTS} attempts; something else is creating and deleting it"
    )


DELETED, GONE, LEFT = "deleted", "gone", "left"


def remove_policy(client: AteClient, guard: Recorded | None, *, strict: bool) -> tuple[str, str]:
    """Delete the policy if it is still the one ``guard`` names; returns (outcome, detail).

    ``deleted``; ``gone`` when there was nothing to delete (NotFound, or the actor is gone: deleting an
    actor deletes its policy); ``left`` when the guards no longer match. ``strict`` leaves the policy on
    any mismatch (a per-actor resource of an earlier version: a shard that adopted the policy moved its
    version). Otherwise a policy with the same uid is the same object, edited since (by hand, or by an
    interrupted run whose new version was never recorded): it is deleted with fresh guards; a new uid
    means someone else recreated it, and it is left alone.
    """
    for _ in range(CONFLICT_ATTEMPTS):
        result = client.delete(guard)
        if result.ok:
            return DELETED, ""
        if result.kind in (NOT_FOUND, ACTOR_NOT_FOUND):
            return GONE, ""
        if result.kind != ABORTED:
            raise client.failure(result, "delete")
        if strict or guard is None:
            return LEFT, f"changed since recorded as uid {guard.uid if guard else '?'}"
        live = client.get()
        if live is None:
            return GONE, ""
        fresh = recorded_of(live)
        if fresh.uid != guard.uid:
            return LEFT, f"recreated since: uid {guard.uid} is now {fresh.uid}"
        guard = fresh
    raise UpdateConflictError(
        f"the egress policy of actor {client.ref} was still changing after {CONFLICT_ATTEMPTS} delete "
        "attempts; something else is writing it. Stop the other writer, then run `pulumi up` again"
    )


# --- running a shard's actors concurrently -------------------------------------------------------

T = TypeVar("T")


def _client(target: Target, ref: str) -> AteClient:
    atespace, actor = ref.split("/", 1)
    return AteClient(target, atespace, actor)


@dataclass
class ShardRun:
    """What one pass over a shard's actors did: each actor's result, each actor's failure, and the failure
    every actor would meet that stopped the pass (no kubectl, another Substrate version, a bad kubeconfig)."""

    results: dict[str, Any]
    errors: dict[str, Exception]
    fatal: Exception | None

    @property
    def failed(self) -> bool:
        return bool(self.errors) or self.fatal is not None


def run_each(shard: ShardInputs, work: Mapping[str, Callable[[AteClient], Any]]) -> ShardRun:
    """Run ``work[ref]`` for every actor, at most ``shard.concurrency`` at once, all with one kubeconfig
    file; stop at the first failure every actor would meet. Never raises for an actor's failure."""
    results: dict[str, Any] = {}
    errors: dict[str, Exception] = {}
    fatal: list[Exception] = []
    stop = threading.Event()

    def attempt(ref: str, target: Target) -> None:
        if stop.is_set():
            return
        try:
            results[ref] = work[ref](_client(target, ref))
        except FATAL_ERRORS as exc:
            fatal.append(exc)
            stop.set()
        except Exception as exc:  # reported per actor by the caller
            errors[ref] = exc

    with kubeconfig_file(shard.kubeconfig) as path:
        target = target_of(shard, path)
        workers = max(1, min(shard.concurrency, len(work)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kubectl-ate") as pool:
            for ref in work:
                pool.submit(attempt, ref, target)
    return ShardRun(results, errors, fatal[0] if fatal else None)


def _failure_message(shard: ShardInputs, run: ShardRun, total: int, action: str, others: str) -> str:
    """The first part of a shard's failure: the fatal failure, or each failed actor (``others`` says what
    became of the actors that did not fail)."""
    name = egress.shard_resource_name(shard.shard)
    if run.fatal is not None:
        return f"{name}: stopped after {len(run.results)} of {total} actors ({action}): {run.fatal}"
    failures = _summary([f"{ref}: {run.errors[ref]}" for ref in sorted(run.errors)], "\n  - ")
    return (
        f"{name}: {len(run.errors)} of {total} actors failed ({action}); {others}. Fix the cause and run it "
        f"again:\n  - {failures}"
    )


def for_each_actor(shard: ShardInputs, work: Mapping[str, Callable[[AteClient], T]], action: str) -> dict[str, T]:
    """Run ``work[ref]`` for every actor (:func:`run_each`). Raises :class:`ShardError` naming each failed
    actor once all the others are done (or at the first failure every actor would meet)."""
    run = run_each(shard, work)
    if run.failed:
        others = f"the other {len(run.results)} are done and the next `pulumi up` finds them done"
        raise ShardError(_failure_message(shard, run, len(work), action, others)) from run.fatal
    return run.results


def write_each(shard: ShardInputs, work: Mapping[str, Callable[[AteClient], Any]], action: str) -> dict[str, Any]:
    """:func:`for_each_actor` for a create or update, which undoes what it created before it fails.

    Pulumi records nothing of a create that fails and keeps the previous state of an update that fails, so a
    policy such an operation created belongs to no state: its actor, removed from the stack before the next
    successful ``up``, would keep it and with it its way to the gateway. So when any actor fails, every policy
    this operation created (:attr:`Written.created`) is deleted again, guarded by the uid and version its write
    printed (as :func:`remove_policy` deletes: edited since, deleted all the same; recreated by someone else,
    left), before the failure is raised; policies that existed before (updated or adopted) stay as they are.
    What the undo could not delete is named in the failure, with the command that deletes it.
    """
    run = run_each(shard, work)
    if not run.failed:
        return run.results
    created = {ref: r.recorded for ref, r in sorted(run.results.items()) if isinstance(r, Written) and r.created}
    if not created:
        others = f"the other {len(run.results)} are done and the next `pulumi up` finds them done"
        raise ShardError(_failure_message(shard, run, len(work), action, others)) from run.fatal
    others = f"the other {len(run.results)} were done"
    message = _failure_message(shard, run, len(work), action, others)
    raise ShardError(f"{message}\n{_undo_created(shard, created)}") from run.fatal


def _undo_created(shard: ShardInputs, created: Mapping[str, Recorded]) -> str:
    """Delete the policies a failed operation created; say what became of them."""
    undo = run_each(shard, {ref: _remove(record) for ref, record in created.items()})
    deleted = [ref for ref in created if ref in undo.results and undo.results[ref][0] in (DELETED, GONE)]
    left = {ref: undo.results[ref][1] for ref in created if ref in undo.results and undo.results[ref][0] == LEFT}
    kept = {ref: str(undo.errors.get(ref) or undo.fatal) for ref in created if ref not in undo.results}
    parts: list[str] = []
    if deleted:
        how_many = f"the {len(deleted)}" if len(deleted) == len(created) else f"{len(deleted)} of the {len(created)}"
        parts.append(
            f"So that none outlives this failure, it deleted again {how_many} egress policies it had created "
            f"({_summary(deleted)}): a failed operation records nothing in the Pulumi state, and a policy no state "
            "records would keep giving its actor the way to the gateway after the actor's removal from the stack. "
            "The next `pulumi up` creates them anew."
        )
    if left:
        details = _summary([f"{ref}: {why}" for ref, why in left.items()], "; ")
        parts.append(f"It left {len(left)} in place that someone else had recreated meanwhile ({details}).")
    if kept:
        where = f"--context {shard.kube_context}"
        if shard.kubeconfig and not is_contents(shard.kubeconfig):
            where += f" --kubeconfig {shlex.quote(shard.kubeconfig.strip())}"
        lines = []
        for ref, reason in list(kept.items())[:REPORTED_FAILURES]:
            atespace, actor = ref.split("/", 1)
            record = created[ref]
            lines.append(
                f"{ref} (uid {record.uid}, version {record.version}): {reason}; delete it with `kubectl ate delete "
                f"egress-policy {actor} -a {atespace} --uid {record.uid} --version {record.version} {where}`"
            )
        if len(kept) > REPORTED_FAILURES:
            lines.append(f"... and {len(kept) - REPORTED_FAILURES} more")
        parts.append(
            f"It could not delete {len(kept)} of the {len(created)} egress policies it had created. No Pulumi "
            "state records them: if their actor is removed from the stack before the next successful `pulumi "
            "up`, its policy stays and keeps its access. Delete each by hand, or list and delete every policy "
            "the stack does not own with `python -m tools.egress_orphans --stack <stack> --delete` once the "
            "actor is out of the stack (docs/egress-policies.md):\n  - " + "\n  - ".join(lines)
        )
    return "\n".join(parts)


def _warn(message: str) -> None:
    """A warning on the Pulumi CLI: the provider host has no engine connection, so ``pulumi.log`` writes
    it to stderr, which the engine shows as the plugin's diagnostic output."""
    pulumi.log.warn(message)


def _summary(items: list[str], separator: str = ", ") -> str:
    """The first :data:`REPORTED_FAILURES` items, then how many more there are."""
    more = len(items) - REPORTED_FAILURES
    return separator.join([*items[:REPORTED_FAILURES], *([f"... and {more} more"] if more > 0 else [])])


def _report_adopted(shard: ShardInputs, written: Mapping[str, Written]) -> None:
    adopted = sorted(ref for ref, w in written.items() if w.adopted)
    if adopted:
        _warn(
            f"{egress.shard_resource_name(shard.shard)}: adopted {len(adopted)} egress policies that existed "
            f"already ({_summary(adopted)}): left by an interrupted run, by the per-actor resources of an "
            "earlier version of this program, or created by someone else. They now belong to this stack: "
            "removing the actor or `pulumi destroy` deletes them"
        )


def _report_left(shard: ShardInputs, outcomes: Mapping[str, tuple[str, str]]) -> None:
    left = sorted(ref for ref, (outcome, _) in outcomes.items() if outcome == LEFT)
    if left:
        details = _summary([f"{ref}: {outcomes[ref][1]}" for ref in left], "; ")
        _warn(
            f"{egress.shard_resource_name(shard.shard)}: did not delete {len(left)} egress policies recreated "
            f"by someone else since Pulumi last read them ({details}). Delete them by hand if they should go: "
            "kubectl ate delete egress-policy <actor> -a <atespace>"
        )


# --- the shard provider --------------------------------------------------------------------------


def _contains_unknown(value: Any) -> bool:
    unknown = pulumi.runtime.rpc.UNKNOWN
    if isinstance(value, str):
        return value == unknown
    if isinstance(value, Mapping):
        return any(_contains_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_contains_unknown(v) for v in value)
    return False


def resolved_cluster(shard: ShardInputs) -> str:
    """The shard's cluster identity, with the server of a kubeconfig *file* read here: the program and the
    provider run on the machine that holds the file (:func:`core.egress.cluster_identity`)."""
    if shard.kubeconfig and not is_contents(shard.kubeconfig):
        return egress.cluster_identity(shard.kubeconfig, shard.kube_context, read_kubeconfig_file(shard.kubeconfig))
    return shard.cluster


def shard_props(shard: ShardInputs, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The shard's properties with its resolved cluster identity. A file that cannot be read here keeps the
    server ``previous`` recorded for the same path (a run on a machine without the file is no new cluster)."""
    props = shard.to_props()
    props["cluster"] = resolved_cluster(shard)
    if previous is not None and egress.unresolved_path(props["cluster"]):
        recorded = str(previous.get("cluster") or "")
        if recorded.startswith("server:") and egress.target_change(previous, props) == "record":
            props["cluster"] = recorded
    return props


def require_recorded_cluster(name: str, shard: ShardInputs, props: Mapping[str, Any]) -> None:
    """Refuse to read or delete a shard's policies through a kubeconfig file that now names another cluster
    than the one they were written to: the calls would reach the wrong cluster (a delete would find nothing
    and leave every policy behind on the old one)."""
    recorded = str(props.get("cluster") or "")
    if not recorded.startswith("server:") or not shard.kubeconfig or is_contents(shard.kubeconfig):
        return
    now = resolved_cluster(shard)
    if now.startswith("server:") and now != recorded:
        path = shard.kubeconfig.strip()
        raise ClusterMovedError(
            f"{name}: its egress policies were written to the cluster at {recorded.removeprefix('server:')} "
            f"through kubeconfig file {path!r}, which now names {now.removeprefix('server:')} for context "
            f"{shard.kube_context!r}. Reading or deleting them through it would reach the wrong cluster. Restore "
            f"a kubeconfig for the old cluster at {path!r} and point agent-budgets:kubernetes.kubeconfig at "
            "another file for the new one: the next `pulumi up` deletes the old policies through the restored "
            "file first, then creates them on the new cluster (`pulumi destroy` needs only the restored file). "
            "If the old cluster is gone for good, remove this shard from the state (`pulumi state delete <its "
            "URN>`) and run `pulumi up`"
        )


class EgressShardProvider(dyn.ResourceProvider):
    """CRUD and diff of the egress policies of one shard of actors through ``kubectl ate``."""

    serialize_as_secret_always = False  # it captures nothing secret

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        """Validate and normalise the inputs; rebuild ``rules``, the per-actor fingerprints and the
        cluster identity from the settings (whatever the program sent), so the engine and the policy
        pack see the document that will be written."""
        if _contains_unknown({k: v for k, v in news.items() if k != PROVIDER_KEY}):
            return dyn.CheckResult(news, [])
        shard = ShardInputs.from_props(news)
        failures = [dyn.CheckFailure(p.field or "rules", p.message) for p in egress.shard_problems(shard)]
        return dyn.CheckResult({**news, **shard_props(shard, _olds or None)}, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        unknown = [k for k, v in news.items() if k != PROVIDER_KEY and _contains_unknown(v)]
        if unknown:  # a preview with values not known yet: assume the worst of each unknown target
            replaces = [
                key
                for key, sources in (("kube_context", ("kube_context",)), ("cluster", ("kubeconfig", "cluster")))
                if any(k in unknown or olds.get(k) != news.get(k) for k in sources)
            ]
            return dyn.DiffResult(changes=True, replaces=replaces, delete_before_replace=bool(replaces))
        decision = egress.shard_diff(olds, news)
        return dyn.DiffResult(
            changes=decision.changes,
            replaces=decision.replaces,
            delete_before_replace=decision.delete_before_replace,
        )

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        shard = _valid(props)
        written = write_each(
            shard, {ref: _ensure(shard, ref, None) for ref in shard.actors}, "create their egress policies"
        )
        _report_adopted(shard, written)
        live = {ref: w.fingerprint for ref, w in written.items()}
        records = {ref: w.recorded for ref, w in written.items()}
        outputs = egress.shard_outputs(shard, live, records, _cluster_of(props, shard))
        return dyn.CreateResult(egress.shard_resource_name(shard.shard), outputs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        shard = _valid(news)
        plan = egress.plan_shard(olds, shard)
        work: dict[str, Callable[[AteClient], Any]] = {}
        work.update({ref: _ensure(shard, ref, None) for ref in plan.create})
        work.update({ref: _ensure(shard, ref, record) for ref, record in plan.write.items()})
        work.update({ref: _remove(record) for ref, record in plan.delete.items()})
        done = write_each(shard, work, "update their egress policies") if work else {}
        written = {ref: result for ref, result in done.items() if isinstance(result, Written)}
        _report_adopted(shard, written)
        _report_left(shard, {ref: done[ref] for ref in plan.delete})
        desired = shard.fingerprint()
        live = {ref: desired for ref in plan.keep} | {ref: w.fingerprint for ref, w in written.items()}
        records = dict(plan.keep) | {ref: w.recorded for ref, w in written.items()}
        return dyn.UpdateResult(egress.shard_outputs(shard, live, records, _cluster_of(news, shard)))

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        if not isinstance(props.get("actors"), Mapping) or not props.get("kube_context"):
            raise EgressPolicyError(
                f"cannot read egress policy shard {id_!r} without its recorded inputs (kube context, "
                "kubeconfig, actors): `pulumi import` of a shard is not supported. Run `pulumi up`: each "
                "shard adopts the policies that already exist"
            )
        shard = ShardInputs.from_props(props)
        require_recorded_cluster(id_, shard, props)
        found = for_each_actor(shard, {ref: AteClient.get for ref in shard.actors}, "read their egress policies")
        live = {ref: egress.rules_fingerprint(p.get("rules") or []) if p else egress.ABSENT for ref, p in found.items()}
        records = {ref: recorded_of(p) for ref, p in found.items() if p is not None}
        outputs = egress.shard_outputs(shard, live, records, _cluster_of(props, shard))
        return dyn.ReadResult(id_, {**{k: v for k, v in props.items() if k != PROVIDER_KEY}, **outputs})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        shard = ShardInputs.from_props(props)
        require_recorded_cluster(_id, shard, props)
        # Only recorded policies: one found absent at the last refresh and there now was created by
        # someone else since, and is theirs.
        work = {ref: _remove(record) for ref, record in egress.recorded_policies(props).items()}
        outcomes = for_each_actor(shard, work, "delete their egress policies") if work else {}
        _report_left(shard, outcomes)


def _cluster_of(props: Mapping[str, Any], shard: ShardInputs) -> str:
    """The identity the checked inputs (or the recorded outputs) carry; derived when they carry none."""
    cluster = props.get("cluster")
    return cluster if isinstance(cluster, str) else resolved_cluster(shard)


def _valid(props: Mapping[str, Any]) -> ShardInputs:
    """The shard's inputs, checked once before any call (check has reported the same problems)."""
    shard = ShardInputs.from_props(props)
    problems = egress.shard_problems(shard)
    if problems:
        raise egress.EgressConfigError(problems)
    return shard


def _ensure(shard: ShardInputs, ref: str, record: Recorded | None) -> Callable[[AteClient], Written]:
    inputs = shard.policy_inputs(ref)
    return lambda client: ensure_policy(client, inputs, record)


def _remove(record: Recorded | None) -> Callable[[AteClient], tuple[str, str]]:
    return lambda client: remove_policy(client, record, strict=False)


class EgressPolicyShard(dyn.Resource, name="EgressPolicyShard"):
    """The egress policies of one shard of actors (``pulumi-python:dynamic:EgressPolicyShard``).

    Inputs: the shared settings, ``actors`` (each actor mapped to the fingerprint of the rules it asks
    for) and ``rules``. Outputs add each actor's live fingerprint and, hidden from diffs, ``policies``:
    the uid and version each next write or delete is guarded by.

    Why per-actor entries under the same key in inputs and outputs: a dynamic provider does not support
    previews, so in a preview the engine takes the new inputs as the new state
    (``sdk/go/common/resource/plugin/provider_plugin.go``, Update) and the CLI prints the difference
    between the old outputs and that (``pkg/backend/display/object_diff.go``): ``actors`` then lists
    exactly the actors added, removed or out of step, and ``policies`` (output only) would show as
    removed, hence ``hide_diffs``. Kubeconfig contents go in as a secret; the engine marks the output of
    the same name secret too (``annotateSecrets``, as the provider does not accept secrets).
    """

    actors: pulumi.Output[dict[str, str]]
    rules: pulumi.Output[list[dict[str, Any]]]
    kube_context: pulumi.Output[str]

    def __init__(self, resource_name: str, shard: ShardInputs, opts: pulumi.ResourceOptions | None = None) -> None:
        props: dict[str, Any] = shard_props(shard)
        if shard.kubeconfig and is_contents(shard.kubeconfig):
            props["kubeconfig"] = pulumi.Output.secret(shard.kubeconfig)
        hidden = pulumi.ResourceOptions(hide_diffs=["policies"])
        super().__init__(EgressShardProvider(), resource_name, props, pulumi.ResourceOptions.merge(opts, hidden))


# --- the per-actor resources of earlier versions ---------------------------------------------------


def _legacy_client(id_: str, props: Mapping[str, Any]) -> AteClient:
    inputs = PolicyInputs.from_props(props)
    if not inputs.atespace or not inputs.actor or not inputs.kube_context:
        raise EgressPolicyError(
            f"cannot use egress policy resource {id_!r} without its recorded inputs (atespace, actor, kube "
            "context): `pulumi import` of a per-actor egress policy is not supported, and reading it with "
            "the ambient kube context could reach another cluster. Run `pulumi up`: the shards adopt the "
            "policies that already exist"
        )
    target = Target(inputs.kubectl, inputs.kube_context, None, float(inputs.timeout_seconds), inputs.substrate_ref)
    return AteClient(target, inputs.atespace, inputs.actor)


@contextlib.contextmanager
def _ambient_kubeconfig_needed(client: AteClient) -> Iterator[None]:
    """Say what the upgrade needs when a per-actor resource cannot use its kube context: these resources
    never recorded a kubeconfig, so setting ``kubernetes.kubeconfig`` cannot help them."""
    try:
        yield
    except KubeconfigError as exc:
        raise KubeconfigError(
            f"{exc}. This is a per-actor egress policy resource of a version before the shards: it never recorded "
            "a kubeconfig, so its refresh and delete read the ambient one whatever kubernetes.kubeconfig says. "
            f"For the upgrade `pulumi up`, export KUBECONFIG=<a kubeconfig file holding context "
            f"{client.target.kube_context!r}> (docs/egress-policies.md, Upgrading from one resource per actor)"
        ) from exc


class ActorEgressPolicyProvider(dyn.ResourceProvider):
    """The provider of the per-actor ``egress-<atespace>.<name>`` resources that versions before the
    shards created. The program no longer registers them, so the engine only refreshes them (read) and,
    at the first ``up`` of the new version, deletes them.

    Its delete is guarded by the uid and version the resource recorded and leaves the policy on any
    mismatch: by then the actor's shard has adopted the policy (and moved its version), so the policy
    stays; an actor removed in the same ``up`` has no shard, its version still matches, and its policy
    is deleted. These resources never recorded a kubeconfig, so they use the ambient one, as they did
    when they created the policies.
    """

    serialize_as_secret_always = False

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        client = _legacy_client(id_, props)
        with _ambient_kubeconfig_needed(client):
            live = client.get()
        if live is None:
            return dyn.ReadResult("", {})
        record = recorded_of(live)
        outputs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
        outputs.update(uid=record.uid, version=record.version, rules=egress.normalize_rules(live.get("rules") or []))
        return dyn.ReadResult(id_, outputs)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        client = _legacy_client(id_, props)
        uid = props.get("uid")
        guard = Recorded.of(uid, props.get("version")) if uid else None
        with _ambient_kubeconfig_needed(client):
            outcome, detail = remove_policy(client, guard, strict=True)
        if outcome == LEFT:
            pulumi.log.info(
                f"egress policy of actor {client.ref} left in place: {detail} (its shard adopted it, or "
                "someone else changed it); the per-actor resource is removed from the stack"
            )

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        raise EgressPolicyError(
            "per-actor egress policy resources are retired: the program manages egress policies with "
            "EgressPolicyShard resources (see docs/egress-policies.md)"
        )

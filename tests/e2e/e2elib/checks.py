"""Pass/fail logic of the eight end-to-end checks, as pure functions of what was observed.

Each ``judge_*`` fills a Verdict with the evidence the example write-up prints and with a failure
line for every expectation that does not hold. The live checks (tests/e2e/test_e2e_*.py) only
gather observations; the unit suite feeds these functions canned ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.identity import API_KEYS, JWT_SOURCES, KUBERNETES
from core.manifests import API_KEY_LISTENER, JWT_LISTENER

from .counters import CounterReading
from .evidence import describe_outcome, excerpt, format_call, format_counters, format_transition, short_name, thousands
from .httpcall import HttpReply
from .probe import Call
from .verdict import Verdict

TITLES: dict[int, str] = {
    1: "Actor A and actor B each complete a call; tokens are metered per actor",
    2: "Actor A sends x-actor-id: actor/agents/actor-b and is still charged as actor A",
    # The run's own title names the stack's limit and cost per call (exhaustion_title).
    3: "Actor A's call after the one that crosses its default budget gets 429; actor B still gets 200",
    4: "An actor with no egress rule for Agent Router cannot reach it (one with a rule can); nothing reaches it",
    5: "A caller that is not an actor, sending no token, a forged JWT or a bare x-actor-id, gets 401",
    6: "A streamed call that did not ask for usage is charged when the stream ends",
    7: "Two model routes charge one bucket per actor (shared: true)",
    8: "With a class giving actor-b 5,000 tokens, actor-b is held to its own limit and actor-a to the default",
    9: "A Redis restart and a rate-limit service restart keep spent budgets: actor-a's counter and its 429 "
    "boundary are unchanged",
    10: "With the rate-limit store unreachable, the fail-open stack admits a call and fail-closed refuses it",
    11: "A usd class limit refuses an agent's call after the one that crosses it; each call is charged its price",
    12: "A class with two windows is refused by the smaller one; every call charges both",
    13: "A suspended actor gets 403 saying so, with its counters untouched; lifted, it is admitted again",
    14: "`make spend --json` shows actor-a's spent tokens (calls x the mock's tokens) and actor-b's unchanged",
    15: "A pool refuses actor-a once actor-b spent it; a per-model limit refuses only calls to its model",
    16: "An API-key agent is metered as apikey.<name> whatever x-actor-id it sends, and its key never reaches the "
    "model; a wrong key, the key on the JWT listener, a token on the API-key listener or nothing gets 401",
    17: "A service account not in agent-budgets:actors gets 403 saying so, and a token for the API server's "
    "audience the gateway's wrong-audience 403; neither is charged",
}

SOURCE_NEEDS: dict[str, str] = {
    "substrate": "it tests what a Substrate egress policy allows, and only Substrate actors have one",
    "apiKeys": "it calls with an API key, and the stack has no API-key listener",
    "kubernetes": "it calls with service-account tokens, and the stack has no service-account provider",
}
"""Why a check marked for an identity source does not apply to a stack without that source."""


WRONG_AUDIENCE_MARK = "The actor token was refused (wrong audience for this gateway)"
"""How the program's 403 for a token of another audience begins (core/suspension.py `_token_refused_body`)."""


def inapplicable_reason(number: int, source: str, settings: Any) -> str | None:
    """Why check `number`, which needs identity source `source`, does not apply here (None: it does): the stack
    lacks the source, or the dev environment has no agent of it (Substrate actors run only in the Substrate
    environment, service-account and API-key agents only in the Substrate-free one)."""
    if source not in settings.sources:
        return (
            f"check {number} applies only to a stack with the {source} identity source ({SOURCE_NEEDS[source]}); "
            f"stack {settings.pulumi_stack} accepts {', '.join(settings.sources)}"
        )
    if (source == "substrate") != settings.on_substrate:
        wanted = "make up" if source == "substrate" else "make up IDENTITY=kubernetes"
        return (
            f"check {number} needs a {source} agent, and only the dev environment of `{wanted}` runs one "
            f"(this run is IDENTITY={settings.identity})"
        )
    return None


LISTENER_SOURCES: dict[str, tuple[str, ...]] = {JWT_LISTENER: tuple(JWT_SOURCES), API_KEY_LISTENER: (API_KEYS,)}
"""The identity sources that give the Gateway each listener (core.manifests `gateway_listeners`)."""


def missing_listener_reason(number: int, listener: str, settings: Any) -> str | None:
    """Why check `number`, which calls the Gateway's `listener` from outside any agent, does not apply here (None:
    the stack has that listener)."""
    have = [name for name, _ in settings.listeners]
    if listener in have:
        return None
    return (
        f"check {number} calls the {listener} listener, which only a stack with the "
        f"{' or '.join(LISTENER_SOURCES[listener])} identity source has; stack {settings.pulumi_stack} accepts "
        f"{', '.join(settings.sources)}, so its Gateway has only {', '.join(have)}"
    )


def _agents_rule(settings: Any) -> str:
    """Which agents the run's dev environment runs for a stack (scripts/up.sh `demo-actors` and `agent-pods`)."""
    if settings.on_substrate:
        return f"it runs the Substrate actors {', '.join(settings.demo_actors)}, agents only of a stack with substrate"
    return (
        f"it runs the service-account agents {', '.join(settings.demo_actors)} for a stack with kubernetes and the "
        f"API-key agent {settings.api_key_agent} for one with apiKeys"
    )


def too_few_agents_reason(number: int, count: int, settings: Any) -> str | None:
    """Why check `number`, which calls as `count` different agents, cannot run here (None: it can). An agent of any
    source will do: a budget is charged to the caller's x-actor-id whether a JWT or an API key named it."""
    agents = settings.listed_agents
    if len(agents) >= count:
        return None
    have = ", ".join(settings.actor_id(agent) for agent in agents) or "none"
    wanted = "one agent" if count == 1 else f"{count} different agents"
    return (
        f"check {number} calls as {wanted}; the dev environment of `{settings.make_up}` has "
        f"{len(agents)} for stack {settings.pulumi_stack} (identity.sources: {', '.join(settings.sources)}): {have} "
        f"({_agents_rule(settings)})"
    )


def skip_reason(
    number: int, settings: Any, *, source: str | None = None, listener: str | None = None, agents: int = 0
) -> str | None:
    """The first reason check `number` does not apply to the stack and its environment (None: it runs), from what
    its marks say it needs: an identity source, a listener it calls from outside, how many agents it calls as."""
    reasons = (
        inapplicable_reason(number, source, settings) if source is not None else None,
        missing_listener_reason(number, listener, settings) if listener is not None else None,
        too_few_agents_reason(number, agents, settings),
    )
    return next((reason for reason in reasons if reason is not None), None)


KEY_ON_JWT_LISTENER = "the agent's key on the JWT listener"
TOKEN_ON_API_KEY_LISTENER = "a service-account token on the API-key listener"


def api_key_refusals_left_out(settings: Any) -> dict[str, str]:
    """The refused calls of check 16 that this stack cannot make, each with why: the verdict names them, so that a
    stack of fewer sources never passes check 16 with fewer assertions unsaid."""
    left_out: dict[str, str] = {}
    sources = ", ".join(settings.sources)
    if JWT_LISTENER not in dict(settings.listeners):
        left_out[KEY_ON_JWT_LISTENER] = (
            f"stack {settings.pulumi_stack} has no {JWT_LISTENER} listener (identity.sources: {sources})"
        )
    if KUBERNETES not in settings.sources:
        left_out[TOKEN_ON_API_KEY_LISTENER] = (
            f"stack {settings.pulumi_stack} accepts no service accounts, so the environment runs no service-account "
            f"agent to take a token from (identity.sources: {sources})"
        )
    return left_out


def agents_for(count: int, settings: Any) -> tuple[str, ...]:
    """The `count` agents a check calls as: the first of the stack's agents, of whichever source."""
    agents = tuple(settings.listed_agents)
    if len(agents) < count:
        raise RuntimeError(f"{count} agents wanted; stack {settings.pulumi_stack} has {len(agents)}: {agents}")
    return agents[:count]


FAIL_CLOSED_STATUS = 500
"""Envoy's rate-limit filter with failure_mode_deny answers 500 when the rate-limit service errors
(Envoy Gateway `rateLimit.failClosed`, reference: envoyproxy/gateway v1.9.0 api/v1alpha1/envoygateway_types.go
and internal/xds/translator/ratelimit.go `FailureModeDeny`)."""


def admitted_calls(limit: int, per_call: int) -> int:
    """Calls a budget admits: a call is refused only once the bucket is over the limit, and it is
    charged at its end, so N tokens at C a call admit floor(N/C) + 1 calls."""
    if per_call <= 0 or limit < 0:
        raise ValueError("per_call must be positive and limit not negative")
    return limit // per_call + 1


def ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def call_from_reply(reply: HttpReply) -> Call:
    """A direct HTTP reply (check 5) in the same shape as a probe's Call."""
    if reply.status is None:
        return Call(error_stage="connect", error=reply.error)
    return Call(
        status=reply.status,
        headers=reply.headers,
        body=reply.body,
        remaining=reply.headers.get("x-ratelimit-remaining"),
    )


def _expect_ok(v: Verdict, who: str, call: Call, per_call: int | None = None) -> None:
    if v.expect(call.status == 200, f"{who}: expected HTTP 200, got {describe_outcome(call)}") and per_call is not None:
        v.expect_equal(f"{who}: total_tokens", call.total_tokens, per_call)


def _expect_admitted_then_429(v: Verdict, name: str, calls: Sequence[Call], admitted: int, per_call: int) -> None:
    who = short_name(name)
    if not v.expect(len(calls) == admitted + 1, f"{who}: expected {admitted + 1} calls, made {len(calls)}"):
        return
    for index, call in enumerate(calls[:admitted], start=1):
        _expect_ok(v, f"{who} call {index}", call, per_call)
    last = calls[admitted]
    v.expect(last.status == 429, f"{who} call {admitted + 1}: expected HTTP 429, got {describe_outcome(last)}")


def run_lines(name: str, calls: Sequence[Call], first: int = 1, last: int = 2) -> list[str]:
    """Evidence for a run of calls: the first and last ones, the middle folded into one line."""
    who = short_name(name)
    shown = set(range(first)) | set(range(max(len(calls) - last, 0), len(calls)))
    lines: list[str] = []
    folded: list[int] = []
    for index, call in enumerate(calls):
        if index in shown:
            if folded:
                statuses = sorted({calls[i].status for i in folded}, key=str)
                lines.append(f"{who} calls {folded[0] + 1}-{folded[-1] + 1}: status {'/'.join(map(str, statuses))}")
                folded = []
            lines.append(f"{who} call {index + 1}: {format_call(call)}")
        else:
            folded.append(index)
    return lines


# --- 1 -------------------------------------------------------------------------------------------


def judge_metering(v: Verdict, calls: Mapping[str, Call], totals: Mapping[str, int], per_call: int) -> None:
    v.note("rate limit counters: " + format_counters({actor: totals.get(actor, 0) for actor in calls}))
    v.note(
        "credential the model received: "
        + " ".join(f"{short_name(actor)}={call.credential or 'unknown'}" for actor, call in calls.items())
    )
    for actor, call in calls.items():
        who = short_name(actor)
        _expect_ok(v, f"{who}'s call", call, per_call)
        v.expect_equal(f"{who}'s counter", totals.get(actor), per_call)
        if call.credential == "jwt":
            v.expect(False, f"the model received {who}'s actor JWT instead of the provider key")
        else:
            v.expect_equal(f"credential the model received from {who}'s call", call.credential, "provider-key")


# --- 2 -------------------------------------------------------------------------------------------


def judge_spoofing(
    v: Verdict, call: Call, caller: str, victim: str, before: Mapping[str, int], after: Mapping[str, int], per_call: int
) -> None:
    v.note(f"{short_name(caller)} sent x-actor-id: {victim}")
    v.note(f"upstream saw x-actor-id: {call.upstream_actor_id}")
    v.note(
        f"{format_transition(caller, before[caller], after[caller])}; "
        f"{format_transition(victim, before[victim], after[victim])}"
    )
    _expect_ok(v, f"{short_name(caller)}'s spoofed call", call)
    v.expect_equal("x-actor-id the model saw", call.upstream_actor_id, caller)
    v.expect_equal(f"{short_name(caller)}'s counter increase", after[caller] - before[caller], per_call)
    v.expect_equal(f"{short_name(victim)}'s counter increase", after[victim] - before[victim], 0)


# --- 3 -------------------------------------------------------------------------------------------


def exhaustion_title(limit: int, per_call: int, unit: str) -> str:
    refused = admitted_calls(limit, per_call) + 1
    return (
        f"Actor A's {ordinal(refused)} call gets 429 ({limit} tokens/{unit.lower()}, {per_call} per call); "
        "actor B still gets 200"
    )


def judge_exhaustion(
    v: Verdict, caller_calls: Sequence[Call], other_call: Call, caller: str, other: str, limit: int, per_call: int
) -> None:
    lines = [f"{short_name(caller)} call {i}: {format_call(c)}" for i, c in enumerate(caller_calls, start=1)]
    width = max((len(line.split(": ", 1)[0]) + 2 for line in lines), default=0)
    for line in lines:
        v.note(line)
    v.note(f"{short_name(other)}:".ljust(width) + format_call(other_call))
    _expect_admitted_then_429(v, caller, caller_calls, admitted_calls(limit, per_call), per_call)
    _expect_ok(v, f"{short_name(other)}'s call after {short_name(caller)} ran out", other_call, per_call)


# --- 4 -------------------------------------------------------------------------------------------


def blocked(call: Call) -> bool:
    """No answer from the destination at all, or the egress gateway's 403 deny."""
    if call.error_stage in ("ingress", "probe-input"):
        return False  # the probe never tried
    return call.status is None or call.status == 403


GATEWAY_ANSWERS = (200, 401, 429)
"""What only the gateway answers a by-name model call from inside a sandbox: served, refused for its
token, or over budget. An egress deny (403) or no answer at all is not the gateway."""


def judge_no_egress(
    v: Verdict,
    actor: str,
    by_name: Call,
    by_ip: Call,
    service_ip: str,
    arrived: int,
    control_arrived: int,
    control_actor: str,
    control_call: Call,
) -> None:
    who = short_name(actor)
    control_who = short_name(control_actor)
    v.note(
        f"positive control: {control_who} (with an egress rule) calling agent-router by name: "
        f"{describe_outcome(control_call)}"
    )
    v.expect(
        control_call.status in GATEWAY_ANSWERS,
        f"positive control: {control_who}, which has an egress rule, got {describe_outcome(control_call)} by name, "
        f"not an answer from the gateway ({'/'.join(map(str, GATEWAY_ANSWERS))}): the sandbox network is broken for "
        "every actor, so the blocked calls below prove nothing",
    )
    v.note(f"{who} calling agent-router by name: {describe_outcome(by_name)}")
    v.note(f"{who} calling the Service IP {service_ip}: {describe_outcome(by_ip)}")
    v.note(
        f"agent-router access log: {arrived} of these 2 requests arrived "
        f"(control request from outside the sandbox: {control_arrived} arrived)"
    )
    for label, call in (("by name", by_name), ("by Service IP", by_ip)):
        if call.error_stage in ("ingress", "probe-input"):
            v.expect(False, f"{label}: the probe agent in {who} did not make the call: {describe_outcome(call)}")
        else:
            v.expect(
                blocked(call),
                f"{label}: {who} got an answer that is not the egress gateway's deny: {describe_outcome(call)}",
            )
    v.expect_equal("requests from the actor in the agent-router access log", arrived, 0)
    v.expect(
        control_arrived >= 1,
        "the control request is missing from the agent-router access log, so its absence "
        "of the actor's requests proves nothing (are the proxy access logs off?)",
    )


# --- 5 -------------------------------------------------------------------------------------------


def judge_non_actor(v: Verdict, cases: Mapping[str, Call], before: Mapping[str, int], after: Mapping[str, int]) -> None:
    for label, call in cases.items():
        detail = call.headers.get("www-authenticate") or excerpt(call.body, 60) or describe_outcome(call)
        v.note(f"{label}: {call.status if call.status is not None else describe_outcome(call)} ({detail})")
        v.expect(call.status == 401, f"{label}: expected HTTP 401, got {describe_outcome(call)}")
    v.note(f"rate limit counters before/after: {format_counters(before)} / {format_counters(after)}")
    v.expect(dict(after) == dict(before), "a rejected caller's requests changed the counters")


# --- 6 -------------------------------------------------------------------------------------------


def judge_streaming(v: Verdict, call: Call, actor: str, before: int, after: int, per_call: int) -> None:
    v.note(f"request: stream=true, stream_options {'sent' if call.sent_stream_options else 'absent'}")
    if call.stream_events is not None:
        v.note(
            f"stream: {call.stream_events} data events, [DONE] {'seen' if call.stream_done else 'missing'}, "
            f"usage chunk total_tokens={call.stream_usage_total} (Agent Router asked for it)"
        )
    v.note(format_transition(actor, before, after))
    v.expect(not call.sent_stream_options, "the request asked for usage itself, so the check proves nothing")
    _expect_ok(v, "the streamed call", call)
    if v.expect(call.stream_events is not None, "the answer was not an event stream"):
        v.expect(call.stream_done, "the stream did not end with [DONE]")
    v.expect_equal(f"{short_name(actor)}'s counter increase", after - before, per_call)


# --- 7 -------------------------------------------------------------------------------------------


def judge_shared_routes(
    v: Verdict, calls: Mapping[str, Call], reading: CounterReading, domain: str, per_call: int
) -> None:
    for model, call in calls.items():
        v.note(f"model {model}: {format_call(call)}")
    v.note(f"{short_name(reading.subject)}: {len(reading.keys)} counter key(s), total {reading.total}")
    for key, value in reading.keys:
        v.note(f"  {key} = {value}")
    for model, call in calls.items():
        _expect_ok(v, f"the {model} call", call, per_call)
    v.expect(
        len(reading.keys) == 1,
        f"expected one bucket for {short_name(reading.subject)}, found "
        f"{len(reading.keys)} counter keys (a bucket per route: shared is off?)",
    )
    v.expect(
        all(key.startswith(f"{domain}_") for key, _ in reading.keys),
        f"expected every counter in the shared domain {domain}",
    )
    v.expect_equal(f"{short_name(reading.subject)}'s total", reading.total, per_call * len(calls))


# --- 8 -------------------------------------------------------------------------------------------


def judge_class(
    v: Verdict,
    config_line: str,
    caller: str,
    caller_calls: Sequence[Call],
    member: str,
    member_calls: Sequence[Call],
    default_limit: int,
    class_limit: int,
    per_call: int,
) -> None:
    v.note(config_line)
    v.note(
        f"{short_name(member)}: {thousands(class_limit)} tokens admit {admitted_calls(class_limit, per_call)} calls; "
        f"{short_name(caller)}: {thousands(default_limit)} admit {admitted_calls(default_limit, per_call)}"
    )
    for line in run_lines(member, member_calls) + run_lines(caller, caller_calls):
        v.note(line)
    _expect_admitted_then_429(v, member, member_calls, admitted_calls(class_limit, per_call), per_call)
    _expect_admitted_then_429(v, caller, caller_calls, admitted_calls(default_limit, per_call), per_call)


# --- 9 -------------------------------------------------------------------------------------------


def judge_redis_restart(
    v: Verdict,
    actor: str,
    restart: str,
    before: CounterReading,
    after: CounterReading,
    calls_after: Sequence[Call],
    limit: int,
    per_call: int,
) -> None:
    """Spent before the restart, the same keys and values after it, and the same boundary: the calls the
    remaining budget admits, then 429."""
    who = short_name(actor)
    v.note(f"before the restart: {who} {len(before.keys)} counter key(s), total {before.total}")
    v.note(restart)
    v.note(f"after the restart: {who} {len(after.keys)} counter key(s), total {after.total}")
    for line in run_lines(actor, calls_after, first=len(calls_after), last=0):
        v.note(line)
    v.expect(before.total > 0, f"{who} had spent nothing before the restart, so the check proves nothing")
    v.expect_equal(f"{who}'s counter keys and values after the restart", after.keys, before.keys)
    remaining = admitted_calls(limit, per_call) - before.total // per_call
    _expect_admitted_then_429(v, actor, calls_after, remaining, per_call)


# --- 10 ------------------------------------------------------------------------------------------


def judge_fail_mode(
    v: Verdict, actor: str, outage: str, dev_fail_closed: bool, open_call: Call, closed_call: Call, restored: str
) -> None:
    """Fail-open (the dev stack) admits a call with the store down; with failClosed applied, the same call
    gets the documented error; the stack is put back afterwards."""
    who = short_name(actor)
    v.note(outage)
    v.note(f"dev stack (rateLimit.failClosed: {str(dev_fail_closed).lower()}): {who} {format_call(open_call)}")
    v.note(f"with rateLimit.failClosed: true applied: {who} {describe_outcome(closed_call)}")
    v.note(restored)
    v.expect(not dev_fail_closed, "the dev stack is configured fail-closed, so its fail-open half proves nothing")
    _expect_ok(v, f"{who}'s call with the store down (fail-open)", open_call)
    v.expect(
        closed_call.status == FAIL_CLOSED_STATUS,
        f"{who}'s call with the store down (fail-closed): expected HTTP {FAIL_CLOSED_STATUS}, "
        f"got {describe_outcome(closed_call)}",
    )


# --- 11-13: money, windows, suspension ------------------------------------------------------------


def judge_usd_limit(
    v: Verdict,
    config_line: str,
    member: str,
    calls: Sequence[Call],
    limit_mills: int,
    mills_per_call: int,
    tokens_per_call: int,
    counter_mills: int,
) -> None:
    """Check 11: a usd limit counts mills; N mills at C a call admit floor(N/C) + 1 calls."""
    admitted = admitted_calls(limit_mills, mills_per_call)
    v.note(config_line)
    v.note(
        f"{short_name(member)}: each call costs {mills_per_call} mills (rounded up); "
        f"{thousands(limit_mills)} mills admit {admitted} calls"
    )
    for line in run_lines(member, calls):
        v.note(line)
    v.note(f"{short_name(member)} usd counter: {thousands(counter_mills)} mills")
    _expect_admitted_then_429(v, member, calls, admitted, tokens_per_call)
    v.expect_equal(f"{short_name(member)} usd counter (mills)", counter_mills, admitted * mills_per_call)


def judge_windows(
    v: Verdict,
    config_line: str,
    member: str,
    calls: Sequence[Call],
    small: tuple[int, int],
    large: tuple[int, int],
    per_call: int,
    counters_by_rule: Mapping[int, int],
) -> None:
    """Check 12: (rule index, limit) of the smaller and the larger window; every admitted call charges both."""
    (small_rule, small_limit), (large_rule, large_limit) = small, large
    admitted = admitted_calls(small_limit, per_call)
    v.note(config_line)
    v.note(
        f"{short_name(member)}: the smaller window ({thousands(small_limit)} tokens) admits {admitted} calls; "
        f"the larger one ({thousands(large_limit)}) would admit {admitted_calls(large_limit, per_call)}"
    )
    for line in run_lines(member, calls):
        v.note(line)
    v.note(f"{short_name(member)} counters by rule: {dict(sorted(counters_by_rule.items()))}")
    _expect_admitted_then_429(v, member, calls, admitted, per_call)
    spent = admitted * per_call
    v.expect_equal(f"rule {small_rule} (smaller window) counter", counters_by_rule.get(small_rule), spent)
    v.expect_equal(f"rule {large_rule} (larger window) counter", counters_by_rule.get(large_rule), spent)
    v.expect(spent <= large_limit, f"the larger window is over too ({spent} > {large_limit}): the check proves nothing")


def error_text(body: str) -> str:
    """An OpenAI-style error body as `<code>: <message>`; anything else as a one-line excerpt."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, Mapping) and error.get("code"):
        return excerpt(f"{error.get('code')}: {error.get('message', '')}", 200)
    return excerpt(body, 160)


def judge_suspension(
    v: Verdict,
    member: str,
    other: str,
    first: Call,
    refused: Call,
    other_call: Call,
    readmitted: Call,
    spent: Sequence[int],
    per_call: int,
) -> None:
    """Check 13: spent = the member's counters after its first call, during the suspension, after it was
    lifted (before its next call) and after that call."""
    before, during, lifted, after = spent
    who, bystander = short_name(member), short_name(other)
    v.note(f"{who} call before the suspension: {format_call(first)}")
    v.note(f"{who} call while suspended: HTTP {refused.status} {error_text(refused.body)}")
    v.note(f"{bystander} call meanwhile: {format_call(other_call)}")
    v.note(f"{who} call after the suspension is lifted: {format_call(readmitted)}")
    v.note(f"{who} counter: {before} -> {during} (suspended) -> {lifted} (lifted) -> {after}")
    _expect_ok(v, f"{who} before the suspension", first, per_call)
    v.expect(refused.status == 403, f"{who} while suspended: expected HTTP 403, got {describe_outcome(refused)}")
    v.expect("actor_suspended" in refused.body, f"{who} while suspended: the body does not say so: {refused.body!r}")
    _expect_ok(v, f"{bystander} while {who} is suspended", other_call, per_call)
    v.expect_equal(f"{who} counter while suspended (untouched)", during, before)
    v.expect_equal(f"{who} counter once lifted (spent budget kept)", lifted, before)
    _expect_ok(v, f"{who} after the suspension", readmitted, per_call)
    v.expect_equal(f"{who} counter after its next call", after, before + per_call)


# --- 16 ------------------------------------------------------------------------------------------


def judge_api_key(
    v: Verdict,
    subject: str,
    call: Call,
    spoofed: Call,
    spoofed_as: str,
    in_header: Mapping[str, Call],
    key_headers: Sequence[str],
    refused: Mapping[str, Call],
    counters: tuple[int, int, int],
    per_call: int,
    left_out: Mapping[str, str] | None = None,
) -> None:
    """Check 16: the API-key agent's own call, a spoofing one and one with its key in each other header the listener
    reads (`in_header`, by header), each charged to `subject`, each reaching the model with the provider key in
    Authorization and no x-api-key (the mock reports both, as classifications), and with no header of `key_headers`
    (`identity.apiKeys.headers`) but Authorization, which then holds the provider's key, among the header names the
    mock lists; then the refused direct calls, which change no counter. `counters` is the agent's spend before,
    after its calls and after the refused ones; `left_out` (api_key_refusals_left_out) names each refused call the
    stack could not make, and why."""
    before, after_calls, after_refused = counters
    who = short_name(subject)
    own = {
        "the API-key agent's call": call,
        "the API-key agent's spoofing call": spoofed,
        **{f"the API-key agent's call with its key in {header}": made for header, made in in_header.items()},
    }
    v.note(f"{who} call: {format_call(call)}; upstream saw x-actor-id: {call.upstream_actor_id}")
    v.note(f"{who} sent x-actor-id: {spoofed_as}; upstream saw x-actor-id: {spoofed.upstream_actor_id}")
    v.note(f"credential the model received: {call.credential or 'unknown'}")
    v.note(f"x-api-key the model received: {call.upstream_x_api_key or 'unknown'}")
    names = call.upstream_header_names
    v.note(f"header names the model received: {'unknown' if names is None else ', '.join(names)}")
    watched = [header.lower() for header in key_headers if header.lower() != "authorization"]
    for label, made in own.items():
        _expect_ok(v, label, made, per_call)
        if made.status != 200:
            continue
        v.expect_equal(f"x-actor-id the model saw on {label}", made.upstream_actor_id, subject)
        v.expect_equal(f"credential the model received on {label}", made.credential, "provider-key")
        # The mock provider's key goes in Authorization, so any x-api-key reaching it is the agent's.
        v.expect_equal(f"x-api-key the model received on {label}", made.upstream_x_api_key, "absent")
        if made.upstream_header_names is None:
            v.expect(False, f"{label}: the mock did not list the header names it received (x-mock-header-names)")
        else:
            reached = [header for header in watched if header in made.upstream_header_names]
            v.expect_equal(f"key headers the model received on {label}", reached, [])
    calls = f"{len(own)} calls"
    v.note(f"{who} counter: {before} -> {after_calls} ({calls}) -> {after_refused} (refused calls)")
    v.expect_equal(f"{who} counter after its {calls}", after_calls - before, len(own) * per_call)
    for label, refusal in refused.items():
        status = refusal.status if refusal.status is not None else describe_outcome(refusal)
        v.note(f"{label}: {status} ({excerpt(refusal.body, 60)})")
        v.expect(refusal.status == 401, f"{label}: expected HTTP 401, got {describe_outcome(refusal)}")
    for label, why in (left_out or {}).items():
        v.note(f"not run: {label}: {why}")
    v.expect_equal(f"{who} counter after the refused calls", after_refused, after_calls)


# --- 17 ------------------------------------------------------------------------------------------


def judge_unlisted_service_account(
    v: Verdict,
    unlisted: str,
    unlisted_call: Call,
    wrong_audience: Call,
    before: Mapping[str, int],
    after: Mapping[str, int],
) -> None:
    """Check 17: the unlisted service account's own call (its projected token, the gateway's audience) and a
    listed one's token for the API server's audience, both refused before any model is called."""
    v.note(f"{short_name(unlisted)} (not listed) call: HTTP {unlisted_call.status} {error_text(unlisted_call.body)}")
    v.note(
        f"token for the API server's audience: HTTP {wrong_audience.status} "
        f"({wrong_audience.headers.get('www-authenticate') or excerpt(wrong_audience.body, 80)})"
    )
    v.expect(
        unlisted_call.status == 403, f"{short_name(unlisted)}: expected HTTP 403, got {describe_outcome(unlisted_call)}"
    )
    v.expect(
        "not in agent-budgets:actors" in unlisted_call.body,
        f"{short_name(unlisted)}: the 403 does not name the reason: {unlisted_call.body!r}",
    )
    # The gateway's custom_response answers the JWT filter's 403 with the program's own body, and its headers go with
    # the rewritten reply (core/suspension.py SERVICE_ACCOUNT_TOKEN_REFUSED_BODY; seen on the rig, where Envoy sent
    # that body and no `www-authenticate`).
    v.expect(
        wrong_audience.status == 403 and WRONG_AUDIENCE_MARK in wrong_audience.body,
        f"a token for the API server's audience: expected the gateway's wrong-audience 403, got "
        f"{describe_outcome(wrong_audience)}",
    )
    v.note(f"rate limit counters before/after: {format_counters(before)} / {format_counters(after)}")
    v.expect(dict(after) == dict(before), "a refused call changed the counters")


# --- 14 ------------------------------------------------------------------------------------------


def spend_rows(document: Mapping[str, Any], subject: str) -> list[Mapping[str, Any]]:
    """The rows of one actor in `make spend --json` output (one per limit that charges it)."""
    return [row for row in document.get("rows") or [] if row.get("subject") == subject]


def judge_spend_report(
    v: Verdict,
    document: Mapping[str, Any],
    calls: Sequence[Call],
    counters: Mapping[str, int],
    caller: str,
    other: str,
    other_before: int,
    per_call: int,
) -> None:
    """The report must show the caller's calls x tokens, the other actor as it was, and agree with Redis."""
    expected = {caller: per_call * len(calls), other: other_before}
    for subject in (caller, other):
        rows = spend_rows(document, subject)
        shown = ", ".join(
            f"{row.get('budget')} {row.get('spent')}/{row.get('limit')} per {row.get('per')} "
            f"({row.get('used_percent')}%, resets {row.get('resets_at')})"
            for row in rows
        )
        v.note(f"make spend --json: {short_name(subject)}: {shown or 'no row'}")
    v.note(f"counters read straight from Redis: {format_counters({s: counters.get(s, 0) for s in expected})}")
    for index, call in enumerate(calls, start=1):
        _expect_ok(v, f"{short_name(caller)} call {index}", call, per_call)
    for subject, want in expected.items():
        rows = spend_rows(document, subject)
        if not v.expect(bool(rows), f"make spend --json has no row for {subject}"):
            continue
        for row in rows:
            v.expect_equal(f"{short_name(subject)}'s spent ({row.get('budget')})", row.get("spent"), want)
        v.expect_equal(
            f"{short_name(subject)}'s spent in the report vs in Redis", rows[0].get("spent"), counters.get(subject)
        )


# --- 15 ------------------------------------------------------------------------------------------


def pool_check_limits(per_call: int) -> tuple[int, int]:
    """(the per-model limit, the pool's limit) of check 15: the model limit admits two calls; the pool holds
    actor-b's three calls (two to the model, one to another) and refuses the call after actor-a's first."""
    return per_call, 3 * per_call + per_call // 2


def judge_pool(
    v: Verdict,
    config_line: str,
    pooled: tuple[str, str],
    model_calls: Sequence[Call],
    other_call: Call,
    pool_calls: Sequence[Call],
    per_call: int,
    default_limit: int,
    rules: Mapping[str, int],
    counters: Mapping[str, int],
) -> None:
    """Check 15. actor-b (`pooled[1]`) calls the per-model limit's model until refused (its own default has room
    left), then another model once; actor-a (`pooled[0]`) then calls until the pool, not its own budget,
    refuses it. `rules` names the rule indexes (`default`, `model`, `pool`), `counters` what they hold
    (`a default`, `b default`, `b model`, `pool`)."""
    actor_a, actor_b = pooled
    model_limit, pool_limit = pool_check_limits(per_call)
    v.note(config_line)
    v.note(
        f"limits: default {thousands(default_limit)} tokens each (rule {rules['default']}), "
        f"{thousands(model_limit)} on the model (rule {rules['model']}), {thousands(pool_limit)} for the pool "
        f"(rule {rules['pool']}, one counter for both)"
    )
    for line in [*run_lines(actor_b, model_calls), *run_lines(actor_b, [other_call]), *run_lines(actor_a, pool_calls)]:
        v.note(line)
    v.note(f"counters: {', '.join(f'{name} {thousands(value)}' for name, value in counters.items())}")
    if not v.expect(
        2 * per_call <= default_limit,
        f"the default budget ({default_limit}) must hold two calls of {per_call}: the check proves nothing",
    ):
        return
    admitted = admitted_calls(model_limit, per_call)
    _expect_admitted_then_429(v, f"{actor_b} (model)", model_calls, admitted, per_call)
    _expect_ok(v, f"{short_name(actor_b)} call to another model", other_call, per_call)
    _expect_admitted_then_429(v, f"{actor_a} (pool)", pool_calls, 1, per_call)
    spent_b = (admitted + 1) * per_call
    v.expect_equal(f"{short_name(actor_b)}'s default counter", counters.get("b default"), spent_b)
    v.expect_equal(f"{short_name(actor_b)}'s per-model counter", counters.get("b model"), admitted * per_call)
    v.expect_equal(f"{short_name(actor_a)}'s default counter", counters.get("a default"), per_call)
    v.expect_equal("the pool's counter (both actors' calls)", counters.get("pool"), spent_b + per_call)
    v.expect(
        counters.get("a default", 0) <= default_limit,
        f"{short_name(actor_a)}'s own budget was over too: the check does not show the pool refusing it",
    )

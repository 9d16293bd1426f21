"""Live checks of the rig stack that `tests/e2e` (written for the dev stacks) does not make, on the deployed stack
(`python -m rig live`, after `make rig RIG_STACK=rig`): each reads the counters in Redis before and after, and what
the mock model received.

1. Two tokens in one call: an actor JWT in `Authorization` and another identity's token in the `access_token`
   query charge the header's actor alone (the JWT providers read `Authorization` only: `extractFrom`), and two
   `Authorization` headers are refused;
2. the route's `maxOutputTokens` ceiling reaches the model (`max_completion_tokens` at the ceiling, `max_tokens`
   removed, `n` 1, whatever the agent asked for), and with `gateway.refuseDuplicateKeys` a body repeating a key
   gets 400 and is charged nothing;
3. 32 concurrent calls at the edge of a budget: with a calls limit (the class `large`) no more calls are admitted
   than it leaves and the tokens stay within the stack output `worstCase`; without one (the default budget, which
   `worstCase` calls unbounded) the calls in flight before the first charges land are admitted, and the overshoot
   is measured.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rig import actor_keys, differential, program
from rig.engine import Engine
from rig.node import Node
from rig.processes import StepError

CONCURRENT_CALLS = 32


class Stack:
    """What the checks share: the settings, outputs, gateway address, counters and credentials of the stack."""

    def __init__(self, node: Node, engine: Engine, stack: str) -> None:
        self.node, self.engine, self.stack = node, engine, stack
        self.settings = actor_keys.stack_settings(engine, stack)
        self.outputs = engine.outputs(stack)
        self.url, self.host = program.gateway_address(node, self.outputs)
        self.policy = differential.budget_policy(node, self.settings.gateway.namespace)

    def fresh(self, *actors: str) -> int:
        """The actors' counters deleted, so that a check starts from fresh buckets (as tests/e2e does)."""
        return differential.fresh_counters(self.node, self.settings.gateway.namespace, list(actors))

    def token(self, actor: str) -> str:
        return differential.caller_token(self.node, self.engine, self.settings, actor)

    def counters(self, actor: str) -> dict[str, int]:
        """The actor's counters by rule index (0 where the window has none yet)."""
        now = int(time.time())
        live = differential.redis_counters(self.node)
        return {
            str(rule.index): live.get(rule.counter_key(now), 0) for rule in differential.actor_rules(self.policy, actor)
        }

    def rule_of(self, budget: str, unit: str) -> int:
        return next(r["rule"] for r in self.outputs["budgetRules"] if r["budget"] == budget and r["unit"] == unit)

    def worst(self, rule: int) -> dict[str, Any]:
        return next(entry for entry in self.outputs["worstCase"] if entry["rule"] == rule)


def raw_call(url: str, host: str, body: bytes, headers: Mapping[str, str], timeout: float = 20) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", "Host": host, **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def two_tokens(stack: Stack) -> dict[str, Any]:
    header_actor, query_actor = "agents/actor-a", "serviceaccount:agents/bot-a"
    stack.fresh(header_actor, query_actor)
    before = {actor: stack.counters(actor) for actor in (header_actor, query_actor)}
    url = f"{stack.url}?access_token={stack.token(query_actor)}"
    status, body, _ = program.call(url, stack.host, stack.token(header_actor))
    time.sleep(1.5)
    after = {actor: stack.counters(actor) for actor in (header_actor, query_actor)}
    if status != 200:
        raise StepError(f"the call with a token in the header and one in the query got {status}: {body[:200]}")
    if after[query_actor] != before[query_actor]:
        raise StepError(
            f"the query's identity {query_actor} was charged: {before[query_actor]} -> {after[query_actor]}"
        )
    if all(after[header_actor][rule] == before[header_actor][rule] for rule in before[header_actor]):
        raise StepError(f"the header's actor {header_actor} was not charged")
    # Two Authorization headers: urllib sends one header per name, so this one goes over a raw connection.
    host, port = stack.url.split("://", 1)[1].split("/", 1)[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=20)
    payload = json.dumps({"model": "mock-small", "messages": [{"role": "user", "content": "two headers"}]})
    connection.putrequest("POST", "/v1/chat/completions", skip_host=True)
    for name, value in (
        ("Host", stack.host),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        ("Authorization", f"Bearer {stack.token(header_actor)}"),
        ("Authorization", f"Bearer {stack.token(query_actor)}"),
    ):
        connection.putheader(name, value)
    connection.endheaders(payload.encode())
    response = connection.getresponse()
    doubled = response.status
    response.read()
    connection.close()
    time.sleep(1.5)
    final = {actor: stack.counters(actor) for actor in (header_actor, query_actor)}
    if doubled != 401 or final != after:
        raise StepError(f"a call with two Authorization headers got {doubled}, and charged {after} -> {final}")
    return {
        "header_and_query": {"status": status, "charged": header_actor, "not_charged": query_actor},
        "counters_before": before,
        "counters_after": after,
        "two_authorization_headers": {"status": doubled, "counters_after": final},
    }


def ceiling_and_duplicates(stack: Stack) -> dict[str, Any]:
    actor = "serviceaccount:agents/bot-b"
    stack.fresh(actor)
    route = next(r for r in stack.settings.routes if r.max_output_tokens)
    model = route.models[0]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "as long as you like"}],
        "max_tokens": 100000,
        "max_completion_tokens": 100000,
        "n": 4,
    }
    status, text = raw_call(
        stack.url, stack.host, json.dumps(body).encode(), {"Authorization": f"Bearer {stack.token(actor)}"}
    )
    if status != 200:
        raise StepError(f"the call asking for 100,000 output tokens got {status}: {text[:200]}")
    received = json.loads(text)["mock_received"]["output_limits"]
    wanted = {"max_completion_tokens": route.max_output_tokens, "n": 1}
    if received != wanted:
        raise StepError(f"the model received {received}, not the ceiling {wanted}")
    time.sleep(1.5)
    before = stack.counters(actor)
    repeated = (
        f'{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}], '
        '"max_completion_tokens": 1, "max_completion_tokens": 100000}'
    ).encode()
    refused, refusal = raw_call(stack.url, stack.host, repeated, {"Authorization": f"Bearer {stack.token(actor)}"})
    time.sleep(1.5)
    after = stack.counters(actor)
    if refused != 400:
        raise StepError(f"a body repeating max_completion_tokens got {refused}, not 400: {refusal[:200]}")
    if after != before:
        raise StepError(f"the refused body was charged: {before} -> {after}")
    return {
        "route": route.name,
        "asked": {key: body[key] for key in ("max_tokens", "max_completion_tokens", "n")},
        "model_received": received,
        "repeated_key": {"status": refused, "body": refusal[:200], "counters_unchanged": after},
    }


def burst(stack: Stack, actor: str) -> list[int]:
    token = stack.token(actor)
    with ThreadPoolExecutor(CONCURRENT_CALLS) as pool:
        results = list(
            pool.map(lambda _: program.call(stack.url, stack.host, token, timeout=60)[0], range(CONCURRENT_CALLS))
        )
    time.sleep(2)
    return results


def judge_bounded_burst(statuses: list[int], calls_left: int, tokens_after: int, worst: int | None) -> None:
    """A calls limit is counted when each call is checked, so exactly the calls it has left are admitted, the rest
    refused with 429, and the tokens charged stay within `worstCase`."""
    admitted = statuses.count(200)
    if admitted != calls_left or statuses.count(429) != len(statuses) - calls_left:
        counts = {str(code): statuses.count(code) for code in sorted(set(statuses))}
        raise StepError(f"{len(statuses)} concurrent calls with {calls_left} left of the calls limit: {counts}")
    if worst is not None and tokens_after > worst:
        raise StepError(f"the class's tokens reached {tokens_after}, above worstCase {worst}")


def concurrency(stack: Stack) -> dict[str, Any]:
    bounded_actor = "agents/actor-b"
    stack.fresh(bounded_actor, "agents/actor-a")
    calls_rule, tokens_rule = stack.rule_of("class:large", "calls"), stack.rule_of("class:large", "tokens")
    calls_limit = next(r["requests"] for r in stack.outputs["budgetRules"] if r["rule"] == calls_rule)
    before = stack.counters(bounded_actor)
    statuses = burst(stack, bounded_actor)
    after = stack.counters(bounded_actor)
    admitted = statuses.count(200)
    left = max(calls_limit - before[str(calls_rule)], 0)
    worst = stack.worst(tokens_rule)
    judge_bounded_burst(statuses, left, after[str(tokens_rule)], worst["worst"])
    bounded = {
        "actor": bounded_actor,
        "calls_limit": calls_limit,
        "calls_left_before": left,
        "admitted": admitted,
        "refused": {str(code): statuses.count(code) for code in sorted(set(statuses)) if code != 200},
        "tokens_counter": [before[str(tokens_rule)], after[str(tokens_rule)]],
        "worstCase": {"worst": worst["worst"], "concurrentCalls": worst["concurrentCalls"]},
    }
    unbounded_actor = "agents/actor-a"
    tokens_rule = stack.rule_of("default", "tokens")
    limit = next(r["requests"] for r in stack.outputs["budgetRules"] if r["rule"] == tokens_rule)
    token = stack.token(unbounded_actor)
    per_call = None
    at_the_edge = False
    for _ in range(50):  # up to the edge: the next call is still admitted, one more charge crosses the limit
        spent = stack.counters(unbounded_actor)[str(tokens_rule)]
        if per_call is not None and spent + per_call > limit:
            at_the_edge = True
            break
        status, body, _ = program.call(stack.url, stack.host, token)
        if status != 200:
            raise StepError(f"{unbounded_actor} was refused ({status}) before the edge of its budget: {body[:160]}")
        time.sleep(1.0)
        per_call = stack.counters(unbounded_actor)[str(tokens_rule)] - spent
    if not at_the_edge or per_call is None:
        raise StepError(f"{unbounded_actor} did not reach the edge of its {limit} tokens in 50 calls")
    before_burst = stack.counters(unbounded_actor)[str(tokens_rule)]
    statuses = burst(stack, unbounded_actor)
    after_burst = stack.counters(unbounded_actor)[str(tokens_rule)]
    # Without a calls limit the calls in flight before the first charges land are admitted: more than one.
    if statuses.count(200) < 2 or after_burst - limit < per_call:
        raise StepError(
            f"without a calls limit {statuses.count(200)} of {CONCURRENT_CALLS} admitted, counter {after_burst}"
        )
    return {
        "with_a_calls_limit": bounded,
        "without_one": {
            "actor": unbounded_actor,
            "limit": limit,
            "tokens_per_call": per_call,
            "counter_before_the_burst": before_burst,
            "admitted": statuses.count(200),
            "counter_after_the_burst": after_burst,
            "overshoot": max(after_burst - limit, 0),
            "worstCase": stack.worst(tokens_rule)["unbounded"],
        },
    }


CHECKS: list[tuple[str, Callable[[Stack], dict[str, Any]]]] = [
    ("two tokens in one call charge one identity", two_tokens),
    ("the output ceiling reaches the model; a repeated key gets 400, uncharged", ceiling_and_duplicates),
    (f"{CONCURRENT_CALLS} concurrent calls at the edge of a budget, against worstCase", concurrency),
]

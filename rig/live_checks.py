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
   is measured;
4. a price change reaches the usd charge when Agent Router's processor loads it: `pulumi up` with new prices, and
   calls from the moment it begins (each from fresh counters), each call's usd charge read from Redis and held to
   the old or the new prices (core/money.py `call_cost_mills` of the usage the mock reported); every call charged
   the new prices must end after the processor logged its reload (tests/e2e/e2elib/env.py `processor_reloads`),
   every call charged the old ones must begin before it.
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

from core.money import Usage, call_cost_mills
from rig import live_stack, program
from rig.engine import Engine
from rig.node import Node
from rig.processes import StepError
from tests.e2e.e2elib.env import processor_reloads

CONCURRENT_CALLS = 32


class Stack:
    """What the checks share: the settings, outputs, gateway address, counters and credentials of the stack."""

    def __init__(self, node: Node, engine: Engine, stack: str) -> None:
        self.node, self.engine, self.stack = node, engine, stack
        self.settings = engine.stack_settings(stack)
        self.outputs = engine.outputs(stack)
        self.url, self.host = program.gateway_address(node, self.outputs)
        self.policy = live_stack.budget_policy(node, self.settings.gateway.namespace)

    def fresh(self, *actors: str) -> int:
        """The actors' counters deleted, so that a check starts from fresh buckets (as tests/e2e does)."""
        return live_stack.fresh_counters(self.node, self.settings.gateway.namespace, list(actors))

    def token(self, actor: str) -> str:
        return live_stack.caller_token(self.node, self.engine, self.settings, actor)

    def counters(self, actor: str) -> dict[str, int]:
        """The actor's counters by rule index (0 where the window has none yet)."""
        now = int(time.time())
        live = live_stack.redis_counters(self.node)
        return {
            str(rule.index): live.get(rule.counter_key(now), 0) for rule in live_stack.actor_rules(self.policy, actor)
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


PRICED_MODEL = "mock-small"
PRICE_FACTOR = 50
"""The new prices: the old ones times this, so that the two charges of a mock call differ by many mills."""
PRICE_WATCH_SECONDS = 30.0


def judge_price_switch(calls: list[dict[str, Any]], old: int, new: int, reload_at: float) -> None:
    """Each call charged the old or the new mills; those charged the new ended after the reload, those charged the
    old began before it (the processor computes the cost as the response passes through it)."""
    wrong = [c for c in calls if c["mills"] not in (old, new)]
    if wrong:
        raise StepError(f"calls charged neither {old} nor {new} mills: {wrong[:3]}")
    late_old = [c for c in calls if c["mills"] == old and c["began"] > reload_at]
    early_new = [c for c in calls if c["mills"] == new and c["ended"] < reload_at]
    if late_old or early_new:
        raise StepError(
            f"the processor reloaded {reload_at:.2f} s after up began, but calls began after it were charged the "
            f"old prices ({late_old[:2]}) or ended before it the new ones ({early_new[:2]})"
        )
    if not any(c["mills"] == new for c in calls):
        raise StepError(f"no call in {PRICE_WATCH_SECONDS:g} s was charged the new prices ({new} mills)")


def _number(value: Any) -> int | float:
    """A price for a stack file: an integer when it is one."""
    return int(value) if value == int(value) else float(value)


def price_change(stack: Stack) -> dict[str, Any]:
    actor = "agents/actor-a"
    usd_rule = str(stack.rule_of("default", "usd"))
    token = stack.token(actor)
    prices = stack.settings.prices
    if PRICED_MODEL not in prices:
        raise StepError(f"stack {stack.stack} has no price for {PRICED_MODEL}")
    old_price = prices[PRICED_MODEL]
    new_entry = {name: _number(getattr(old_price, name) * PRICE_FACTOR) for name in ("input", "output")}
    new_settings = type(old_price).model_validate(new_entry)

    def one_call(t0: float) -> dict[str, Any]:
        stack.fresh(actor)
        began = time.time() - t0
        status, body, _ = program.call(stack.url, stack.host, token, model=PRICED_MODEL)
        ended = time.time() - t0
        if status != 200:
            raise StepError(f"{actor} was refused ({status}) while the prices changed: {body[:160]}")
        usage = json.loads(body)["usage"]
        time.sleep(0.3)  # the response charge is made as Envoy's stream ends, just after the client has the body
        return {
            "began": round(began, 2),
            "ended": round(ended, 2),
            "mills": stack.counters(actor)[usd_rule],
            "usage": Usage(input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]),
        }

    first = one_call(time.time())
    old_mills = call_cost_mills(old_price.to_price(), first["usage"])
    new_mills = call_cost_mills(new_settings.to_price(), first["usage"])
    if first["mills"] != old_mills or old_mills == new_mills:
        raise StepError(f"before the change a call was charged {first['mills']} mills, the old prices say {old_mills}")
    with stack.engine.restoring(stack.stack, log_name=f"{stack.stack}-up-live-prices-restore"):
        stack.engine.overlay(stack.stack, {"agent-budgets:prices": {PRICED_MODEL: new_entry}})
        with ThreadPoolExecutor(max_workers=1) as pool:
            began = time.time()
            up = pool.submit(stack.engine.up, stack.stack, f"{stack.stack}-up-live-prices")
            calls = []
            while time.time() - began < PRICE_WATCH_SECONDS:
                calls.append(one_call(began))
            up_seconds = up.result()[1]
        pods = program.envoy_pod_names(stack.node)
        reloads = processor_reloads(stack.node.kubectl, program.GATEWAY_NAMESPACE, pods, began)
    if not reloads or None in reloads.values():
        raise StepError(f"not every processor logged a reload of its filter configuration: {reloads}")
    reload_at = max(at for at in reloads.values() if at is not None) - began
    for call in calls:
        if call.pop("usage") != first["usage"]:
            raise StepError("the mock reported another usage during the check")
    judge_price_switch(calls, old_mills, new_mills, reload_at)
    first_new = next(c for c in calls if c["mills"] == new_mills)
    return {
        "model": PRICED_MODEL,
        "prices": {"old": old_price.to_price().describe(), "new": new_entry},
        "mills_per_call": {"old": old_mills, "new": new_mills},
        "up_seconds": up_seconds,
        "processor_reloads_after_up_began": {pod: round(at - began, 2) for pod, at in reloads.items() if at},
        "first_call_charged_the_new_prices": first_new,
        "calls": calls,
    }


CHECKS: list[tuple[str, Callable[[Stack], dict[str, Any]]]] = [
    ("two tokens in one call charge one identity", two_tokens),
    ("the output ceiling reaches the model; a repeated key gets 400, uncharged", ceiling_and_duplicates),
    (f"{CONCURRENT_CALLS} concurrent calls at the edge of a budget, against worstCase", concurrency),
    ("a price change reaches the usd charge when Agent Router's processor loads it", price_change),
]

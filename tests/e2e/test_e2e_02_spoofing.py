"""Check 2: actor-a sends x-actor-id: actor/agents/actor-b and is still charged as actor-a."""

import pytest

from tests.e2e.e2elib.checks import judge_spoofing

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]


def test_spoofed_actor_header_is_replaced(env, report, agents):
    s = env.settings
    per = s.tokens_per_call
    actor_a, actor_b = agents
    caller, victim = env.subject(actor_a), env.subject(actor_b)
    with report(2) as v:
        v.note(env.fresh_buckets())
        v.note("setup: one ordinary call each, as in check 1")
        env.call(actor_a)
        env.call(actor_b)
        before = env.counters.wait_for({caller: per, victim: per})
        v.expect(before == {caller: per, victim: per}, f"the setup calls left counters {before}")
        spoofed = env.call(actor_a, headers={"x-actor-id": victim})
        after = env.counters.wait_for({caller: before[caller] + per, victim: before[victim]})
        judge_spoofing(v, spoofed, caller, victim, before, after, per)

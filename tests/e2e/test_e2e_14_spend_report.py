"""Check 14: after metered calls, the spend report (`make spend ARGS=--json`, docs/spend.md) shows actor-a's
spent tokens as its calls x the mock's tokens, actor-b's as they were, and agrees with the counters read
straight from Redis."""

import pytest

from tests.e2e.e2elib.checks import judge_spend_report

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]

CALLS = 2


def test_spend_report_shows_each_actors_spent_tokens(env, report, agents):
    s = env.settings
    per = s.tokens_per_call
    actor_a, actor_b = agents
    caller, other = env.subject(actor_a), env.subject(actor_b)
    with report(14) as v:
        v.note(env.fresh_buckets())
        v.note(f"setup: one call as {actor_b}, then {CALLS} as {actor_a}")
        env.call(actor_b)
        before = env.counters.wait_for({other: per})
        calls = env.run_calls(actor_a, CALLS)
        counters = env.counters.totals([caller, other])
        document = env.spend_report()
        judge_spend_report(v, document, calls, counters, caller, other, before[other], per)

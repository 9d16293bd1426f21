"""Check 3: actor-a calls until its default budget is spent (limit and cost per call read from the stack file):
the call after the one that crosses it gets 429; actor-b still gets 200."""

import pytest

from tests.e2e.e2elib.checks import admitted_calls, exhaustion_title, judge_exhaustion

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]


def test_spent_budget_gives_429_to_that_actor_only(env, report, agents):
    s = env.settings
    per, limit = s.tokens_per_call, s.default_tokens
    actor_a, actor_b = agents
    with report(3, exhaustion_title(limit, per, s.default_per)) as v:
        v.note(env.fresh_buckets())
        v.note(f"setup: one call by {actor_b}; then {actor_a} calls until refused")
        env.run_calls(actor_b, 1)
        caller_calls = env.run_calls(actor_a, admitted_calls(limit, per) + 1)
        other_call = env.call(actor_b)
        judge_exhaustion(v, caller_calls, other_call, env.subject(actor_a), env.subject(actor_b), limit, per)

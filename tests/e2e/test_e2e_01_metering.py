"""Check 1: actor-a and actor-b each complete a call; each is metered in its own bucket, and the
model receives the provider key, never the actor JWT."""

import pytest

from tests.e2e.e2elib.checks import judge_metering

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]


def test_each_actor_is_metered_in_its_own_bucket(env, report, agents):
    s = env.settings
    per = s.tokens_per_call
    actor_a, actor_b = agents
    with report(1) as v:
        v.note(env.fresh_buckets())
        calls = {env.subject(actor_a): env.call(actor_a), env.subject(actor_b): env.call(actor_b)}
        totals = env.counters.wait_for({subject: per for subject in calls})
        judge_metering(v, calls, totals, per)

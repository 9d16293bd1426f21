"""Check 9 (beyond the write-up): a Redis restart and a rate-limit service restart keep spent budgets. actor-a
spends part of its budget, the Redis pod is deleted and comes back (StatefulSet, append-only file on a volume), the
rate-limit Deployment is restarted (its counters are Redis's; the restart also renews its Redis connections), and
the counter and the 429 boundary are exactly as before. Repeatable: it starts from fresh buckets and changes nothing
else."""

import time

import pytest

from tests.e2e.e2elib.checks import admitted_calls, judge_redis_restart

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]


def test_a_redis_restart_keeps_spent_budgets(env, report, agents):
    s = env.settings
    per, limit = s.tokens_per_call, s.default_tokens
    [actor] = agents
    subject = env.subject(actor)
    with report(9) as v:
        v.note(env.fresh_buckets())
        spend = max(admitted_calls(limit, per) - 1, 1)  # part of the budget: every admitted call but the last
        env.run_calls(actor, spend)
        before = env.counters.read([subject])[subject]
        time.sleep(1.5)  # appendfsync everysec: the last write is on disk before the pod is stopped
        restart = f"{env.restart_redis()}; {env.restart_rate_limit()}"
        after = env.counters.read([subject])[subject]
        remaining = admitted_calls(limit, per) - before.total // per
        calls_after = env.run_calls(actor, max(remaining, 0) + 1)
        judge_redis_restart(v, subject, restart, before, after, calls_after, limit, per)

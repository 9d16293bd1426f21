"""Check 7 (beyond the write-up): calls on two model routes charge one bucket per actor (shared: true)."""

import pytest

from tests.e2e.e2elib.checks import judge_shared_routes

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]


def test_two_routes_share_one_bucket(env, report, agents):
    s = env.settings
    per = s.tokens_per_call
    [actor] = agents
    subject = env.subject(actor)
    with report(7) as v:
        v.note(env.fresh_buckets())
        calls = {}
        for number, model in enumerate(s.models, start=1):
            calls[model] = env.call(actor, model=model)
            env.counters.wait_for({subject: per * number})
        reading = env.counters.read([subject])[subject]
        judge_shared_routes(v, calls, reading, s.domain, per)

"""Check 6: a streamed call that did not ask for usage is charged when the stream ends (Agent Router
adds stream_options.include_usage itself)."""

import pytest

from tests.e2e.e2elib.checks import judge_streaming

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]


def test_stream_without_usage_request_is_charged(env, report, agents):
    s = env.settings
    per = s.tokens_per_call
    [actor] = agents
    subject = env.subject(actor)
    with report(6) as v:
        v.note(env.fresh_buckets())
        before = env.counters.totals([subject])[subject]
        call = env.call(actor, stream=True)  # no include_usage: the probe sends no stream_options
        after = env.counters.wait_for({subject: before + per})[subject]
        judge_streaming(v, call, subject, before, after, per)

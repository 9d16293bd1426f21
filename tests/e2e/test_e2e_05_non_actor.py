"""Check 5: a caller that is not an actor (straight to the gateway Service, outside any sandbox) gets
401 with no token, with a forged JWT, and with a bare x-actor-id; nothing is charged."""

import time

import pytest

from tests.e2e.e2elib.checks import judge_non_actor
from tests.e2e.e2elib.tokens import forged_jwt

pytestmark = [pytest.mark.e2e, pytest.mark.listener("http"), pytest.mark.agents(1)]


def test_non_actor_callers_get_401(env, report, agents):
    s = env.settings
    subjects = [env.subject(actor) for actor in s.listed_agents]
    impersonated = env.subject(agents[0])
    with report(5) as v:
        v.note(env.fresh_buckets())
        before = env.counters.totals(subjects)
        forged = forged_jwt(impersonated, s.token_issuer, s.token_audience)
        cases = {
            "no token": env.gateway_call({}),
            f"forged JWT (sub {impersonated}, random signature)": env.gateway_call(
                {"Authorization": f"Bearer {forged}"}
            ),
            f"bare x-actor-id: {impersonated}": env.gateway_call({"x-actor-id": impersonated}),
        }
        time.sleep(2.0)  # anything wrongly charged at stream end has landed by now
        after = env.counters.totals(subjects)
        judge_non_actor(v, cases, before, after)

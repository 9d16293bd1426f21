"""Check 17 (stacks with the kubernetes source): a pod running as a service account that is not in
agent-budgets:actors calls with its own projected token (the gateway's audience) and gets 403 naming the reason;
a listed service account's token for the API server's audience (what a pod mounts by default) is refused by the
JWT filter for its audience: 403 (envoyproxy/envoy source/extensions/filters/http/jwt_authn/filter.cc `onComplete`:
`JwtAudienceNotAllowed` is answered 403, every other failure 401), which the gateway's custom_response answers with
the program's wrong-audience body. Neither call reaches a model or changes a counter.
"""

import time

import pytest

from tests.e2e.e2elib.checks import judge_unlisted_service_account

pytestmark = [pytest.mark.e2e, pytest.mark.identity_source("kubernetes")]

CHECK = 17


def test_only_listed_service_accounts_with_the_gateway_s_audience_are_admitted(env, report):
    s = env.settings
    unlisted, listed = s.unlisted_agent, s.demo_actors[0]
    subjects = [env.subject(unlisted), env.subject(listed)]
    with report(CHECK) as v:
        v.note(env.fresh_buckets())
        before = env.counters.totals(subjects)
        unlisted_call = env.call(unlisted)
        default_token = env.service_account_token(listed)
        wrong_audience = env.gateway_call({"Authorization": f"Bearer {default_token}"})
        time.sleep(2.0)  # anything wrongly charged at stream end has landed by now
        after = env.counters.totals(subjects)
        judge_unlisted_service_account(v, env.subject(unlisted), unlisted_call, wrong_audience, before, after)

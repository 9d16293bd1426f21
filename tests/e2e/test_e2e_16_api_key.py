"""Check 16 (stacks with the apiKeys source): the API-key agent calls the API-key listener with its key and is
metered as `apikey.<name>`, also when it sends another actor's x-actor-id, and when it sends its key in each other
header of `identity.apiKeys.headers` (e.g. `x-api-key`); the model gets the provider key in Authorization and, as the
mock reports it, no x-api-key and no other header of `identity.apiKeys.headers` at all (the header names it lists in
x-mock-header-names; the AIServiceBackend's headerMutation.remove). Calls
straight to the gateway with a wrong key, with the agent's key on the JWT listener, with a service-account token
on the API-key listener, and with nothing, each get 401 and charge nobody (the JWT-listener and token cases where
the stack has that listener and those agents).
"""

import time

import pytest

from tests.e2e.e2elib.checks import (
    KEY_ON_JWT_LISTENER,
    TOKEN_ON_API_KEY_LISTENER,
    api_key_refusals_left_out,
    judge_api_key,
)

pytestmark = [pytest.mark.e2e, pytest.mark.identity_source("apiKeys")]

CHECK = 16


def test_an_api_key_agent_is_metered_as_its_key(env, report):
    s = env.settings
    per = s.tokens_per_call
    agent = s.api_key_agent
    subject = env.subject(agent)
    with report(CHECK) as v:
        v.note(env.fresh_buckets())
        before = env.totals(agent)[agent]
        [call] = env.run_calls(agent, 1)
        spoofed_as = env.subject(s.demo_actors[0])
        [spoofed] = env.run_calls(agent, 1, headers={"x-actor-id": spoofed_as})
        key = env.kube.secret_value(s.agent_namespace, f"{agent}-api-key", "key")
        in_header = {  # the key where the listener also looks for it, and no Authorization at all
            header: env.run_calls(agent, 1, authorization=None, headers={header: key})[0]
            for header in s.api_key_headers
            if header != "authorization"
        }
        after_calls = env.totals(agent)[agent]
        wrong = key[:-1] + ("x" if key[-1] != "x" else "y")
        refused = {
            "a wrong key on the API-key listener": env.gateway_call({"x-api-key": wrong}, listener="apikeys"),
            f"nothing but x-actor-id: {subject}": env.gateway_call({"x-actor-id": subject}, listener="apikeys"),
        }
        left_out = api_key_refusals_left_out(s)  # named in the verdict: a left-out call is never silent
        if KEY_ON_JWT_LISTENER not in left_out:
            refused[KEY_ON_JWT_LISTENER] = env.gateway_call({"Authorization": f"Bearer {key}"})
        if TOKEN_ON_API_KEY_LISTENER not in left_out:
            token = env.service_account_token(s.demo_actors[0], audience=s.kubernetes_audience)
            refused[TOKEN_ON_API_KEY_LISTENER] = env.gateway_call(
                {"Authorization": f"Bearer {token}"}, listener="apikeys"
            )
        time.sleep(2.0)  # anything wrongly charged at stream end has landed by now
        after_refused = env.totals(agent)[agent]
        judge_api_key(
            v,
            subject,
            call,
            spoofed,
            spoofed_as,
            in_header,
            s.api_key_headers,
            refused,
            (before, after_calls, after_refused),
            per,
            left_out,
        )

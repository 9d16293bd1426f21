"""Pools, per-model limits and token kinds, checked through the rate-limit model at 10,000 actors.

The model (core/ratelimit_model.py) follows Envoy Gateway v1.9.0 `internal/xds/translator/ratelimit.go`
(`buildRouteRateLimits`: a shared rule's first entry is `<ns>/<policy>/rule/<i>`; `buildHeaderMatchRateLimitActions`:
a Distinct match contributes the header's value, any other match only `rule-<k>-match-<m>`) and envoyproxy/ratelimit
`src/limiter/cache_key.go`. So a rule with no Distinct match, as a pool's is, charges one counter for every request
it admits: upstream's own golden file `internal/xds/translator/testdata/out/ratelimit-config/
global-shared-multiple-shared-policies.yaml` has exactly that shape (an Exact `x-user-id` match, shared, one
`rule-0-match-0` descriptor). A per-model limit matches `x-ai-eg-model`, which Agent Router's router filter sets
from the request body before the rate-limit filter runs and no `modelNameOverride` changes (envoyproxy/ai-gateway
v1.1.0 `internal/extproc/processor_impl.go:282-290`, `:700-709`).

Each stability test is a row of the restart table in docs/budgets.md (tests/test_budget_limits.py
`RESTART_TABLE_TESTS`): it makes the change and asserts exactly which counters move.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import re2

from core.budget_rules import (
    COST_METADATA_KEY,
    KIND_MARKERS,
    MATCHES_NOTHING,
    MODEL_HEADER,
    TOKEN_METADATA_KEYS,
    BudgetSpec,
    LimitSpec,
    PoolSpec,
    compile_rules,
    pool_regex,
)
from core.identity import actor_header_value
from core.problems import ConfigError
from core.ratelimit_model import PolicyModel
from tests.test_budget_limits import (
    ACTORS,
    BASE_CLASSES,
    NAME,
    NOW,
    NS,
    SAMPLE,
    Counters,
    changed,
    compile_layout,
    limit_counters,
    sequential_calls,
    tokens,
    usd,
)


def calls(amount: int, per: str = "Minute", models: tuple[str, ...] = ()) -> LimitSpec:
    return LimitSpec("calls", amount, per, models=models)


def kind(count: str, amount: int, per: str = "Hour", models: tuple[str, ...] = ()) -> LimitSpec:
    return LimitSpec("tokens", amount, per, count, models)  # type: ignore[arg-type]


def on(limit: LimitSpec, *models: str) -> LimitSpec:
    return LimitSpec(limit.unit, limit.amount, limit.per, limit.count, models)


# --- the shape of the rules ------------------------------------------------------------------------------------


def test_two_members_share_one_counter_and_keep_their_own():
    """The issue's first example: together $200 a day, each at most $20."""
    research = BudgetSpec("research", (usd("20"),), ("agents/r1", "agents/r2"))
    pool = PoolSpec("research", (usd("200"),), ("agents/r1", "agents/r2"))
    rules = compile_rules(BudgetSpec("default", (tokens(500),)), [research], 1, 1, [pool], 1)
    assert [(r.index, r.purpose) for r in rules.rules] == [(0, "default"), (1, "class:research"), (2, "pool:research")]
    model = PolicyModel(NS, NAME, rules.specs())
    r1, r2 = (model.for_actor(actor_header_value(a)) for a in ("agents/r1", "agents/r2"))
    assert [r.index for r in r1] == [r.index for r in r2] == [1, 2]
    assert r1[1].counter_key(NOW) == r2[1].counter_key(NOW), "the pool's limit: one counter for both"
    assert r1[0].counter_key(NOW) != r2[0].counter_key(NOW), "their own limits: one counter each"
    assert actor_header_value("agents/r1") not in r1[1].counter_key(NOW)
    assert model.for_actor(actor_header_value("agents/other"))[0].index == 0, "not a member: only the default"


def test_both_must_have_room_the_pool_refuses_before_a_member_s_own_limit():
    """Members of 600 tokens each in a pool of 1,000, at 200 a call: r1 spends 600 (three calls, its own limit
    then refuses it), r2 gets two calls before the pool is over and refuses everyone in it."""
    pool = PoolSpec("team", (tokens(1_000),), ("agents/r1", "agents/r2"))
    rules = compile_rules(BudgetSpec("default", (tokens(600),)), [], 1, 1, [pool], 0)
    admitted, charged = sequential_calls(rules, "agents/r1", {COST_METADATA_KEY: 200}, 4)
    assert admitted == [True, True, True, True] and charged == {0: 800, 1: 800}
    # Through one gateway: the counters are shared across calls of both members.
    from tests.support.enforcement import Gateway

    gateway = Gateway(NS, rules.specs())
    log = []
    for step, actor in enumerate(["agents/r1"] * 3 + ["agents/r2"] * 4):
        ok = gateway.admit(actor, NOW + 2 * step)
        log.append(ok)
        if ok:
            gateway.charge(actor, NOW + 2 * step + 1, {COST_METADATA_KEY: 200})
    # r1: 3 calls (200, 400, 600); r2: 800 and 1,000 (the pool at its limit still admits one), 1,200, then refused.
    assert log == [True, True, True, True, True, True, False]
    assert gateway.charged_by_rule() == {0: 600, 1: 1_200}


def test_an_atespace_pool_admits_every_actor_of_it_now_and_later():
    pool = PoolSpec("lab", (tokens(9_000),), (), atespaces=("lab",))
    rules = compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 1, [pool], 0)
    [match] = rules.specs()[1]["clientSelectors"][0]["headers"]
    assert match == {"name": "x-actor-id", "type": "RegularExpression", "value": "^actor/(?:lab)/[^/]+$"}
    model = PolicyModel(NS, NAME, rules.specs())
    created_later = "lab/a-new-actor-created-after-the-last-pulumi-up"
    keys = {model.for_actor(actor_header_value(actor))[1].counter_key(NOW) for actor in ("lab/bot-1", created_later)}
    assert len(keys) == 1
    assert rules.pools_of_actor(created_later) == (0,)
    # Nothing of another atespace or another identity source: a Substrate subject is actor/<atespace>/<name>.
    for subject in (
        "actor/labs/x",
        "actor/lab",
        "actor/lab/x/y",
        "actor/agents/lab",
        "system:serviceaccount:lab:x",
        "apikey.lab",
    ):
        assert [r.index for r in model.for_actor(subject)] == [0], subject


def test_a_pool_pattern_joins_listed_members_and_whole_atespaces():
    # A service-account name may hold '.', which the pattern escapes (a Substrate name is a DNS label).
    pattern = pool_regex(["agents/a", "lab/x", "serviceaccount:agents/b.c"], ["lab"])
    assert pattern == (
        r"^(?:(?:actor/(?:agents/(?:a))|system\:serviceaccount\:(?:agents\:(?:b\.c)))|actor/(?:lab)/[^/]+)$"
    )
    compiled = re2.compile(pattern)
    for subject, admitted in [
        ("actor/agents/a", True),
        ("system:serviceaccount:agents:b.c", True),
        ("system:serviceaccount:agents:bxc", False),
        ("actor/agents/b.c", False),
        ("actor/lab/x", True),
        ("actor/lab/anyone", True),
        ("actor/agents/c", False),
    ]:
        assert (compiled.fullmatch(subject) is not None) is admitted, subject
    assert pool_regex([], []) == MATCHES_NOTHING, "a retired pool matches nobody"
    assert pool_regex(["agents/a"], []) == "^actor/(?:agents/(?:a))$"


def test_a_pool_that_does_not_fit_one_match_is_refused_not_split():
    members = tuple(f"agents/agent-with-a-long-name-{i:04d}" for i in range(40))
    pool = PoolSpec("big", (tokens(9),), members, "budgets.pools[0]")
    with pytest.raises(ConfigError) as caught:
        compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 1, [pool], 0)
    [problem] = caught.value.problems
    assert problem.key == "budgets.pools[0].members"
    assert "pool 'big': matching its 40 members takes 1,4" not in problem.message  # the figure is written plainly
    assert "over Envoy Gateway's 1024 per match. A pool is one rule with one counter" in problem.message
    assert "list those under atespaces instead" in problem.message
    as_atespace = PoolSpec("big", (tokens(9),), (), "budgets.pools[0]", atespaces=("agents",))
    pooled_rule = compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 1, [as_atespace], 0).rules[1]
    assert pooled_rule.headers == (
        {"name": "x-actor-id", "type": "RegularExpression", "value": "^actor/(?:agents)/[^/]+$"},
    )


def test_pools_after_classes_need_class_slots_and_say_what_changing_them_restarts():
    pool = PoolSpec("team", (tokens(9),), ("agents/a",))
    classes = [BudgetSpec("c", (tokens(9),), ("agents/b",)), BudgetSpec("d", (tokens(9),), ("agents/c",))]
    with pytest.raises(ConfigError) as caught:
        compile_rules(BudgetSpec("default", (tokens(500),)), classes, 1, 1, [pool], 1)
    [problem] = caught.value.problems
    assert problem.key == "budgetPolicy.classSlots"
    assert problem.message == (
        "is 1, but budgets.classes has 2 classes, and the pools' rules come after the classSlots class blocks: set "
        "agent-budgets:budgetPolicy.classSlots to 2 or more, with room for the classes you expect to add. Every "
        "pool's rules move when it changes, so pool counters restart once (the default budget's and the classes' "
        "keep theirs): set it with the first pool, when nothing restarts"
    )
    no_class = compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 1, [pool], 0)
    assert [r.purpose for r in no_class.rules] == ["default", "pool:team"], "no class: nothing to make room for"
    no_pool = compile_rules(BudgetSpec("default", (tokens(500),)), classes, 1, 1, [], 0)
    assert [r.purpose for r in no_pool.rules] == ["default", "class:c", "class:d"], "no pool: classSlots plays no part"


def test_unused_class_slots_hold_reserved_rules_only_before_a_pool():
    pool = PoolSpec("team", (tokens(9),), ("agents/a",))
    first_class = BudgetSpec("c", (tokens(1),), ("agents/b",))
    alone = compile_rules(BudgetSpec("default", (tokens(500),)), [first_class], 1, 2, [], 3)
    assert [r.purpose for r in alone.rules] == ["default", "reserved", "class:c"], "no pool: no class slot reserved"
    with_pool = compile_rules(BudgetSpec("default", (tokens(500),)), [first_class], 1, 2, [pool], 3)
    assert [r.purpose for r in with_pool.rules] == ["default", "reserved", "class:c"] + ["reserved"] * 5 + ["pool:team"]
    assert with_pool.rules[-1].index == (3 + 1) * 2


def test_the_pools_that_fit_after_the_class_slots_are_counted():
    """At limitSlots 2 and classSlots 120, pools take blocks 121 on: rule 127 * 2 = 254 is the last that fits."""
    pools = [PoolSpec(f"p{i}", (tokens(9),), ("agents/a",)) for i in range(8)]
    fitting = compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 2, pools[:7], 120)
    assert (fitting.rules[-1].index, fitting.rules[-1].purpose) == (254, "pool:p6")
    with pytest.raises(ConfigError) as caught:
        compile_rules(BudgetSpec("default", (tokens(500),)), [], 1, 2, pools, 120)
    [problem] = caught.value.problems
    assert problem.key == "budgets.pools"
    assert problem.message.startswith(
        "has 8 pool(s) after 120 class block(s) (budgetPolicy.classSlots 120): with budgetPolicy.limitSlots 2 they "
        "need 257 rate-limit rules, over Envoy Gateway's 256 per policy, so at most 7 pools fit"
    )


def test_a_per_model_limit_starts_with_the_model_match_and_counts_only_those_calls():
    """The issue's second example: the mini model freely, the large one at most $2 a day."""
    default = BudgetSpec("default", (tokens(1_000_000), on(usd("2"), "gpt-4.1")))
    rules = compile_rules(default, [BudgetSpec("c", (tokens(5),), ("agents/b",))], 2, 2)
    big = rules.specs()[1]["clientSelectors"][0]["headers"]
    assert big[0] == {"name": MODEL_HEADER, "type": "Exact", "value": "gpt-4.1"}
    assert big[1:] == [*rules.specs()[0]["clientSelectors"][0]["headers"], big[-1]]  # the budget's, then usd's marker
    model = PolicyModel(NS, NAME, rules.specs())
    subject = actor_header_value("agents/a")
    assert [r.index for r in model.applied({"x-actor-id": subject, MODEL_HEADER: "gpt-4.1-mini"})] == [0]
    assert [r.index for r in model.applied({"x-actor-id": subject, MODEL_HEADER: "gpt-4.1"})] == [0, 1]
    assert [r.index for r in model.applied({"x-actor-id": subject})] == [0], "a call with no model: not this limit"
    several = compile_rules(BudgetSpec("default", (on(tokens(9), "gpt-4.1", "o3"),)), [], 1, 1).specs()
    assert several[0]["clientSelectors"][0]["headers"][0] == {
        "name": MODEL_HEADER,
        "type": "RegularExpression",
        "value": r"^(?:gpt-4\.1|o3)$",
    }


def test_a_token_kind_limit_charges_its_own_metadata_key():
    """The issue's third example: output tokens per hour, whatever the prompt."""
    default = BudgetSpec("default", (tokens(500), *(kind(k, 1_000) for k in ("input", "output", "cachedInput"))))
    rules = compile_rules(default, [], 1, 4)
    keys = [spec["cost"]["response"]["metadata"]["key"] for spec in rules.specs()]
    assert keys == [COST_METADATA_KEY, "llm_input_token", "llm_output_token", "llm_cached_input_token"]
    assert keys[1:] == [TOKEN_METADATA_KEYS[k] for k in ("input", "output", "cachedInput")]
    markers = [len(spec["clientSelectors"][0]["headers"]) - 2 for spec in rules.specs()]
    assert markers == [0, 3, 4, 5] == [KIND_MARKERS[k] for k in ("tokens", "input", "output", "cachedInput")]
    admitted, charged = sequential_calls(
        rules, "agents/a", {COST_METADATA_KEY: 200, "llm_input_token": 50, "llm_output_token": 150}, 3
    )
    assert admitted == [True] * 3
    assert charged == {0: 600, 1: 150, 2: 450, 3: 0}, "no cached input reported: nothing charged to that limit"


def test_no_two_kinds_with_or_without_models_share_a_key_in_one_slot():
    """Every kind, with and without models, in the same slot of a budget and of a pool: all different keys (a
    budget's per-model limit has its actor id one place later; a pool's rule has twice its kind's markers)."""
    base = [tokens(9), usd("9"), calls(9), kind("input", 9), kind("output", 9), kind("cachedInput", 9)]
    limits = base + [on(limit, "m") for limit in base]
    budget_keys, pool_keys = set(), set()
    for limit in limits:
        rules = compile_rules(BudgetSpec("default", (limit,)), [], 1, 1, [PoolSpec("p", (limit,), ("x/a",))], 0)
        model = PolicyModel(NS, NAME, rules.specs())
        applied = {r.index: r for r in model.applied({"x-actor-id": "actor/x/a", MODEL_HEADER: "m"})}
        budget_keys.add(applied[0].counter_key(NOW))
        pool_keys.add(applied[1].counter_key(NOW))
    assert len(budget_keys) == len(pool_keys) == len(limits) == 12


# --- stability at 10,000 actors ---------------------------------------------------------------------------------
#
# The pooled layout: the 20 base classes of tests/test_budget_limits.py in 24 class slots, then two pools (one of the
# whole atespace `lab`, 1,000 actors, and one of three listed agents), a per-model limit on the default budget and
# a limit on output tokens on the first pool.

CLASS_SLOTS = 24
POOLED_DEFAULT = BudgetSpec("default", (tokens(100_000), on(usd("2"), "gpt-big")))
POOLS = [
    PoolSpec("lab", (usd("200"), kind("output", 1_000_000)), (), atespaces=("lab",)),
    PoolSpec("trio", (tokens(5_000),), (ACTORS[1], ACTORS[2], ACTORS[3])),
]
POOL_SAMPLE = sorted(set(SAMPLE) | {ACTORS[1], ACTORS[2], ACTORS[3]})


def pooled(
    default: BudgetSpec = POOLED_DEFAULT,
    classes: list[BudgetSpec] = BASE_CLASSES,
    pools: list[PoolSpec] = POOLS,
    class_slots: int = CLASS_SLOTS,
    actors: list[str] = ACTORS,
    limit_slots: int = 3,
) -> Counters:
    return limit_counters(
        compile_layout(default, classes, pools=pools, class_slots=class_slots, limit_slots=limit_slots), actors
    )


@pytest.fixture(scope="module")
def pooled_base() -> Counters:
    return pooled()


@pytest.fixture(scope="module")
def pooled_sample(pooled_base) -> Counters:
    sampled = set(POOL_SAMPLE)
    return {pair: counter for pair, counter in pooled_base.items() if pair[0] in sampled or pair[0].startswith("pool:")}


def pool_pairs(pool: PoolSpec) -> set[tuple[str, int]]:
    return {(f"pool:{pool.name}", j) for j in range(len(pool.limits))}


def test_the_pooled_layout_covers_ten_thousand_actors_and_two_shared_counters(pooled_base):
    actors = {pair[0] for pair in pooled_base if not pair[0].startswith("pool:")}
    assert len(actors) == 10_000
    assert set(pooled_base) - {(a, j) for a in actors for j in range(3)} == pool_pairs(POOLS[0]) | pool_pairs(POOLS[1])
    assert len({key for _, key in pooled_base.values()}) == len(pooled_base), "no two counters share a key"


def test_appending_a_pool_changes_no_other_key(pooled_base):
    newcomers = PoolSpec("newcomers", (tokens(77), calls(5, "Minute")), (ACTORS[9_500], ACTORS[9_501]))
    after = pooled(pools=[*POOLS, newcomers])
    assert changed(pooled_base, after) == set()
    assert set(after) - set(pooled_base) == pool_pairs(newcomers)


def test_appending_a_per_model_limit_changes_no_other_key(pooled_base):
    """To the default budget (its third slot), to a class and to a pool: every existing counter stays."""
    default = BudgetSpec("default", (*POOLED_DEFAULT.limits, on(calls(30, "Hour"), "gpt-big", "gpt-small")))
    classes = list(BASE_CLASSES)
    grown = classes[4]
    classes[4] = BudgetSpec(grown.name, (*grown.limits, on(tokens(10), "gpt-small")), grown.actors)
    pools = [POOLS[0], PoolSpec("trio", (*POOLS[1].limits, on(usd("1"), "gpt-big")), POOLS[1].actors)]
    after = pooled(default=default, classes=classes, pools=pools)
    assert changed(pooled_base, after) == set()
    members = {a for c in BASE_CLASSES for a in c.actors}
    expected = {(a, 2) for a in ACTORS if a not in members} | {(a, len(grown.limits)) for a in grown.actors}
    assert set(after) - set(pooled_base) == expected | {("pool:trio", 1)}


def test_appending_a_token_kind_limit_changes_no_other_key(pooled_base):
    """Input tokens on the default budget, cached input on a class, output tokens on a pool."""
    default = BudgetSpec("default", (*POOLED_DEFAULT.limits, kind("input", 50_000, "Hour")))
    classes = list(BASE_CLASSES)
    grown = classes[7]
    classes[7] = BudgetSpec(grown.name, (*grown.limits, kind("cachedInput", 1_000)), grown.actors)
    pools = [POOLS[0], PoolSpec("trio", (*POOLS[1].limits, kind("output", 900)), POOLS[1].actors)]
    after = pooled(default=default, classes=classes, pools=pools)
    assert changed(pooled_base, after) == set()
    members = {a for c in BASE_CLASSES for a in c.actors}
    expected = {(a, 2) for a in ACTORS if a not in members} | {(a, len(grown.limits)) for a in grown.actors}
    assert set(after) - set(pooled_base) == expected | {("pool:trio", 1)}


def test_changing_a_pool_s_members_or_atespaces_moves_no_counter(pooled_sample):
    """Members join or leave the shared counter as it stands; nobody's own counters move."""
    pools = [
        PoolSpec("lab", POOLS[0].limits, (ACTORS[4],), atespaces=("lab", "elsewhere")),
        PoolSpec("trio", POOLS[1].limits, (ACTORS[1], ACTORS[5])),
    ]
    after = pooled(pools=pools, actors=POOL_SAMPLE)
    assert changed(pooled_sample, after) == set()
    assert set(after) == set(pooled_sample)


def test_emptying_a_pool_moves_no_counter(pooled_sample):
    """A pool with no members and no atespaces keeps its place (its rules match nobody): the later pools stay."""
    pools = [PoolSpec("lab", POOLS[0].limits, ()), POOLS[1]]
    after = pooled(pools=pools, actors=POOL_SAMPLE)
    assert changed(pooled_sample, after) == set()
    assert set(pooled_sample) - set(after) == pool_pairs(POOLS[0]), "nobody is charged by the retired pool"


@pytest.mark.parametrize("change", ["remove", "reorder"])
def test_removing_or_reordering_a_pool_moves_the_pools_that_change_place(pooled_sample, change):
    pools = [POOLS[1]] if change == "remove" else [POOLS[1], POOLS[0]]
    after = pooled(pools=pools, actors=POOL_SAMPLE)
    # Removed, the first pool's counters are gone and the second moves up one block; swapped, both move.
    moved = pool_pairs(POOLS[1]) if change == "remove" else pool_pairs(POOLS[0]) | pool_pairs(POOLS[1])
    assert changed(pooled_sample, after) == moved


def test_changing_which_models_a_limit_names_moves_nothing_and_adding_models_moves_that_limit(pooled_sample):
    renamed = BudgetSpec("default", (POOLED_DEFAULT.limits[0], on(usd("2"), "gpt-big", "gpt-bigger")))
    after = pooled(default=renamed, actors=POOL_SAMPLE)
    assert changed(pooled_sample, after) == set(), "the model names are a pattern's value, not part of the key"
    every_model = BudgetSpec("default", (POOLED_DEFAULT.limits[0], usd("2")))
    after = pooled(default=every_model, actors=POOL_SAMPLE)
    members = {a for c in BASE_CLASSES for a in c.actors}
    assert changed(pooled_sample, after) == {(a, 1) for a in POOL_SAMPLE if a not in members}


def test_changing_a_tokens_limit_s_count_moves_that_limit_only(pooled_sample):
    pools = [PoolSpec("lab", (POOLS[0].limits[0], kind("input", 1_000_000)), (), atespaces=("lab",)), POOLS[1]]
    classes = list(BASE_CLASSES)
    switched = classes[2]
    classes[2] = BudgetSpec(switched.name, (kind("output", 1_002, "Day"),), switched.actors)
    after = pooled(classes=classes, pools=pools, actors=POOL_SAMPLE)
    assert changed(pooled_sample, after) == {("pool:lab", 1)} | {(a, 0) for a in switched.actors}


def test_appending_a_class_within_the_class_slots_moves_only_its_members(pooled_sample):
    newcomers = BudgetSpec("newcomers", (tokens(77), usd("1")), tuple(ACTORS[9_500:9_530]))
    after = pooled(classes=[*BASE_CLASSES, newcomers], actors=sorted({*POOL_SAMPLE, *newcomers.actors}))
    assert {actor for actor, _ in changed(pooled_sample, after)} <= set(newcomers.actors)
    assert not any(pair[0].startswith("pool:") for pair in changed(pooled_sample, after)), "the pools stay"


def test_changing_class_slots_moves_every_pool_counter_and_no_actor_s_own(pooled_sample):
    after = pooled(class_slots=CLASS_SLOTS + 1, actors=POOL_SAMPLE)
    assert changed(pooled_sample, after) == pool_pairs(POOLS[0]) | pool_pairs(POOLS[1])


def test_changing_limit_slots_moves_every_class_and_pool_counter_and_no_default_one(pooled_sample):
    after = pooled(limit_slots=4, actors=POOL_SAMPLE)
    members = {a for c in BASE_CLASSES for a in c.actors}
    moved = {pair for pair in pooled_sample if pair[0] in members or pair[0].startswith("pool:")}
    assert changed(pooled_sample, after) == moved


def test_a_default_limit_with_models_counts_the_model_match_against_the_exclusion_slots():
    default = BudgetSpec("default", (tokens(5), on(calls(9), "m")))
    with pytest.raises(ConfigError, match="a calls limit with models on the default budget needs 3 more matches"):
        compile_rules(default, [], exclusion_slots=1021, limit_slots=2)
    rules = compile_rules(default, [], exclusion_slots=1020, limit_slots=2)
    assert [len(s["headers"]) for s in rules.specs()[1]["clientSelectors"]] == [128] * 8


def test_a_model_list_that_does_not_fit_one_match_names_the_limit():
    models = tuple(f"a-model-with-a-rather-long-name-{i:03d}" for i in range(40))
    default = BudgetSpec("default", (tokens(5), on(usd("1"), *models)), (), "budgets.default", ("d.l[0]", "d.l[1]"))
    with pytest.raises(ConfigError) as caught:
        compile_rules(default, [], 1, 2)
    [problem] = caught.value.problems
    assert problem.key == "d.l[1].models"
    assert "split the limit into limits over fewer models each" in problem.message


def test_the_summary_names_pools_models_and_kinds():
    pool = PoolSpec("lab", (kind("output", 7), on(usd("3"), "m")), ("agents/a",), atespaces=("lab",))
    rules = compile_rules(BudgetSpec("default", (tokens(5),)), [], 1, 2, [pool], 0)
    assert rules.summary()[1:] == [
        {"rule": 2, "budget": "pool:lab", "limit": 0, "unit": "tokens", "amount": 7, "per": "Hour",
         "count": "output", "requests": 7, "members": 1, "atespaces": ["lab"]},
        {"rule": 3, "budget": "pool:lab", "limit": 1, "unit": "usd", "amount": 3.0, "per": "Day",
         "models": ["m"], "requests": 3_000, "members": 1, "atespaces": ["lab"]},
    ]  # fmt: skip
    assert Decimal(rules.rules[3].limit.amount) == Decimal(3)

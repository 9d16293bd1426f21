"""Several limits per budget (windows, tokens and usd), checked through the rate-limit model.

The model (core/ratelimit_model.py) follows Envoy Gateway v1.9.0 `internal/xds/translator/ratelimit.go`
and envoyproxy/ratelimit `src/limiter/cache_key.go`: every matching rule applies and charges its own
counter, keyed by the policy, the rule index and the descriptor entries. The stability proof runs on
10,000 actors: appending a limit, appending a class or moving an actor leaves the counter key of every
other (actor, limit) as it was.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import re2

from core.budget_rules import (
    ACTOR_HEADER,
    COST_METADATA_KEY,
    MATCHES_NOTHING,
    MAX_LIMIT_SLOTS,
    MAX_RULES,
    MODEL_HEADER,
    RESERVED_LIMIT,
    BudgetRules,
    BudgetSpec,
    LimitSpec,
    PoolSpec,
    compile_rules,
)
from core.identity import actor_header_value
from core.money import USD_METADATA_KEY
from core.ratelimit_model import PolicyModel
from core.settings import ConfigError
from tests.support.enforcement import Gateway

NS, NAME = "agent-budgets", "agent-budgets"


def tokens(amount: int, per: str = "Day") -> LimitSpec:
    return LimitSpec("tokens", amount, per)


def usd(amount: str, per: str = "Day") -> LimitSpec:
    return LimitSpec("usd", Decimal(amount), per)


def calls(amount: int, per: str = "Minute") -> LimitSpec:
    return LimitSpec("calls", amount, per)


def budget(name: str, *limits: LimitSpec, actors: tuple[str, ...] = ()) -> BudgetSpec:
    return BudgetSpec(name, tuple(limits), actors)


def test_each_limit_is_a_rule_in_its_budgets_block_of_slots():
    default = budget("default", tokens(500), usd("1", "Month"))
    research = budget("research", tokens(200_000, "Hour"), usd("5"), usd("50", "Month"), actors=("agents/b",))
    solo = budget("solo", tokens(9), actors=("agents/c",))
    rules = compile_rules(default, [research, solo], exclusion_slots=2, limit_slots=3)
    layout = [(r.index, r.purpose, r.limit_index, r.unit) for r in rules.rules]
    assert layout == [
        (0, "default", 0, "tokens"),
        (1, "default", 1, "usd"),
        (2, "reserved", 2, None),
        (3, "class:research", 0, "tokens"),
        (4, "class:research", 1, "usd"),
        (5, "class:research", 2, "usd"),
        (6, "class:solo", 0, "tokens"),
    ]
    specs = rules.specs()
    assert [s["limit"] for s in specs] == [
        {"requests": 500, "unit": "Day"},
        {"requests": 1_000, "unit": "Month"},  # $1 in mills
        RESERVED_LIMIT,
        {"requests": 200_000, "unit": "Hour"},
        {"requests": 5_000, "unit": "Day"},
        {"requests": 50_000, "unit": "Month"},
        {"requests": 9, "unit": "Day"},
    ]
    keys = [s["cost"]["response"]["metadata"]["key"] for s in specs]
    assert keys == [
        COST_METADATA_KEY,
        USD_METADATA_KEY,
        COST_METADATA_KEY,
        COST_METADATA_KEY,
        USD_METADATA_KEY,
        USD_METADATA_KEY,
        COST_METADATA_KEY,
    ]
    assert all(s["shared"] is True and s["cost"]["request"] == {"from": "Number", "number": 0} for s in specs)
    assert specs[2]["shadowMode"] is True and "shadowMode" not in specs[0]


def test_an_actor_is_charged_by_every_limit_of_its_budget_and_no_other():
    default = budget("default", tokens(500), usd("1", "Month"))
    research = budget("research", tokens(200_000, "Hour"), usd("5"), actors=("agents/b",))
    rules = compile_rules(default, [research], exclusion_slots=1, limit_slots=2)
    model = PolicyModel(NS, NAME, rules.specs())
    assert [r.index for r in model.for_actor(actor_header_value("agents/b"))] == [2, 3]
    assert [r.index for r in model.for_actor(actor_header_value("agents/a"))] == [0, 1]
    assert [r.index for r in rules.rules_for_actor("agents/b")] == [2, 3]
    assert [r.index for r in rules.rules_for_actor("lab/anyone")] == [0, 1]
    b_keys = {r.counter_key(0) for r in model.for_actor(actor_header_value("agents/b"))}
    assert len(b_keys) == 2, "each limit counts in its own counter"


def sequential_calls(
    rules: BudgetRules, actor: str, costs: dict[str, int], count: int
) -> tuple[list[bool], dict[int, int]]:
    """`count` calls one after the other, each charged `costs` (by metadata key) at its end, through the
    simulation of the rate-limit service (tests/support/enforcement.py): which were admitted, and each rule's
    counter at the end."""
    gateway = Gateway(NS, rules.specs())
    admitted = []
    for call in range(count):
        ok = gateway.admit(actor, NOW + 2 * call)
        admitted.append(ok)
        if ok:
            gateway.charge(actor, NOW + 2 * call + 1, costs)
    return admitted, gateway.charged_by_rule()


def test_the_smaller_window_refuses_first_and_every_limit_is_charged():
    """A 600-tokens-an-hour and a 5,000-tokens-a-day limit at 200 tokens a call: the hour refuses call 5."""
    research = budget("research", tokens(600, "Hour"), tokens(5_000, "Day"), actors=("agents/b",))
    rules = compile_rules(budget("default", tokens(500)), [research], exclusion_slots=1, limit_slots=2)
    admitted, charged = sequential_calls(rules, "agents/b", {COST_METADATA_KEY: 200}, 6)
    assert admitted == [True, True, True, True, False, False]
    assert charged == {2: 800, 3: 800}


def test_a_usd_limit_refuses_the_call_after_the_one_that_crosses_it():
    """$0.02 at 4 mills a call ($0.0035 rounded up): calls 1-6 pass (the sixth crosses 20), the seventh is refused."""
    rules = compile_rules(budget("default", tokens(1_000_000), usd("0.02")), [], exclusion_slots=1, limit_slots=2)
    admitted, charged = sequential_calls(rules, "agents/a", {COST_METADATA_KEY: 200, USD_METADATA_KEY: 4}, 8)
    assert admitted == [True] * 6 + [False, False]
    assert charged == {0: 1_200, 1: 24}


def test_a_calls_limit_charges_one_call_on_the_request_and_nothing_on_the_response():
    rules = compile_rules(budget("default", tokens(500), calls(3, "Minute")), [], exclusion_slots=2, limit_slots=2)
    tokens_rule, calls_rule = rules.specs()
    assert calls_rule["cost"] == {"request": {"from": "Number", "number": 1}}
    assert calls_rule["limit"] == {"requests": 3, "unit": "Minute"}
    headers = calls_rule["clientSelectors"][0]["headers"]
    marker = {"name": "x-actor-id", "type": "RegularExpression", "value": MATCHES_NOTHING, "invert": True}
    assert headers == [*tokens_rule["clientSelectors"][0]["headers"], marker, marker]
    # Three calls a minute, whatever they cost; the tokens limit still refuses above 500.
    admitted, charged = sequential_calls(rules, "agents/a", {COST_METADATA_KEY: 1}, 5)
    assert admitted == [True, True, True, False, False]
    assert charged == {0: 3, 1: 5}, "the refused calls are counted too, and charge no tokens"


def test_each_kind_of_limit_in_one_slot_has_its_own_counter_key():
    """tokens, usd and calls in the same slot: three different Redis keys (0, 1 and 2 marker matches)."""
    keys = set()
    for limit in (tokens(9), usd("9"), calls(9)):
        rules = compile_rules(budget("default", limit), [], exclusion_slots=1, limit_slots=1)
        [applied] = PolicyModel(NS, NAME, rules.specs()).for_actor("actor/agents/a")
        keys.add(applied.counter_key(NOW))
    assert len(keys) == 3


def test_a_usd_rule_carries_one_more_always_true_match():
    rules = compile_rules(budget("default", tokens(5), usd("5")), [], exclusion_slots=3, limit_slots=2)
    tokens_rule, usd_rule = (r.headers for r in rules.rules)
    assert usd_rule[: len(tokens_rule)] == tokens_rule
    assert usd_rule[len(tokens_rule) :] == (
        {"name": "x-actor-id", "type": "RegularExpression", "value": MATCHES_NOTHING, "invert": True},
    )


def test_switching_a_limit_between_tokens_and_usd_starts_that_counter_afresh():
    members = ("agents/b",)
    before = compile_rules(budget("default", tokens(5)), [budget("c", tokens(9), actors=members)], 1, 1)
    after = compile_rules(budget("default", tokens(5)), [budget("c", usd("9"), actors=members)], 1, 1)
    old = PolicyModel(NS, NAME, before.specs()).for_actor("actor/agents/b")
    new = PolicyModel(NS, NAME, after.specs()).for_actor("actor/agents/b")
    assert old[0].index == new[0].index == 1
    assert old[0].identity() != new[0].identity(), "a tokens count must never be read as mills"
    default_old = PolicyModel(NS, NAME, before.specs()).for_actor("actor/agents/a")
    default_new = PolicyModel(NS, NAME, after.specs()).for_actor("actor/agents/a")
    assert default_old[0].identity() == default_new[0].identity()


def test_limit_slots_one_is_the_single_limit_layout_of_earlier_versions():
    classes = [budget("large", tokens(5000), actors=("agents/b",)), budget("tiny", tokens(5), actors=("agents/c",))]
    rules = compile_rules(budget("default", tokens(500)), classes, exclusion_slots=2, limit_slots=1)
    assert [(r.index, r.purpose) for r in rules.rules] == [(0, "default"), (1, "class:large"), (2, "class:tiny")]
    assert not any(r.reserved for r in rules.rules)


def test_trailing_reserved_slots_are_not_emitted_but_inner_ones_are():
    rules = compile_rules(
        budget("default", tokens(1)), [budget("a", tokens(2), actors=("x/a",))], exclusion_slots=1, limit_slots=4
    )
    assert [r.purpose for r in rules.rules] == ["default", "reserved", "reserved", "reserved", "class:a"]
    model = PolicyModel(NS, NAME, rules.specs())
    for subject in ("actor/x/a", "actor/x/b", "actor/lab/z"):
        assert all(not rules.rules[r.index].reserved for r in model.for_actor(subject))
    pattern = rules.specs()[1]["clientSelectors"][0]["headers"][1]["value"]
    assert pattern == MATCHES_NOTHING and not re2.compile(pattern).search("")


def test_more_limits_than_slots_names_the_setting_and_the_cost_of_changing_it():
    default = BudgetSpec("default", (tokens(1), tokens(2, "Hour"), usd("3")), (), "budgets.default")
    with pytest.raises(ConfigError) as caught:
        compile_rules(default, [], exclusion_slots=1, limit_slots=2)
    [problem] = caught.value.problems
    assert problem.key == "budgets.default.limits"
    assert problem.message.startswith("has 3 limits but agent-budgets:budgetPolicy.limitSlots is 2")
    assert "set budgetPolicy.limitSlots to 3 or more" in problem.message
    assert problem.message.endswith(
        "Every class's rules move when it changes, so class counters restart once (the default budget's keep theirs)"
    )


def test_limit_slots_must_be_between_one_and_the_maximum():
    for slots in (0, MAX_LIMIT_SLOTS + 1):
        with pytest.raises(ConfigError, match=r"budgetPolicy.limitSlots: is -?\d+: it must be between 1 and 8"):
            compile_rules(budget("default", tokens(1)), [], exclusion_slots=1, limit_slots=slots)


def test_rules_beyond_envoy_gateways_cap_are_refused_with_how_many_classes_fit():
    classes = [budget(f"c{i}", tokens(1), actors=(f"agents/a{i}",)) for i in range(64)]
    compile_rules(budget("default", tokens(1)), classes[:63], exclusion_slots=1, limit_slots=4)
    with pytest.raises(ConfigError) as caught:
        compile_rules(budget("default", tokens(1)), classes, exclusion_slots=1, limit_slots=4)
    assert "need 257 rate-limit rules, over Envoy Gateway's 256" in str(caught.value)
    assert "at most 63 classes fit" in str(caught.value)
    assert MAX_RULES == 256


def test_the_number_of_classes_that_fit_counts_the_last_class_limits():
    """85 classes of 3 limits at limitSlots 3 need rule 85 * 3 + 2 = 257: only 84 fit, and the message says so."""
    three = (tokens(1), tokens(2, "Hour"), tokens(3, "Week"))
    classes = [budget(f"c{i}", *three, actors=(f"agents/a{i}",)) for i in range(85)]
    compile_rules(budget("default", tokens(1)), classes[:84], exclusion_slots=1, limit_slots=3)
    with pytest.raises(ConfigError) as caught:
        compile_rules(budget("default", tokens(1)), classes, exclusion_slots=1, limit_slots=3)
    assert "has 85 classes: with budgetPolicy.limitSlots 3 they need 258 rate-limit rules" in str(caught.value)
    assert "so at most 84 classes fit" in str(caught.value)


def test_a_usd_default_budget_needs_one_match_for_its_marker():
    with pytest.raises(ConfigError, match="lower it to 1022"):
        compile_rules(budget("default", usd("5")), [], exclusion_slots=1023, limit_slots=1)
    rules = compile_rules(budget("default", usd("5")), [], exclusion_slots=1022, limit_slots=1)
    [spec] = rules.specs()
    assert [len(s["headers"]) for s in spec["clientSelectors"]] == [128] * 8


def test_a_calls_limit_on_the_default_budget_needs_two_more_matches():
    with pytest.raises(
        ConfigError, match="a calls limit on the default budget needs 2 more matches in its rule: lower it to 1021"
    ):
        compile_rules(budget("default", tokens(5), calls(9)), [], exclusion_slots=1022, limit_slots=2)
    rules = compile_rules(budget("default", tokens(5), calls(9)), [], exclusion_slots=1021, limit_slots=2)
    assert [len(s["headers"]) for s in rules.specs()[1]["clientSelectors"]] == [128] * 8


def test_summary_describes_each_limit_for_stack_outputs():
    research = budget("research", tokens(200_000, "Hour"), usd("5"), actors=("agents/b", "agents/c"))
    rules = compile_rules(budget("default", tokens(500)), [research], exclusion_slots=1, limit_slots=2)
    assert rules.summary() == [
        {"rule": 0, "budget": "default", "limit": 0, "unit": "tokens", "amount": 500, "per": "Day",
         "requests": 500, "members": 0},
        {"rule": 2, "budget": "class:research", "limit": 0, "unit": "tokens", "amount": 200_000, "per": "Hour",
         "requests": 200_000, "members": 2},
        {"rule": 3, "budget": "class:research", "limit": 1, "unit": "usd", "amount": 5.0, "per": "Day",
         "requests": 5_000, "members": 2},
    ]  # fmt: skip
    [usd_rule] = [r for r in rules.rules if r.unit == "usd"]
    assert usd_rule.counter_amount(4_321) == Decimal("4.321")


# --- stability at 10,000 actors -------------------------------------------------------------------------
#
# Each test below is one row of the table "Why classes are append-only" in docs/budgets.md: it makes that
# change and asserts exactly which (actor, limit) counters move. Counters are compared by their Redis key at
# one instant inside a window of every unit, so a change of window (`per`) shows too.

ACTORS = [f"agents/agent-{i:05d}" for i in range(9_000)] + [f"lab/bot-{i:04d}" for i in range(1_000)]
CLASS_SIZE = 50
LIMIT_SLOTS = 3
NOW = 1_796_064_480 + 1_234
"""2026-11-30T19:08:34Z: no window of any unit starts at this second."""


def class_members(position: int) -> tuple[str, ...]:
    return tuple(ACTORS[position * 400 : position * 400 + CLASS_SIZE])


BASE_DEFAULT = budget("default", tokens(100_000))
BASE_CLASSES = [
    budget(f"class-{c:02d}", tokens(1_000 + c), *([usd("5")] if c % 2 else []), actors=class_members(c))
    for c in range(20)
]
MEMBERS = {actor for budget_class in BASE_CLASSES for actor in budget_class.actors}
DEFAULT_ACTORS = [actor for actor in ACTORS if actor not in MEMBERS]
SAMPLE = sorted(set(ACTORS[::9]) | MEMBERS)
"""For the rows whose proof needs no 10,000: every class member and every ninth actor (2,000 in all)."""

Counters = dict[tuple[str, int], tuple[LimitSpec, str]]


def limit_counters(rules: BudgetRules, actors: list[str] = ACTORS, namespace: str = NS) -> Counters:
    """Every (actor, limit position) → (its limit, its counter's Redis key at NOW), through the model; every
    pool limit as ("pool:<name>", position), the one counter all of its members share.

    Also proves coverage: each actor is charged by exactly the limits of its own budget and of the pools it is
    in, asking the model once per model a per-model limit names (a call to any model is also charged by every
    limit over all models, which never read that header), or once with no model when no limit names one.
    """
    model = PolicyModel(namespace, NAME, rules.specs())
    probes = [{MODEL_HEADER: name} for name in rules.model_names()] or [{}]
    result: Counters = {}
    for actor in actors:
        applied = {}
        for probe in probes:
            for applied_rule in model.applied({ACTOR_HEADER: actor_header_value(actor), **probe}):
                applied[applied_rule.index] = applied_rule
        own, pooled = rules.rules_for_actor(actor), rules.pool_rules_for_actor(actor)
        assert sorted(applied) == sorted(r.index for r in (*own, *pooled)), actor
        for compiled in own:
            assert compiled.limit is not None
            result[(actor, compiled.limit_index)] = (compiled.limit, applied[compiled.index].counter_key(NOW))
        for compiled in pooled:
            assert compiled.limit is not None
            pair, counter = (compiled.purpose, compiled.limit_index), applied[compiled.index].counter_key(NOW)
            assert result.setdefault(pair, (compiled.limit, counter)) == (compiled.limit, counter), "one shared counter"
    return result


def compile_layout(
    default: BudgetSpec,
    classes: list[BudgetSpec],
    exclusion_slots: int = 32,
    limit_slots: int = LIMIT_SLOTS,
    pools: list[PoolSpec] | None = None,
    class_slots: int = 0,
) -> BudgetRules:
    return compile_rules(
        default,
        classes,
        exclusion_slots=exclusion_slots,
        limit_slots=limit_slots,
        pools=pools or [],
        class_slots=class_slots,
    )


@pytest.fixture(scope="module")
def base() -> Counters:
    return limit_counters(compile_layout(BASE_DEFAULT, BASE_CLASSES))


@pytest.fixture(scope="module")
def base_sample(base) -> Counters:
    sampled = set(SAMPLE)
    return {pair: counter for pair, counter in base.items() if pair[0] in sampled}


def changed(before: Counters, after: Counters) -> set[tuple[str, int]]:
    """(actor, limit position) pairs present in both whose counter key moved."""
    return {pair for pair in before.keys() & after.keys() if before[pair][1] != after[pair][1]}


def by_limit(counters: Counters) -> dict[tuple[str, LimitSpec], str]:
    """The same counters keyed by the limit itself, for changes that move a limit to another position."""
    result = {(actor, limit): key for (actor, _), (limit, key) in counters.items()}
    assert len(result) == len(counters), "two limits of one budget are equal: the test data cannot tell them apart"
    return result


def pairs_of(budget_class: BudgetSpec, positions: range | None = None) -> set[tuple[str, int]]:
    """(member, position) for every member of a class and every (or the given) limit position."""
    return {(a, j) for a in budget_class.actors for j in positions or range(len(budget_class.limits))}


def test_the_base_layout_covers_ten_thousand_actors(base):
    assert len({actor for actor, _ in base}) == 10_000
    assert len(MEMBERS) == 1_000
    assert len({key for _, key in base.values()}) == len(base), "no two (actor, limit) pairs share a counter"


def test_appending_a_limit_to_the_default_changes_no_other_key(base):
    after = limit_counters(compile_layout(budget("default", tokens(100_000), usd("2", "Month")), BASE_CLASSES))
    assert changed(base, after) == set()
    assert set(after) - set(base) == {(a, 1) for a in DEFAULT_ACTORS}


def test_appending_a_limit_to_a_class_changes_no_other_key(base):
    classes = list(BASE_CLASSES)
    grown = classes[4]
    classes[4] = BudgetSpec(grown.name, (*grown.limits, tokens(10, "Minute")), grown.actors)
    after = limit_counters(compile_layout(BASE_DEFAULT, classes))
    assert changed(base, after) == set()
    assert set(after) - set(base) == {(a, 1) for a in grown.actors}


def test_appending_a_calls_limit_changes_no_other_key(base_sample):
    """A calls limit in a free slot of the default budget and of a class: every existing counter stays (every
    class member, and every ninth default actor: the default's rules are the same for all of them)."""
    classes = list(BASE_CLASSES)
    paced = classes[6]
    classes[6] = BudgetSpec(paced.name, (*paced.limits, calls(30, "Minute")), paced.actors)
    default = budget("default", tokens(100_000), calls(60, "Minute"))
    after = limit_counters(compile_layout(default, classes), SAMPLE)
    assert changed(base_sample, after) == set()
    new = {pair for pair in set(after) - set(base_sample)}
    assert new == {(a, 1) for a in SAMPLE if a not in MEMBERS} | {(a, len(paced.limits)) for a in paced.actors}


def test_appending_a_class_changes_only_its_members(base):
    newcomers = tuple(ACTORS[9_500:9_530])
    appended = [*BASE_CLASSES, budget("newcomers", tokens(77), usd("0.5", "Hour"), actors=newcomers)]
    after = limit_counters(compile_layout(BASE_DEFAULT, appended))
    assert {actor for actor, _ in changed(base, after)} == set(newcomers)


def test_adding_the_first_pool_to_a_stack_with_classes_moves_no_counter(base):
    """An existing stack (20 classes, no pool) gets its first pools, with budgetPolicy.classSlots set to room for
    more classes: the pools' blocks come after every class block, so no (actor, limit) counter of the 10,000 moves."""
    pools = [
        PoolSpec("lab", (usd("200"),), (), atespaces=("lab",)),
        PoolSpec("pair", (tokens(9_000),), (ACTORS[1], ACTORS[2])),
    ]
    after = limit_counters(compile_layout(BASE_DEFAULT, BASE_CLASSES, pools=pools, class_slots=len(BASE_CLASSES) + 5))
    assert changed(base, after) == set()
    assert set(after) - set(base) == {("pool:lab", 0), ("pool:pair", 0)}


def test_moving_an_actor_between_classes_changes_only_that_actor(base):
    mover = BASE_CLASSES[3].actors[7]
    classes = list(BASE_CLASSES)
    classes[3] = BudgetSpec(classes[3].name, classes[3].limits, tuple(a for a in classes[3].actors if a != mover))
    classes[8] = BudgetSpec(classes[8].name, classes[8].limits, (*classes[8].actors, mover))
    after = limit_counters(compile_layout(BASE_DEFAULT, classes))
    assert {actor for actor, _ in changed(base, after)} == {mover}


def test_changing_limit_slots_moves_every_class_counter_and_no_default_one(base):
    """limitSlots 3 → 4: class k's j-th limit moves from rule 3k + j to 4k + j; the default's stay at j."""
    after = limit_counters(compile_layout(BASE_DEFAULT, BASE_CLASSES, limit_slots=4))
    assert changed(base, after) == {pair for budget_class in BASE_CLASSES for pair in pairs_of(budget_class)}
    assert set(after) == set(base)
    grown_default = budget("default", tokens(100_000), usd("2", "Month"))
    two = limit_counters(compile_layout(grown_default, BASE_CLASSES), DEFAULT_ACTORS[:500])
    five = limit_counters(compile_layout(grown_default, BASE_CLASSES, limit_slots=5), DEFAULT_ACTORS[:500])
    assert changed(two, five) == set() and len(two) == 1_000, "every limit of the default keeps its counter"


def test_removing_a_limit_that_is_not_the_last_moves_the_later_limits_of_that_budget_only():
    """Class 1 has [tokens/Hour, usd/Day, usd/Month]; removing usd/Day moves usd/Month from rule 4 + 2 to 4 + 1."""
    three = (tokens(600, "Hour"), usd("5"), usd("50", "Month"))
    classes = list(BASE_CLASSES)
    classes[1] = BudgetSpec(classes[1].name, three, classes[1].actors)
    before = by_limit(limit_counters(compile_layout(BASE_DEFAULT, classes)))
    classes[1] = BudgetSpec(classes[1].name, (three[0], three[2]), classes[1].actors)
    after = by_limit(limit_counters(compile_layout(BASE_DEFAULT, classes)))
    moved = {pair for pair in before.keys() & after.keys() if before[pair] != after[pair]}
    assert moved == {(actor, three[2]) for actor in classes[1].actors}
    assert set(before) - set(after) == {(actor, three[1]) for actor in classes[1].actors}


def test_reordering_the_limits_of_a_budget_moves_the_reordered_ones_only(base):
    """Class 1 is [tokens, usd]: swapping them moves both of its members' counters, nobody else's."""
    classes = list(BASE_CLASSES)
    swapped = classes[1]
    classes[1] = BudgetSpec(swapped.name, tuple(reversed(swapped.limits)), swapped.actors)
    after = by_limit(limit_counters(compile_layout(BASE_DEFAULT, classes)))
    before = by_limit(base)
    moved = {pair for pair in before.keys() & after.keys() if before[pair] != after[pair]}
    assert moved == {(actor, limit) for actor in swapped.actors for limit in swapped.limits}


def test_changing_an_amount_moves_no_counter(base_sample):
    classes = [BudgetSpec(c.name, tuple(_doubled(limit) for limit in c.limits), c.actors) for c in BASE_CLASSES]
    after = limit_counters(compile_layout(budget("default", tokens(250_000)), classes), SAMPLE)
    assert changed(base_sample, after) == set()
    assert {limit for limit, _ in after.values()}.isdisjoint({limit for limit, _ in base_sample.values()})


def _doubled(limit: LimitSpec) -> LimitSpec:
    return LimitSpec(limit.unit, limit.amount * 2, limit.per)


def test_emptying_a_class_moves_its_members_only(base_sample):
    classes = list(BASE_CLASSES)
    retired = classes[5]
    classes[5] = BudgetSpec(retired.name, retired.limits, ())
    after = limit_counters(compile_layout(BASE_DEFAULT, classes), SAMPLE)
    assert changed(base_sample, after) == {(a, 0) for a in retired.actors}, "they join the default budget"


@pytest.mark.parametrize("change", ["remove", "reorder"])
def test_removing_or_reordering_a_class_moves_the_members_of_every_class_that_changes_place(base_sample, change):
    classes = list(BASE_CLASSES)
    if change == "remove":
        del classes[12]
    else:
        classes[12], classes[13] = classes[13], classes[12]
    after = limit_counters(compile_layout(BASE_DEFAULT, classes), SAMPLE)
    moved_classes = BASE_CLASSES[12:] if change == "remove" else BASE_CLASSES[12:14]
    # A removed class's members fall to the default budget; every class after it moves up one block.
    assert changed(base_sample, after) == {pair for budget_class in moved_classes for pair in pairs_of(budget_class)}


def test_changing_a_limit_between_tokens_and_usd_moves_that_limit_only(base_sample):
    classes = list(BASE_CLASSES)
    switched = classes[2]
    classes[2] = BudgetSpec(switched.name, (usd("1"),), switched.actors)
    after = limit_counters(compile_layout(BASE_DEFAULT, classes), SAMPLE)
    assert changed(base_sample, after) == pairs_of(switched)


def test_changing_a_limit_to_or_from_calls_moves_that_limit_only(base_sample):
    """A tokens limit turned into a calls limit in place (and a usd one into tokens) starts afresh: a count of
    tokens is never read as calls."""
    classes = list(BASE_CLASSES)
    to_calls, to_tokens = classes[2], classes[3]
    classes[2] = BudgetSpec(to_calls.name, (calls(1_002, "Day"),), to_calls.actors)
    classes[3] = BudgetSpec(to_tokens.name, (to_tokens.limits[0], tokens(5, "Day")), to_tokens.actors)
    after = limit_counters(compile_layout(BASE_DEFAULT, classes), SAMPLE)
    assert changed(base_sample, after) == pairs_of(to_calls) | {(a, 1) for a in to_tokens.actors}


def test_changing_exclusion_slots_moves_every_default_counter_once(base_sample):
    after = limit_counters(compile_layout(BASE_DEFAULT, BASE_CLASSES, exclusion_slots=33), SAMPLE)
    assert changed(base_sample, after) == {(a, 0) for a in SAMPLE if a not in MEMBERS}


def test_changing_the_gateway_namespace_moves_every_counter(base_sample):
    after = limit_counters(compile_layout(BASE_DEFAULT, BASE_CLASSES), SAMPLE, namespace="budgets-elsewhere")
    assert changed(base_sample, after) == set(base_sample)


def test_changing_a_limit_s_window_moves_that_limit_only(base_sample):
    """The window start is part of the key: Day → Week starts a new window for that limit's actors."""
    classes = list(BASE_CLASSES)
    weekly = classes[3]
    classes[3] = BudgetSpec(weekly.name, (tokens(1_003, "Week"), *weekly.limits[1:]), weekly.actors)
    after = limit_counters(compile_layout(BASE_DEFAULT, classes), SAMPLE)
    assert changed(base_sample, after) == pairs_of(weekly, range(1))


# Each row of the table in docs/budgets.md ("Why classes are append-only") and the tests that prove it.
RESTART_TABLE_TESTS: dict[str, tuple[str, ...]] = {
    "add an actor (to the default)": ("test_budget_rules.py::test_adding_an_actor_to_the_default_changes_no_key",),
    "add an actor to a class, or move one between classes": (
        "test_budget_rules.py::test_adding_an_actor_to_a_class_changes_only_that_actor",
        "test_budget_limits.py::test_moving_an_actor_between_classes_changes_only_that_actor",
    ),
    "change a limit's `tokens` or `usd` amount": ("test_budget_limits.py::test_changing_an_amount_moves_no_counter",),
    "append a limit to a budget or pool (up to `limitSlots`), with or without `models` or `count`": (
        "test_budget_limits.py::test_appending_a_limit_to_the_default_changes_no_other_key",
        "test_budget_limits.py::test_appending_a_limit_to_a_class_changes_no_other_key",
        "test_budget_limits.py::test_appending_a_calls_limit_changes_no_other_key",
        "test_budget_pools.py::test_appending_a_per_model_limit_changes_no_other_key",
        "test_budget_pools.py::test_appending_a_token_kind_limit_changes_no_other_key",
    ),
    "append a class (once there are pools, within `budgetPolicy.classSlots`)": (
        "test_budget_limits.py::test_appending_a_class_changes_only_its_members",
        "test_budget_pools.py::test_appending_a_class_within_the_class_slots_moves_only_its_members",
    ),
    "add the first pool (with `budgetPolicy.classSlots` of at least the number of classes)": (
        "test_budget_limits.py::test_adding_the_first_pool_to_a_stack_with_classes_moves_no_counter",
    ),
    "append a pool": ("test_budget_pools.py::test_appending_a_pool_changes_no_other_key",),
    "add or remove a pool's members or atespaces": (
        "test_budget_pools.py::test_changing_a_pool_s_members_or_atespaces_moves_no_counter",
    ),
    "empty a class (retire it in place)": ("test_budget_limits.py::test_emptying_a_class_moves_its_members_only",),
    "empty a pool (retire it in place)": ("test_budget_pools.py::test_emptying_a_pool_moves_no_counter",),
    "remove or reorder a class": (
        "test_budget_limits.py::test_removing_or_reordering_a_class_moves_the_members_of_every_class_that_changes_place",
    ),
    "remove or reorder a pool": (
        "test_budget_pools.py::test_removing_or_reordering_a_pool_moves_the_pools_that_change_place",
    ),
    "remove a limit that is not the last of its budget, or reorder limits": (
        "test_budget_limits.py::test_removing_a_limit_that_is_not_the_last_moves_the_later_limits_of_that_budget_only",
        "test_budget_limits.py::test_reordering_the_limits_of_a_budget_moves_the_reordered_ones_only",
    ),
    "change a limit's kind (`tokens`, `usd`, `calls`, or a tokens limit's `count`)": (
        "test_budget_limits.py::test_changing_a_limit_between_tokens_and_usd_moves_that_limit_only",
        "test_budget_limits.py::test_changing_a_limit_to_or_from_calls_moves_that_limit_only",
        "test_budget_pools.py::test_changing_a_tokens_limit_s_count_moves_that_limit_only",
    ),
    "change which models a per-model limit names": (
        "test_budget_pools.py::test_changing_which_models_a_limit_names_moves_nothing_and_adding_models_moves_that_limit",
    ),
    "give a limit `models`, or take them away": (
        "test_budget_pools.py::test_changing_which_models_a_limit_names_moves_nothing_and_adding_models_moves_that_limit",
    ),
    "change `budgetPolicy.exclusionSlots`": (
        "test_budget_limits.py::test_changing_exclusion_slots_moves_every_default_counter_once",
    ),
    "change `budgetPolicy.limitSlots`": (
        "test_budget_limits.py::test_changing_limit_slots_moves_every_class_counter_and_no_default_one",
        "test_budget_pools.py::test_changing_limit_slots_moves_every_class_and_pool_counter_and_no_default_one",
    ),
    "change `budgetPolicy.classSlots` (once there are pools)": (
        "test_budget_pools.py::test_changing_class_slots_moves_every_pool_counter_and_no_actor_s_own",
    ),
    "change `gateway.namespace` (the policy's namespace is in every key)": (
        "test_budget_limits.py::test_changing_the_gateway_namespace_moves_every_counter",
    ),
    "change a limit's `per`": ("test_budget_limits.py::test_changing_a_limit_s_window_moves_that_limit_only",),
}


def test_every_row_of_the_restart_table_in_the_docs_has_its_test():
    """docs/budgets.md says the unit suite proves each row: a row without a test fails here."""
    import importlib

    page = (Path(__file__).resolve().parents[1] / "docs" / "budgets.md").read_text(encoding="utf-8")
    table = page.split("| change | whose spent budget restarts |\n| --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()]
    assert rows == list(RESTART_TABLE_TESTS)
    for tests in RESTART_TABLE_TESTS.values():
        for test in tests:
            module, name = test.split(".py::")
            assert callable(getattr(importlib.import_module(f"tests.{module}"), name)), test


def test_a_class_named_default_is_not_the_default_budget():
    classes = [budget("default", tokens(7), usd("1"), actors=("agents/b",))]
    rules = compile_rules(budget("default", tokens(500)), classes, exclusion_slots=1, limit_slots=2)
    member = [(r.index, r.purpose) for r in rules.rules_for_actor("agents/b")]
    assert member == [(2, "class:default"), (3, "class:default")]
    assert [(r.index, r.purpose) for r in rules.rules_for_actor("agents/a")] == [(0, "default")]
    model = PolicyModel(NS, NAME, rules.specs())
    assert [r.index for r in model.for_actor("actor/agents/b")] == [2, 3]

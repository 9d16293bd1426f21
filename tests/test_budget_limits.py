"""Several limits per budget (windows, tokens and usd), checked through the rate-limit model.

The model (core/ratelimit_model.py) follows Envoy Gateway v1.9.0 `internal/xds/translator/ratelimit.go`
and envoyproxy/ratelimit `src/limiter/cache_key.go`: every matching rule applies and charges its own
counter, keyed by the policy, the rule index and the descriptor entries. The stability proof runs on
10,000 actors: appending a limit, appending a class or moving an actor leaves the counter key of every
other (actor, limit) as it was.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import re2

from core.budget_rules import (
    COST_METADATA_KEY,
    MATCHES_NOTHING,
    MAX_LIMIT_SLOTS,
    MAX_RULES,
    RESERVED_LIMIT,
    BudgetRules,
    BudgetSpec,
    LimitSpec,
    actor_subject,
    compile_rules,
)
from core.money import USD_METADATA_KEY
from core.ratelimit_model import PolicyModel
from core.settings import ConfigError

NS, NAME = "agent-budgets", "agent-budgets"


def tokens(amount: int, per: str = "Day") -> LimitSpec:
    return LimitSpec("tokens", amount, per)


def usd(amount: str, per: str = "Day") -> LimitSpec:
    return LimitSpec("usd", Decimal(amount), per)


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
    assert [r.index for r in model.for_actor(actor_subject("agents/b"))] == [2, 3]
    assert [r.index for r in model.for_actor(actor_subject("agents/a"))] == [0, 1]
    assert [r.index for r in rules.rules_for_actor("agents/b")] == [2, 3]
    assert [r.index for r in rules.rules_for_actor("lab/anyone")] == [0, 1]
    b_keys = {r.counter_key(0) for r in model.for_actor(actor_subject("agents/b"))}
    assert len(b_keys) == 2, "each limit counts in its own counter"


def admit_and_charge(model: PolicyModel, counters: dict[str, int], subject: str, costs: dict[int, int]) -> bool:
    """One call as Envoy makes it: refused if any applying counter is over its limit (check-only request,
    envoyproxy/ratelimit base_limiter.go), else admitted and each rule charged its own cost at the end."""
    applied = model.for_actor(subject)
    if any(counters.get(r.counter_key(0), 0) > r.requests for r in applied):
        return False
    for rule in applied:
        key = rule.counter_key(0)
        counters[key] = counters.get(key, 0) + costs[rule.index]
    return True


def test_the_smaller_window_refuses_first_and_every_limit_is_charged():
    """A 600-tokens-an-hour and a 5,000-tokens-a-day limit at 200 tokens a call: the hour refuses call 5."""
    research = budget("research", tokens(600, "Hour"), tokens(5_000, "Day"), actors=("agents/b",))
    rules = compile_rules(budget("default", tokens(500)), [research], exclusion_slots=1, limit_slots=2)
    model = PolicyModel(NS, NAME, rules.specs())
    counters: dict[str, int] = {}
    admitted = [admit_and_charge(model, counters, "actor/agents/b", {2: 200, 3: 200}) for _ in range(6)]
    assert admitted == [True, True, True, True, False, False]
    hour, day = (counters[r.counter_key(0)] for r in model.for_actor("actor/agents/b"))
    assert (hour, day) == (800, 800)


def test_a_usd_limit_refuses_the_call_after_the_one_that_crosses_it():
    """$0.02 at 4 mills a call ($0.0035 rounded up): calls 1-6 pass (the sixth crosses 20), the seventh is refused."""
    rules = compile_rules(budget("default", tokens(1_000_000), usd("0.02")), [], exclusion_slots=1, limit_slots=2)
    model = PolicyModel(NS, NAME, rules.specs())
    counters: dict[str, int] = {}
    admitted = [admit_and_charge(model, counters, "actor/agents/a", {0: 200, 1: 4}) for _ in range(8)]
    assert admitted == [True] * 6 + [False, False]


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
    assert "counters restart once" in problem.message


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

ACTORS = [f"agents/agent-{i:05d}" for i in range(9_000)] + [f"lab/bot-{i:04d}" for i in range(1_000)]
CLASS_SIZE = 50
LIMIT_SLOTS = 3


def class_members(position: int) -> tuple[str, ...]:
    return tuple(ACTORS[position * 400 : position * 400 + CLASS_SIZE])


BASE_DEFAULT = budget("default", tokens(100_000))
BASE_CLASSES = [
    budget(f"class-{c:02d}", tokens(1_000 + c), *([usd("5")] if c % 2 else []), actors=class_members(c))
    for c in range(20)
]


def limit_identities(rules: BudgetRules) -> dict[tuple[str, int], tuple]:
    """Every (actor, limit position) → its counter identity, for all 10,000 actors, through the model.

    Also proves coverage: each actor is charged by exactly the limits of its own budget.
    """
    model = PolicyModel(NS, NAME, rules.specs())
    result: dict[tuple[str, int], tuple] = {}
    for actor in ACTORS:
        applied = model.for_actor(actor_subject(actor))
        expected = rules.rules_for_actor(actor)
        assert [r.index for r in applied] == [r.index for r in expected], actor
        for applied_rule, compiled in zip(applied, expected, strict=True):
            result[(actor, compiled.limit_index)] = applied_rule.identity()
    return result


def compile_layout(default: BudgetSpec, classes: list[BudgetSpec]) -> BudgetRules:
    return compile_rules(default, classes, exclusion_slots=32, limit_slots=LIMIT_SLOTS)


@pytest.fixture(scope="module")
def base() -> dict[tuple[str, int], tuple]:
    return limit_identities(compile_layout(BASE_DEFAULT, BASE_CLASSES))


def changed(before: dict[tuple[str, int], tuple], after: dict[tuple[str, int], tuple]) -> set[tuple[str, int]]:
    """(actor, limit) pairs present in both whose counter key moved."""
    return {pair for pair in before if pair in after and before[pair] != after[pair]}


def test_the_base_layout_covers_ten_thousand_actors(base):
    assert len({actor for actor, _ in base}) == 10_000
    members = {a for c in BASE_CLASSES for a in c.actors}
    assert len(members) == 1_000
    assert len(set(base.values())) == len(base), "no two (actor, limit) pairs share a counter"


def test_appending_a_limit_to_the_default_changes_no_other_key(base):
    after = limit_identities(compile_layout(budget("default", tokens(100_000), usd("2", "Month")), BASE_CLASSES))
    assert changed(base, after) == set()
    added = set(after) - set(base)
    assert added == {(a, 1) for a in ACTORS if not any(a in c.actors for c in BASE_CLASSES)}


def test_appending_a_limit_to_a_class_changes_no_other_key(base):
    classes = list(BASE_CLASSES)
    grown = classes[4]
    classes[4] = BudgetSpec(grown.name, (*grown.limits, tokens(10, "Minute")), grown.actors)
    after = limit_identities(compile_layout(BASE_DEFAULT, classes))
    assert changed(base, after) == set()
    assert set(after) - set(base) == {(a, 1) for a in grown.actors}


def test_appending_a_class_changes_only_its_members(base):
    newcomers = tuple(ACTORS[9_500:9_530])
    appended = [*BASE_CLASSES, budget("newcomers", tokens(77), usd("0.5", "Hour"), actors=newcomers)]
    after = limit_identities(compile_layout(BASE_DEFAULT, appended))
    assert {actor for actor, _ in changed(base, after)} == set(newcomers)


def test_moving_an_actor_between_classes_changes_only_that_actor(base):
    mover = BASE_CLASSES[3].actors[7]
    classes = list(BASE_CLASSES)
    classes[3] = BudgetSpec(classes[3].name, classes[3].limits, tuple(a for a in classes[3].actors if a != mover))
    classes[8] = BudgetSpec(classes[8].name, classes[8].limits, (*classes[8].actors, mover))
    after = limit_identities(compile_layout(BASE_DEFAULT, classes))
    assert {actor for actor, _ in changed(base, after)} == {mover}


def test_a_class_named_default_is_not_the_default_budget():
    classes = [budget("default", tokens(7), usd("1"), actors=("agents/b",))]
    rules = compile_rules(budget("default", tokens(500)), classes, exclusion_slots=1, limit_slots=2)
    member = [(r.index, r.purpose) for r in rules.rules_for_actor("agents/b")]
    assert member == [(2, "class:default"), (3, "class:default")]
    assert [(r.index, r.purpose) for r in rules.rules_for_actor("agents/a")] == [(0, "default")]
    model = PolicyModel(NS, NAME, rules.specs())
    assert [r.index for r in model.for_actor("actor/agents/b")] == [2, 3]

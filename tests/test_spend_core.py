"""The pure half of the spend report (core/spend.py): which counters, rows, order, thresholds and formats."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core import spend
from core.budget_rules import BudgetRules, CompiledRule, LimitSpec, compile_budget_rules
from core.identity import actor_header_value, actor_source
from core.ratelimit_model import PolicyModel, rules_for_actor
from core.settings import BudgetsConfig
from tests.support.budgets import MIXED_MODELS, mixed_layout, rich_layout

NOW = 1796064480  # 2026-11-30T18:48:00Z
DAY_END = 1796083200


def compiled(classes=(), slots=2, limit_slots=1) -> BudgetRules:
    budgets = BudgetsConfig.model_validate({"default": {"tokens": 500, "per": "Day"}, "classes": list(classes)})
    return compile_budget_rules(budgets, slots, limit_slots)


RESEARCH = {
    "name": "research",
    "limits": [{"tokens": 400_000, "per": "Hour"}, {"usd": 5, "per": "Day"}],
    "actors": ["agents/r"],
}


def counter(**changes) -> spend.Counter:
    fields = {
        "actor": "a/b",
        "subject": "actor/a/b",
        "budget": "default",
        "rule": 0,
        "limit_index": 0,
        "unit": "tokens",
        "limit": 500,
        "requests": 500,
        "per": "Day",
        "key": "k",
        "window_start": DAY_END - 86_400,
        "resets_at": DAY_END,
    }
    return spend.Counter(**{**fields, **changes})


def test_plan_asks_the_rate_limit_model_for_every_key():
    rules = compiled([{"name": "large", "tokens": 5000, "per": "Hour", "actors": ["agents/b"]}])
    plan = spend.plan_counters(["agents/a", "agents/b"], rules, "ns", "policy", NOW)
    for planned in plan.counters:
        (applied,) = rules_for_actor("ns", "policy", rules.specs(), planned.subject)
        assert planned.key == applied.counter_key(NOW)
        assert (planned.rule, planned.requests, planned.per) == (applied.index, applied.requests, applied.unit)
    assert [(c.actor, c.budget, c.per, c.window_start, c.resets_at) for c in plan.counters] == [
        ("agents/a", "default", "Day", 1795996800, DAY_END),
        ("agents/b", "large", "Hour", 1796061600, 1796065200),
    ]
    assert plan.unmetered == ()


def test_every_limit_of_a_budget_is_a_row_in_its_own_unit_and_reserved_slots_are_not():
    rules = compiled([RESEARCH], limit_slots=3)
    assert any(rule.reserved for rule in rules.rules)
    plan = spend.plan_counters(["agents/r", "agents/a"], rules, "ns", "p", NOW, suspended={"agents/r"})
    assert [(c.actor, c.budget, c.limit_index, c.unit, c.limit, c.requests, c.suspended) for c in plan.counters] == [
        ("agents/r", "research", 0, "tokens", 400_000, 400_000, True),
        ("agents/r", "research", 1, "usd", Decimal(5), 5000, True),
        ("agents/a", "default", 0, "tokens", 500, 500, False),
    ]
    tokens, usd, default = plan.counters
    report = spend.build_report("s", "ns/p", NOW, plan, {tokens.key: b"100000", usd.key: b"4210", default.key: b"0"})
    rows = {(r.counter.actor, r.counter.limit_index): r for r in report.rows}
    assert (rows["agents/r", 1].spent, rows["agents/r", 1].remaining) == (Decimal("4.210"), Decimal("0.790"))
    assert rows["agents/r", 1].used == Fraction(4210, 5000)
    assert [(r.counter.actor, r.counter.limit_index) for r in report.rows] == [
        ("agents/r", 1),
        ("agents/r", 0),
        ("agents/a", 0),
    ]
    lines = spend.render_table(report).splitlines()
    assert lines[1].split()[:6] == ["agents/r", "research", "$5.00/Day", "$4.21", "$0.79", "84.2%"]
    assert lines[1].split()[6] == "403"
    assert lines[2].split()[:6] == ["agents/r", "research", "400,000/Hour", "100,000", "300,000", "25.0%"]
    document = spend.row_document(rows["agents/r", 1], NOW)
    assert {k: document[k] for k in ("unit", "limit", "spent", "remaining", "counter_value", "counter_limit")} == {
        "unit": "usd",
        "limit": 5.0,
        "spent": 4.21,
        "remaining": 0.79,
        "counter_value": 4210,
        "counter_limit": 5000,
    }
    assert document["suspended"] is True


def test_an_actor_whose_budget_has_no_limit_is_listed_as_unmetered():
    """A compiled configuration always gives every budget a limit; a layout without one (here class 1 holds only
    a reserved slot) leaves its members uncounted, and the report says so rather than show nothing."""
    distinct = ({"name": "x-actor-id", "type": "Distinct"},)
    default = CompiledRule(0, "default", 0, 0, LimitSpec("tokens", 500, "Day"), (), distinct)
    reserved = CompiledRule(1, "", 1, 0, None, (), distinct)
    rules = BudgetRules((default, reserved), 0, 0, class_of_actor={"agents/b": 1})
    plan = spend.plan_counters(["agents/a", "agents/b"], rules, "ns", "p", NOW)
    assert [c.actor for c in plan.counters] == ["agents/a"] and plan.unmetered == ("agents/b",)
    text = spend.render_table(spend.build_report("s", "ns/p", NOW, plan, {}))
    assert text.endswith("not metered by any rule (calls are not counted): agents/b\n")


def test_the_plan_gives_every_actor_the_keys_the_model_finds_by_matching_every_rule():
    """The oracle: the rate-limit model matches every pattern of every rule with RE2 for each actor, as Envoy
    would (`PolicyModel.for_actor`, `literal_patterns=False`); the plan takes each actor's rules from the budget
    layout instead. Both must give every actor the same counters, in the same order, with the same keys."""
    actors, rules, suspended = rich_layout()
    assert rules.slots_used > 2 and any(rule.reserved for rule in rules.rules)
    assert len({rule.budget_index for rule in rules.limit_rules}) == 15  # the default and 14 classes
    plan = spend.plan_counters(actors, rules, "agent-budgets", "agent-budgets", NOW, suspended=suspended)
    model = PolicyModel("agent-budgets", "agent-budgets", rules.specs(), literal_patterns=False)
    planned: dict[str, list[tuple]] = {}
    for c in plan.counters:
        planned.setdefault(c.actor, []).append((c.rule, c.key, c.requests, c.per, c.window_start, c.resets_at))
        assert c.suspended == (c.actor in suspended)
    for actor in actors:
        found = [rule for rule in model.for_actor(actor_header_value(actor)) if not rules.rules[rule.index].reserved]
        expected = [(a.index, a.counter_key(NOW), a.requests, a.unit, *a.window(NOW)) for a in found]
        assert planned[actor] == expected, actor
    assert plan.unmetered == () and "class-06" not in {c.budget for c in plan.counters}  # the retired class
    units = {(c.budget == "default", c.unit) for c in plan.counters}
    assert units == {(True, "tokens"), (True, "usd"), (False, "tokens"), (False, "usd")}


def test_the_integer_sort_orders_rows_exactly_as_their_fractions_do():
    """Shares too close for a float to tell apart (limits near 2**32) still sort exactly: the same order as
    sorting by the Fraction itself, then actor, then rule."""
    pairs = [(2**32 - 1 - k, 2**32 - 2 - k) for k in (0, 4, 8)] + [(2**32 - 7, 2**32 + 9), (2**32 - 3, 2**32 + 11)]
    pairs += [(limit, (limit * n) // 7) for n in range(9) for limit in (3, 500, 5000, 4_000_000_007)]
    rows = [
        spend.SpendRow(counter(actor=f"agents/a-{n % 5}", rule=n % 3, requests=requests), value)
        for n, (requests, value) in enumerate(pairs * 3)
    ]
    close = {row.used for row in rows if row.counter.requests > 2**31}
    assert len({float(share) for share in close}) < len(close)  # a float key would tie these
    for given in (rows, rows[::-1]):
        expected = sorted(given, key=lambda row: (-row.used, row.counter.actor, row.counter.rule))
        assert spend.most_used_first(given) == expected


def test_rows_sort_by_share_then_actor_and_thresholds_are_exact():
    rules = compiled([{"name": "three", "tokens": 3, "per": "Day", "actors": ["agents/c"]}])
    plan = spend.plan_counters(["agents/b", "agents/a", "agents/c"], rules, "ns", "p", NOW)
    keys = {c.actor: c.key for c in plan.counters}
    values = {keys["agents/a"]: "400", keys["agents/b"]: "400", keys["agents/c"]: 2}
    report = spend.build_report("s", "ns/p", NOW, plan, values)
    assert [r.counter.actor for r in report.rows] == ["agents/a", "agents/b", "agents/c"]
    # 2 of 3 is 66.66...%: at or above 66.66, below 66.67; 400 of 500 is exactly 80%.
    assert [r.counter.actor for r in spend.rows_at_or_above(report.rows, 66.66)] == ["agents/a", "agents/b", "agents/c"]
    assert [r.counter.actor for r in spend.rows_at_or_above(report.rows, 66.67)] == ["agents/a", "agents/b"]
    assert [r.counter.actor for r in spend.rows_at_or_above(report.rows, 80)] == ["agents/a", "agents/b"]
    assert spend.rows_at_or_above(report.rows, 80.0001) == []
    assert [r.counter.actor for r in spend.rows_of_actor(report.rows, "actor/agents/c")] == ["agents/c"]
    assert report.rows[2].used_percent == 66.67
    with pytest.raises(ValueError):
        spend.percent_threshold(float("nan"))


@pytest.mark.parametrize(
    ("value", "remaining", "refused"), [(0, 500, False), (499, 1, False), (500, 0, False), (501, 0, True)]
)
def test_remaining_and_refused_follow_ratelimits_over_the_limit_rule(value, remaining, refused):
    row = spend.SpendRow(counter(), value)
    assert (row.remaining, row.refused) == (remaining, refused)


@pytest.mark.parametrize(("amount", "unit", "text"), [
    (1_240_000, "tokens", "1,240,000"),
    (Decimal(5), "usd", "$5.00"),
    (Decimal("4.21"), "usd", "$4.21"),
    (Decimal("3.217"), "usd", "$3.217"),
    (Decimal("1234.5"), "usd", "$1,234.50"),
    (Decimal("0.001"), "usd", "$0.001"),
])  # fmt: skip
def test_amounts_are_tokens_or_dollars_to_the_mill(amount, unit, text):
    assert spend.format_amount(amount, unit) == text


@pytest.mark.parametrize(("raw", "value"), [(None, 0), (b"0", 0), (b"1200", 1200), ("7", 7), (42, 42)])
def test_counter_values_as_redis_returns_them(raw, value):
    assert spend.parse_counter_value("k", raw) == value


@pytest.mark.parametrize("raw", [b"12.5", b"", b"-3", "abc", b"\xff"])
def test_values_that_are_not_counters_are_refused(raw):
    with pytest.raises(spend.SpendError, match="'k'"):
        spend.parse_counter_value("k", raw)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (61, "1m 1s"), (3600, "1h"), (3659, "1h"), (18720, "5h 12m"),
     (86400, "1d"), (3 * 86400 + 4 * 3600 + 59, "3d 4h"), (30 * 86400, "30d")],
)  # fmt: skip
def test_durations_read_like_people_say_them(seconds, text):
    assert spend.format_duration(seconds) == text


def test_prometheus_output_parses_and_escapes_label_values():
    odd = counter(actor='a/"odd"\\x', budget="de\nfault", rule=3, per="Week", limit=1000, requests=1000)
    usd = counter(budget="research", rule=4, limit_index=1, unit="usd", limit=Decimal(5), requests=5000)
    report = spend.SpendReport('st"ack', "ns/p", 100, (spend.SpendRow(odd, 250), spend.SpendRow(usd, 4210)))
    families = {f.name: f for f in text_string_to_metric_families(spend.render_prometheus(report))}
    first = families["agent_budgets_used_ratio"].samples[0]
    assert first.labels == {
        "stack": 'st"ack',
        "actor": 'a/"odd"\\x',
        "budget": "de\nfault",
        "rule": "3",
        "limit": "0",
        "per": "Week",
    }
    assert first.value == 0.25
    assert [s.value for s in families["agent_budgets_spent_tokens"].samples] == [250]
    assert [s.value for s in families["agent_budgets_spent_usd"].samples] == [4.21]
    assert [s.value for s in families["agent_budgets_remaining_usd"].samples] == [0.79]
    tokens_only = spend.SpendReport("s", "ns/p", 100, (spend.SpendRow(counter(), 1),))
    assert "agent_budgets_spent_usd" not in spend.render_prometheus(tokens_only)


def test_json_row_fields_are_exactly_the_documented_ones():
    document = spend.row_document(spend.SpendRow(counter(window_start=1795996800), 600), NOW)
    assert list(document) == list(spend.JSON_ROW_FIELDS)
    assert (document["used_percent"], document["refused"], document["remaining"]) == (120.0, True, 0)
    assert document["window_start"] == "2026-11-30T00:00:00Z"


def test_a_calls_counter_refuses_the_next_call_once_it_reaches_its_limit():
    """ratelimit adds 1 before it compares: a calls counter at its limit refuses the next call, a tokens counter
    at its limit still admits one (src/redis/fixed_cache_impl.go, src/limiter/base_limiter.go)."""
    calls = counter(unit="calls", limit=60, requests=60, per="Minute")
    assert [spend.SpendRow(calls, value).refused for value in (59, 60, 61)] == [False, True, True]
    tokens = counter()
    assert [spend.SpendRow(tokens, value).refused for value in (499, 500, 501)] == [False, False, True]
    assert spend.format_amount(1_240, "calls") == "1,240" and spend.json_amount(7, "calls") == 7


# --- pools and per-model limits ---------------------------------------------------------------------------------

POOLED = {
    "default": {
        "limits": [
            {"usd": 20, "per": "Day"},
            {"usd": 2, "per": "Day", "models": ["gpt-4.1"]},
            {"tokens": 9_000, "per": "Hour", "count": "output"},
        ]
    },
    "classes": [{"name": "solo", "usd": 5, "per": "Day", "actors": ["lab/solo"]}],
    "pools": [
        {"name": "research", "atespaces": ["research"], "limits": [{"usd": 200, "per": "Day"}]},
        {
            "name": "pair",
            "members": ["agents/a", "lab/solo"],
            "limits": [{"tokens": 50_000, "per": "Hour", "count": "output"}],
        },
        {"name": "retired", "limits": [{"tokens": 1, "per": "Day"}]},
    ],
}
POOLED_ACTORS = ["research/r1", "research/r2", "agents/a", "lab/solo"]


def pooled_rules() -> BudgetRules:
    """limitSlots 3, classSlots 2: the default's rules 0-2, the class's 3, a free class block, the pools' 9 and 12."""
    return compile_budget_rules(BudgetsConfig.model_validate(POOLED), 2, 3, 2)


def test_the_plan_gives_every_counter_the_key_the_model_finds_for_its_requests():
    """The oracle: the rate-limit model evaluates every match of every rule for a request of each actor naming
    each model a limit names (as Envoy would); the plan takes the rules from the budget layout. Each actor's own
    counters and each pool's one counter must have the same keys both ways."""
    rules = pooled_rules()
    plan = spend.plan_counters(POOLED_ACTORS, rules, "ns", "p", NOW)
    model = PolicyModel("ns", "p", rules.specs())
    found: dict[int, set[str]] = {}
    for actor in POOLED_ACTORS:
        for probe in ({}, {"x-ai-eg-model": "gpt-4.1"}, {"x-ai-eg-model": "gpt-4.1-mini"}):
            for applied in model.applied({"x-actor-id": actor_header_value(actor), **probe}):
                found.setdefault(applied.index, set()).add(applied.counter_key(NOW))
    planned: dict[int, set[str]] = {}
    for counter in plan.counters:
        planned.setdefault(counter.rule, set()).add(counter.key)
    assert planned == found
    pools = [(c.budget, c.members, c.atespaces) for c in plan.counters if c.pool is not None]
    assert pools == [
        ("pool:research", ("research/r1", "research/r2"), ("research",)),
        ("pool:pair", ("agents/a", "lab/solo"), ()),
    ], "one row per pool limit, the retired pool left out"
    assert len(found[rules.rules_of_pool(0)[0].index]) == 1, "two research agents, one counter"


def test_a_member_s_share_is_read_only_from_its_own_counter_of_the_same_kind_window_and_models():
    """Every call of the member charges its own counter and the pool's alike only when both count the same calls:
    a per-model pool limit's share is not in a counter over every model, nor in one over other models, nor in one
    of another kind or window."""
    pool = counter(actor="", subject="", budget="pool:team", rule=9, models=("gpt-4.1",), pool="team",
                   members=("a/same", "a/every-model", "a/other-model", "a/output", "a/hourly"))  # fmt: skip
    own = {
        "a/same": [(counter(actor="a/same", models=("gpt-4.1",)), 40)],
        "a/every-model": [(counter(actor="a/every-model"), 900)],
        "a/other-model": [(counter(actor="a/other-model", models=("o3",)), 70)],
        "a/output": [(counter(actor="a/output", models=("gpt-4.1",), count="output"), 30)],
        "a/hourly": [(counter(actor="a/hourly", models=("gpt-4.1",), per="Hour"), 20)],
    }
    assert spend.member_shares(pool, own) == (("a/same", 40),)


def test_a_pool_row_shows_the_shared_counter_once_and_only_the_shares_that_can_be_read():
    rules = pooled_rules()
    plan = spend.plan_counters(POOLED_ACTORS, rules, "ns", "p", NOW)
    by = {(c.actor or c.budget, c.limit_index): c for c in plan.counters}
    values = {
        by["pool:research", 0].key: 30_000,
        by["research/r1", 0].key: 18_000,
        by["research/r2", 0].key: 12_000,
        by["pool:pair", 0].key: 12_000,
        by["agents/a", 2].key: 7_000,
    }
    report = spend.build_report("s", "ns/p", NOW, plan, values)
    rows = {(r.counter.actor or r.counter.budget, r.counter.limit_index): r for r in report.rows}
    research, pair = rows["pool:research", 0], rows["pool:pair", 0]
    assert (research.spent, research.shares) == (Decimal(30), (("research/r1", 18_000), ("research/r2", 12_000)))
    # agents/a's own output-tokens limit is per Hour like the pool's: readable. lab/solo's class counts usd only.
    assert (pair.spent, pair.shares) == (12_000, (("agents/a", 7_000),))
    table = spend.render_table(report)
    cells = {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in table.splitlines()}
    assert cells["(research/*, 2 listed)"][:6] == [
        "(research/*, 2 listed)",
        "pool:research",
        "$200.00/Day",
        "$30.00",
        "$170.00",
        "15.0%",
    ]
    assert cells["(2 members)"][:4] == ["(2 members)", "pool:pair", "50,000/Hour (output)", "12,000"]
    assert "pool:research $200.00/Day: shares research/r1 $18.00, research/r2 $12.00" in table
    assert "pool:pair 50,000/Hour (output): shares agents/a 7,000; 1 member(s) with no own limit of the same" in table
    assert re.search(r"^agents/a +default +\$2\.00/Day \(gpt-4\.1\) ", table, re.MULTILINE)
    document = spend.row_document(research, NOW)
    assert (document["actor"], document["pool"], document["members"]) == (
        None,
        "research",
        ["research/r1", "research/r2"],
    )
    assert document["shares"] == {"research/r1": 18.0, "research/r2": 12.0}
    own = spend.row_document(rows["agents/a", 2], NOW)
    assert (own["count"], own["models"], own["pool"], own["shares"]) == ("output", [], None, None)
    assert spend.row_document(rows["agents/a", 1], NOW)["models"] == ["gpt-4.1"]
    assert [r.counter.budget for r in spend.rows_of_actor(report.rows, "actor/agents/a")] == [
        "default",  # 7,000 of 9,000 output tokens
        "pool:pair",  # 12,000 of 50,000
        "default",
        "default",
    ], "an actor's rows and the rows of the pools it is in"
    metrics = spend.render_prometheus(report)
    assert (
        'agent_budgets_spent_usd{stack="s",actor="",budget="pool:research",rule="9",limit="0",per="Day"} 30.0'
        in metrics
    )


def test_the_plan_matches_the_model_for_actors_of_every_source_in_classes_pools_and_per_model_limits():
    """The oracle over a layout with Substrate actors, service accounts and API keys together (classes mixing them,
    pools of whole atespaces and of listed members of every source, per-model limits with escaped names, several
    exclusion slots): the rate-limit model matches every pattern with RE2 for a request of each actor naming each
    model (and none, and another); every counter it charges must be one the plan reads, under the same key, and a
    pool's counter must list exactly the actors whose calls the model charges to it."""
    actors, rules, suspended, _ = mixed_layout()
    assert rules.slots_used > 1 and len({actor_source(actor) for actor in actors}) == 3
    plan = spend.plan_counters(actors, rules, "ns", "p", NOW, suspended=suspended)
    model = PolicyModel("ns", "p", rules.specs(), literal_patterns=False)
    own: dict[str, set[tuple[int, str]]] = {actor: set() for actor in actors}
    pooled: dict[tuple[int, str], set[str]] = {}
    for actor in actors:
        for probe in ({}, *({"x-ai-eg-model": m} for m in (*MIXED_MODELS, "gpt-4o"))):
            for applied in model.applied({"x-actor-id": actor_header_value(actor), **probe}):
                assert not rules.rules[applied.index].reserved, (actor, applied.index)
                if rules.rules[applied.index].pooled:
                    pooled.setdefault((applied.index, applied.counter_key(NOW)), set()).add(actor)
                else:
                    own[actor].add((applied.index, applied.counter_key(NOW)))
    planned_own: dict[str, set[tuple[int, str]]] = {actor: set() for actor in actors}
    planned_pools: dict[tuple[int, str], set[str]] = {}
    for c in plan.counters:
        if c.pool is None:
            planned_own[c.actor].add((c.rule, c.key))
            assert c.suspended == (c.actor in suspended) and c.subject == actor_header_value(c.actor)
        else:
            planned_pools[(c.rule, c.key)] = set(c.members)
    assert planned_own == own
    assert planned_pools == pooled
    assert {c.budget for c in plan.counters if c.pool is not None} == {"pool:whole", "pool:listed"}
    per_model = {c.models for c in plan.counters}
    assert {(), ("gpt-4.1", "gpt-4.1-mini"), ("claude-3.5:sonnet",), ("gpt-4.1",)} <= per_model

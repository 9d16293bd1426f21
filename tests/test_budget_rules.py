"""Budget rules, checked through a model of Envoy Gateway's rule translation (core.ratelimit_model).

For any actor id the model says which rules apply and under which Redis key each counts; the tests
prove every actor falls in exactly one rule with the right limit, that Envoy Gateway's caps hold at
10,000 actors in 250 classes, and that configuration edits leave other actors' counter keys alone.
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import pytest
import re2

from core.budget_rules import (
    MATCHES_NOTHING,
    MAX_HEADERS_PER_SELECTOR,
    MAX_RULES,
    MAX_SELECTORS,
    MAX_VALUE_LENGTH,
    actors_regex,
    compile_budget_rules,
    pack_actors,
    re2_escape,
)
from core.identity import actor_header_value, actor_source
from core.ratelimit_model import (
    UNIT_SECONDS,
    AppliedRule,
    PolicyModel,
    envoy_listener_name,
    envoy_route_name,
    key_base,
    literal_alternatives,
    rules_for_actor,
)
from core.settings import BudgetsConfig, ConfigError
from tests.support.budgets import MIXED_MODELS, mixed_layout, rich_layout

NS, NAME = "agent-budgets", "agent-budgets"


def make_budgets(default: tuple[int, str] = (500, "Day"), classes: list[tuple[str, int, str, list[str]]] = ()):
    return BudgetsConfig.model_validate(
        {
            "default": {"tokens": default[0], "per": default[1]},
            "classes": [{"name": n, "tokens": t, "per": p, "actors": a} for n, t, p, a in classes],
        }
    )


def applied(specs: list[dict[str, Any]], actor: str) -> list[AppliedRule]:
    return rules_for_actor(NS, NAME, specs, actor_header_value(actor))


def matching_model(specs: list[dict[str, Any]]) -> PolicyModel:
    """What `applied` asks (`rules_for_actor`: every pattern matched with RE2), built once for many actors."""
    return PolicyModel(NS, NAME, specs, literal_patterns=False)


def counter_identities(specs: list[dict[str, Any]], actors: list[str]) -> dict[str, tuple]:
    """Each actor's counter identity (domain + descriptor entries); exactly one rule must apply."""
    result = {}
    model = matching_model(specs)
    for actor in actors:
        rules = model.for_actor(actor_header_value(actor))
        assert len(rules) == 1, f"{actor} falls in rules {[r.index for r in rules]}"
        result[actor] = rules[0].identity()
    return result


def assert_caps(specs: list[dict[str, Any]]) -> None:
    assert 1 <= len(specs) <= MAX_RULES
    for rule in specs:
        assert rule["shared"] is True
        assert rule["cost"]["request"] == {"from": "Number", "number": 0}
        assert rule["cost"]["response"] == {
            "from": "Metadata",
            "metadata": {"namespace": "io.envoy.ai_gateway", "key": "llm_total_token"},
        }
        assert 1 <= len(rule["clientSelectors"]) <= MAX_SELECTORS
        for selector in rule["clientSelectors"]:
            assert 1 <= len(selector["headers"]) <= MAX_HEADERS_PER_SELECTOR
            for match in selector["headers"]:
                assert match["name"] == "x-actor-id"
                if match["type"] == "Distinct":
                    assert "value" not in match and "invert" not in match
                else:
                    assert match["type"] == "RegularExpression"
                    value = match["value"]
                    assert len(value) <= MAX_VALUE_LENGTH
                    assert value.startswith("^") and value.endswith(("$", "$."))
                    re2.compile(value)  # Envoy Gateway checks regexes with RE2


def test_dev_budget_is_one_distinct_rule_per_actor_of_500_tokens_a_day():
    rules = compile_budget_rules(make_budgets(), exclusion_slots=4)
    specs = rules.specs()
    assert len(specs) == 1
    headers = specs[0]["clientSelectors"][0]["headers"]
    assert headers[0] == {"name": "x-actor-id", "type": "Distinct"}
    assert [h["value"] for h in headers[1:]] == [MATCHES_NOTHING] * 4
    assert all(h["invert"] is True for h in headers[1:])
    assert specs[0]["limit"] == {"requests": 500, "unit": "Day"}
    a, b = applied(specs, "agents/actor-a"), applied(specs, "agents/actor-b")
    assert len(a) == len(b) == 1
    assert a[0].requests == b[0].requests == 500
    assert a[0].counter_key(0) != b[0].counter_key(0), "each actor needs its own bucket"
    assert_caps(specs)


def test_class_member_is_admitted_by_its_class_and_excluded_from_the_default():
    budgets = make_budgets(classes=[("large", 5000, "Day", ["agents/actor-b"])])
    specs = compile_budget_rules(budgets, exclusion_slots=2).specs()
    [a] = applied(specs, "agents/actor-a")
    [b] = applied(specs, "agents/actor-b")
    assert (a.index, a.requests) == (0, 500)
    assert (b.index, b.requests) == (1, 5000)
    # An actor nobody listed (a new Substrate actor) still has a budget: the default.
    [new] = applied(specs, "lab/someone-else")
    assert (new.index, new.requests) == (0, 500)
    # The shape of the class rule is exactly Distinct + one admitting regex.
    headers = specs[1]["clientSelectors"][0]["headers"]
    assert headers == [
        {"name": "x-actor-id", "type": "Distinct"},
        {"name": "x-actor-id", "type": "RegularExpression", "value": "^actor/(?:agents/(?:actor-b))$"},
    ]
    assert_caps(specs)


def test_counter_key_layout_matches_envoy_gateway_translation():
    specs = compile_budget_rules(make_budgets(classes=[("large", 5000, "Hour", ["agents/actor-b"])]), 1).specs()
    [b] = applied(specs, "agents/actor-b")
    now = 1_700_000_123
    window = now // 3600 * 3600
    assert b.counter_key(now) == (
        "agent-budgets/agent-budgets_agent-budgets/agent-budgets/rule/1_agent-budgets/agent-budgets/rule/1_"
        f"rule-1-match-0_actor/agents/actor-b_rule-1-match-1_rule-1-match-1_{window}"
    )


def test_windows_are_fixed_and_utc_aligned():
    day = AppliedRule(0, 500, "Day", (("k", "v"),), "d")
    # 2026-11-29 23:59:59 UTC and 2026-11-30 00:00:00 UTC fall in different Day windows.
    assert day.counter_key(1_796_083_199) != day.counter_key(1_796_083_200)
    assert day.counter_key(1_796_083_200).endswith("_1796083200")
    week = AppliedRule(0, 500, "Week", (("k", "v"),), "d")
    start = int(week.counter_key(1_796_083_200).rsplit("_", 1)[1])
    assert time.gmtime(start).tm_wday == 3, "Week windows start on Thursday (the epoch's weekday)"
    assert UNIT_SECONDS["Month"] == 30 * 86_400


# --- stability: counter keys of everyone else survive configuration edits ------------------------------

ACTORS = [f"agents/actor-{i:03d}" for i in range(60)] + [f"lab/bot-{i:02d}" for i in range(15)]
CLASSES = [
    ("large", 5000, "Day", ACTORS[0:10]),
    ("xl", 50_000, "Day", ACTORS[10:12] + ACTORS[60:63]),
    ("tiny", 50, "Hour", ACTORS[20:30]),
]


def identities(budgets: BudgetsConfig, actors: list[str], slots: int = 8) -> dict[str, tuple]:
    return counter_identities(compile_budget_rules(budgets, slots).specs(), actors)


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    return {actor for actor in before if actor in after and before[actor] != after[actor]}


def test_adding_an_actor_to_the_default_changes_no_key():
    before = identities(make_budgets(classes=CLASSES), ACTORS[:-1])
    after = identities(make_budgets(classes=CLASSES), ACTORS)
    assert changed(before, after) == set()


def test_adding_an_actor_to_a_class_changes_only_that_actor():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    grown = [("large", 5000, "Day", [*ACTORS[0:10], ACTORS[40]]), *CLASSES[1:]]
    after = identities(make_budgets(classes=grown), ACTORS)
    assert changed(base, after) == {ACTORS[40]}


def test_moving_an_actor_between_classes_changes_only_that_actor():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    moved = [
        ("large", 5000, "Day", ACTORS[1:10]),
        ("xl", 50_000, "Day", [ACTORS[0], *ACTORS[10:12], *ACTORS[60:63]]),
        CLASSES[2],
    ]
    after = identities(make_budgets(classes=moved), ACTORS)
    assert changed(base, after) == {ACTORS[0]}


def test_changing_limits_changes_no_key():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    bigger = [(n, t * 2, p, a) for n, t, p, a in CLASSES]
    after = identities(make_budgets(default=(900, "Day"), classes=bigger), ACTORS)
    assert changed(base, after) == set()


def test_appending_a_class_changes_only_its_members():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    appended = [*CLASSES, ("new", 7, "Minute", [ACTORS[50], ACTORS[70]])]
    after = identities(make_budgets(classes=appended), ACTORS)
    assert changed(base, after) == {ACTORS[50], ACTORS[70]}


def test_retiring_a_class_by_emptying_it_keeps_later_classes_in_place():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    retired = [("large", 5000, "Day", []), *CLASSES[1:]]
    after = identities(make_budgets(classes=retired), ACTORS)
    assert changed(base, after) == set(ACTORS[0:10])


def test_removing_a_class_from_the_middle_would_move_others_which_is_why_classes_are_append_only():
    base = identities(make_budgets(classes=CLASSES), ACTORS)
    after = identities(make_budgets(classes=[CLASSES[0], CLASSES[2]]), ACTORS)
    assert set(ACTORS[20:30]) <= changed(base, after)


# --- scale and caps -------------------------------------------------------------------------------------


def big_config(actors: int = 10_000, classes: int = 250, per_class: int = 30):
    ids = [f"agents/agent-{i:05d}" for i in range(actors)]
    groups = [(f"class-{c:03d}", 1000 + c, "Day", ids[c * per_class : (c + 1) * per_class]) for c in range(classes)]
    return ids, groups


def test_ten_thousand_actors_in_250_classes_fit_envoy_gateway_caps():
    ids, groups = big_config()
    budgets = make_budgets(classes=groups)
    rules = compile_budget_rules(budgets, exclusion_slots=127)
    specs = rules.specs()
    assert len(specs) == 251
    assert_caps(specs)
    expected = {actor: 500 for actor in ids}
    for _, tokens, _, members in groups:
        for actor in members:
            expected[actor] = tokens
    # Every actor (a stride over all 10,000 plus every class boundary) lands in exactly one rule.
    sample = set(ids[::37]) | {g[3][0] for g in groups} | {g[3][-1] for g in groups} | {ids[-1]}
    model = matching_model(specs)
    for actor in sorted(sample):
        [rule] = model.for_actor(actor_header_value(actor))
        assert rule.requests == expected[actor], actor
    assert rules.slots_used < 127


def test_the_compiled_exclusions_cover_exactly_the_class_members():
    ids, groups = big_config()
    rules = compile_budget_rules(make_budgets(classes=groups), exclusion_slots=127)
    default_headers = rules.rules[0].headers[1:]
    patterns = [re2.compile(h["value"]) for h in default_headers]  # each on its own, as Envoy compiles it
    members = {a for g in groups for a in g[3]}
    # An id is excluded when any pattern matches it whole: one RE2 alternation of them all asks exactly that, in
    # one pass per id instead of one per pattern.
    options = re2.Options()
    options.max_mem = 64 << 20
    any_pattern = re2.compile("|".join(f"(?:{p.pattern})" for p in patterns), options)
    excluded = {a for a in ids if any_pattern.fullmatch(actor_header_value(a))}
    assert excluded == members


def test_a_class_too_large_for_one_match_is_refused_with_how_to_split_it():
    ids = [f"agents/{'x' * 40}-{i:04d}" for i in range(100)]
    with pytest.raises(ConfigError) as caught:
        compile_budget_rules(make_budgets(classes=[("huge", 9, "Day", ids)]), 127)
    message = str(caught.value)
    assert caught.value.keys == ["agent-budgets:budgets.classes[0].actors"]
    assert "class 'huge'" in message
    assert "over Envoy Gateway's 1024" in message
    assert "append a new class with the same limits" in message


def test_too_few_exclusion_slots_names_the_number_needed():
    _, groups = big_config(actors=3000, classes=100)
    with pytest.raises(ConfigError) as caught:
        compile_budget_rules(make_budgets(classes=groups), exclusion_slots=3)
    message = str(caught.value)
    needed = len(pack_actors([a for g in groups for a in g[3]]))
    assert f"needs {needed}" in message
    assert "agent-budgets:budgetPolicy.exclusionSlots" in message


def test_more_than_255_classes_is_refused():
    groups = [(f"c{i}", 5, "Day", []) for i in range(256)]
    with pytest.raises(ConfigError, match=r"256 classes: .* need 257 rate-limit rules, over Envoy Gateway's 256"):
        compile_budget_rules(make_budgets(classes=groups), 1)


# --- regular expressions -------------------------------------------------------------------------------


def test_escaping_makes_every_character_literal_in_re2():
    nasty = "a.b*c+d?e(f)g[h]i{j}k|l^m$n\\o"
    pattern = "^" + re2_escape(nasty) + "$"
    assert re2.compile(pattern).fullmatch(nasty)
    assert not re2.compile(pattern).fullmatch(nasty.replace(".", "x"))
    assert re.fullmatch(pattern, nasty)


def test_actor_regex_is_anchored_and_exact():
    pattern = re2.compile(actors_regex(["agents/actor-a", "lab/b"]))
    assert pattern.fullmatch("actor/agents/actor-a")
    assert pattern.fullmatch("actor/lab/b")
    assert not pattern.fullmatch("actor/agents/actor-ab")
    assert not pattern.fullmatch("actor/agents/actor-")
    assert not pattern.fullmatch("xactor/lab/b")
    assert not pattern.fullmatch("actor/lab/b/c")
    assert not re2.compile(MATCHES_NOTHING).search("")


def test_packing_uses_few_chunks_and_keeps_every_actor():
    ids = [f"agents/agent-{i:05d}" for i in range(5000)]
    chunks = pack_actors(ids)
    assert sorted(a for c in chunks for a in c) == sorted(ids)
    assert all(len(actors_regex(c)) <= MAX_VALUE_LENGTH for c in chunks)
    # Greedy packing fills each chunk: no two consecutive chunks could have been merged.
    for first, second in itertools.pairwise(chunks):
        assert len(actors_regex([*first, second[0]])) > MAX_VALUE_LENGTH


# --- non-shared rules in the translation model (issue 10, defect 12) ----------------------------------------


def _unshared(headers):
    return {"clientSelectors": [{"headers": headers}], "limit": {"requests": 5, "unit": "Minute"}}


def test_a_non_shared_rule_is_keyed_by_the_envoy_route_and_listener_names():
    """envoyproxy/gateway v1.9.0 internal/xds/translator/ratelimit.go: a non-shared rule's first descriptor
    entry is the Envoy route's name (getRouteDescriptor) and its domain the listener's name; the match
    index counts non-shared rules on their own (getDomainRuleIndex)."""
    shared = {**_unshared([{"name": "x-actor-id", "type": "Distinct"}]), "shared": True}
    unshared = _unshared([{"name": "x-actor-id", "type": "Distinct"}])
    route = envoy_route_name("agent-budgets", "mock-small", 0, 1, "llm.example.com")
    listener = envoy_listener_name("agent-budgets", "agent-router", "http")
    assert route == "httproute/agent-budgets/mock-small/rule/0/match/1/llm_example_com"
    assert listener == "agent-budgets/agent-router/http"
    applied = rules_for_actor(NS, NAME, [shared, unshared], "actor/agents/a", route_name=route, listener_name=listener)
    assert [(rule.index, rule.domain, rule.entries) for rule in applied] == [
        (0, f"{NS}/{NAME}", ((f"{NS}/{NAME}/rule/0",) * 2, ("rule-0-match-0", "actor/agents/a"))),
        (1, listener, ((route, route), ("rule-0-match-0", "actor/agents/a"))),
    ]
    assert applied[1].counter_key(86_400 * 3 + 5) == f"{listener}_{route}_{route}_rule-0-match-0_actor/agents/a_259200"


def test_the_precomputed_key_is_the_key_of_the_entries_for_any_number_of_distinct_matches():
    """The model cuts each rule's key around its Distinct values once, so a request's key costs one join; it
    must equal the key written out from the entries, with none, one or two Distinct matches, shared or not."""
    distinct = {"name": "x-actor-id", "type": "Distinct"}
    tenant = {"name": "x-tenant", "type": "Distinct"}
    gate = {"name": "x-actor-id", "type": "RegularExpression", "value": "^$.", "invert": True}
    rules = [
        {**_unshared([gate]), "shared": True},
        {**_unshared([distinct]), "shared": True},
        {**_unshared([gate, distinct, gate, tenant, gate]), "shared": True},
        _unshared([tenant, distinct]),
    ]
    model = PolicyModel(NS, NAME, rules, route_name="route/a", listener_name="listener/b")
    applied = model.applied({"x-actor-id": "actor/agents/a", "X-Tenant": "t_1"})
    assert [rule.index for rule in applied] == [0, 1, 2, 3]
    for rule in applied:
        assert rule.key_base == key_base(rule.domain, rule.entries)
        written = AppliedRule(rule.index, rule.requests, rule.unit, rule.entries, rule.domain)
        assert rule.counter_key(1_796_064_480) == written.counter_key(1_796_064_480)
    charged = model.charge(2, {"X-Actor-Id": "actor/agents/a", "x-tenant": "t_1"})
    assert (charged.entries, charged.counter_key(120)) == (applied[2].entries, applied[2].counter_key(120))
    with pytest.raises(ValueError, match="rule 2 counts per x-tenant, which the request does not carry"):
        model.charge(2, {"x-actor-id": "actor/agents/a"})
    assert applied[2].counter_key(120) == (
        f"{NS}/{NAME}_{NS}/{NAME}/rule/2_{NS}/{NAME}/rule/2_rule-2-match-0_rule-2-match-0_rule-2-match-1_"
        "actor/agents/a_rule-2-match-2_rule-2-match-2_rule-2-match-3_t_1_rule-2-match-4_rule-2-match-4_120"
    )


def test_the_model_refuses_to_guess_a_non_shared_rules_route_and_listener():
    with pytest.raises(ValueError, match=r"rule\(s\) 0 of BackendTrafficPolicy .* are not shared") as raised:
        rules_for_actor(NS, NAME, [_unshared([{"name": "x-actor-id", "type": "Distinct"}])], "actor/agents/a")
    assert "route_name=, listener_name=" in str(raised.value)


# --- patterns that list literal strings: answered by lookup, held to RE2 -----------------------------------

LISTING_PATTERNS = [
    actors_regex(["agents/actor-a", "agents/actor-b", "lab/bot-7", "team-x/x"]),
    actors_regex(["agents/actor-a", "serviceaccount:agents/research.bot", "apikey:ci-bot", "apikey:other"]),
    actors_regex([f"agents/agent-{n:05d}" for n in range(0, 5000, 7)]),
    MATCHES_NOTHING.replace(".", ""),  # "^$": the empty string only
    "",
    "^$",
    "abc",
    "(?:)",
    "^(?:a|)$",
    "(?:a|b)(?:c|d|)x",
    r"a\.b\*c\(\)\|\\\[\]\{\}\?\+\^\$",
    r"\ \_\-\/\:\@\=\,\#\%\&\~\`\!\"\'\<\>\;",
    "(?:x|(?:y|(?:z|w)))/(?:1|2)",
    "a|b|c",
    "^a|b$",
]
NOT_LISTING = [
    MATCHES_NOTHING,
    ".*",
    "a+",
    "a?",
    "a*",
    "[ab]",
    "a{2}",
    "(a)",
    "(?i)a",
    "(?P<n>a)",
    r"\d",
    r"\b",
    r"\Qa\E",
    r"\1",
    "a$b",
    "b^a",
    "(?:a",
    "a)",
    "ä",
    ".",
    "a\\",
]


def _probes(listed: frozenset[str]) -> set[str]:
    """Strings near the listed ones: each listed string, and each one cut, extended and changed by a character."""
    probes = {"", "x", "actor/", "actor/agents/"} | set(listed)
    for text in sorted(listed)[:300]:
        probes |= {text[:-1], text + "x", "x" + text, text[1:], text.upper(), text.replace("-", "_"), text + "\n"}
    return probes


@pytest.mark.parametrize("pattern", LISTING_PATTERNS)
def test_a_pattern_of_literals_lists_exactly_the_strings_re2_matches(pattern):
    listed = literal_alternatives(pattern)
    assert listed is not None
    compiled = re2.compile(pattern)
    for probe in _probes(listed):
        assert (compiled.fullmatch(probe) is not None) == (probe in listed), (pattern, probe)


def test_what_the_budget_patterns_list_is_exactly_their_actors():
    members = ["agents/actor-a", "agents/actor-b", "lab/bot-7", "team-x/x"]
    members += ["serviceaccount:agents/research.bot", "serviceaccount:ml/trainer", "apikey:ci-bot"]
    assert len(set(map(actor_source, members))) == 3  # every identity source, one pattern
    assert literal_alternatives(actors_regex(members)) == {actor_header_value(actor) for actor in members}
    assert literal_alternatives("(?:a|b)(?:c|d|)x") == {"acx", "adx", "ax", "bcx", "bdx", "bx"}
    assert literal_alternatives(r"a\.b") == {"a.b"}


@pytest.mark.parametrize("pattern", NOT_LISTING)
def test_any_other_pattern_is_left_to_re2(pattern):
    assert literal_alternatives(pattern) is None


def test_every_escaped_ascii_character_the_lookup_takes_is_that_character_in_re2():
    for code in range(128):
        pattern = "\\" + chr(code)
        listed = literal_alternatives(pattern)
        if chr(code).isalnum():
            assert listed is None, pattern
            continue
        assert listed == {chr(code)}, pattern
        assert re2.compile(pattern).fullmatch(chr(code)) is not None, pattern


def test_the_lookup_and_re2_find_the_same_rules_for_every_actor_and_every_near_miss():
    """The model answers a pattern of literals by lookup (`literal_patterns=True`, the default) and decides the
    applying rules once per combination of matches; with RE2 on every pattern it must find exactly the same
    rules and keys for every actor of a layout with classes, several limits, exclusion slots and reserved
    slots, and for strings near them that no rule lists."""
    actors, rules, _ = rich_layout()
    specs = rules.specs()
    lookup = PolicyModel(NS, NAME, specs)
    matching = PolicyModel(NS, NAME, specs, literal_patterns=False)
    subjects = [actor_header_value(actor) for actor in actors]
    subjects += [s + "x" for s in subjects[::50]] + [s[:-1] for s in subjects[::50]]
    subjects += ["actor/", "", "agents/actor-0001", subjects[0].upper()]
    for subject in subjects:
        found = lookup.for_actor(subject)
        expected = matching.for_actor(subject)
        assert [(a.index, a.counter_key(120)) for a in found] == [(a.index, a.counter_key(120)) for a in expected]
    assert {len(lookup.for_actor(s)) for s in subjects} == {1, 2, 3}  # everyone else falls in the default
    assert lookup.applied({}) == matching.applied({}) == []  # no x-actor-id: no descriptor, no rule


def test_the_lookup_and_re2_agree_for_actors_of_every_source_pools_and_per_model_limits():
    """As above, over actors of all three identity sources: classes mixing them, pools of whole atespaces (a
    pattern the lookup leaves to RE2, `[^/]+`) and of listed members, per-model limits (`x-ai-eg-model`, Exact and
    an alternation of escaped names), several exclusion slots; each actor and each near miss (another source's form
    of the same names, an atespace pool's look-alikes) asked with each model, none and another."""
    actors, rules, _, near = mixed_layout()
    specs = rules.specs()
    lookup = PolicyModel(NS, NAME, specs)
    matching = PolicyModel(NS, NAME, specs, literal_patterns=False)
    subjects = [actor_header_value(actor) for actor in actors] + near
    subjects += [s + "x" for s in subjects[::7]] + [s[:-1] for s in subjects[::7]]
    models = [{}, *({"x-ai-eg-model": m} for m in (*MIXED_MODELS, "gpt-4o", "GPT-4.1", "gpt-4x1"))]
    pooled = set()
    for subject in subjects:
        for probe in models:
            found = lookup.applied({"X-Actor-Id": subject, **probe})
            expected = matching.applied({"x-actor-id": subject, **probe})
            assert [(a.index, a.counter_key(120)) for a in found] == [(a.index, a.counter_key(120)) for a in expected]
            pooled |= {a.index for a in found if rules.rules[a.index].pooled}
    assert pooled == {rule.index for rule in rules.limit_rules if rule.pooled and rule.budget != "retired"}
    for probe in models:
        assert lookup.applied(probe) == matching.applied(probe) == []

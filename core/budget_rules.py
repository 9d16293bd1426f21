"""Compile `agent-budgets:budgets` into the rules of the one BackendTrafficPolicy that holds every budget.

Pure functions over plain data. The layout is chosen so that counters survive configuration edits:

* Envoy's rate-limit service keys a counter by the policy, the rule index and every descriptor entry of
  the rule (`rule-<k>-match-<m>`), plus the actor id for the Distinct match. Regular-expression values are
  not part of the key; the number of matches in a rule is.
* Rule 0 is the default budget: Distinct on `x-actor-id` followed by a fixed number of inverted regular
  expressions ("exclusion slots") that exclude every class member. Members are packed into the slots;
  unused slots hold a pattern that matches nothing. The slot count never depends on the classes, so
  adding or moving a class member leaves every default counter key unchanged.
* Rule k (k >= 1) is class k-1 in config order: Distinct plus one regular expression that admits exactly
  its actors. Appending a class appends a rule; classes are append-only (retire one by emptying it).
* Every rule is `shared: true` (one bucket per actor across all model routes), costs nothing on the
  request and charges the response's `llm_total_token` reported by Agent Router.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.problems import PROJECT, ConfigError, Problem
from core.settings import BudgetsConfig, Limit

ACTOR_HEADER = "x-actor-id"
SUBJECT_PREFIX = "actor/"
COST_METADATA_NAMESPACE = "io.envoy.ai_gateway"
COST_METADATA_KEY = "llm_total_token"

# Envoy Gateway v1.9.0 caps (api/v1alpha1/ratelimit_types.go).
MAX_RULES = 256
MAX_SELECTORS = 8
MAX_HEADERS_PER_SELECTOR = 128
MAX_VALUE_LENGTH = 1024
MAX_EXCLUSION_SLOTS = MAX_SELECTORS * MAX_HEADERS_PER_SELECTOR - 1

# Matches no string at all: `$` is the end of the text, so nothing can follow it.
MATCHES_NOTHING = "^$."

_RE2_LITERAL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/ ")


def actor_subject(actor_id: str) -> str:
    """The JWT subject (and so the `x-actor-id` value) Substrate gives actor `<atespace>/<name>`."""
    return SUBJECT_PREFIX + actor_id


def re2_escape(text: str) -> str:
    """Escape every character RE2 could read as syntax (RE2 accepts a backslash before punctuation)."""
    return "".join(ch if ch in _RE2_LITERAL_SAFE else "\\" + ch for ch in text)


def actors_regex(actor_ids: Iterable[str]) -> str:
    """An anchored RE2 pattern matching exactly the subjects of `actor_ids`, grouped by atespace.

    `^actor/(?:agents/(?:a|b)|lab/(?:c))$`: grouping keeps the pattern short and readable.
    """
    by_atespace: dict[str, list[str]] = {}
    for actor in sorted(set(actor_ids)):
        atespace, name = actor.split("/", 1)
        by_atespace.setdefault(atespace, []).append(name)
    if not by_atespace:
        return MATCHES_NOTHING
    groups = [
        f"{re2_escape(atespace)}/(?:{'|'.join(re2_escape(n) for n in names)})"
        for atespace, names in by_atespace.items()
    ]
    return f"^{re2_escape(SUBJECT_PREFIX)}(?:{'|'.join(groups)})$"


def _group_cost(atespace: str, names: Sequence[str]) -> int:
    return len(re2_escape(atespace)) + len("/(?:)") + sum(len(re2_escape(n)) for n in names) + len(names) - 1


def pack_actors(actor_ids: Iterable[str], max_length: int = MAX_VALUE_LENGTH) -> list[list[str]]:
    """Split actors into the fewest sorted chunks whose `actors_regex` fits in `max_length` characters.

    Greedy over sorted ids, with the pattern length computed incrementally (linear in the number of
    actors), then checked exactly.
    """
    overhead = len(f"^{re2_escape(SUBJECT_PREFIX)}(?:)$")
    chunks: list[list[str]] = []
    current: list[str] = []
    groups: dict[str, list[str]] = {}
    length = overhead
    for actor in sorted(set(actor_ids)):
        atespace, name = actor.split("/", 1)
        if atespace in groups:
            added = len(re2_escape(name)) + 1
        else:
            added = _group_cost(atespace, [name]) + (1 if groups else 0)
        if current and length + added > max_length:
            chunks.append(current)
            current, groups, length = [], {}, overhead
            added = _group_cost(atespace, [name])
        if not current and overhead + added > max_length:
            raise ConfigError(
                [Problem("actors", f"actor {actor!r} alone needs more than {max_length} characters to match")]
            )
        current.append(actor)
        groups.setdefault(atespace, []).append(name)
        length += added
    if current:
        chunks.append(current)
    for chunk in chunks:
        assert len(actors_regex(chunk)) <= max_length, "packing length drifted from actors_regex"
    return chunks


@dataclass(frozen=True)
class CompiledRule:
    """One rate-limit rule and the bookkeeping tests, outputs and the policy pack read."""

    index: int
    purpose: str  # "default" or "class:<name>"
    limit: Limit
    actors: tuple[str, ...]  # class members admitted (empty for the default rule)
    headers: tuple[dict[str, Any], ...]  # concatenated header matches, selector by selector

    def to_spec(self) -> dict[str, Any]:
        """The rule as Envoy Gateway's BackendTrafficPolicy expects it (camelCase)."""
        selectors = [
            {"headers": list(self.headers[start : start + MAX_HEADERS_PER_SELECTOR])}
            for start in range(0, len(self.headers), MAX_HEADERS_PER_SELECTOR)
        ]
        return {
            "clientSelectors": selectors,
            "limit": {"requests": self.limit.tokens, "unit": self.limit.per},
            "shared": True,
            "cost": {
                "request": {"from": "Number", "number": 0},
                "response": {
                    "from": "Metadata",
                    "metadata": {"namespace": COST_METADATA_NAMESPACE, "key": COST_METADATA_KEY},
                },
            },
        }


@dataclass(frozen=True)
class BudgetRules:
    """The compiled policy: rules in index order, and where each class member landed."""

    rules: tuple[CompiledRule, ...]
    exclusion_slots: int
    slots_used: int
    rule_of_actor: dict[str, int] = field(default_factory=dict)

    def specs(self) -> list[dict[str, Any]]:
        """Every rule as a BackendTrafficPolicy rule, in index order."""
        return [rule.to_spec() for rule in self.rules]

    def summary(self) -> list[dict[str, Any]]:
        """A small, secret-free description of the rules for stack outputs."""
        return [
            {
                "rule": rule.index,
                "budget": rule.purpose,
                "tokens": rule.limit.tokens,
                "per": rule.limit.per,
                "members": len(rule.actors),
            }
            for rule in self.rules
        ]


def _distinct() -> dict[str, Any]:
    return {"name": ACTOR_HEADER, "type": "Distinct"}


def _regex(value: str, invert: bool) -> dict[str, Any]:
    match: dict[str, Any] = {"name": ACTOR_HEADER, "type": "RegularExpression", "value": value}
    if invert:
        match["invert"] = True
    return match


def compile_budget_rules(budgets: BudgetsConfig, exclusion_slots: int) -> BudgetRules:
    """Compile budgets into rules; raise ConfigError listing every Envoy Gateway cap they would break."""
    problems: list[Problem] = []
    if not 1 <= exclusion_slots <= MAX_EXCLUSION_SLOTS:
        raise ConfigError(
            [
                Problem(
                    "budgetPolicy.exclusionSlots",
                    f"is {exclusion_slots}: it must be between 1 and {MAX_EXCLUSION_SLOTS} ({MAX_SELECTORS} "
                    f"selectors of {MAX_HEADERS_PER_SELECTOR} matches, minus the Distinct match)",
                )
            ]
        )
    if 1 + len(budgets.classes) > MAX_RULES:
        problems.append(
            Problem(
                "budgets.classes",
                f"has {len(budgets.classes)} classes: Envoy Gateway allows {MAX_RULES} rules in a policy, one of "
                f"them the default, so at most {MAX_RULES - 1} classes. Merge classes that share tokens and per",
            )
        )

    class_rules: list[CompiledRule] = []
    rule_of_actor: dict[str, int] = {}
    for position, budget_class in enumerate(budgets.classes):
        index = position + 1
        pattern = actors_regex(budget_class.actors)
        if len(pattern) > MAX_VALUE_LENGTH:
            fitting = len(pack_actors(budget_class.actors)[0])
            problems.append(
                Problem(
                    f"budgets.classes[{position}].actors",
                    f"class {budget_class.name!r}: matching its {len(budget_class.actors)} actors takes "
                    f"{len(pattern)} characters, over Envoy Gateway's {MAX_VALUE_LENGTH} per match, and a rule "
                    f"cannot admit actors through several matches. Keep about {fitting} actors in this class and "
                    "append a new class with the same tokens and per for the rest",
                )
            )
        class_rules.append(
            CompiledRule(
                index=index,
                purpose=f"class:{budget_class.name}",
                limit=Limit(tokens=budget_class.tokens, per=budget_class.per),
                actors=tuple(budget_class.actors),
                headers=(_distinct(), _regex(pattern, invert=False)),
            )
        )
        for actor in budget_class.actors:
            rule_of_actor[actor] = index

    chunks = pack_actors(rule_of_actor)
    if len(chunks) > exclusion_slots:
        needed = len(chunks)
        if needed > MAX_EXCLUSION_SLOTS:
            problems.append(
                Problem(
                    "budgets.classes",
                    f"excluding {len(rule_of_actor)} class members from the default budget needs {needed} matches, "
                    f"over Envoy Gateway's {MAX_EXCLUSION_SLOTS}. Use shorter actor names or fewer class members",
                )
            )
        else:
            problems.append(
                Problem(
                    "budgetPolicy.exclusionSlots",
                    f"is {exclusion_slots}, but excluding the {len(rule_of_actor)} class members from the default "
                    f"budget needs {needed}. Set {PROJECT}:budgetPolicy.exclusionSlots to {needed} or more (every "
                    "default-budget bucket restarts once when the slot count changes)",
                )
            )
    if problems:
        raise ConfigError(problems)
    slots = [_regex(actors_regex(chunk), invert=True) for chunk in chunks]
    slots += [_regex(MATCHES_NOTHING, invert=True) for _ in range(exclusion_slots - len(chunks))]
    default_rule = CompiledRule(
        index=0,
        purpose="default",
        limit=budgets.default,
        actors=(),
        headers=(_distinct(), *slots),
    )
    return BudgetRules(
        rules=(default_rule, *class_rules),
        exclusion_slots=exclusion_slots,
        slots_used=len(chunks),
        rule_of_actor=rule_of_actor,
    )

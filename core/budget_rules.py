"""Compile `agent-budgets:budgets` into the rules of the one BackendTrafficPolicy that holds every budget.

Pure functions over plain data. Every limit of every budget is one rate-limit rule; Envoy Gateway applies
every rule whose selectors match, so an actor's request is refused as soon as any of its limits is spent,
and each response charges all of them. The layout is chosen so that counters survive configuration edits:

* Envoy's rate-limit service keys a counter by the policy, the rule index and every descriptor entry of
  the rule (`rule-<k>-match-<m>`), plus the actor id for the Distinct match. Regular-expression values are
  not part of the key; the number of matches in a rule is.
* Rules come in blocks of `limitSlots` (budgetPolicy.limitSlots, default 1): budget b (0 = the default,
  k = class k-1 in config order) owns rule indexes b*limitSlots .. b*limitSlots + limitSlots - 1, and its
  j-th limit is rule b*limitSlots + j. Appending a class appends a block; appending a limit fills the next
  slot of its own block; neither moves any other rule. A slot without a limit (before the last real rule)
  holds a reserved rule that matches no actor. With limitSlots 1 this is exactly the single-limit layout
  of earlier versions, so existing stacks keep their counters.
* Every rule of the default budget has Distinct on `x-actor-id` followed by a fixed number of inverted
  regular expressions ("exclusion slots") that exclude every class member. Members are packed into the
  slots; unused slots hold a pattern that matches nothing. The slot count never depends on the classes,
  so adding or moving a class member leaves every default counter key unchanged.
* Every rule of a class has Distinct plus one regular expression that admits exactly its actors.
* A limit's kind is told apart in the counter key by a number of extra, always-true matches (an inverted
  pattern that matches nothing): none for tokens, one for usd, two for calls (`KIND_MARKERS`; a new kind
  takes the next number). Two kinds never share a Redis key, so changing a limit's kind in place starts
  that limit afresh instead of reading tokens as mills or as calls.
* Every rule is `shared: true` (one bucket per actor across all model routes). A tokens or usd limit
  costs nothing on the request and charges the response: `llm_total_token`, or the call's price in mills
  (`agent_budgets_usd_mills`, see core/money.py), both reported by Agent Router. A calls limit charges 1
  on the request and nothing on the response, so it counts the calls checked, refused ones included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from core.money import UINT32_MAX, USD_METADATA_KEY, mills_to_usd, usd_to_mills
from core.problems import PROJECT, ConfigError, Problem
from core.settings import MAX_LIMITS_PER_BUDGET, BudgetsConfig

ACTOR_HEADER = "x-actor-id"
SUBJECT_PREFIX = "actor/"
COST_METADATA_NAMESPACE = "io.envoy.ai_gateway"
COST_METADATA_KEY = "llm_total_token"
METADATA_KEYS: dict[str, str] = {"tokens": COST_METADATA_KEY, "usd": USD_METADATA_KEY}
"""The dynamic-metadata key a limit's rule charges at the end of a response, by the limit's unit (a calls
limit charges the request instead)."""
KIND_MARKERS: dict[str, int] = {"tokens": 0, "usd": 1, "calls": 2}
"""Always-true matches appended to a limit's rule by its unit: the kind's part of the counter key."""
CALL_COST = 1
"""What a calls limit's rule charges on the request: one call."""

# Envoy Gateway v1.9.0 caps (api/v1alpha1/ratelimit_types.go).
MAX_RULES = 256
MAX_SELECTORS = 8
MAX_HEADERS_PER_SELECTOR = 128
MAX_VALUE_LENGTH = 1024
MAX_EXCLUSION_SLOTS = MAX_SELECTORS * MAX_HEADERS_PER_SELECTOR - 1
MAX_LIMIT_SLOTS = MAX_LIMITS_PER_BUDGET
"""The most limits one budget may have (budgetPolicy.limitSlots)."""
LIMIT_SLOTS_ANNOTATION = "agent-budgets.dev/limit-slots"
"""On the budget policy: its budgetPolicy.limitSlots, so a reader can tell which rules form one budget."""
RESERVED_LIMIT = {"requests": UINT32_MAX, "unit": "Year"}
"""A reserved slot's limit: it matches nobody, and would never refuse anyone if it did."""

# Matches no string at all: `$` is the end of the text, so nothing can follow it.
MATCHES_NOTHING = "^$."

_RE2_LITERAL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/ ")

Unit = Literal["tokens", "usd", "calls"]
SPEND_UNITS: tuple[Unit, ...] = ("tokens", "usd")
"""The units a response is charged in (a calls limit counts calls, not spend)."""


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
class LimitSpec:
    """One limit of a budget, as plain data: `amount` tokens or calls (int) or dollars (Decimal) per `per`."""

    unit: Unit
    amount: int | Decimal
    per: str

    @property
    def requests(self) -> int:
        """The rule's limit in the counter's unit: tokens, calls, or mills ($0.001) for usd."""
        if self.unit == "usd":
            return usd_to_mills(Decimal(self.amount))
        return int(self.amount)

    @property
    def metadata_key(self) -> str | None:
        """The Agent Router metadata key this limit's rule charges (None: a calls limit charges the request)."""
        return METADATA_KEYS.get(self.unit)

    @property
    def counts_spend(self) -> bool:
        """Whether responses are charged to this limit (tokens or usd), rather than calls counted."""
        return self.unit in SPEND_UNITS

    def describe(self) -> dict[str, Any]:
        """Unit, amount and window, for stack outputs and reports."""
        amount: int | float = float(self.amount) if self.unit == "usd" else int(self.amount)
        return {"unit": self.unit, "amount": amount, "per": self.per}


@dataclass(frozen=True)
class BudgetSpec:
    """A budget as plain data: its limits (every one applies) and, for a class, its members.

    `key` is the budget's configuration key (`budgets.default`, `budgets.classes[2]`) for messages.
    """

    name: str
    limits: tuple[LimitSpec, ...]
    actors: tuple[str, ...] = ()
    key: str = ""


@dataclass(frozen=True)
class CompiledRule:
    """One rate-limit rule and the bookkeeping outputs, reports and the policy pack read."""

    index: int
    budget: str  # "default", the class name, or "" for a reserved slot
    budget_index: int  # 0 for the default, k for class k-1
    limit_index: int  # position of the limit in its budget's list
    limit: LimitSpec | None  # None for a reserved slot
    actors: tuple[str, ...]  # class members admitted (empty for the default rule)
    headers: tuple[dict[str, Any], ...]  # concatenated header matches, selector by selector

    @property
    def reserved(self) -> bool:
        """A slot kept for a limit not configured yet: it matches no actor."""
        return self.limit is None

    @property
    def purpose(self) -> str:
        """`default`, `class:<name>` or `reserved`."""
        if self.limit is None:
            return "reserved"
        return "default" if self.budget_index == 0 else f"class:{self.budget}"

    @property
    def unit(self) -> Unit | None:
        """What the rule's counter counts: tokens, calls, or usd in mills (None for a reserved slot)."""
        return None if self.limit is None else self.limit.unit

    def counter_amount(self, value: int) -> int | Decimal:
        """A counter value of this rule in the limit's own unit: tokens, or dollars."""
        return mills_to_usd(value) if self.unit == "usd" else value

    def to_spec(self) -> dict[str, Any]:
        """The rule as Envoy Gateway's BackendTrafficPolicy expects it (camelCase)."""
        selectors = [
            {"headers": list(self.headers[start : start + MAX_HEADERS_PER_SELECTOR])}
            for start in range(0, len(self.headers), MAX_HEADERS_PER_SELECTOR)
        ]
        spec: dict[str, Any] = {"clientSelectors": selectors}
        if self.limit is None:
            spec["limit"] = dict(RESERVED_LIMIT)
            metadata_key: str | None = COST_METADATA_KEY
        else:
            spec["limit"] = {"requests": self.limit.requests, "unit": self.limit.per}
            metadata_key = self.limit.metadata_key
        spec["shared"] = True
        if metadata_key is None:
            # One call on the request, nothing on the response: Envoy Gateway adds no stream-done rate limit
            # for a rule without a response cost (v1.9.0 internal/xds/translator/ratelimit.go).
            spec["cost"] = {"request": {"from": "Number", "number": CALL_COST}}
        else:
            spec["cost"] = {
                "request": {"from": "Number", "number": 0},
                "response": {
                    "from": "Metadata",
                    "metadata": {"namespace": COST_METADATA_NAMESPACE, "key": metadata_key},
                },
            }
        if self.limit is None:
            spec["shadowMode"] = True  # belt and braces: even a match could never refuse anyone
        return spec


@dataclass(frozen=True)
class BudgetRules:
    """The compiled policy: rules in index order, and where each budget and class member landed."""

    rules: tuple[CompiledRule, ...]
    exclusion_slots: int
    slots_used: int
    limit_slots: int = 1
    class_of_actor: dict[str, int] = field(default_factory=dict)
    """Each class member → its budget index (k for class k-1; the default, 0, holds everyone else)."""

    def specs(self) -> list[dict[str, Any]]:
        """Every rule as a BackendTrafficPolicy rule, in index order (reserved slots included)."""
        return [rule.to_spec() for rule in self.rules]

    @property
    def limit_rules(self) -> tuple[CompiledRule, ...]:
        """The rules that hold a configured limit (no reserved slot)."""
        return tuple(rule for rule in self.rules if not rule.reserved)

    def rules_of_budget(self, budget_index: int) -> tuple[CompiledRule, ...]:
        """The rules of one budget (0 for the default, k for class k-1), in limit order."""
        return tuple(rule for rule in self.limit_rules if rule.budget_index == budget_index)

    def rules_for_actor(self, actor_id: str) -> tuple[CompiledRule, ...]:
        """Every rule that charges actor `<atespace>/<name>`: its class's limits, or the default's."""
        return self.rules_of_budget(self.class_of_actor.get(actor_id, 0))

    def summary(self) -> list[dict[str, Any]]:
        """A small, secret-free description of every limit's rule for stack outputs."""
        return [
            {
                "rule": rule.index,
                "budget": rule.purpose,
                "limit": rule.limit_index,
                **rule.limit.describe(),
                "requests": rule.limit.requests,
                "members": len(rule.actors),
            }
            for rule in self.limit_rules
            if rule.limit is not None
        ]


def _distinct() -> dict[str, Any]:
    return {"name": ACTOR_HEADER, "type": "Distinct"}


def _regex(value: str, invert: bool) -> dict[str, Any]:
    match: dict[str, Any] = {"name": ACTOR_HEADER, "type": "RegularExpression", "value": value}
    if invert:
        match["invert"] = True
    return match


def _always() -> dict[str, Any]:
    """A match every request with an `x-actor-id` passes: it adds one descriptor entry, nothing else."""
    return _regex(MATCHES_NOTHING, invert=True)


def _with_unit(headers: tuple[dict[str, Any], ...], limit: LimitSpec) -> tuple[dict[str, Any], ...]:
    return (*headers, *(_always() for _ in range(KIND_MARKERS[limit.unit])))


def _key(spec: BudgetSpec, fallback: str) -> str:
    return spec.key or fallback


def _layout_problems(
    default: BudgetSpec, classes: Sequence[BudgetSpec], exclusion_slots: int, limit_slots: int
) -> list[Problem]:
    """Every reason the budgets cannot be laid out as rules within Envoy Gateway's caps."""
    problems: list[Problem] = []
    if not 1 <= exclusion_slots <= MAX_EXCLUSION_SLOTS:
        problems.append(
            Problem(
                "budgetPolicy.exclusionSlots",
                f"is {exclusion_slots}: it must be between 1 and {MAX_EXCLUSION_SLOTS} ({MAX_SELECTORS} selectors of "
                f"{MAX_HEADERS_PER_SELECTOR} matches, minus the Distinct match)",
            )
        )
    if not 1 <= limit_slots <= MAX_LIMIT_SLOTS:
        problems.append(
            Problem("budgetPolicy.limitSlots", f"is {limit_slots}: it must be between 1 and {MAX_LIMIT_SLOTS}")
        )
        return problems
    budgets = [default, *classes]
    for position, budget in enumerate(budgets):
        where = _key(budget, "budgets.default" if position == 0 else f"budgets.classes[{position - 1}]")
        if not budget.limits:
            problems.append(Problem(where, "has no limit: give it tokens (or usd) and per, or a non-empty limits list"))
        elif len(budget.limits) > limit_slots:
            problems.append(
                Problem(
                    f"{where}.limits",
                    f"has {len(budget.limits)} limits but {PROJECT}:budgetPolicy.limitSlots is {limit_slots}: set "
                    f"budgetPolicy.limitSlots to {len(budget.limits)} or more (up to {MAX_LIMIT_SLOTS}). Every class's "
                    "rules move when it changes, so class counters restart once (the default budget's keep theirs)",
                )
            )
    last_index = (len(budgets) - 1) * limit_slots + max(len(budgets[-1].limits), 1) - 1
    if last_index >= MAX_RULES:
        # c classes fit when c * limitSlots + (limits of the last class) - 1 < MAX_RULES.
        most = (MAX_RULES - max(len(budgets[-1].limits), 1)) // limit_slots
        problems.append(
            Problem(
                "budgets.classes",
                f"has {len(classes)} classes: with budgetPolicy.limitSlots {limit_slots} they need {last_index + 1} "
                f"rate-limit rules, over Envoy Gateway's {MAX_RULES} per policy, so at most {most} classes fit. Merge "
                "classes that share the same limits, or lower budgetPolicy.limitSlots",
            )
        )
    for position, budget_class in enumerate(classes):
        pattern = actors_regex(budget_class.actors)
        if len(pattern) > MAX_VALUE_LENGTH:
            fitting = len(pack_actors(budget_class.actors)[0])
            problems.append(
                Problem(
                    f"{_key(budget_class, f'budgets.classes[{position}]')}.actors",
                    f"class {budget_class.name!r}: matching its {len(budget_class.actors)} actors takes {len(pattern)} "
                    f"characters, over Envoy Gateway's {MAX_VALUE_LENGTH} per match, and a rule cannot admit actors "
                    f"through several matches. Keep about {fitting} actors in this class and append a new class with "
                    "the same limits for the rest",
                )
            )
    members = {actor for budget_class in classes for actor in budget_class.actors}
    needed = len(pack_actors(members))
    markers = max((KIND_MARKERS[limit.unit] for limit in default.limits), default=0)
    capacity = MAX_EXCLUSION_SLOTS - markers
    if markers and exclusion_slots > capacity:
        kind = next(limit.unit for limit in default.limits if KIND_MARKERS[limit.unit] == markers)
        extra = "one more match" if markers == 1 else f"{markers} more matches"
        problems.append(
            Problem(
                "budgetPolicy.exclusionSlots",
                f"is {exclusion_slots}, but a {kind} limit on the default budget needs {extra} in its rule: lower "
                f"it to {capacity} (every default-budget bucket restarts once)",
            )
        )
    if needed > capacity:
        problems.append(
            Problem(
                "budgets.classes",
                f"excluding {len(members)} class members from the default budget needs {needed} matches, over Envoy "
                f"Gateway's {capacity}. Use shorter actor names or fewer class members",
            )
        )
    elif needed > exclusion_slots and 1 <= exclusion_slots <= MAX_EXCLUSION_SLOTS:
        problems.append(
            Problem(
                "budgetPolicy.exclusionSlots",
                f"is {exclusion_slots}, but excluding the {len(members)} class members from the default budget needs "
                f"{needed}. Set {PROJECT}:budgetPolicy.exclusionSlots to {needed} or more (every default-budget bucket "
                "restarts once when the slot count changes)",
            )
        )
    return problems


def compile_rules(
    default: BudgetSpec,
    classes: Sequence[BudgetSpec],
    exclusion_slots: int,
    limit_slots: int = 1,
) -> BudgetRules:
    """Lay every limit of every budget out as rules; raise ConfigError listing every Envoy Gateway cap they
    would break (each Problem names the key to change and how)."""
    problems = _layout_problems(default, classes, exclusion_slots, limit_slots)
    if problems:
        raise ConfigError(problems)
    budgets = [default, *classes]
    last_index = (len(budgets) - 1) * limit_slots + len(budgets[-1].limits) - 1
    class_headers: list[tuple[dict[str, Any], ...]] = []
    class_of_actor: dict[str, int] = {}
    for position, budget_class in enumerate(classes, start=1):
        class_headers.append((_distinct(), _regex(actors_regex(budget_class.actors), invert=False)))
        for actor in budget_class.actors:
            class_of_actor[actor] = position
    chunks = pack_actors(class_of_actor)
    slots = [_regex(actors_regex(chunk), invert=True) for chunk in chunks]
    slots += [_regex(MATCHES_NOTHING, invert=True) for _ in range(exclusion_slots - len(chunks))]
    default_headers = (_distinct(), *slots)

    rules: list[CompiledRule] = []
    for position, budget in enumerate(budgets):
        headers = default_headers if position == 0 else class_headers[position - 1]
        actors = () if position == 0 else tuple(budget.actors)
        name = "default" if position == 0 else budget.name
        for slot in range(limit_slots):
            index = position * limit_slots + slot
            if index > last_index:
                break
            if slot < len(budget.limits):
                limit = budget.limits[slot]
                rules.append(CompiledRule(index, name, position, slot, limit, actors, _with_unit(headers, limit)))
            else:
                never = (_distinct(), _regex(MATCHES_NOTHING, invert=False))
                rules.append(CompiledRule(index, "", position, slot, None, (), never))
    return BudgetRules(
        rules=tuple(rules),
        exclusion_slots=exclusion_slots,
        slots_used=len(chunks),
        limit_slots=limit_slots,
        class_of_actor=class_of_actor,
    )


def budget_specs(budgets: BudgetsConfig) -> tuple[BudgetSpec, list[BudgetSpec]]:
    """The validated `agent-budgets:budgets` as plain budget specs (default first, then classes)."""
    default = BudgetSpec(
        "default", tuple(_limit_spec(limit) for limit in budgets.default.limit_list()), (), "budgets.default"
    )
    classes = [
        BudgetSpec(
            c.name,
            tuple(_limit_spec(limit) for limit in c.limit_list()),
            tuple(c.actors),
            f"budgets.classes[{i}]",
        )
        for i, c in enumerate(budgets.classes)
    ]
    return default, classes


def _limit_spec(limit: Any) -> LimitSpec:
    if limit.usd is not None:
        return LimitSpec("usd", limit.usd, limit.per)
    if limit.calls is not None:
        return LimitSpec("calls", limit.calls, limit.per)
    return LimitSpec("tokens", limit.tokens, limit.per)


def compile_budget_rules(budgets: BudgetsConfig, exclusion_slots: int, limit_slots: int = 1) -> BudgetRules:
    """Compile the validated `agent-budgets:budgets` (see `compile_rules`)."""
    default, classes = budget_specs(budgets)
    return compile_rules(default, classes, exclusion_slots, limit_slots)

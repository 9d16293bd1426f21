"""Compile `agent-budgets:budgets` into the rules of the one BackendTrafficPolicy that holds every budget.

Pure functions over plain data. Every limit of every budget and pool is one rate-limit rule; Envoy Gateway
applies every rule whose selectors match ("If a request matches multiple rules, each of their associated
limits get applied", envoyproxy/gateway v1.9.0 `api/v1alpha1/ratelimit_types.go`), so an actor's request is
refused as soon as any of its limits, or any limit of a pool it is in, is spent, and each response charges all
of them. The layout is chosen so that counters survive configuration edits:

* Envoy's rate-limit service keys a counter by the policy, the rule index and every descriptor entry of
  the rule (`rule-<k>-match-<m>`), plus the actor id for the Distinct match (v1.9.0
  `internal/xds/translator/ratelimit.go` `buildRouteRateLimits`, `buildHeaderMatchRateLimitActions`;
  envoyproxy/ratelimit `src/limiter/cache_key.go`). Regular-expression values are not part of the key; the
  number of matches in a rule, and where the Distinct one sits, are.
* Rules come in blocks of `limitSlots` (budgetPolicy.limitSlots, default 1), and a block's j-th rule is its
  j-th limit. Block 0 is the default budget and class k-1 is block k. Pools come after the classes: once there
  is a pool, blocks 1 to `classSlots` (budgetPolicy.classSlots) are the classes', and pool p is block
  `classSlots + 1 + p`. Appending a class (within `classSlots` once there are pools) or a pool appends a
  block; appending a limit fills the next slot of its own block; none moves any other rule. A slot without a
  limit (before the last real rule) holds a reserved rule that matches no actor. With limitSlots 1 and no
  pools this is exactly the single-limit layout of earlier versions, and adding the first pool after the
  existing classes moves nothing, so existing stacks keep their counters. (Pools before the classes would
  move every class's counters when the first pool is added; docs/budgets.md, "Why pools come after the
  classes", has the alternatives.)
* Every rule of the default budget has Distinct on `x-actor-id` followed by a fixed number of inverted
  regular expressions ("exclusion slots") that exclude every class member. Members are packed into the
  slots; unused slots hold a pattern that matches nothing. The slot count never depends on the classes,
  so adding or moving a class member leaves every default counter key unchanged.
* Every rule of a class has Distinct plus one regular expression that admits exactly its actors.
* A pool's rules have no Distinct match: one regular expression admits its members (listed actors, and
  `^actor/<atespace>/[^/]+$` for every actor of a whole atespace, present or future), so every member's
  calls charge the same counter. A member's own budget still applies: the pool is charged in addition.
* A per-model limit's rule starts with a match on `x-ai-eg-model`, the model name the agent sent: Agent
  Router's router-level filter sets it from the request body, overwriting any value the client sent, before
  the rate-limit filter builds its descriptors, and no `modelNameOverride` changes it (envoyproxy/ai-gateway
  v1.1.0 `internal/extproc/processor_impl.go` :282-290 and `SetBackend` :700-709, which changes only the
  processor's own copy; `internal/extensionserver/post_translate_modify.go` inserts that filter before the
  rate-limit filter). The match comes first, so in a budget's rule the actor id sits one place later in the
  key than in any limit over every model.
* A limit's kind is told apart in the counter key by a number of extra, always-true matches (an inverted
  pattern that matches nothing): `KIND_MARKERS`, none for tokens (total), one for usd, two for calls, then
  the token kinds input, output and cachedInput; a new kind takes the next number. In a pool's rule, which
  has no actor value in its key, the count alone tells limits apart, so a pool rule carries twice its kind's
  markers and a per-model pool limit one more match (the model match): even counts for limits over every
  model, odd for per-model ones. Two kinds never share a Redis key, so changing a limit's kind in place
  starts that limit afresh instead of reading tokens as mills, calls or other tokens.
* Every rule is `shared: true` (one bucket per actor, or per pool, across all model routes). A tokens or usd
  limit costs nothing on the request and charges the response with what Agent Router reports under its
  kind's metadata key (`llm_total_token`, `llm_input_token`, `llm_output_token`, `llm_cached_input_token`, or
  the call's price in mills, `agent_budgets_usd_mills`, see core/money.py). A calls limit charges 1 on the
  request and nothing on the response, so it counts the calls checked, refused ones included.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from core.identity import SUBSTRATE_SUBJECT_PREFIX, ActorRef, parse_actor_id
from core.money import UINT32_MAX, USD_METADATA_KEY, mills_to_usd, usd_to_mills
from core.problems import PROJECT, ConfigError, Problem
from core.settings import MAX_LIMITS_PER_BUDGET, BudgetsConfig, TokenKind

ACTOR_HEADER = "x-actor-id"
MODEL_HEADER = "x-ai-eg-model"
"""The model name the agent sent, set by Agent Router before the rate-limit filter runs (module docstring;
envoyproxy/ai-gateway v1.1.0 `api/v1beta1/shared_types.go` `AIModelHeaderKey`)."""
SUBJECT_PREFIX = SUBSTRATE_SUBJECT_PREFIX
COST_METADATA_NAMESPACE = "io.envoy.ai_gateway"
COST_METADATA_KEY = "llm_total_token"
TOKEN_METADATA_KEYS: dict[TokenKind, str] = {
    "total": COST_METADATA_KEY,
    "input": "llm_input_token",
    "output": "llm_output_token",
    "cachedInput": "llm_cached_input_token",
}
"""The metadata key Agent Router reports each kind of tokens under (the keys of upstream's own example,
envoyproxy/ai-gateway v1.1.0 `examples/token_ratelimit/token_ratelimit.yaml`)."""
TOKEN_COST_TYPES: dict[TokenKind, str] = {
    "total": "TotalToken",
    "input": "InputToken",
    "output": "OutputToken",
    "cachedInput": "CachedInputToken",
}
"""The `llmRequestCosts` type that computes each kind (envoyproxy/ai-gateway v1.1.0 `internal/filterapi/
filterconfig.go` `LLMRequestCostType*`; `internal/extproc/processor_impl.go` `evalCost` reads one usage field
per type, 0 when the provider sent none)."""
Kind = Literal["tokens", "usd", "calls", "input", "output", "cachedInput"]
METADATA_KEYS: dict[str, str] = {
    "tokens": COST_METADATA_KEY,
    "usd": USD_METADATA_KEY,
    "input": TOKEN_METADATA_KEYS["input"],
    "output": TOKEN_METADATA_KEYS["output"],
    "cachedInput": TOKEN_METADATA_KEYS["cachedInput"],
}
"""The dynamic-metadata key a limit's rule charges at the end of a response, by the limit's kind (a calls
limit charges the request instead)."""
KIND_MARKERS: dict[Kind, int] = {"tokens": 0, "usd": 1, "calls": 2, "input": 3, "output": 4, "cachedInput": 5}
"""Always-true matches appended to a limit's rule by its kind: the kind's part of the counter key."""
POOL_MARKER_FACTOR = 2
"""A pool rule carries this many times its kind's markers (its per-model limits one match more)."""
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
CLASS_SLOTS_ANNOTATION = "agent-budgets.dev/class-slots"
"""On the budget policy when it has pools: blocks 1 to this number are the classes' (reserved where there is no
class yet), and every later block is a pool's (one shared bucket per limit)."""
RESERVED_LIMIT = {"requests": UINT32_MAX, "unit": "Year"}
"""A reserved slot's limit: it matches nobody, and would never refuse anyone if it did."""

# Matches no string at all: `$` is the end of the text, so nothing can follow it.
MATCHES_NOTHING = "^$."

_RE2_LITERAL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/ ")
_RE2_ALL_SAFE = re.compile(r"[a-zA-Z0-9_\-/ ]*")
"""Text made of `_RE2_LITERAL_SAFE` characters only (`fullmatch` it): nothing to escape."""

Unit = Literal["tokens", "usd", "calls"]
KIND_TEXT: dict[Kind, str] = {
    "tokens": "tokens",
    "usd": "usd",
    "calls": "calls",
    "input": "input tokens",
    "output": "output tokens",
    "cachedInput": "cached input tokens",
}
"""A kind as people read it in a limit: `500 output tokens per Hour`."""
SPEND_UNITS: tuple[Unit, ...] = ("tokens", "usd")
"""The units a response is charged in (a calls limit counts calls, not spend)."""


def re2_escape(text: str) -> str:
    """Escape every character RE2 could read as syntax (RE2 accepts a backslash before punctuation)."""
    if _RE2_ALL_SAFE.fullmatch(text):
        return text  # the common case (an actor or atespace name), in one match
    return "".join(ch if ch in _RE2_LITERAL_SAFE else "\\" + ch for ch in text)


def _alternatives(names: Sequence[str]) -> str:
    return "|".join(re2_escape(name) for name in names)


def _group_pattern(group: str, separator: str, names: Sequence[str]) -> str:
    """`agents/(?:a|b)`; for an API key, which has no group, just the names: `a|b`."""
    if not group:
        return _alternatives(names)
    return f"{re2_escape(group)}{re2_escape(separator)}(?:{_alternatives(names)})"


def _source_pattern(prefix: str, groups: Mapping[tuple[str, str], Sequence[str]]) -> str:
    """`actor/(?:agents/(?:a|b)|lab/(?:c))`: every group of one source under its value prefix."""
    parts = [_group_pattern(group, separator, names) for (group, separator), names in groups.items()]
    return f"{re2_escape(prefix)}(?:{'|'.join(parts)})"


def _layout(actor_ids: Iterable[str]) -> dict[str, dict[tuple[str, str], list[str]]]:
    """Value prefix → (group, separator) → names, in the order of the sorted actor ids."""
    layout: dict[str, dict[tuple[str, str], list[str]]] = {}
    for actor in sorted(set(actor_ids)):
        ref = parse_actor_id(actor)
        layout.setdefault(ref.value_prefix, {}).setdefault((ref.group, ref.separator), []).append(ref.name)
    return layout


def actors_regex(actor_ids: Iterable[str]) -> str:
    """An anchored RE2 pattern matching exactly the `x-actor-id` values of `actor_ids`, grouped by source and by
    atespace or namespace.

    `^actor/(?:agents/(?:a|b)|lab/(?:c))$` for Substrate actors alone (the pattern of every earlier version);
    with several sources, one alternative each: `^(?:actor/(?:agents/(?:a))|apikey\\.(?:ci-bot))$`.
    """
    layout = _layout(actor_ids)
    if not layout:
        return MATCHES_NOTHING
    sources = [_source_pattern(prefix, groups) for prefix, groups in layout.items()]
    if len(sources) == 1:
        return f"^{sources[0]}$"
    return f"^(?:{'|'.join(sources)})$"


class _PatternLength:
    """The exact length of `actors_regex` over a growing set of actors (added in sorted order), kept in O(1)
    per actor: one source alone is `^P$`, several `^(?:P1|P2)$`; a source `esc(prefix)(?:G1|G2)`; a group
    `esc(group)esc(separator)(?:n1|n2)`, or for an API key (no group) `n1|n2`."""

    def __init__(self) -> None:
        self.groups: dict[str, set[tuple[str, str]]] = {}
        self.length = 0

    def cost(self, ref: ActorRef) -> int:
        """How much longer the pattern gets when `ref` is added."""
        name = len(re2_escape(ref.name))
        groups = self.groups.get(ref.value_prefix)
        if groups is not None and (ref.group, ref.separator) in groups:
            return name + 1
        group = name if not ref.group else len(re2_escape(ref.group)) + len(re2_escape(ref.separator)) + 4 + name
        if groups is not None:
            return group + 1
        source = len(re2_escape(ref.value_prefix)) + 4 + group
        if not self.groups:
            return 2 + source
        return source + 1 + (4 if len(self.groups) == 1 else 0)

    def add(self, ref: ActorRef) -> None:
        self.length += self.cost(ref)
        self.groups.setdefault(ref.value_prefix, set()).add((ref.group, ref.separator))


def pack_actors(actor_ids: Iterable[str], max_length: int = MAX_VALUE_LENGTH) -> list[list[str]]:
    """Split actors into the fewest sorted chunks whose `actors_regex` fits in `max_length` characters.

    Greedy over sorted ids, with the pattern length computed incrementally (linear in the number of
    actors), then checked exactly.
    """
    chunks: list[list[str]] = []
    current: list[str] = []
    pattern = _PatternLength()
    for actor in sorted(set(actor_ids)):
        ref = parse_actor_id(actor)
        if current and pattern.length + pattern.cost(ref) > max_length:
            chunks.append(current)
            current, pattern = [], _PatternLength()
        if not current and pattern.cost(ref) > max_length:
            raise ConfigError(
                [Problem("actors", f"actor {actor!r} alone needs more than {max_length} characters to match")]
            )
        current.append(actor)
        pattern.add(ref)
    if current:
        chunks.append(current)
    for chunk in chunks:
        assert len(actors_regex(chunk)) <= max_length, "packing length drifted from actors_regex"
    return chunks


def atespace_pattern(atespaces: Iterable[str]) -> str:
    """The unanchored RE2 alternative matching every Substrate subject of these atespaces, present or future:
    `actor/(?:agents|lab)/[^/]+`. A subject is `actor/<atespace>/<name>` and a name holds no `/`, so nothing
    of another atespace, or of another identity source, can match."""
    names = "|".join(re2_escape(atespace) for atespace in sorted(set(atespaces)))
    return f"{re2_escape(SUBJECT_PREFIX)}(?:{names})/[^/]+"


def atespace_of(actor_id: str) -> str | None:
    """The atespace of a Substrate actor id `<atespace>/<name>`; None for any other id."""
    parts = actor_id.split("/")
    return parts[0] if len(parts) == 2 and ":" not in actor_id else None


def pool_regex(members: Iterable[str], atespaces: Iterable[str]) -> str:
    """One anchored RE2 pattern admitting a pool's members: its listed actors and every actor of its atespaces.

    A rule cannot OR two matches (a selector's header matches are ANDed, and so are selectors), so a pool is
    one pattern or nothing: `^(?:actor/(?:agents/(?:a))|actor/(?:lab)/[^/]+)$`.
    """
    whole = sorted(set(atespaces))
    listed = [actor for actor in members if atespace_of(actor) not in whole]
    parts = []
    if listed:
        parts.append(actors_regex(listed)[1:-1])  # without its anchors
    if whole:
        parts.append(atespace_pattern(whole))
    if not parts:
        return MATCHES_NOTHING
    return f"^{parts[0]}$" if len(parts) == 1 else f"^(?:{'|'.join(parts)})$"


def model_match(models: Sequence[str]) -> dict[str, Any]:
    """The `x-ai-eg-model` header match admitting exactly these model names: Exact for one (as upstream's own
    per-model example, envoyproxy/ai-gateway v1.1.0 `site/docs/capabilities/traffic/usage-based-ratelimiting.md`),
    else one anchored, fully escaped alternation (a rule cannot OR two matches). Names are matched exactly and
    case-sensitively, as Agent Router's model routing matches them."""
    names = sorted(set(models))
    if len(names) == 1:
        return {"name": MODEL_HEADER, "type": "Exact", "value": names[0]}
    return {"name": MODEL_HEADER, "type": "RegularExpression", "value": models_regex(names)}


def models_regex(models: Iterable[str]) -> str:
    """`^(?:gpt-4\\.1|gpt-4o)$`: the names, escaped, in one anchored alternation."""
    return f"^(?:{'|'.join(re2_escape(model) for model in sorted(set(models)))})$"


@dataclass(frozen=True)
class LimitSpec:
    """One limit of a budget or pool, as plain data: `amount` tokens or calls (int) or dollars (Decimal) per
    `per`; a tokens limit counts the tokens of `count`; with `models`, only calls to those models count."""

    unit: Unit
    amount: int | Decimal
    per: str
    count: TokenKind = "total"
    models: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        """What the counter counts: `tokens` (total), `input`, `output`, `cachedInput`, `usd` or `calls`."""
        if self.unit == "tokens" and self.count != "total":
            return self.count
        return self.unit

    @property
    def requests(self) -> int:
        """The rule's limit in the counter's unit: tokens, calls, or mills ($0.001) for usd."""
        if self.unit == "usd":
            return usd_to_mills(Decimal(self.amount))
        return int(self.amount)

    @property
    def metadata_key(self) -> str | None:
        """The Agent Router metadata key this limit's rule charges (None: a calls limit charges the request)."""
        return METADATA_KEYS.get(self.kind)

    @property
    def counts_spend(self) -> bool:
        """Whether responses are charged to this limit (tokens or usd), rather than calls counted."""
        return self.unit in SPEND_UNITS

    def covers(self, other: LimitSpec) -> bool:
        """Whether every call `other` counts is also counted here (same models, or every model here)."""
        return not self.models or (bool(other.models) and set(other.models) <= set(self.models))

    def describe(self) -> dict[str, Any]:
        """Unit, amount and window (and `count`, `models` when they narrow it), for stack outputs and reports."""
        amount: int | float = float(self.amount) if self.unit == "usd" else int(self.amount)
        described: dict[str, Any] = {"unit": self.unit, "amount": amount, "per": self.per}
        if self.kind != self.unit:
            described["count"] = self.count
        if self.models:
            described["models"] = list(self.models)
        return described


@dataclass(frozen=True)
class BudgetSpec:
    """A budget as plain data: its limits (every one applies) and, for a class, its members.

    `key` is the budget's configuration key (`budgets.default`, `budgets.classes[2]`) and `limit_keys` each
    limit's (`budgets.default.limits[1]`, or the budget's own key in the short form), for messages.
    """

    name: str
    limits: tuple[LimitSpec, ...]
    actors: tuple[str, ...] = ()
    key: str = ""
    limit_keys: tuple[str, ...] = ()

    def limit_key(self, position: int, fallback: str) -> str:
        """The configuration key of limit `position`."""
        if position < len(self.limit_keys):
            return self.limit_keys[position]
        return f"{self.key or fallback}.limits[{position}]"


@dataclass(frozen=True)
class PoolSpec(BudgetSpec):
    """A pool as plain data: its limits, charged by all of its members together; `actors` are the listed
    members, `atespaces` the Substrate atespaces all of whose actors are members, present or future."""

    atespaces: tuple[str, ...] = ()

    def admits(self, actor_id: str) -> bool:
        """Whether the pool's rules charge the calls of `actor_id` (what `pool_regex` admits)."""
        return actor_id in self.actors or atespace_of(actor_id) in self.atespaces

    @property
    def pattern(self) -> str:
        """The one `x-actor-id` pattern that admits the members."""
        return pool_regex(self.actors, self.atespaces)


@dataclass(frozen=True)
class CompiledRule:
    """One rate-limit rule and the bookkeeping outputs, reports and the policy pack read."""

    index: int
    budget: str  # "default", the class or pool name, or "" for a reserved slot
    budget_index: int | None  # 0 for the default, k for class k-1; None in the pools' blocks
    limit_index: int  # position of the limit in its budget's (or pool's) list
    limit: LimitSpec | None  # None for a reserved slot
    actors: tuple[str, ...]  # class or pool members admitted (empty for the default rule)
    headers: tuple[dict[str, Any], ...]  # concatenated header matches, selector by selector
    pool_index: int | None = None  # p for the rules of pool p (or of its reserved block)
    atespaces: tuple[str, ...] = ()  # a pool's whole atespaces

    @property
    def reserved(self) -> bool:
        """A slot kept for a limit not configured yet: it matches no actor."""
        return self.limit is None

    @property
    def pooled(self) -> bool:
        """A pool's limit: one counter for all of its members."""
        return self.pool_index is not None and self.limit is not None

    @property
    def purpose(self) -> str:
        """`default`, `class:<name>`, `pool:<name>` or `reserved`."""
        if self.limit is None:
            return "reserved"
        if self.pool_index is not None:
            return f"pool:{self.budget}"
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
    """The compiled policy: rules in index order, and where each budget, pool and class member landed."""

    rules: tuple[CompiledRule, ...]
    exclusion_slots: int
    slots_used: int
    limit_slots: int = 1
    class_of_actor: dict[str, int] = field(default_factory=dict)
    """Each class member → its budget index (k for class k-1; the default, 0, holds everyone else)."""
    class_slots: int = 0
    """budgetPolicy.classSlots: the class blocks before the first pool (they matter only once there are pools)."""
    pools: tuple[PoolSpec, ...] = ()

    def specs(self) -> list[dict[str, Any]]:
        """Every rule as a BackendTrafficPolicy rule, in index order (reserved slots included)."""
        return [rule.to_spec() for rule in self.rules]

    @property
    def limit_rules(self) -> tuple[CompiledRule, ...]:
        """The rules that hold a configured limit (no reserved slot)."""
        return tuple(rule for rule in self.rules if not rule.reserved)

    @functools.cached_property
    def _rules_by_owner(self) -> dict[tuple[str, int], tuple[CompiledRule, ...]]:
        """("budget", b) or ("pool", p) → its limit rules in limit order, grouped once (asked once per actor)."""
        grouped: dict[tuple[str, int], list[CompiledRule]] = {}
        for rule in self.limit_rules:
            owner = ("pool", rule.pool_index) if rule.pool_index is not None else ("budget", rule.budget_index)
            grouped.setdefault(owner, []).append(rule)  # type: ignore[arg-type]
        return {owner: tuple(rules) for owner, rules in grouped.items()}

    def rules_of_budget(self, budget_index: int) -> tuple[CompiledRule, ...]:
        """The rules of one budget (0 for the default, k for class k-1), in limit order."""
        return self._rules_by_owner.get(("budget", budget_index), ())

    def rules_of_pool(self, pool_index: int) -> tuple[CompiledRule, ...]:
        """The rules of pool `pool_index` (its position in `budgets.pools`), in limit order."""
        return self._rules_by_owner.get(("pool", pool_index), ())

    def rules_for_actor(self, actor_id: str) -> tuple[CompiledRule, ...]:
        """Every rule that charges the actor `actor_id` (any source): its class's limits, or the default's."""
        return self.rules_of_budget(self.class_of_actor.get(actor_id, 0))

    def pools_of_actor(self, actor_id: str) -> tuple[int, ...]:
        """The positions of the pools the actor is in (listed, or of a whole atespace)."""
        return tuple(position for position, pool in enumerate(self.pools) if pool.admits(actor_id))

    def pool_rules_for_actor(self, actor_id: str) -> tuple[CompiledRule, ...]:
        """Every rule of every pool the actor is in, pool by pool."""
        return tuple(rule for position in self.pools_of_actor(actor_id) for rule in self.rules_of_pool(position))

    def model_names(self) -> tuple[str, ...]:
        """Every model some per-model limit names, sorted."""
        return tuple(sorted({m for rule in self.limit_rules if rule.limit is not None for m in rule.limit.models}))

    def summary(self) -> list[dict[str, Any]]:
        """A small, secret-free description of every limit's rule for stack outputs."""
        summary = []
        for rule in self.limit_rules:
            assert rule.limit is not None
            entry = {
                "rule": rule.index,
                "budget": rule.purpose,
                "limit": rule.limit_index,
                **rule.limit.describe(),
                "requests": rule.limit.requests,
                "members": len(rule.actors),
            }
            if rule.pool_index is not None:
                entry["atespaces"] = list(rule.atespaces)
            summary.append(entry)
        return summary


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


def marker_count(limit: LimitSpec, pooled: bool) -> int:
    """The always-true matches a limit's rule ends with: its kind's, doubled in a pool's rule."""
    return KIND_MARKERS[limit.kind] * (POOL_MARKER_FACTOR if pooled else 1)


def extra_matches(limit: LimitSpec, pooled: bool = False) -> int:
    """The matches a limit adds to its budget's (or pool's) own: the model match and the kind's markers."""
    return (1 if limit.models else 0) + marker_count(limit, pooled)


def limit_headers(headers: tuple[dict[str, Any], ...], limit: LimitSpec, pooled: bool) -> tuple[dict[str, Any], ...]:
    """A limit's matches: the model match first (when it names models), the budget's or pool's own, then the
    kind's markers."""
    model = (model_match(limit.models),) if limit.models else ()
    return (*model, *headers, *(_always() for _ in range(marker_count(limit, pooled))))


def _key(spec: BudgetSpec, fallback: str) -> str:
    return spec.key or fallback


@dataclass(frozen=True)
class _Block:
    """One block of `limitSlots` rules: the default budget, a class (or a class slot not used yet), or a pool."""

    number: int
    spec: BudgetSpec | None
    budget_index: int | None
    pool_index: int | None
    key: str


def first_pool_block(class_count: int, class_slots: int) -> int:
    """The block of the first pool: after the default's and `classSlots` class blocks (after every class, should
    there be more, which the layout refuses)."""
    return 1 + max(class_slots, class_count)


def _blocks(
    default: BudgetSpec, classes: Sequence[BudgetSpec], pools: Sequence[PoolSpec], class_slots: int
) -> list[_Block]:
    """Every block in rule order, up to the last one that holds a budget or pool."""
    blocks = [_Block(0, default, 0, None, _key(default, "budgets.default"))]
    first_pool = first_pool_block(len(classes), class_slots)
    for position in range(1, first_pool):
        budget_class = classes[position - 1] if position <= len(classes) else None
        key = _key(budget_class, f"budgets.classes[{position - 1}]") if budget_class else ""
        blocks.append(_Block(position, budget_class, position, None, key))
    for position, pool in enumerate(pools):
        blocks.append(_Block(first_pool + position, pool, None, position, _key(pool, f"budgets.pools[{position}]")))
    while blocks[-1].spec is None:
        blocks.pop()
    return blocks


def _last_index(blocks: Sequence[_Block], limit_slots: int) -> int:
    last = blocks[-1]
    assert last.spec is not None
    return last.number * limit_slots + max(len(last.spec.limits), 1) - 1


def _rule_cap_problems(
    blocks: Sequence[_Block],
    classes: Sequence[BudgetSpec],
    pools: Sequence[PoolSpec],
    limit_slots: int,
    class_slots: int,
) -> list[Problem]:
    """Envoy Gateway's 256 rules per policy: the classes' last rule, then the pools' (after the class blocks)."""
    class_blocks = [block for block in blocks if block.pool_index is None and block.spec is not None]
    last_class_index = _last_index(class_blocks, limit_slots)
    if last_class_index >= MAX_RULES:
        last = class_blocks[-1].spec
        assert last is not None
        # c classes fit when c * limitSlots + (limits of the last class) - 1 < MAX_RULES.
        most = (MAX_RULES - max(len(last.limits), 1)) // limit_slots
        return [
            Problem(
                "budgets.classes",
                f"has {len(classes)} classes: with budgetPolicy.limitSlots {limit_slots} they need "
                f"{last_class_index + 1} rate-limit rules, over Envoy Gateway's {MAX_RULES} per policy, so at most "
                f"{most} classes fit. Merge classes that share the same limits, or lower budgetPolicy.limitSlots",
            )
        ]
    last_index = _last_index(blocks, limit_slots)
    if last_index < MAX_RULES:
        return []
    last = blocks[-1].spec
    assert last is not None
    first_pool = first_pool_block(len(classes), class_slots)
    # p pools fit when (first_pool + p - 1) * limitSlots + (limits of the last pool) - 1 < MAX_RULES.
    most = max((MAX_RULES - max(len(last.limits), 1)) // limit_slots - first_pool + 1, 0)
    return [
        Problem(
            "budgets.pools",
            f"has {len(pools)} pool(s) after {first_pool - 1} class block(s) (budgetPolicy.classSlots "
            f"{class_slots}): with budgetPolicy.limitSlots {limit_slots} they need {last_index + 1} rate-limit rules, "
            f"over Envoy Gateway's {MAX_RULES} per policy, so at most {most} pools fit. Merge pools, or lower "
            "budgetPolicy.classSlots (pool counters restart once) or budgetPolicy.limitSlots",
        )
    ]


def _layout_problems(
    default: BudgetSpec,
    classes: Sequence[BudgetSpec],
    exclusion_slots: int,
    limit_slots: int,
    pools: Sequence[PoolSpec] = (),
    class_slots: int = 0,
) -> list[Problem]:
    """Every reason the budgets and pools cannot be laid out as rules within Envoy Gateway's caps."""
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
    if pools and len(classes) > class_slots:
        problems.append(
            Problem(
                "budgetPolicy.classSlots",
                f"is {class_slots}, but budgets.classes has {len(classes)} classes, and the pools' rules come after "
                f"the classSlots class blocks: set {PROJECT}:budgetPolicy.classSlots to {len(classes)} or more, with "
                "room for the classes you expect to add. Every pool's rules move when it changes, so pool counters "
                "restart once (the default budget's and the classes' keep theirs): set it with the first pool, "
                "when nothing restarts",
            )
        )
    blocks = _blocks(default, classes, pools, class_slots)
    moved = (
        "Every class's and pool's rules move when it changes, so their counters restart once (the default budget's "
        "keep theirs)"
        if pools
        else "Every class's rules move when it changes, so class counters restart once (the default budget's keep "
        "theirs)"
    )
    for block in blocks:
        budget = block.spec
        if budget is None:
            continue
        where = block.key
        if not budget.limits:
            problems.append(Problem(where, "has no limit: give it tokens (or usd) and per, or a non-empty limits list"))
        elif len(budget.limits) > limit_slots:
            problems.append(
                Problem(
                    f"{where}.limits",
                    f"has {len(budget.limits)} limits but {PROJECT}:budgetPolicy.limitSlots is {limit_slots}: set "
                    f"budgetPolicy.limitSlots to {len(budget.limits)} or more (up to {MAX_LIMIT_SLOTS}). {moved}",
                )
            )
        for position, limit in enumerate(budget.limits):
            if limit.models and len(model_match(limit.models)["value"]) > MAX_VALUE_LENGTH:
                length = len(model_match(limit.models)["value"])
                problems.append(
                    Problem(
                        f"{budget.limit_key(position, where)}.models",
                        f"matching its {len(limit.models)} model name(s) takes {length} characters, over Envoy "
                        f"Gateway's {MAX_VALUE_LENGTH} per match, and a rule cannot admit models through several "
                        "matches: split the limit into limits over fewer models each",
                    )
                )
    problems.extend(_rule_cap_problems(blocks, classes, pools, limit_slots, class_slots))
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
    for position, pool in enumerate(pools):
        pattern = pool.pattern
        if len(pattern) > MAX_VALUE_LENGTH:
            problems.append(
                Problem(
                    f"{_key(pool, f'budgets.pools[{position}]')}.members",
                    f"pool {pool.name!r}: matching its {len(pool.actors)} members takes {len(pattern)} characters, "
                    f"over Envoy Gateway's {MAX_VALUE_LENGTH} per match. A pool is one rule with one counter, and a "
                    "rule cannot admit actors through several matches, so it cannot be split: when the members make up "
                    "whole atespaces, list those under atespaces instead (every actor of an atespace in one short "
                    "pattern), or use shorter actor names",
                )
            )
    members = {actor for budget_class in classes for actor in budget_class.actors}
    needed = len(pack_actors(members))
    extra = max((extra_matches(limit) for limit in default.limits), default=0)
    capacity = MAX_EXCLUSION_SLOTS - extra
    if extra and exclusion_slots > capacity:
        widest = next(limit for limit in default.limits if extra_matches(limit) == extra)
        what = f"a {KIND_TEXT[widest.kind]} limit" + (" with models" if widest.models else "")
        more = "one more match" if extra == 1 else f"{extra} more matches"
        problems.append(
            Problem(
                "budgetPolicy.exclusionSlots",
                f"is {exclusion_slots}, but {what} on the default budget needs {more} in its rule: lower "
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
    pools: Sequence[PoolSpec] = (),
    class_slots: int = 0,
) -> BudgetRules:
    """Lay every limit of every budget and pool out as rules; raise ConfigError listing every Envoy Gateway cap
    they would break (each Problem names the key to change and how)."""
    problems = _layout_problems(default, classes, exclusion_slots, limit_slots, pools, class_slots)
    if problems:
        raise ConfigError(problems)
    blocks = _blocks(default, classes, pools, class_slots)
    last_index = _last_index(blocks, limit_slots)
    class_of_actor: dict[str, int] = {}
    for position, budget_class in enumerate(classes, start=1):
        for actor in budget_class.actors:
            class_of_actor[actor] = position
    chunks = pack_actors(class_of_actor)
    slots = [_regex(actors_regex(chunk), invert=True) for chunk in chunks]
    slots += [_regex(MATCHES_NOTHING, invert=True) for _ in range(exclusion_slots - len(chunks))]
    default_headers = (_distinct(), *slots)

    rules: list[CompiledRule] = []
    for block in blocks:
        budget = block.spec
        pooled = isinstance(budget, PoolSpec)
        if budget is None:
            headers: tuple[dict[str, Any], ...] = ()
        elif block.number == 0:
            headers = default_headers
        elif pooled:
            assert isinstance(budget, PoolSpec)
            headers = (_regex(budget.pattern, invert=False),)
        else:
            headers = (_distinct(), _regex(actors_regex(budget.actors), invert=False))
        actors = () if budget is None or block.number == 0 else tuple(budget.actors)
        atespaces = tuple(budget.atespaces) if isinstance(budget, PoolSpec) else ()
        name = "default" if block.number == 0 else budget.name if budget is not None else ""
        for slot in range(limit_slots):
            index = block.number * limit_slots + slot
            if index > last_index:
                break
            if budget is not None and slot < len(budget.limits):
                limit = budget.limits[slot]
                rules.append(
                    CompiledRule(
                        index,
                        name,
                        block.budget_index,
                        slot,
                        limit,
                        actors,
                        limit_headers(headers, limit, pooled),
                        block.pool_index,
                        atespaces,
                    )
                )
            else:
                never = (_distinct(), _regex(MATCHES_NOTHING, invert=False))
                rules.append(CompiledRule(index, "", block.budget_index, slot, None, (), never, block.pool_index))
    return BudgetRules(
        rules=tuple(rules),
        exclusion_slots=exclusion_slots,
        slots_used=len(chunks),
        limit_slots=limit_slots,
        class_of_actor=class_of_actor,
        class_slots=class_slots,
        pools=tuple(pools),
    )


def _limit_specs(budget: Any, key: str) -> tuple[tuple[LimitSpec, ...], tuple[str, ...]]:
    """A validated budget's (or pool's) limits, and each one's configuration key."""
    limits = budget.limit_list()
    keys = tuple(f"{key}.limits[{j}]" for j in range(len(limits))) if budget.limits is not None else (key,)
    return tuple(_limit_spec(limit) for limit in limits), keys


def budget_specs(budgets: BudgetsConfig) -> tuple[BudgetSpec, list[BudgetSpec], list[PoolSpec]]:
    """The validated `agent-budgets:budgets` as plain specs: the default, the classes, the pools."""
    limits, keys = _limit_specs(budgets.default, "budgets.default")
    default = BudgetSpec("default", limits, (), "budgets.default", keys)
    classes: list[BudgetSpec] = []
    for position, budget_class in enumerate(budgets.classes):
        key = f"budgets.classes[{position}]"
        limits, keys = _limit_specs(budget_class, key)
        classes.append(BudgetSpec(budget_class.name, limits, tuple(budget_class.actors), key, keys))
    pools: list[PoolSpec] = []
    for position, pool in enumerate(budgets.pools):
        key = f"budgets.pools[{position}]"
        limits, keys = _limit_specs(pool, key)
        pools.append(PoolSpec(pool.name, limits, tuple(pool.members), key, keys, tuple(pool.atespaces)))
    return default, classes, pools


def _limit_spec(limit: Any) -> LimitSpec:
    models = tuple(limit.models or ())
    if limit.usd is not None:
        return LimitSpec("usd", limit.usd, limit.per, models=models)
    if limit.calls is not None:
        return LimitSpec("calls", limit.calls, limit.per, models=models)
    return LimitSpec("tokens", limit.tokens, limit.per, limit.count or "total", models)


def compile_budget_rules(
    budgets: BudgetsConfig, exclusion_slots: int, limit_slots: int = 1, class_slots: int = 0
) -> BudgetRules:
    """Compile the validated `agent-budgets:budgets` (see `compile_rules`)."""
    default, classes, pools = budget_specs(budgets)
    return compile_rules(default, classes, exclusion_slots, limit_slots, pools, class_slots)

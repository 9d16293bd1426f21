"""Who spent what in the current budget window: which counters to read, and the report made of them.

Pure functions over plain data; reading the stack file and Redis is `tools/spend`'s job. Where a counter
lives is decided in one place only, `core.ratelimit_model` (the model of Envoy Gateway's translation and of
envoyproxy/ratelimit's key layout that the program and the policy pack use too): this module takes which
rules charge an actor from the compiled budget layout, asks the model under which key each one counts, and
never builds a key itself.

"Spent" is exactly what envoyproxy/ratelimit holds for the counter of the current window: the sum of what
each admitted response was charged at its end (`INCRBY` in `src/redis/fixed_cache_impl.go`): Agent Router's
`llm_total_token` for a tokens limit, the call's price in mills ($0.001) for a usd limit. A call is refused
with 429 only once that sum is above the limit (`src/limiter/base_limiter.go`: over when the count after
the check-only request, which adds 0, exceeds the limit), so the call that crosses the limit is admitted and
charged in full. A calls limit's counter holds the calls checked, refused ones included: each check adds 1
first and is refused when the sum exceeds the limit, so the next call is refused once the counter has
reached the limit. Calls that went through while the rate-limit service or Redis was down (fail-open) were
never counted.

One row is one (actor, limit) pair: an actor whose budget has several limits gets a row for each. A pool's
limit is one row too, the pool's shared counter shown once: nothing records how much of it each member spent
(the counter's key holds no actor), so a member's share is shown only where another counter holds exactly it:
the member's own limit of the same kind, window and models, which every one of its calls charges alongside the
pool's (exact when it was a member for the whole window).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from core.budget_rules import (
    ACTOR_HEADER,
    KIND_TEXT,
    BudgetRules,
    CompiledRule,
    LimitSpec,
    Unit,
)
from core.identity import actor_header_value, header_forms, listed_forms, parse_header_value
from core.money import mills_to_usd
from core.ratelimit_model import AppliedRule, PolicyModel
from core.settings import TokenKind


class SpendError(ValueError):
    """Counter data the report cannot trust (a value that is not a token count)."""


@dataclass(frozen=True)
class Counter:
    """One (actor, limit) counter, or one pool limit's shared counter, in the window that holds the report's time.

    `requests` is the limit in the counter's own unit (tokens, or mills of a dollar for a usd limit);
    `limit` is the same limit as configured (tokens, or dollars). A pool's counter has no actor: `pool` names
    it, `members` are the listed actors it admits (a pool of whole atespaces also charges actors not listed).
    """

    actor: str
    subject: str
    budget: str
    rule: int
    limit_index: int
    unit: Unit
    limit: int | Decimal
    requests: int
    per: str
    key: str
    window_start: int
    resets_at: int
    suspended: bool = False
    count: TokenKind = "total"
    models: tuple[str, ...] = ()
    pool: str | None = None
    members: tuple[str, ...] = ()
    atespaces: tuple[str, ...] = ()

    def amount(self, value: int) -> int | Decimal:
        """A counter value in the limit's unit: tokens as they are, mills as dollars."""
        return mills_to_usd(value) if self.unit == "usd" else value

    def measures_like(self, other: Counter) -> bool:
        """Whether the two counters are charged the same by every call both count: same kind, window, models."""
        return (self.unit, self.count, self.per, set(self.models)) == (
            other.unit,
            other.count,
            other.per,
            set(other.models),
        )


@dataclass(frozen=True)
class CounterPlan:
    """Every counter to read, plus the actors no rule charges (their calls are not metered at all)."""

    counters: tuple[Counter, ...]
    unmetered: tuple[str, ...]

    @property
    def keys(self) -> list[str]:
        """The Redis keys to fetch, in counter order (a key shared by two rows is fetched once)."""
        return list(dict.fromkeys(counter.key for counter in self.counters))


def _counter(compiled: CompiledRule, applied: AppliedRule, now: int, **fields: Any) -> Counter:
    limit = compiled.limit
    assert limit is not None  # only limit rules are planned
    start, end = applied.window(now)
    return Counter(
        budget=compiled.budget if compiled.pool_index is None else compiled.purpose,
        rule=applied.index,
        limit_index=compiled.limit_index,
        unit=limit.unit,
        limit=limit.amount,
        requests=applied.requests,
        per=applied.unit,
        key=applied.counter_key(now),
        window_start=start,
        resets_at=end,
        count=limit.count,
        models=limit.models,
        **fields,
    )


def plan_counters(
    actors: Sequence[str],
    rules: BudgetRules,
    policy_namespace: str,
    policy_name: str,
    now: int,
    suspended: Collection[str] = (),
    listed: Sequence[str] | None = None,
) -> CounterPlan:
    """Each actor's counters at unix time `now` (one per limit of its budget, per-model limits included), then
    each pool limit's one counter, with the actors of `listed` it admits (`listed` is every actor of the stack;
    default `actors`). When `actors` is a part of `listed`, only the pools one of them is in are planned.

    Which rules charge an actor, and which a pool, comes from the budget layout the program compiled; each
    counter's key from the rate-limit model (`PolicyModel.charge`). tests/test_spend_core.py holds the plan to
    the model's own evaluation of every match (`PolicyModel.applied`, with each model a limit names).
    """
    model = PolicyModel(policy_namespace, policy_name, rules.specs())
    counters: list[Counter] = []
    unmetered: list[str] = []
    for actor in actors:
        charged = rules.rules_for_actor(actor)
        if not charged:
            unmetered.append(actor)
        subject = actor_header_value(actor)
        headers = {ACTOR_HEADER: subject}
        for compiled in charged:
            applied = model.charge(compiled.index, headers)
            counters.append(
                _counter(compiled, applied, now, actor=actor, subject=subject, suspended=actor in suspended)
            )
    everyone = list(actors) if listed is None else list(listed)
    asked = set(actors)
    every_actor = asked >= set(everyone)
    for position, pool in enumerate(rules.pools):
        members = tuple(actor for actor in everyone if pool.admits(actor))
        if every_actor and not members and not pool.atespaces:
            continue  # retired in place: its rules match nobody
        if not every_actor and asked.isdisjoint(members):
            continue  # none of the actors asked about is in it
        for compiled in rules.rules_of_pool(position):
            applied = model.charge(compiled.index, {})
            counters.append(
                _counter(
                    compiled,
                    applied,
                    now,
                    actor="",
                    subject="",
                    pool=pool.name,
                    members=members,
                    atespaces=pool.atespaces,
                )
            )
    return CounterPlan(tuple(counters), tuple(unmetered))


def parse_counter_value(key: str, raw: bytes | str | int | None) -> int:
    """A counter as Redis returns it: missing (nothing spent in this window) or the decimal integer INCRBY keeps."""
    if raw is None:
        return 0
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if not text.isascii() or not text.lstrip("-").isdigit():
            raise SpendError(
                f"Redis key {key!r} holds {text[:40]!r}, not a counter: something other than the rate-limit "
                "service wrote it. Inspect it with redis-cli GET before trusting this report"
            )
        value = int(text)
    if value < 0:
        raise SpendError(f"Redis key {key!r} holds {value}: a rate-limit counter is never negative")
    return value


@dataclass(frozen=True)
class SpendRow:
    """One actor under one limit, or one pool limit, with what its counter holds in the current window (tokens
    or mills); a pool row also has each member's share where one of the member's own counters holds it."""

    counter: Counter
    value: int
    shares: tuple[tuple[str, int], ...] = ()

    @property
    def spent(self) -> int | Decimal:
        """Spent in the limit's unit: tokens, or dollars."""
        return self.counter.amount(self.value)

    @property
    def remaining(self) -> int | Decimal:
        """Left before the limit, in its unit (0 once at or over it)."""
        return self.counter.amount(max(self.counter.requests - self.value, 0))

    @functools.cached_property
    def used(self) -> Fraction:
        """Share of the limit spent, exactly (1 = at the limit; above 1 once a response overshot it)."""
        return Fraction(self.value, self.counter.requests)

    @property
    def used_percent(self) -> float:
        """`used` as a percentage, rounded to two decimals for display."""
        return round(_percent(self), 2)

    @property
    def refused(self) -> bool:
        """True when the next call gets 429: a tokens or usd counter above its limit (at the limit still admits
        one), or a calls counter at its limit (the next check adds 1 before it compares)."""
        if self.counter.unit == "calls":
            return self.value >= self.counter.requests
        return self.value > self.counter.requests


@dataclass(frozen=True)
class SpendReport:
    """Every (actor, limit) and pool row of one stack at one moment, most used first."""

    stack: str
    policy: str
    generated_at: int
    rows: tuple[SpendRow, ...]
    unmetered: tuple[str, ...] = ()


def most_used_first(rows: Iterable[SpendRow]) -> list[SpendRow]:
    """The rows by share of their limit spent, largest first, then by actor (or pool) and rule.

    Exact without comparing fractions: with L the least common multiple of the limits, value / requests orders
    as the integer value * (L / requests), so the sort compares integers only (fast for 10,000 rows).
    """
    rows = list(rows)
    limits = {row.counter.requests for row in rows}
    scale = math.lcm(*limits)
    factor = {requests: scale // requests for requests in limits}

    def key(row: SpendRow) -> tuple[int, str, int]:
        return (-row.value * factor[row.counter.requests], row.counter.actor or row.counter.budget, row.counter.rule)

    return sorted(rows, key=key)


def member_shares(counter: Counter, own: Mapping[str, Sequence[tuple[Counter, int]]]) -> tuple[tuple[str, int], ...]:
    """Each listed member's part of a pool counter, where the member's own counters hold it exactly (one of its
    own limits of the same kind, window and models: every call of the member charges both alike)."""
    shares = []
    for member in counter.members:
        for candidate, value in own.get(member, ()):
            if candidate.measures_like(counter):
                shares.append((member, value))
                break
    return tuple(shares)


def build_report(
    stack: str, policy: str, now: int, plan: CounterPlan, values: Mapping[str, bytes | str | int | None]
) -> SpendReport:
    """Join the plan with what Redis returned (`values` by key; a missing key means nothing spent)."""
    read = [(counter, parse_counter_value(counter.key, values.get(counter.key))) for counter in plan.counters]
    own: dict[str, list[tuple[Counter, int]]] = {}
    for counter, value in read:
        if counter.pool is None:
            own.setdefault(counter.actor, []).append((counter, value))
    rows = [
        SpendRow(counter, value, member_shares(counter, own) if counter.pool is not None else ())
        for counter, value in read
    ]
    return SpendReport(stack, policy, now, tuple(most_used_first(rows)), plan.unmetered)


def percent_threshold(percent: float) -> Fraction:
    """A PCT option as an exact share (`80` → 4/5), so `--over 80` is exact at the boundary."""
    if not math.isfinite(percent) or percent < 0:
        raise ValueError(f"a percentage must be a finite number of at least 0, got {percent}")
    return Fraction(str(percent)) / 100


def rows_at_or_above(rows: Iterable[SpendRow], percent: float) -> list[SpendRow]:
    """The rows whose spend is at least `percent` of their limit."""
    share = percent_threshold(percent)
    return [row for row in rows if row.used >= share]


def rows_of_actor(rows: Iterable[SpendRow], actor: str) -> list[SpendRow]:
    """The rows of one actor, named as in `actors` or by its `x-actor-id` (its `subject`), and of every pool it
    is a listed member of (a pool that is over refuses its calls too)."""
    actor_id = actor_id_of(actor)
    return [row for row in rows if actor in (row.counter.actor, row.counter.subject) or actor_id in row.counter.members]


def actor_id_of(name: str) -> str:
    """The actor id (as `actors` writes it) of a name given as an id or as its `x-actor-id` value."""
    ref = parse_header_value(name)
    return ref.actor_id if ref is not None else name


def with_rows(report: SpendReport, rows: Iterable[SpendRow]) -> SpendReport:
    """The same report holding only `rows` (a filter of `report.rows`, so already in the report's order)."""
    return dataclasses.replace(report, rows=tuple(rows))


# --- formatting -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def utc_iso(timestamp: int) -> str:
    """`2026-11-30T00:00:00Z`."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.lru_cache(maxsize=1024)
def format_duration(seconds: int) -> str:
    """A wait as people say it, the two largest units, rounded down: `5h 12m`, `3d 4h`, `7m`, `42s`."""
    if seconds < 0:
        raise ValueError(f"a duration is never negative, got {seconds}")
    units = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
    for position, (unit, size) in enumerate(units):
        if seconds >= size or unit == "s":
            whole, rest = divmod(seconds, size)
            text = f"{whole}{unit}"
            if position + 1 < len(units):
                next_unit, next_size = units[position + 1]
                if rest // next_size:
                    text += f" {rest // next_size}{next_unit}"
            return text
    raise AssertionError("unreachable: the last unit always matches")  # pragma: no cover


def _percent(row: SpendRow) -> float:
    """`used` times 100 as the nearest float (int / int is correctly rounded, as float(Fraction) is)."""
    return row.value * 100 / row.counter.requests


def format_percent(row: SpendRow) -> str:
    """`80.0%`; a single decimal is enough for a table."""
    return f"{_percent(row):.1f}%"


def format_amount(amount: int | Decimal, unit: Unit) -> str:
    """`1,240,000` tokens or calls, or dollars to the mill with at least cents: `$5.00`, `$3.217`."""
    if unit != "usd":
        return f"{int(amount):,}"
    text = f"{Decimal(amount).quantize(Decimal('0.001')):,.3f}"
    return "$" + (text[:-1] if text.endswith("0") else text)


def limit_text(
    amount: int | Decimal, unit: Unit, per: str, count: TokenKind = "total", models: Sequence[str] = ()
) -> str:
    """A limit as people read it: `500 tokens per Day`, `$5.00 per Day`, `60 calls per Minute`,
    `20,000 output tokens per Hour`, `$2.00 per Day on claude-sonnet-4-5`."""
    text = format_amount(amount, unit)
    what = KIND_TEXT[count] if unit == "tokens" and count != "total" else unit
    described = f"{text} per {per}" if unit == "usd" else f"{text} {what} per {per}"
    return f"{described} on {', '.join(models)}" if models else described


def spec_text(limit: LimitSpec) -> str:
    """`limit_text` of a compiled limit."""
    return limit_text(limit.amount, limit.unit, limit.per, limit.count, limit.models)


def json_amount(amount: int | Decimal, unit: Unit) -> int | float:
    """An amount for JSON: a whole number of tokens or calls, or dollars (exact to the mill as a decimal number)."""
    return float(Decimal(amount).quantize(Decimal("0.001"))) if unit == "usd" else int(amount)


def row_flags(row: SpendRow) -> str:
    """` 429` when the next call is refused for this limit, ` 403` when the actor is suspended."""
    return (" 429" if row.refused else "") + (" 403" if row.counter.suspended else "")


TABLE_COLUMNS = ("ACTOR", "BUDGET", "LIMIT", "SPENT", "REMAINING", "USED", "RESETS (UTC)")


def limit_cell(counter: Counter) -> str:
    """The LIMIT column: `200,000/Day`, `100,000/Hour (output)`, `$2.00/Day (gpt-4.1)`."""
    narrowed = ([counter.count] if counter.unit == "tokens" and counter.count != "total" else []) + list(counter.models)
    text = f"{format_amount(counter.limit, counter.unit)}/{counter.per}"
    return f"{text} ({', '.join(narrowed)})" if narrowed else text


def who(counter: Counter) -> str:
    """The ACTOR column: the actor, or for a pool row who shares its counter (`research/*, 2 listed`)."""
    if counter.pool is None:
        return counter.actor
    parts = [f"{atespace}/*" for atespace in counter.atespaces]
    listed = len(counter.members)
    parts.append(f"{listed} listed" if parts else f"{listed} member{'s' if listed != 1 else ''}")
    return f"({', '.join(parts)})"


def share_lines(report: SpendReport, shown: int = 10) -> list[str]:
    """Under the table: each pool row's members' shares, where their own counters hold them."""
    reported = {row.counter.actor for row in report.rows if row.counter.pool is None}
    lines = []
    for row in report.rows:
        counter = row.counter
        if counter.pool is None or not counter.members:
            continue
        known = [f"{member} {format_amount(counter.amount(value), counter.unit)}" for member, value in row.shares]
        text = f"{counter.budget} {limit_cell(counter)}: "
        text += "shares " + ", ".join(known[:shown]) if known else "no share readable"
        if len(known) > shown:
            text += f" and {len(known) - shown} more"
        read = {member for member, _ in row.shares}
        unread = [member for member in counter.members if member not in read]
        absent = sum(member not in reported for member in unread)
        if unread and absent < len(unread):
            text += f"; {len(unread) - absent} member(s) with no own limit of the same kind, window and models"
        if absent:
            text += f"; {absent} member(s) not in this report"
        lines.append(text)
    return lines


def render_table(report: SpendReport) -> str:
    """One line per (actor, limit) and pool limit, most used first, with a header; plain text for a terminal."""
    lines: list[list[str]] = [list(TABLE_COLUMNS)]
    for row in report.rows:
        counter = row.counter
        wait = format_duration(counter.resets_at - report.generated_at)
        lines.append(
            [
                who(counter),
                counter.budget,
                limit_cell(counter),
                format_amount(row.spent, counter.unit),
                format_amount(row.remaining, counter.unit),
                format_percent(row) + row_flags(row),
                f"{utc_iso(counter.resets_at).replace('T', ' ').removesuffix('Z')} (in {wait})",
            ]
        )
    widths = [max(map(len, column)) for column in zip(*lines, strict=True)]
    numeric = {2, 3, 4, 5}
    # One format for every line (numbers right-aligned, text left-aligned), applied in C per line.
    layout = "  ".join(f"{{:{'>' if i in numeric else '<'}{width}}}" for i, width in enumerate(widths))
    text = [layout.format(*line).rstrip() for line in lines]
    footer = f"stack {report.stack}, policy {report.policy}, at {utc_iso(report.generated_at)}"
    footer += f": {len(report.rows)} row(s)"
    text.append(footer)
    if any(row.refused for row in report.rows) or any(row.counter.suspended for row in report.rows):
        text.append("429: over this limit, refused until the window resets; 403: the actor is suspended")
    if report.unmetered:
        text.append(f"not metered by any rule (calls are not counted): {', '.join(report.unmetered)}")
    text.extend(share_lines(report))
    return "\n".join(text) + "\n"


# Field → meaning of every row in `--json`; docs/spend.md shows this table (a test keeps them equal).
JSON_ROW_FIELDS: dict[str, str] = {
    "actor": f"the actor as `agent-budgets:actors` writes it ({listed_forms()}); null on a pool's row",
    "subject": f"its `x-actor-id` value ({header_forms()}: the JWT subject of a Substrate actor or a service "
    "account, the client id of an API key); null on a pool's row",
    "budget": "`default`, the name of the class that holds it, or `pool:<name>` on a pool's row",
    "rule": "index of the rule in the budget policy that counts this limit",
    "limit_index": "position of the limit in its budget's (or pool's) `limits` (0 for the short form)",
    "unit": "what the limit counts: `tokens`, `usd` or `calls`",
    "count": "which tokens a tokens limit counts: `total`, `input`, `output` or `cachedInput`; null otherwise",
    "models": "the models a per-model limit counts (as agents send them); empty: every model",
    "limit": "the limit, in `unit` (dollars for usd)",
    "per": "the window: Second, Minute, Hour, Day, Week, Month (30 days) or Year (365 days)",
    "spent": "charged in the current window, in `unit` (0 when the window has no counter yet)",
    "remaining": "`limit - spent`, never below 0",
    "used_percent": "`spent / limit * 100`, two decimals; above 100 once a response overshot the limit",
    "refused": "true when the next call gets 429 for this limit (`spent > limit`; `spent >= limit` for calls)",
    "suspended": "true when the actor is in `agent-budgets:suspended` (refused with 403, counters kept)",
    "counter_value": "the counter exactly as Redis holds it: tokens, calls, or mills ($0.001) for usd",
    "counter_limit": "the limit in the counter's unit (tokens, calls, or mills)",
    "window_start": "start of the current window, UTC, ISO 8601",
    "resets_at": "end of the current window (the counter starts again from 0), UTC, ISO 8601",
    "resets_at_unix": "`resets_at` as unix seconds",
    "resets_in_seconds": "seconds from `generated_at` to `resets_at`",
    "counter_key": "the Redis key of the counter (envoyproxy/ratelimit layout)",
    "pool": "on a pool's row, the pool's name (its one counter, shared by all members); null otherwise",
    "members": "on a pool's row, the actors of `agent-budgets:actors` it admits (a pool of atespaces also charges "
    "actors not listed); null otherwise",
    "shares": "on a pool's row, each member's part of `spent` where the member's own limit of the same kind, window "
    "and models holds it (absent members: not recorded anywhere); null otherwise",
}

JSON_TOP_FIELDS: dict[str, str] = {
    "stack": "the stack the report is for",
    "policy": "`<namespace>/<name>` of the budget policy (the rate-limit domain)",
    "generated_at": "when the counters were read, UTC, ISO 8601",
    "generated_at_unix": "the same, as unix seconds",
    "rows": "one object per (actor, limit) and per pool limit, most used first (fields below)",
    "unmetered": "actors no rule charges (always empty for a configuration the program accepts)",
}


def row_document(row: SpendRow, now: int) -> dict[str, Any]:
    """One row of `--json`, with exactly the fields of `JSON_ROW_FIELDS`."""
    counter = row.counter
    pooled = counter.pool is not None
    return {
        "actor": None if pooled else counter.actor,
        "subject": None if pooled else counter.subject,
        "budget": counter.budget,
        "rule": counter.rule,
        "limit_index": counter.limit_index,
        "unit": counter.unit,
        "count": counter.count if counter.unit == "tokens" else None,
        "models": list(counter.models),
        "limit": json_amount(counter.limit, counter.unit),
        "per": counter.per,
        "spent": json_amount(row.spent, counter.unit),
        "remaining": json_amount(row.remaining, counter.unit),
        "used_percent": row.used_percent,
        "refused": row.refused,
        "suspended": counter.suspended,
        "counter_value": row.value,
        "counter_limit": counter.requests,
        "window_start": utc_iso(counter.window_start),
        "resets_at": utc_iso(counter.resets_at),
        "resets_at_unix": counter.resets_at,
        "resets_in_seconds": counter.resets_at - now,
        "counter_key": counter.key,
        "pool": counter.pool,
        "members": list(counter.members) if pooled else None,
        "shares": {member: json_amount(counter.amount(value), counter.unit) for member, value in row.shares}
        if pooled
        else None,
    }


def report_document(report: SpendReport) -> dict[str, Any]:
    """The whole `--json` document, with exactly the fields of `JSON_TOP_FIELDS`."""
    return {
        "stack": report.stack,
        "policy": report.policy,
        "generated_at": utc_iso(report.generated_at),
        "generated_at_unix": report.generated_at,
        "rows": [row_document(row, report.generated_at) for row in report.rows],
        "unmetered": list(report.unmetered),
    }


def render_json(report: SpendReport) -> str:
    """`--json`: stable field names (documented in docs/spend.md), indented for people and tools alike."""
    return json.dumps(report_document(report), indent=2) + "\n"


@dataclass(frozen=True)
class Gauge:
    """One metric family of `--prometheus`; `unit` set: only rows of that unit, valued in it."""

    name: str
    help: str
    unit: Unit | None = None
    value: Callable[[SpendRow], int | Fraction | Decimal] | None = None


PROMETHEUS_GAUGES: tuple[Gauge, ...] = (
    Gauge(
        "agent_budgets_spent_tokens",
        "Tokens charged under a tokens limit in the current window.",
        "tokens",
        lambda row: row.spent,
    ),
    Gauge("agent_budgets_limit_tokens", "A tokens limit, per window.", "tokens", lambda row: row.counter.limit),
    Gauge(
        "agent_budgets_remaining_tokens",
        "Tokens left before a tokens limit (0 at or over it).",
        "tokens",
        lambda row: row.remaining,
    ),
    Gauge(
        "agent_budgets_spent_usd",
        "Dollars charged under a usd limit in the current window.",
        "usd",
        lambda row: row.spent,
    ),
    Gauge("agent_budgets_limit_usd", "A usd limit, in dollars per window.", "usd", lambda row: row.counter.limit),
    Gauge(
        "agent_budgets_remaining_usd",
        "Dollars left before a usd limit (0 at or over it).",
        "usd",
        lambda row: row.remaining,
    ),
    Gauge(
        "agent_budgets_spent_calls",
        "Calls checked under a calls limit in the current window, refused ones included.",
        "calls",
        lambda row: row.spent,
    ),
    Gauge("agent_budgets_limit_calls", "A calls limit, per window.", "calls", lambda row: row.counter.limit),
    Gauge(
        "agent_budgets_remaining_calls",
        "Calls left before a calls limit (0 at it).",
        "calls",
        lambda row: row.remaining,
    ),
    Gauge(
        "agent_budgets_used_ratio",
        "Spent divided by the limit (above 1 once a response overshot it).",
        None,
        lambda row: row.used,
    ),
    Gauge(
        "agent_budgets_refused",
        "1 when the actor's next call gets 429 for this limit, else 0.",
        None,
        lambda row: int(row.refused),
    ),
    Gauge(
        "agent_budgets_suspended",
        "1 when the actor is suspended (every call refused with 403), else 0.",
        None,
        lambda row: int(row.counter.suspended),
    ),
    Gauge(
        "agent_budgets_window_reset_timestamp_seconds",
        "Unix time when the current window ends.",
        None,
        lambda row: row.counter.resets_at,
    ),
)
REPORT_TIMESTAMP = Gauge("agent_budgets_report_timestamp_seconds", "Unix time when the counters were read.")
PROMETHEUS_LABELS = ("stack", "actor", "budget", "rule", "limit", "per")


def _label_value(value: str) -> str:
    """Escape a label value as the text exposition format requires (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{name}="{_label_value(value)}"' for name, value in pairs) + "}"


def _number(value: int | Fraction | Decimal) -> str:
    if isinstance(value, (Fraction, Decimal)):
        return repr(float(value))
    return str(value)


def render_prometheus(report: SpendReport) -> str:
    """`--prometheus`: the same figures in the Prometheus text exposition format (version 0.0.4).

    Gauge families labelled by stack, actor, budget, rule, limit (its position in the budget) and window,
    for a node-exporter textfile collector or a CronJob that pushes them. Amounts are in the family's unit
    (tokens of any kind, dollars or calls); a family with no row of its unit is left out. A pool's row has an
    empty `actor` (which Prometheus reads as no actor label) and `budget` `pool:<name>`.
    """
    lines: list[str] = []
    for gauge in PROMETHEUS_GAUGES:
        rows = [row for row in report.rows if gauge.unit is None or row.counter.unit == gauge.unit]
        if gauge.unit is not None and not rows:
            continue
        lines.append(f"# HELP {gauge.name} {gauge.help}")
        lines.append(f"# TYPE {gauge.name} gauge")
        for row in rows:
            counter = row.counter
            labels = _labels(
                [
                    ("stack", report.stack),
                    ("actor", counter.actor),
                    ("budget", counter.budget),
                    ("rule", str(counter.rule)),
                    ("limit", str(counter.limit_index)),
                    ("per", counter.per),
                ]
            )
            lines.append(f"{gauge.name}{labels} {_number(gauge.value(row))}")
    lines.append(f"# HELP {REPORT_TIMESTAMP.name} {REPORT_TIMESTAMP.help}")
    lines.append(f"# TYPE {REPORT_TIMESTAMP.name} gauge")
    lines.append(f"{REPORT_TIMESTAMP.name}{_labels([('stack', report.stack)])} {report.generated_at}")
    return "\n".join(lines) + "\n"

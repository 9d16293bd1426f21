"""Who spent what in the current budget window: which counters to read, and the report made of them.

Pure functions over plain data; reading the stack file and Redis is `tools/spend`'s job. Where a counter
lives is decided in one place only, `core.ratelimit_model` (the model of Envoy Gateway's translation and of
envoyproxy/ratelimit's key layout that the program and the policy pack use too): this module asks it which
rules apply to an actor and under which key each one counts, and never builds a key itself.

"Spent" is exactly what envoyproxy/ratelimit holds for the counter of the current window: the sum of what
each admitted response was charged at its end (`INCRBY` in `src/redis/fixed_cache_impl.go`): Agent Router's
`llm_total_token` for a tokens limit, the call's price in mills ($0.001) for a usd limit. A call is refused
with 429 only once that sum is above the limit (`src/limiter/base_limiter.go`: over when the count after
the check-only request, which adds 0, exceeds the limit), so the call that crosses the limit is admitted and
charged in full. A calls limit's counter holds the calls checked, refused ones included: each check adds 1
first and is refused when the sum exceeds the limit, so the next call is refused once the counter has
reached the limit. Calls that went through while the rate-limit service or Redis was down (fail-open) were
never counted.

One row is one (actor, limit) pair: an actor whose budget has several limits gets a row for each.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from core.budget_rules import BudgetRules, Unit, actor_subject
from core.money import mills_to_usd
from core.ratelimit_model import PolicyModel


class SpendError(ValueError):
    """Counter data the report cannot trust (a value that is not a token count)."""


@dataclass(frozen=True)
class Counter:
    """One (actor, limit) counter in the window that holds the report's time.

    `requests` is the limit in the counter's own unit (tokens, or mills of a dollar for a usd limit);
    `limit` is the same limit as configured (tokens, or dollars).
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

    def amount(self, value: int) -> int | Decimal:
        """A counter value in the limit's unit: tokens as they are, mills as dollars."""
        return mills_to_usd(value) if self.unit == "usd" else value


@dataclass(frozen=True)
class CounterPlan:
    """Every counter to read, plus the actors no rule charges (their calls are not metered at all)."""

    counters: tuple[Counter, ...]
    unmetered: tuple[str, ...]

    @property
    def keys(self) -> list[str]:
        """The Redis keys to fetch, in counter order (a key shared by two rows is fetched once)."""
        return list(dict.fromkeys(counter.key for counter in self.counters))


def plan_counters(
    actors: Sequence[str],
    rules: BudgetRules,
    policy_namespace: str,
    policy_name: str,
    now: int,
    suspended: Collection[str] = (),
) -> CounterPlan:
    """Each actor's counters at unix time `now`, as the rate-limit model computes them (one per limit)."""
    model = PolicyModel(policy_namespace, policy_name, rules.specs())
    counters: list[Counter] = []
    unmetered: list[str] = []
    for actor in actors:
        subject = actor_subject(actor)
        charged = [applied for applied in model.for_actor(subject) if not rules.rules[applied.index].reserved]
        if not charged:
            unmetered.append(actor)
        for applied in charged:
            compiled = rules.rules[applied.index]
            assert compiled.limit is not None  # reserved slots are left out above
            start, end = applied.window(now)
            counters.append(
                Counter(
                    actor=actor,
                    subject=subject,
                    budget=compiled.budget,
                    rule=applied.index,
                    limit_index=compiled.limit_index,
                    unit=compiled.limit.unit,
                    limit=compiled.limit.amount,
                    requests=applied.requests,
                    per=applied.unit,
                    key=applied.counter_key(now),
                    window_start=start,
                    resets_at=end,
                    suspended=actor in suspended,
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
    """One actor under one limit, with what its counter holds in the current window (tokens or mills)."""

    counter: Counter
    value: int

    @property
    def spent(self) -> int | Decimal:
        """Spent in the limit's unit: tokens, or dollars."""
        return self.counter.amount(self.value)

    @property
    def remaining(self) -> int | Decimal:
        """Left before the limit, in its unit (0 once at or over it)."""
        return self.counter.amount(max(self.counter.requests - self.value, 0))

    @property
    def used(self) -> Fraction:
        """Share of the limit spent, exactly (1 = at the limit; above 1 once a response overshot it)."""
        return Fraction(self.value, self.counter.requests)

    @property
    def used_percent(self) -> float:
        """`used` as a percentage, rounded to two decimals for display."""
        return round(float(self.used * 100), 2)

    @property
    def refused(self) -> bool:
        """True when the next call gets 429: a tokens or usd counter above its limit (at the limit still admits
        one), or a calls counter at its limit (the next check adds 1 before it compares)."""
        if self.counter.unit == "calls":
            return self.value >= self.counter.requests
        return self.value > self.counter.requests


@dataclass(frozen=True)
class SpendReport:
    """Every (actor, limit) row of one stack at one moment, most used first."""

    stack: str
    policy: str
    generated_at: int
    rows: tuple[SpendRow, ...]
    unmetered: tuple[str, ...] = ()


def _sort_key(row: SpendRow) -> tuple[Fraction, str, int]:
    return (-row.used, row.counter.actor, row.counter.rule)


def build_report(
    stack: str, policy: str, now: int, plan: CounterPlan, values: Mapping[str, bytes | str | int | None]
) -> SpendReport:
    """Join the plan with what Redis returned (`values` by key; a missing key means nothing spent)."""
    rows = [SpendRow(counter, parse_counter_value(counter.key, values.get(counter.key))) for counter in plan.counters]
    return SpendReport(stack, policy, now, tuple(sorted(rows, key=_sort_key)), plan.unmetered)


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
    """The rows of one actor, named `<atespace>/<name>` or by its subject `actor/<atespace>/<name>`."""
    return [row for row in rows if actor in (row.counter.actor, row.counter.subject)]


def with_rows(report: SpendReport, rows: Iterable[SpendRow]) -> SpendReport:
    """The same report holding only `rows` (a filter of `report.rows`, so already in the report's order)."""
    return dataclasses.replace(report, rows=tuple(rows))


# --- formatting -------------------------------------------------------------------------------------------


def utc_iso(timestamp: int) -> str:
    """`2026-11-30T00:00:00Z`."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def format_percent(row: SpendRow) -> str:
    """`80.0%`; a single decimal is enough for a table."""
    return f"{float(row.used * 100):.1f}%"


def format_amount(amount: int | Decimal, unit: Unit) -> str:
    """`1,240,000` tokens or calls, or dollars to the mill with at least cents: `$5.00`, `$3.217`."""
    if unit != "usd":
        return f"{int(amount):,}"
    text = f"{Decimal(amount).quantize(Decimal('0.001')):,.3f}"
    return "$" + (text[:-1] if text.endswith("0") else text)


def limit_text(amount: int | Decimal, unit: Unit, per: str) -> str:
    """A limit as people read it: `500 tokens per Day`, `$5.00 per Day`, `60 calls per Minute`."""
    text = format_amount(amount, unit)
    return f"{text} per {per}" if unit == "usd" else f"{text} {unit} per {per}"


def json_amount(amount: int | Decimal, unit: Unit) -> int | float:
    """An amount for JSON: a whole number of tokens or calls, or dollars (exact to the mill as a decimal number)."""
    return float(Decimal(amount).quantize(Decimal("0.001"))) if unit == "usd" else int(amount)


def row_flags(row: SpendRow) -> str:
    """` 429` when the next call is refused for this limit, ` 403` when the actor is suspended."""
    return (" 429" if row.refused else "") + (" 403" if row.counter.suspended else "")


TABLE_COLUMNS = ("ACTOR", "BUDGET", "LIMIT", "SPENT", "REMAINING", "USED", "RESETS (UTC)")


def render_table(report: SpendReport) -> str:
    """One line per (actor, limit), most used first, with a header; plain text for a terminal."""
    lines: list[list[str]] = [list(TABLE_COLUMNS)]
    for row in report.rows:
        counter = row.counter
        wait = format_duration(counter.resets_at - report.generated_at)
        lines.append(
            [
                counter.actor,
                counter.budget,
                f"{format_amount(counter.limit, counter.unit)}/{counter.per}",
                format_amount(row.spent, counter.unit),
                format_amount(row.remaining, counter.unit),
                format_percent(row) + row_flags(row),
                f"{utc_iso(counter.resets_at).replace('T', ' ').removesuffix('Z')} (in {wait})",
            ]
        )
    widths = [max(len(line[column]) for line in lines) for column in range(len(TABLE_COLUMNS))]
    numeric = {2, 3, 4, 5}
    text = [
        "  ".join(
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ).rstrip()
        for line in lines
    ]
    footer = f"stack {report.stack}, policy {report.policy}, at {utc_iso(report.generated_at)}"
    footer += f": {len(report.rows)} row(s)"
    text.append(footer)
    if any(row.refused for row in report.rows) or any(row.counter.suspended for row in report.rows):
        text.append("429: over this limit, refused until the window resets; 403: the actor is suspended")
    if report.unmetered:
        text.append(f"not metered by any rule (calls are not counted): {', '.join(report.unmetered)}")
    return "\n".join(text) + "\n"


# Field → meaning of every row in `--json`; docs/spend.md shows this table (a test keeps them equal).
JSON_ROW_FIELDS: dict[str, str] = {
    "actor": "the actor, `<atespace>/<name>` as in `agent-budgets:actors`",
    "subject": "its JWT subject and `x-actor-id` value, `actor/<atespace>/<name>`",
    "budget": "`default`, or the name of the class that holds it",
    "rule": "index of the rule in the budget policy that counts this limit",
    "limit_index": "position of the limit in its budget's `limits` (0 for the short form)",
    "unit": "what the limit counts: `tokens`, `usd` or `calls`",
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
}

JSON_TOP_FIELDS: dict[str, str] = {
    "stack": "the stack the report is for",
    "policy": "`<namespace>/<name>` of the budget policy (the rate-limit domain)",
    "generated_at": "when the counters were read, UTC, ISO 8601",
    "generated_at_unix": "the same, as unix seconds",
    "rows": "one object per (actor, limit), most used first (fields below)",
    "unmetered": "actors no rule charges (always empty for a configuration the program accepts)",
}


def row_document(row: SpendRow, now: int) -> dict[str, Any]:
    """One row of `--json`, with exactly the fields of `JSON_ROW_FIELDS`."""
    counter = row.counter
    return {
        "actor": counter.actor,
        "subject": counter.subject,
        "budget": counter.budget,
        "rule": counter.rule,
        "limit_index": counter.limit_index,
        "unit": counter.unit,
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
    (tokens, dollars or calls); a family with no row of its unit is left out.
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

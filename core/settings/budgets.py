"""`agent-budgets:budgets`: the default budget and the classes, each a short-form limit or `limits`."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from core import money
from core.settings.base import RATE_LIMIT_UNITS, ActorId, ConfigModel, check_dns_label, number_text_hint

# Envoy Gateway v1.9 RateLimitValue.requests is a uint32 (api/v1alpha1/ratelimit_types.go).
MAX_TOKENS = money.UINT32_MAX
MAX_LIMITS_PER_BUDGET = 8
"""The documented maximum of `limits` per budget (and of budgetPolicy.limitSlots)."""


def _whole_count(value: Any, key: str, example: int, one: str) -> int:
    """A count of tokens or calls: whole, positive, within Envoy Gateway's uint32; people's ways of writing it
    explained."""
    hint = f"give a whole number of {key}, e.g. {key}: {example}"
    if value is None:
        raise ValueError(f"is empty (YAML null): {hint}")
    if isinstance(value, bool):
        raise ValueError(f"got {value!r}: {hint}")
    if isinstance(value, str):
        raise ValueError(f"got {value!r}: {number_text_hint(value, key)}")
    if isinstance(value, float):
        if not math.isfinite(value):  # YAML's .inf and .nan: no whole number to round to
            raise ValueError(f"got {value!r}: give a whole number of tokens, e.g. tokens: 500")
        if not value.is_integer():
            raise ValueError(f"got {value!r}: {key} are whole; round it, e.g. {key}: {int(value)}")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"got {value!r}: {hint}")
    if value < 0:
        raise ValueError(f"got {value}, a negative number: a budget is a count of {key}, at least 1")
    if value == 0:
        raise ValueError(f"got 0: a budget must be at least 1 {one} (0 would refuse every call)")
    if value > MAX_TOKENS:
        raise ValueError(
            f"got {value}, above Envoy Gateway's maximum of {MAX_TOKENS} (a uint32): use a longer window (per)"
        )
    return value


def _tokens(value: Any) -> int:
    return _whole_count(value, "tokens", 500, "token")


def _calls(value: Any) -> int:
    return _whole_count(value, "calls", 60, "call")


def _per(value: Any) -> Any:
    if isinstance(value, str) and value not in RATE_LIMIT_UNITS:
        raise ValueError(
            f"per {value!r} is not an Envoy Gateway rate-limit unit: use one of {', '.join(RATE_LIMIT_UNITS)}"
        )
    return value


TokenCount = Annotated[int, Field(strict=True)]
CallCount = Annotated[int, Field(strict=True)]


def _usd(value: Any) -> Decimal:
    """A `usd` amount: $0.01 to $1,000,000 in whole mills (core.money)."""
    if value is None:
        raise ValueError("is empty (YAML null): give an amount in dollars, e.g. usd: 5")
    if isinstance(value, str):
        raise ValueError(f"got {value!r}: write the amount as a number without quotes or $, e.g. usd: 5")
    try:
        return money.check_usd_limit(value)
    except money.MoneyError as error:
        raise ValueError(str(error)) from None


UsdAmount = Annotated[Decimal, BeforeValidator(_usd)]
WINDOWS_TEXT = "`Second`, `Minute`, `Hour`, `Day`, `Week`, `Month` or `Year`; fixed and UTC-aligned"


LIMIT_UNITS = ("tokens", "usd", "calls")
"""What a limit counts: tokens, dollars (in mills), or calls."""
TokenKind = Literal["total", "input", "output", "cachedInput"]
TOKEN_KINDS: tuple[TokenKind, ...] = ("total", "input", "output", "cachedInput")
"""What a tokens limit counts (`count`): each is one of Agent Router's `llmRequestCosts` types."""
_COUNT_WORDS = {2: "two", 3: "three"}


def _limit_problem(amounts: dict[str, Any], per: str | None, count: str | None = None) -> str | None:
    """Why a limit written with these `{unit: amount}` (None when absent), `per` and `count` is not one limit,
    or None."""
    given = {unit: amount for unit, amount in amounts.items() if amount is not None}
    if len(given) > 1:
        window = per or "Day"
        split = ", ".join(f"{{{unit}: {amount}, per: {window}}}" for unit, amount in given.items())
        parts = [f"{unit} ({amount})" for unit, amount in given.items()]
        listed = f"both {parts[0]} and {parts[1]}" if len(parts) == 2 else f"{', '.join(parts[:-1])} and {parts[-1]}"
        return (
            f"has {listed}: a limit counts one of them. "
            f"Split it into {_COUNT_WORDS.get(len(given), str(len(given)))} limits, e.g. limits: [{split}]"
        )
    if not given:
        return (
            "has none of tokens, usd or calls: give one, e.g. {tokens: 500, per: Day}, {usd: 5, per: Day} or "
            "{calls: 60, per: Minute}"
        )
    if per is None:
        return f"has {next(iter(given))} but no per: add the window, e.g. per: Day"
    unit = next(iter(given))
    if count is not None and unit != "tokens":
        return (
            f"has count {count!r} on a {unit} limit: count says which tokens a tokens limit counts. Drop it, or "
            f"write a tokens limit, e.g. {{tokens: 100000, per: {per}, count: {count}}}"
        )
    return None


def _models(value: Any) -> Any:
    """A limit's `models`: a non-empty list of distinct, non-empty names (cross-checked against `routes`)."""
    if not isinstance(value, list):
        return value
    if not value:
        raise ValueError(
            "is empty: list the model names this limit counts (as agents send them, e.g. models: [gpt-4.1]), "
            "or leave models out to count every model"
        )
    seen: set[str] = set()
    for model in value:
        if not isinstance(model, str):
            continue  # not a name: the list's own type check says so
        if not model or model != model.strip():
            raise ValueError(f"model name {model!r} must be a non-empty string without surrounding spaces")
        if model in seen:
            raise ValueError(f"lists {model!r} twice: name each model once")
        seen.add(model)
    return value


class _LimitFields(ConfigModel):
    """What a limit is written with: `tokens`, `usd` or `calls` per a `per` window (a `Limit`, or a `Budget` in
    the short form)."""

    tokens: TokenCount | None = Field(
        default=None,
        description=(
            f"Tokens each actor may spend per window: 1 to {MAX_TOKENS:,} (Envoy Gateway's uint32). Exactly one of "
            "`tokens`, `usd` and `calls`; written on a budget itself, the short form (then no `limits`)."
        ),
    )
    usd: UsdAmount | None = Field(
        default=None,
        description=(
            "Dollars each actor may spend per window: 0.01 to 1,000,000, counted in mills ($0.001); calls are priced "
            "from `prices`. Exactly one of `tokens`, `usd` and `calls`; written on a budget itself, the short form "
            "(then no `limits`)."
        ),
    )
    calls: CallCount | None = Field(
        default=None,
        description=(
            f"Calls each actor may start per window: 1 to {MAX_TOKENS:,}, refused calls included. Bounds how many "
            "calls run at once, and so how far the other limits can be overshot (stack output `worstCase`). Exactly "
            "one of `tokens`, `usd` and `calls`."
        ),
    )
    per: str | None = Field(default=None, description=f"The window: {WINDOWS_TEXT}.")
    count: TokenKind | None = Field(
        default=None,
        description=(
            "Which tokens a tokens limit counts: `total` (the default: input and output), `input` (every input "
            "token, cache reads and writes included), `output` (reasoning included) or `cachedInput` (cache reads), "
            "each as Agent Router reports it. Only on a tokens limit."
        ),
    )
    models: list[str] | None = Field(
        default=None,
        description=(
            "Count only calls to these models, named as agents send them (each one of `routes[].models`, not a "
            "`modelNameOverride`); unset: every model."
        ),
    )

    @field_validator("models", mode="before")
    @classmethod
    def _listed_models(cls, value: Any) -> Any:
        return _models(value)

    @field_validator("tokens", mode="before")
    @classmethod
    def _whole_tokens(cls, value: Any) -> Any:
        return _tokens(value)

    @field_validator("calls", mode="before")
    @classmethod
    def _whole_calls(cls, value: Any) -> Any:
        return _calls(value)

    def amounts(self) -> dict[str, Any]:
        """Each unit's amount as written (None when absent), in LIMIT_UNITS order."""
        return {"tokens": self.tokens, "usd": self.usd, "calls": self.calls}

    def qualifiers(self) -> dict[str, Any]:
        """What narrows the limit as written (`count`, `models`; None when absent)."""
        return {"count": self.count, "models": self.models}

    @field_validator("per")
    @classmethod
    def _known_unit(cls, value: str | None) -> str | None:
        return _per(value)


class Limit(_LimitFields):
    """One limit of a budget: `tokens`, `usd` or `calls` per fixed, UTC-aligned `per` window."""

    per: str = Field(description=f"The window: {WINDOWS_TEXT}.")

    @model_validator(mode="after")
    def _one_unit(self) -> Limit:
        problem = _limit_problem(self.amounts(), self.per, self.count)
        if problem:
            raise ValueError(problem)
        return self


class Budget(_LimitFields):
    """A budget: one limit written inline (the short form), or `limits`, every one of which applies."""

    limits: list[Limit] | None = Field(
        default=None,
        description=(
            f"Long form: 1 to {MAX_LIMITS_PER_BUDGET} limits (`{{tokens|usd|calls, per}}`), every one applies; a "
            "budget with more than one needs `budgetPolicy.limitSlots` at least as large. Append only."
        ),
    )

    @field_validator("limits", mode="before")
    @classmethod
    def _limit_count(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError(
                "is empty: give at least one limit, e.g. limits: [{tokens: 500, per: Day}], or use the short form "
                "(tokens or usd, and per, on the budget itself)"
            )
        if isinstance(value, list) and len(value) > MAX_LIMITS_PER_BUDGET:
            raise ValueError(
                f"has {len(value)} limits: a budget may have at most {MAX_LIMITS_PER_BUDGET} (one per window and "
                "unit is plenty). Drop the ones another limit already implies"
            )
        return value

    @model_validator(mode="after")
    def _one_form(self) -> Budget:
        written = {**self.amounts(), "per": self.per, **self.qualifiers()}
        inline = [key for key, value in written.items() if value is not None]
        if self.limits is not None:
            if inline:
                raise ValueError(
                    f"has both limits and {', '.join(inline)}: use either the short form ({{tokens|usd|calls, per}} on "
                    "the budget) or limits, not both. Move the inline limit into limits"
                )
            return self
        problem = _limit_problem(self.amounts(), self.per, self.count)
        if problem:
            raise ValueError(problem)
        return self

    def limit_list(self) -> list[Limit]:
        """Every limit of the budget, in order (the short form is one limit)."""
        if self.limits is not None:
            return list(self.limits)
        given = {key: value for key, value in {**self.amounts(), **self.qualifiers()}.items() if value is not None}
        return [Limit(**given, per=self.per)]


class BudgetClass(Budget):
    """Actors sharing one budget (each still has its own buckets); one rate-limit rule per limit."""

    name: str = Field(description="DNS label, unique among classes. Classes are append-only.")
    # Empty retires the class while keeping every later class (and its counters) in place.
    actors: list[ActorId] = Field(
        default_factory=list,
        description="Members; each must be in `actors` and in at most one class. Empty retires the class in place.",
    )

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        return check_dns_label(value, "class name")


class Pool(Budget):
    """Actors sharing one bucket per limit, in addition to each one's own budget: a call needs room in both."""

    name: str = Field(description="DNS label, unique among pools. Pools are append-only.")
    members: list[ActorId] = Field(
        default_factory=list,
        description="Actors in the pool, each in `actors` (of any identity source); an actor may be in several pools.",
    )
    atespaces: list[str] = Field(
        default_factory=list,
        description=(
            "Substrate atespaces whose every actor is in the pool, including actors created later (no configuration "
            "change). With no members and no atespaces the pool is retired in place."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        return check_dns_label(value, "pool name")

    @field_validator("atespaces")
    @classmethod
    def _atespaces_are_labels(cls, value: list[str]) -> list[str]:
        for atespace in value:
            check_dns_label(atespace, "atespace")
        repeated = sorted({atespace for atespace in value if value.count(atespace) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(map(repr, repeated))} twice: name each atespace once")
        return value


class BudgetsConfig(ConfigModel):
    """`agent-budgets:budgets`: the default budget, the ordered, append-only classes and pools."""

    default: Budget = Field(description="The budget of every actor not in a class.")
    classes: list[BudgetClass] = Field(
        default_factory=list,
        description="Other budgets in order; each limit of a class is one rate-limit rule. Append only, never reorder.",
    )
    pools: list[Pool] = Field(
        default_factory=list,
        description=(
            "Shared buckets in order, each charged by all its members together on top of their own budgets; each "
            "limit of a pool is one rate-limit rule, after the classes' `budgetPolicy.classSlots` blocks. Append only, "
            "never reorder."
        ),
    )

    def all_limits(self) -> list[Limit]:
        """Every limit of every budget and pool."""
        return [limit for budget in (self.default, *self.classes, *self.pools) for limit in budget.limit_list()]

    @property
    def uses_usd(self) -> bool:
        """Whether any limit is in dollars (so every route model needs a price)."""
        return any(limit.usd is not None for limit in self.all_limits())

    @property
    def token_kinds(self) -> tuple[TokenKind, ...]:
        """The kinds of tokens some tokens limit counts (`total` included only when one counts it), in
        TOKEN_KINDS order: each needs its own `llmRequestCosts` entry on every route."""
        used = {limit.count or "total" for limit in self.all_limits() if limit.tokens is not None}
        return tuple(kind for kind in TOKEN_KINDS if kind in used)

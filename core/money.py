"""Money budgets: the integer unit a `usd` limit counts in, and the CEL that prices every call in it.

Pure functions over plain data (no Pulumi, no settings models), shared by the settings validation,
the budget rules, the route manifests, the policy pack and the tests.

How a call is priced (facts from upstream, each checked in source). The program deploys Agent Router v1.2.1
by default (`platform.agentRouterVersion`), but no v1.2.x tag could be read where this was written: the
envoyproxy/ai-gateway history ends at v1.1.0, and the theagentrouter/agent-router copies available hold
untagged commits only. So the facts are cited at envoyproxy/ai-gateway v1.1.0, and the expression uses only
the CEL variables v1.1.0 declares, which the later source keeps (theagentrouter/agent-router
`internal/llmcostcel/cel.go` at commits c934db19 and 74fe06c9 declares the same names and two more,
`cache_creation_5m_input_tokens` and `cache_creation_1h_input_tokens`, from envoyproxy/ai-gateway PR 2677,
opened 2026-09-11 and absent from the v1.2.0 release notes). Those two would price a 1-hour cache write apart
from a 5-minute one; they are not used, because a variable the deployed controller does not declare fails
compilation and the controller refuses the whole route. Once a pinned release is confirmed to declare them,
an optional `cacheWrite1h` price can use them.

* Agent Router evaluates a route's `llmRequestCosts` entry of `type: CEL` once per response, at the
  end of the body or stream, and stores the result under its `metadataKey` in the dynamic-metadata
  namespace `io.envoy.ai_gateway` (envoyproxy/ai-gateway v1.1.0 `internal/extproc/processor_impl.go`
  `buildDynamicMetadata`, `evalCost`). The expression sees `model`, `backend`, `route_name` and the
  unsigned integers `input_tokens`, `cached_input_tokens`, `cache_creation_input_tokens`,
  `output_tokens`, `total_tokens`, `reasoning_tokens`; it must return a non-negative int or uint
  (`internal/llmcostcel/cel.go` `NewProgram`, `EvaluateProgram`). The controller compiles it and
  evaluates it once with `model == "dummy"` and every count 0; an expression that fails there is
  refused, and with it the whole Gateway's filter configuration stays as it was
  (`internal/controller/gateway.go:201-210`, `:512-516`). A failed evaluation at run time fails the
  whole metadata build, so this expression never errors: no unsigned underflow, no overflow, no
  missing map key (the tests prove it at the extremes, with Google's checked CEL compile).
* **`model` is the name the provider bills.** `model` is the `x-ai-eg-model` header, and when the
  route's backend has a `modelNameOverride`, Agent Router rewrites that header to the override
  *before* it evaluates costs (`processor_impl.go:706-709` `SetBackend`: "Header-derived labels/CEL must
  be able to see the overridden request model"; `evalCost` passes that header, `:882`; v1.1.0, kept in
  theagentrouter/agent-router 05440134). So a route with an override prices
  every call at the override model's price, whatever name the agent sent (`billed_models`), and the
  program requires that price; a route without one prices each call by the name the agent sent.
* `input_tokens` already counts every input token, cache reads and cache writes included:
  - OpenAI schema: `usage.prompt_tokens` (which OpenAI documents as including
    `prompt_tokens_details.cached_tokens`); cached = `prompt_tokens_details.cached_tokens`, cache
    writes = `prompt_tokens_details.cache_creation_input_tokens` (absent from OpenAI itself, 0);
    output = `completion_tokens`, which includes `completion_tokens_details.reasoning_tokens`
    (ai-gateway v1.1.0 `internal/translator/openai_openai.go`).
  - Anthropic schema: Anthropic reports `input_tokens` *without* the cache, so Agent Router adds
    `cache_read_input_tokens` and `cache_creation_input_tokens` into its `input_tokens`
    (`internal/metrics/metrics.go` `ExtractTokenUsageFromExplicitCaching`, used by
    `internal/translator/anthropic_helper.go` and `anthropic_anthropic.go`); `output_tokens` includes
    thinking tokens, which Agent Router also reports as `reasoning_tokens`.
  So the fresh (uncached) input is `input_tokens - cached_input_tokens - cache_creation_input_tokens`,
  and reasoning tokens are already in `output_tokens`: both providers bill them as output. Charging
  `reasoning_tokens` again would double-charge them.

The unit: one **mill**, a thousandth of a dollar ($0.001). A `usd` limit of at most $1,000,000 is at
most 1,000,000,000 mills, inside the rate limit's uint32 `requests`. Each call's cost is computed
exactly in picodollars and rounded **up** to whole mills once, so a call is overcharged by less than
$0.001 and never charged less than it cost. One call is charged at most 1,000,000,000 mills: Envoy
drops a descriptor whose `hits_addend` is above 1e9 (envoy
`source/extensions/filters/common/ratelimit_config/ratelimit_config.cc`, `MAX_HITS_ADDEND`), which
would make the call free, so the expression clamps there instead.

Prices are USD per 1,000,000 tokens, held as integer microdollars per 1,000,000 tokens (picodollars
per token): a price has at most 6 decimal places, and the smallest non-zero price the unit carries is
$0.000001 per 1,000,000 tokens. The largest is $1,000 per 1,000,000 tokens, which keeps the sum of
four `uint32 * price` products plus the rounding term below 2^64 (see `WORST_CASE_PICODOLLARS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

USD_METADATA_KEY = "agent_budgets_usd_mills"
"""The dynamic-metadata key (namespace io.envoy.ai_gateway) holding a call's cost in mills."""

MILLS_PER_USD = 1000
USD_PER_MILL = Decimal("0.001")
MIN_USD_LIMIT = Decimal("0.01")
MAX_USD_LIMIT = Decimal("1000000")
UINT32_MAX = 4_294_967_295
"""Envoy Gateway v1.9 `RateLimitValue.requests` (api/v1alpha1/ratelimit_types.go)."""

PRICE_SCALE = 1_000_000
"""Prices are stored as integer microdollars per 1,000,000 tokens, i.e. picodollars per token."""
SMALLEST_PRICE = Decimal(1) / PRICE_SCALE
MAX_PRICE = Decimal(1000)
PICODOLLARS_PER_MILL = 10**12 // MILLS_PER_USD
MAX_MILLS_PER_CALL = 1_000_000_000
"""Envoy's `MAX_HITS_ADDEND`: a larger per-call charge is dropped, not applied."""

PRICE_FIELDS = ("input", "cachedInput", "cacheWrite", "output")
"""The configuration names of a model's prices, in the order the CEL price lists use."""

# CEL parsers refuse longer expressions by default (cel-cpp parser/options.h
# kExpressionSizeCodepointLimit; cel-go's parser has the same ExpressionSizeCodePointLimit option).
MAX_CEL_CODE_POINTS = 100_000

_TOKEN_COUNT_MAX = UINT32_MAX  # Agent Router passes every count as a uint32
WORST_CASE_PICODOLLARS = 4 * _TOKEN_COUNT_MAX * int(MAX_PRICE * PRICE_SCALE) + PICODOLLARS_PER_MILL - 1
if MAX_USD_LIMIT * MILLS_PER_USD > UINT32_MAX or WORST_CASE_PICODOLLARS >= 2**64:  # pragma: no cover
    raise ImportError("the money unit no longer fits the rate limit's uint32 or CEL's uint64")


class MoneyError(ValueError):
    """A price or amount the money unit cannot carry; the message says why and what to write instead."""


def as_decimal(value: Any, what: str) -> Decimal:
    """A configured number as an exact Decimal; refuses booleans, strings and non-finite values."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise MoneyError(f"{what} must be a number written without quotes, e.g. 2.50; got {value!r}")
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as error:  # pragma: no cover - every int/float/Decimal converts
        raise MoneyError(f"{what} {value!r} is not a number") from error
    if not number.is_finite():
        raise MoneyError(f"{what} must be a finite number, got {value!r}")
    return number


def _fits_scale(number: Decimal, scale: int) -> bool:
    return (number * scale) % 1 == 0


def check_usd_limit(value: Any) -> Decimal:
    """A `usd` limit amount: from $0.01 to $1,000,000, in whole mills (at most 3 decimal places)."""
    amount = as_decimal(value, "usd")
    if amount < MIN_USD_LIMIT or amount > MAX_USD_LIMIT:
        raise MoneyError(
            f"usd {value} is outside {MIN_USD_LIMIT} to {MAX_USD_LIMIT:,}: a budget needs at least a cent, and "
            f"${MAX_USD_LIMIT:,} is the most the rate limit's counter holds in mills"
        )
    if not _fits_scale(amount, MILLS_PER_USD):
        raise MoneyError(
            f"usd {value} has more than 3 decimal places: money budgets count in mills ($0.001). "
            f"Round it, e.g. to {amount.quantize(USD_PER_MILL, rounding=ROUND_HALF_UP)}"
        )
    return amount


def usd_to_mills(amount: Decimal) -> int:
    """A checked `usd` amount in mills, the unit of the rate-limit counter."""
    return int(amount * MILLS_PER_USD)


def mills_to_usd(mills: int) -> Decimal:
    """A counter value (or limit) in mills, back in dollars."""
    return Decimal(mills) * USD_PER_MILL


def check_price(value: Any, what: str) -> Decimal:
    """One price in USD per 1,000,000 tokens: 0, or from $0.000001 to $1,000 with at most 6 decimals."""
    price = as_decimal(value, what)
    if price < 0:
        raise MoneyError(f"{what} {value} is negative: a price is what the provider charges, 0 or more")
    if 0 < price < SMALLEST_PRICE:
        raise MoneyError(
            f"{what} {value} is below the smallest price the money unit carries, $0.000001 per 1,000,000 "
            "tokens: it would price every call at 0. Write 0 for a free token kind, or use tokens limits "
            "for this model"
        )
    if price > MAX_PRICE:
        raise MoneyError(
            f"{what} {value} is above ${MAX_PRICE:,} per 1,000,000 tokens, the most the cost expression "
            "can multiply without overflowing: check the unit (prices are per 1,000,000 tokens)"
        )
    if not _fits_scale(price, PRICE_SCALE):
        raise MoneyError(
            f"{what} {value} has more than 6 decimal places: prices are exact to $0.000001 per 1,000,000 "
            f"tokens. Write e.g. {price.quantize(SMALLEST_PRICE, rounding=ROUND_HALF_UP)}"
        )
    return price


@dataclass(frozen=True)
class ModelPrice:
    """What one model costs, in USD per 1,000,000 tokens of each kind (already checked)."""

    input: Decimal
    cached_input: Decimal
    cache_write: Decimal
    output: Decimal

    @classmethod
    def of(cls, input: Any, output: Any, cached_input: Any | None = None, cache_write: Any | None = None) -> ModelPrice:
        """Checked prices; cache reads and writes cost the input price unless given."""
        fresh = check_price(input, "input")
        return cls(
            input=fresh,
            cached_input=fresh if cached_input is None else check_price(cached_input, "cachedInput"),
            cache_write=fresh if cache_write is None else check_price(cache_write, "cacheWrite"),
            output=check_price(output, "output"),
        )

    def scaled(self) -> tuple[int, int, int, int]:
        """Picodollars per token: (input, cachedInput, cacheWrite, output)."""
        return (
            int(self.input * PRICE_SCALE),
            int(self.cached_input * PRICE_SCALE),
            int(self.cache_write * PRICE_SCALE),
            int(self.output * PRICE_SCALE),
        )

    def describe(self) -> dict[str, float]:
        """The prices as plain numbers (for stack outputs and messages)."""
        return {
            name: float(value)
            for name, value in zip(
                PRICE_FIELDS, (self.input, self.cached_input, self.cache_write, self.output), strict=True
            )
        }


@dataclass(frozen=True)
class Usage:
    """The token counts Agent Router hands a cost expression (see the module docstring)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def fresh_input_tokens(self) -> int:
        """Input tokens that were neither read from nor written to the prompt cache."""
        return max(0, self.input_tokens - self.cached_input_tokens - self.cache_creation_input_tokens)


def call_cost_mills(price: ModelPrice, usage: Usage) -> int:
    """What the generated CEL charges for one call, computed in Python: exact, rounded up, clamped."""
    p_in, p_cached, p_write, p_out = price.scaled()
    picodollars = (
        usage.fresh_input_tokens * p_in
        + usage.cached_input_tokens * p_cached
        + usage.cache_creation_input_tokens * p_write
        + usage.output_tokens * p_out
    )
    mills = -(-picodollars // PICODOLLARS_PER_MILL)
    return min(mills, MAX_MILLS_PER_CALL)


def billed_models(models: Sequence[str], model_name_override: str | None) -> tuple[str, ...]:
    """The names a route's calls are priced by: what Agent Router's CEL `model` holds on that route.

    The route's `modelNameOverride` when it has one (Agent Router rewrites the model header to it before
    it evaluates costs, see the module docstring), else each name the agents send.
    """
    return (model_name_override,) if model_name_override else tuple(models)


def cel_string_problem(text: str) -> str | None:
    """Why no CEL parser accepts `text` as a string literal, or None when one does.

    Every character is written as itself or escaped (`cel_string`), so the only text a parser refuses is
    one holding a code point that is not a Unicode scalar value: a lone surrogate (U+D800 to U+DFFF),
    which UTF-8 cannot carry and which `\\u` escapes may not name (cel-go v0.28.1, the version
    envoyproxy/ai-gateway v1.1.0 builds with, `parser/unescape.go` `unescapeChar`: `utf8.ValidRune`;
    cel-cpp refuses the same, which the tests check with cel-expr-python).
    """
    for position, character in enumerate(text):
        if 0xD800 <= ord(character) <= 0xDFFF:
            return (
                f"holds U+{ord(character):04X} at position {position}, a lone surrogate that is not a Unicode "
                "character: Agent Router's CEL parser refuses a cost expression naming it, and one refused "
                "expression keeps the whole gateway's configuration from updating"
            )
    return None


def cel_string(text: str) -> str:
    """A CEL double-quoted string literal for `text` (every quote, backslash and control escaped)."""
    problem = cel_string_problem(text)
    if problem:
        raise MoneyError(f"{text!r} {problem}")
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _price_list(scaled: Sequence[int]) -> str:
    return "[" + ", ".join(f"{p}u" for p in scaled) + "]"


def _price_lookup(billed: Sequence[str], prices: Mapping[str, ModelPrice]) -> str:
    """A CEL expression for the price list of the call's model.

    One billed name (an override, or a one-model route): its prices, whatever `model` holds. Several: a
    table keyed by name, and for a name outside it (only the controller's trial run with "dummy" can
    bring one: the route matches on these names) the dearest price of each kind among them, never zero.
    """
    if len(billed) == 1:
        return _price_list(prices[billed[0]].scaled())
    table = "{" + ", ".join(f"{cel_string(m)}: {_price_list(prices[m].scaled())}" for m in billed) + "}"
    dearest = [max(prices[m].scaled()[kind] for m in billed) for kind in range(len(PRICE_FIELDS))]
    return f"model in {table} ? {table}[model] : {_price_list(dearest)}"


def route_cost_cel(billed: Sequence[str], prices: Mapping[str, ModelPrice]) -> str:
    """The CEL expression charging a route's calls in mills, priced by the route's billed model names.

    `[[<price list>].map(p, ceil(picodollars / 1e9))[0]].map(c, min(c, 1e9))[0]`: the `map` macro over a
    one-element list binds the price list `p` and the cost `c` once (CEL has no `let` in Agent Router's
    environment), so the expression grows linearly with the models.
    """
    if not billed:
        raise MoneyError("a route with no models cannot be priced")
    missing = [m for m in billed if m not in prices]
    if missing:
        raise MoneyError(f"no price for model(s) {', '.join(map(repr, missing))}")
    fresh = (
        "(input_tokens > cached_input_tokens + cache_creation_input_tokens"
        " ? input_tokens - cached_input_tokens - cache_creation_input_tokens : 0u)"
    )
    picodollars = (
        f"{fresh} * p[0] + cached_input_tokens * p[1] + cache_creation_input_tokens * p[2] + output_tokens * p[3]"
    )
    rounded = f"({picodollars} + {PICODOLLARS_PER_MILL - 1}u) / {PICODOLLARS_PER_MILL}u"
    lookup = _price_lookup(billed, prices)
    return f"[[{lookup}].map(p, {rounded})[0]].map(c, c > {MAX_MILLS_PER_CALL}u ? {MAX_MILLS_PER_CALL}u : c)[0]"


def route_cost_entry(billed: Sequence[str], prices: Mapping[str, ModelPrice]) -> dict[str, Any]:
    """The AIGatewayRoute `llmRequestCosts` item reporting a call's cost in mills (`billed_models` names)."""
    expression = route_cost_cel(billed, prices)
    if len(expression) > MAX_CEL_CODE_POINTS:
        raise MoneyError(
            f"the cost expression of this route is {len(expression):,} characters, over the "
            f"{MAX_CEL_CODE_POINTS:,} a CEL parser accepts: split its models over more routes or use shorter "
            "model names"
        )
    return {"metadataKey": USD_METADATA_KEY, "type": "CEL", "cel": expression}

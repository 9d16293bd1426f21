"""The money unit and the generated CEL cost expression, compiled and evaluated with Google's CEL.

Every expression is compiled the way Agent Router's controller compiles it (a checked compile with its
variable declarations, then the trial run) and evaluated the way its external processor evaluates it, with
cel-expr-python (cel-cpp): tests/support/agent_router_cel.py says which upstream files it follows.

The expected costs below are worked out by hand (in the comments) from the configured prices and the
usage Agent Router hands the expression, following envoyproxy/ai-gateway v1.1.0:
`internal/translator/openai_openai.go` (OpenAI: input_tokens = usage.prompt_tokens, which already holds
prompt_tokens_details.cached_tokens; output_tokens = completion_tokens, which already holds
completion_tokens_details.reasoning_tokens) and `internal/metrics/metrics.go`
`ExtractTokenUsageFromExplicitCaching` (Anthropic: input_tokens = input_tokens + cache_read_input_tokens
+ cache_creation_input_tokens).
"""

from __future__ import annotations

import random
import re
from decimal import Decimal

import pytest

from core.money import (
    MAX_MILLS_PER_CALL,
    MAX_PRICE,
    MAX_USD_LIMIT,
    MILLS_PER_USD,
    PICODOLLARS_PER_MILL,
    UINT32_MAX,
    USD_METADATA_KEY,
    ModelPrice,
    MoneyError,
    Usage,
    billed_models,
    call_cost_mills,
    cel_string,
    cel_string_problem,
    check_price,
    check_usd_limit,
    route_cost_cel,
    route_cost_entry,
    usd_to_mills,
)
from tests.support.agent_router_cel import (
    DECLARATIONS,
    TRIAL_CALL,
    Call,
    CostExpressionRefusedError,
    check_cost_expression,
    compile_cost,
    evaluate,
    model_as_agent_router_sets_it,
)

PRICES = {
    # USD per 1,000,000 tokens. OpenAI models: a cache write costs the input price (the default).
    "gpt-4o": ModelPrice.of(input=2.50, cached_input=1.25, output=10.00),
    "gpt-4o-mini": ModelPrice.of(input=0.15, cached_input=0.075, output=0.60),
    "o3-mini": ModelPrice.of(input=1.10, cached_input=0.55, output=4.40),
    "claude-sonnet": ModelPrice.of(input=3.00, cached_input=0.30, cache_write=3.75, output=15.00),
    "claude-haiku": ModelPrice.of(input=0.80, cached_input=0.08, cache_write=1.00, output=4.00),
}

# Usage as Agent Router passes it to the expression.
OPENAI_SHAPES = {
    # {"prompt_tokens": 120000, "completion_tokens": 3000}
    "plain": Usage(input_tokens=120_000, output_tokens=3_000),
    # {"prompt_tokens": 120000, "prompt_tokens_details": {"cached_tokens": 100000}, "completion_tokens": 3000}
    "cached": Usage(input_tokens=120_000, cached_input_tokens=100_000, output_tokens=3_000),
    # {"prompt_tokens": 20000, "completion_tokens": 40000, "completion_tokens_details": {"reasoning_tokens": 36000}}
    "reasoning": Usage(input_tokens=20_000, output_tokens=40_000, reasoning_tokens=36_000),
}
ANTHROPIC_SHAPES = {
    # {"input_tokens": 120000, "output_tokens": 3000}
    "plain": Usage(input_tokens=120_000, output_tokens=3_000),
    # {"input_tokens": 2000, "cache_read_input_tokens": 100000, "cache_creation_input_tokens": 18000,
    #  "output_tokens": 3000}: Agent Router's input_tokens is 2000 + 100000 + 18000
    "cached": Usage(
        input_tokens=120_000, cached_input_tokens=100_000, cache_creation_input_tokens=18_000, output_tokens=3_000
    ),
    # {"input_tokens": 20000, "output_tokens": 40000} of which 36000 were thinking
    "reasoning": Usage(input_tokens=20_000, output_tokens=40_000, reasoning_tokens=36_000),
}

HAND_COMPUTED_MILLS = {
    # gpt-4o: 120000*2.50 + 3000*10 = $0.30 + $0.03 = $0.33
    ("gpt-4o", "plain"): 330,
    # 20000*2.50 + 100000*1.25 + 3000*10 = $0.05 + $0.125 + $0.03 = $0.205
    ("gpt-4o", "cached"): 205,
    # 20000*2.50 + 40000*10 = $0.05 + $0.40 = $0.45 (reasoning is inside the 40000 output tokens)
    ("gpt-4o", "reasoning"): 450,
    # gpt-4o-mini: 120000*0.15 + 3000*0.60 = $0.018 + $0.0018 = $0.0198 -> 19.8 mills, rounded up
    ("gpt-4o-mini", "plain"): 20,
    # 20000*0.15 + 100000*0.075 + 3000*0.60 = $0.003 + $0.0075 + $0.0018 = $0.0123 -> 12.3 -> 13
    ("gpt-4o-mini", "cached"): 13,
    # 20000*0.15 + 40000*0.60 = $0.003 + $0.024 = $0.027
    ("gpt-4o-mini", "reasoning"): 27,
    # o3-mini: 120000*1.10 + 3000*4.40 = $0.132 + $0.0132 = $0.1452 -> 145.2 -> 146
    ("o3-mini", "plain"): 146,
    # 20000*1.10 + 100000*0.55 + 3000*4.40 = $0.022 + $0.055 + $0.0132 = $0.0902 -> 90.2 -> 91
    ("o3-mini", "cached"): 91,
    # 20000*1.10 + 40000*4.40 = $0.022 + $0.176 = $0.198
    ("o3-mini", "reasoning"): 198,
    # claude-sonnet: 120000*3 + 3000*15 = $0.36 + $0.045 = $0.405
    ("claude-sonnet", "plain"): 405,
    # 2000*3 + 100000*0.30 + 18000*3.75 + 3000*15 = $0.006 + $0.03 + $0.0675 + $0.045 = $0.1485 -> 149
    ("claude-sonnet", "cached"): 149,
    # 20000*3 + 40000*15 = $0.06 + $0.60 = $0.66
    ("claude-sonnet", "reasoning"): 660,
    # claude-haiku: 120000*0.80 + 3000*4 = $0.096 + $0.012 = $0.108
    ("claude-haiku", "plain"): 108,
    # 2000*0.80 + 100000*0.08 + 18000*1.00 + 3000*4 = $0.0016 + $0.008 + $0.018 + $0.012 = $0.0396 -> 40
    ("claude-haiku", "cached"): 40,
    # 20000*0.80 + 40000*4 = $0.016 + $0.16 = $0.176
    ("claude-haiku", "reasoning"): 176,
}


def shape(model: str, name: str) -> Usage:
    return (ANTHROPIC_SHAPES if model.startswith("claude") else OPENAI_SHAPES)[name]


class Route:
    """One route's generated cost expression, evaluated call by call as Agent Router evaluates it."""

    def __init__(self, models: list[str], prices: dict[str, ModelPrice], override: str | None = None) -> None:
        self.override = override
        self.expression = route_cost_entry(billed_models(models, override), prices)["cel"]
        check_cost_expression(self.expression)

    def charge(self, sent: str, usage: Usage, **call: object) -> int:
        """Mills charged for a call naming `sent`, with `model` set as Agent Router sets it on this route."""
        model = model_as_agent_router_sets_it(sent, self.override)
        return evaluate(self.expression, Call(model=model, usage=usage, **call))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def program() -> Route:
    return Route(list(PRICES), PRICES)


@pytest.mark.parametrize(("model", "usage_shape"), sorted(HAND_COMPUTED_MILLS))
def test_generated_cel_charges_the_hand_computed_cost(program, model, usage_shape):
    usage = shape(model, usage_shape)
    assert program.charge(model, usage) == HAND_COMPUTED_MILLS[(model, usage_shape)]
    assert call_cost_mills(PRICES[model], usage) == HAND_COMPUTED_MILLS[(model, usage_shape)]


def test_reasoning_tokens_are_not_charged_twice(program):
    usage = OPENAI_SHAPES["reasoning"]
    with_reasoning = program.charge("o3-mini", usage)
    without = program.charge("o3-mini", Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens))
    assert with_reasoning == without == 198


def test_every_model_of_the_table_is_priced_by_its_own_row(program):
    costs = {model: program.charge(model, OPENAI_SHAPES["plain"]) for model in PRICES}
    assert costs == {"gpt-4o": 330, "gpt-4o-mini": 20, "o3-mini": 146, "claude-sonnet": 405, "claude-haiku": 108}


def test_the_controllers_trial_run_succeeds_and_charges_nothing(program):
    """Agent Router's NewProgram evaluates model "dummy" with every count 0; failing there refuses the route."""
    for source in DECLARATIONS:
        assert evaluate(program.expression, TRIAL_CALL, source) == 0


def test_a_model_outside_the_table_pays_the_dearest_price_of_each_kind(program):
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=0, output_tokens=1_000_000)
    # dearest input 3.00 (claude-sonnet), dearest output 15.00 (claude-sonnet): $18.00
    assert program.charge("someone-elses-model", usage) == 18_000


def test_inconsistent_counts_never_underflow(program):
    """More cached than input tokens (a provider bug) prices the fresh input at 0 instead of failing."""
    usage = Usage(input_tokens=10, cached_input_tokens=1_000_000, cache_creation_input_tokens=5, output_tokens=0)
    # 1,000,000 cached * 1.25 + 5 writes * 2.50 = $1.25 + $0.0000125 -> 1250.0125 mills -> 1251
    assert program.charge("gpt-4o", usage) == 1251


def test_the_largest_counts_at_the_largest_prices_clamp_instead_of_overflowing():
    dearest = ModelPrice.of(input=MAX_PRICE, cached_input=MAX_PRICE, cache_write=MAX_PRICE, output=MAX_PRICE)
    for models in (["frontier"], ["frontier", "cheap"]):  # the single-price form and the table
        route = Route(models, {"frontier": dearest, "cheap": ModelPrice.of(input=0, output=0)})
        for counts in (
            dict(input_tokens=UINT32_MAX, output_tokens=UINT32_MAX),
            dict(
                input_tokens=UINT32_MAX,
                cached_input_tokens=UINT32_MAX,
                cache_creation_input_tokens=UINT32_MAX,
                output_tokens=UINT32_MAX,
            ),
            dict(cached_input_tokens=UINT32_MAX, cache_creation_input_tokens=UINT32_MAX, output_tokens=UINT32_MAX),
        ):
            for source in DECLARATIONS:
                call = Call(model="frontier", usage=Usage(**counts), total_tokens=UINT32_MAX)
                assert evaluate(route.expression, call, source) == MAX_MILLS_PER_CALL
        # One mill under the clamp is charged as computed: 999,999,999 mills = $999,999.999.
        tokens = 999_999_999  # at $1,000 per 1,000,000 tokens: $999,999.999
        assert route.charge("frontier", Usage(output_tokens=tokens)) == 999_999_999


def test_the_checker_would_notice_an_overflow_a_bad_type_and_an_undeclared_variable():
    """The checks above can fail: cel-cpp refuses what cel-go refuses, at compile time or at evaluation."""
    with pytest.raises(CostExpressionRefusedError, match="overflow"):
        evaluate("input_tokens * input_tokens * input_tokens", Call("m", Usage(input_tokens=UINT32_MAX)))
    with pytest.raises(
        CostExpressionRefusedError, match=re.escape("no matching overload for '_*_' applied to '(uint, int)'")
    ):
        compile_cost("input_tokens * 2")
    with pytest.raises(CostExpressionRefusedError, match="undeclared reference to 'cache_creation_5m_input_tokens'"):
        compile_cost("cache_creation_5m_input_tokens")
    with pytest.raises(CostExpressionRefusedError, match="not uint or int"):
        check_cost_expression("double(input_tokens) * 0.5")
    with pytest.raises(CostExpressionRefusedError, match="not an int >= 0 or a uint"):
        check_cost_expression("int(input_tokens) - 1")  # the trial run: -1
    with pytest.raises(CostExpressionRefusedError, match="Key not found in map"):
        check_cost_expression('{"gpt": 1u}[model]')  # the trial run's "dummy" is not in the map


def test_a_route_with_an_override_charges_the_override_models_price_for_every_model_it_serves():
    """`models: [a, b]` with `modelNameOverride: o`: Agent Router sets `model` to o before it evaluates costs
    (processor_impl.go:706-709), so calls to a and to b cost o's price, never a's, b's or the dearest."""
    prices = {
        "a": ModelPrice.of(input=0.40, output=1.60),
        "b": ModelPrice.of(input=2.00, output=8.00),
        "o": ModelPrice.of(input=1.00, cached_input=0.25, output=4.00),
    }
    route = Route(["a", "b"], prices, override="o")
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=200_000, output_tokens=100_000)
    # o: 800,000 fresh * $1.00 + 200,000 cached * $0.25 + 100,000 * $4.00 = $0.80 + $0.05 + $0.40 = $1.25
    assert route.charge("a", usage) == route.charge("b", usage) == 1_250 == call_cost_mills(prices["o"], usage)
    assert route.charge("a", usage) != call_cost_mills(prices["a"], usage)
    assert '"a"' not in route.expression and '"b"' not in route.expression
    # Without the override, each name is priced by its own row, as before.
    plain = Route(["a", "b"], prices)
    # a: 800,000 * $0.40 + 200,000 * $0.40 (cachedInput defaults to input) + 100,000 * $1.60 = $0.56
    assert plain.charge("a", usage) == call_cost_mills(prices["a"], usage) == 560
    # b: 800,000 * $2.00 + 200,000 * $2.00 + 100,000 * $8.00 = $2.80
    assert plain.charge("b", usage) == call_cost_mills(prices["b"], usage) == 2_800


def test_a_route_with_an_override_needs_the_override_models_price():
    with pytest.raises(MoneyError, match=re.escape("no price for model(s) 'o'")):
        route_cost_entry(billed_models(["a", "b"], "o"), {"a": ModelPrice.of(input=1, output=1)})
    assert billed_models(["a", "b"], "o") == ("o",)
    assert billed_models(["a", "b"], None) == ("a", "b")


def test_random_usage_matches_the_python_reference_and_rounds_up_by_less_than_a_mill(program):
    rng = random.Random(13)
    for _ in range(150):
        model = rng.choice(sorted(PRICES))
        fresh, cached, written = rng.randrange(0, 300_000), rng.randrange(0, 300_000), rng.randrange(0, 50_000)
        usage = Usage(
            input_tokens=fresh + cached + written,
            cached_input_tokens=cached,
            cache_creation_input_tokens=written,
            output_tokens=rng.randrange(0, 100_000),
        )
        charged = program.charge(model, usage)
        assert charged == call_cost_mills(PRICES[model], usage)
        price = PRICES[model]
        exact_usd = (
            fresh * price.input + cached * price.cached_input + written * price.cache_write
        ) / 1_000_000 + usage.output_tokens * price.output / 1_000_000
        exact_mills = exact_usd * MILLS_PER_USD
        assert exact_mills <= charged < exact_mills + 1


def test_only_agent_router_variables_are_used():
    """Only the v1.1.0 variables: the cache-write breakdown by TTL is in later Agent Router source, but could not
    be confirmed at the deployed v1.2.1 (core/money.py), and an undeclared variable makes the controller refuse
    the route."""
    expression = route_cost_cel(list(PRICES), PRICES)
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    identifiers = set(re.findall(r"\b[a-z_][a-z_0-9]*\b", without_strings))
    macro_variables = {"p", "c"}
    keywords = {"in", "map", "u"}
    assert identifiers - macro_variables - keywords <= set(DECLARATIONS["envoyproxy/ai-gateway v1.1.0"])
    assert {"input_tokens", "cached_input_tokens", "cache_creation_input_tokens", "output_tokens"} <= identifiers
    assert "reasoning_tokens" not in identifiers and "total_tokens" not in identifiers
    assert not identifiers & {"cache_creation_5m_input_tokens", "cache_creation_1h_input_tokens"}


@pytest.mark.parametrize(
    "name", ['gpt-"4o"', "back\\slash", "new\nline", "tab\tand\x7f", "ünïcødé-模型", "a'b", "\U0010ffff"]
)
def test_model_names_are_escaped_as_cel_strings(name):
    prices = {name: ModelPrice.of(input=1, output=2), "other": ModelPrice.of(input=100, output=200)}
    route = Route([name, "other"], prices)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert route.charge(name, usage) == 3_000  # $1 + $2
    assert compile_cost(cel_string(name)).eval(data={}).value() == name


def test_a_name_is_refused_exactly_when_cels_parser_refuses_its_literal():
    """Every code point of the Basic Multilingual Plane and a sample beyond: `cel_string_problem` names the
    lone surrogates, which cel-cpp refuses as cel-go's `unescapeChar` does; every other one round-trips."""
    rng = random.Random(19)
    code_points = [*range(0x10000), *rng.sample(range(0x10000, 0x110000), 2000), 0x10FFFF]
    refused_by_us = [code for code in code_points if cel_string_problem(f"m{chr(code)}")]

    def round_trips(codes: list[int]) -> bool:
        """cel-cpp parses the literal of these characters as exactly them."""
        text = "m" + "".join(map(chr, codes))
        try:
            return compile_cost(cel_string(text)).eval(data={}).value() == text
        except CostExpressionRefusedError:
            return False

    def refused(codes: list[int]) -> list[int]:
        """The characters of `codes` cel-cpp does not take, found by halving: one literal per run that parses
        (a string literal is lexed character by character, so a run parses exactly when each of its characters
        does), which checks 67,000 code points in a few hundred compiles."""
        if round_trips(codes):
            return []
        if len(codes) == 1:
            return codes
        half = len(codes) // 2
        return refused(codes[:half]) + refused(codes[half:])

    assert refused(sorted(set(code_points) - set(refused_by_us))) == []
    refused_by_cel = []
    for code in refused_by_us:  # no literal can hold these: only a \u escape can name one
        try:
            compile_cost(f'"m\\u{code:04x}"')
        except CostExpressionRefusedError:
            refused_by_cel.append(code)
    assert refused_by_cel == refused_by_us == list(range(0xD800, 0xE000))
    with pytest.raises(MoneyError, match="U\\+D800 at position 3, a lone surrogate"):
        cel_string("gpt\ud800")


def test_route_cost_entry_is_a_cel_cost_under_our_metadata_key():
    entry = route_cost_entry(["gpt-4o"], PRICES)
    assert entry["metadataKey"] == USD_METADATA_KEY == "agent_budgets_usd_mills"
    assert entry["type"] == "CEL"
    assert evaluate(entry["cel"], Call("gpt-4o", OPENAI_SHAPES["plain"])) == 330


def test_a_route_with_an_unpriced_model_cannot_be_priced():
    with pytest.raises(MoneyError, match="no price for model"):
        route_cost_cel(["gpt-4o", "mystery"], PRICES)


def test_an_expression_too_long_for_a_cel_parser_is_refused():
    models = [f"model-{i:03d}-" + "x" * 400 for i in range(128)]
    prices = {m: ModelPrice.of(input=1, output=1) for m in models}
    with pytest.raises(MoneyError, match="over the 100,000 a CEL parser accepts"):
        route_cost_entry(models, prices)


# --- the unit and the checks ---------------------------------------------------------------------------


def test_no_accepted_usd_amount_overflows_the_rate_limit_counter():
    assert usd_to_mills(check_usd_limit(MAX_USD_LIMIT)) == 1_000_000_000 <= UINT32_MAX
    assert usd_to_mills(check_usd_limit(0.01)) == 10
    assert usd_to_mills(check_usd_limit(5)) == 5_000
    assert usd_to_mills(check_usd_limit(49.999)) == 49_999
    assert PICODOLLARS_PER_MILL == 10**9


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "outside 0.01 to 1,000,000"),
        (-5, "outside 0.01 to 1,000,000"),
        (0.009, "outside 0.01 to 1,000,000"),
        (1_000_000.5, "outside 0.01 to 1,000,000"),
        (5.0005, "more than 3 decimal places"),
        ("5", "without quotes"),
        (True, "without quotes"),
        (float("nan"), "finite"),
    ],
)
def test_bad_usd_amounts_are_refused_with_the_fix(value, message):
    with pytest.raises(MoneyError, match=re.escape(message)):
        check_usd_limit(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "is negative"),
        ("2.50", "without quotes"),
        (None, "without quotes"),
        (0.0000001, "below the smallest price the money unit carries, $0.000001 per 1,000,000 tokens"),
        (1000.01, "above $1,000 per 1,000,000 tokens"),
        (0.0000015, "more than 6 decimal places"),
        (float("inf"), "finite"),
    ],
)
def test_bad_prices_are_refused_with_the_fix(value, message):
    with pytest.raises(MoneyError, match=re.escape(message)):
        check_price(value, "input")


def test_good_prices_are_exact():
    assert check_price(2.5, "input") == Decimal("2.5")
    assert check_price(0, "input") == 0
    assert check_price(0.000001, "input") == Decimal("0.000001")
    assert check_price(0.075, "input") == Decimal("0.075")
    assert ModelPrice.of(input=0.1, output=0.3).scaled() == (100_000, 100_000, 100_000, 300_000)


def test_cache_prices_default_to_the_input_price():
    price = ModelPrice.of(input=3, output=15)
    assert price.cached_input == price.cache_write == Decimal(3)
    explicit = ModelPrice.of(input=3, output=15, cached_input=0, cache_write=3.75)
    assert (explicit.cached_input, explicit.cache_write) == (0, Decimal("3.75"))


def test_the_money_facts_name_the_agent_router_version_deployed_by_default():
    """core/money.py and docs/money-and-windows.md say which version they could check against the deployed one."""
    from pathlib import Path

    from core import money
    from core.settings import PlatformSettings

    deployed = f"Agent Router {PlatformSettings().agent_router_version}"
    page = (Path(__file__).resolve().parents[1] / "docs" / "money-and-windows.md").read_text(encoding="utf-8")
    for text in (money.__doc__ or "", page):
        assert deployed in " ".join(text.split()), "name the deployed version when it changes"

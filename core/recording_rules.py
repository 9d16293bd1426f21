"""Dollars in Prometheus: recording rules that price Agent Router's token counters with `agent-budgets:prices`.

The same prices and the same arithmetic as the routes' cost expression (core.money), so a dashboard shows
what the budgets charge:

* Agent Router's external processor records each call's token counts in the histogram
  `gen_ai.client.token.usage` (Prometheus: `gen_ai_client_token_usage_sum`, one series per
  `gen_ai_token_type`: `input`, `cached_input`, `cache_creation_input`, `output`, `reasoning`), from the same
  usage it hands the cost expression (envoyproxy/ai-gateway v1.1.0 `internal/metrics/metrics_impl.go`
  `RecordTokenUsage`, `internal/metrics/genai.go`). Its `gen_ai_request_model` is the model header after the
  route's `modelNameOverride` (`internal/extproc/processor_impl.go:354-357`), the name the cost expression sees
  as `model`: the billed name (core.money.billed_models). `gen_ai_original_model` is what the agent sent.
* As in the cost expression, `input` already holds the cached and cache-write tokens and `output` the
  reasoning tokens. Pricing fresh input at `input`, cache reads at `cachedInput` and cache writes at
  `cacheWrite` is therefore the same, per call and summed, as pricing the counters Agent Router keeps at
  these *weights*: `input` at the input price, `cached_input` at `cachedInput - input`, `cache_creation_input`
  at `cacheWrite - input`, `output` at the output price, `reasoning` not at all:

      fresh * input + cached * cachedInput + writes * cacheWrite + output * output
        = input_tokens * input + cached * (cachedInput - input) + writes * (cacheWrite - input) + output * output

  A weight is negative when the cache is cheaper than fresh input (it usually is); the sum never is. Being
  linear in the counters, the weights price any window and any aggregation: `increase(...[1d]) * on (...)
  group_left <weights>` is exact, where a recorded rate would have to be integrated.

The rules, one group evaluated in order (Prometheus runs a group's rules in sequence, each seeing the ones
before it at the same timestamp):

1. `agent_budgets:gen_ai_token_price:usd`, one constant series per billed model and token type: the weight in
   USD per token, labelled `gen_ai_request_model` and `gen_ai_token_type` like the counters.
2. `agent_budgets:gen_ai_tokens:rate5m`: tokens per second by actor, requested and billed model and type.
3. `agent_budgets:gen_ai_usd:rate5m`: USD per second by actor, requested and billed model.

Where the cost expression differs: it rounds each call up to a mill and clamps a call at 1,000,000,000 mills;
these rules are exact, so a budget is charged at most a mill a call more. A model with no price has no
weights, so its calls are left out of the USD series (with a `usd` limit every billed model has one).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from core.money import ModelPrice
from core.settings import StackSettings

TOKEN_METRIC = "gen_ai_client_token_usage_sum"
"""Agent Router's token counter (the `_sum` of the histogram; no bucket is needed)."""
TOKEN_TYPE_LABEL = "gen_ai_token_type"
BILLED_MODEL_LABEL = "gen_ai_request_model"
REQUESTED_MODEL_LABEL = "gen_ai_original_model"
PRICE_RECORD = "agent_budgets:gen_ai_token_price:usd"
TOKENS_RECORD = "agent_budgets:gen_ai_tokens:rate5m"
USD_RECORD = "agent_budgets:gen_ai_usd:rate5m"
RATE_WINDOW = "5m"
RECORDING_GROUP = "agent-budgets-usd"
PRICED_TOKEN_TYPES = ("input", "cached_input", "cache_creation_input", "output")
"""The token types a price applies to, as Agent Router names them (`reasoning` is inside `output`)."""
_PER_TOKEN = Decimal(1_000_000)


def token_weights(price: ModelPrice) -> dict[str, Decimal]:
    """USD per token of each counter Agent Router keeps, such that their sum is the call's exact price."""
    return {
        "input": price.input / _PER_TOKEN,
        "cached_input": (price.cached_input - price.input) / _PER_TOKEN,
        "cache_creation_input": (price.cache_write - price.input) / _PER_TOKEN,
        "output": price.output / _PER_TOKEN,
    }


def _number(value: Decimal) -> str:
    """A PromQL number literal for an exact decimal (no exponent, so it reads as the price it is)."""
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def promql_string(value: str) -> str:
    """A PromQL string literal (double-quoted; backslashes and quotes escaped), for every query the program writes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def billed_prices(settings: StackSettings) -> dict[str, ModelPrice]:
    """Every billed model name (route order) that has a price, with its checked prices."""
    billed: dict[str, ModelPrice] = {}
    for route in settings.routes:
        for model in route.billed_models:
            if model in settings.prices and model not in billed:
                billed[model] = settings.prices[model].to_price()
    return billed


def price_rules(settings: StackSettings) -> list[dict[str, Any]]:
    """One constant series per billed model and priced token type: the weight in USD per token."""
    return [
        {
            "record": PRICE_RECORD,
            "expr": f"vector({_number(weight)})",
            "labels": {BILLED_MODEL_LABEL: model, TOKEN_TYPE_LABEL: token_type},
        }
        for model, price in billed_prices(settings).items()
        for token_type, weight in token_weights(price).items()
    ]


def grouping(settings: StackSettings, *labels: str) -> str:
    """`actor_id, <labels>` (the actor first, when per-actor metrics are on)."""
    actor = settings.monitoring.actor_label
    return ", ".join(([actor] if actor else []) + list(labels))


def tokens_rule(settings: StackSettings) -> dict[str, Any]:
    """Tokens per second by actor, requested and billed model and token type."""
    by = grouping(settings, REQUESTED_MODEL_LABEL, BILLED_MODEL_LABEL, TOKEN_TYPE_LABEL)
    return {"record": TOKENS_RECORD, "expr": f"sum by ({by}) (rate({TOKEN_METRIC}[{RATE_WINDOW}]))"}


def usd_expression(counters: str, by: str) -> str:
    """PromQL pricing `counters` (a vector of token counts by type) with the recorded weights, summed by `by`."""
    return (
        f"sum by ({by}) (\n"
        f"  {counters}\n"
        f"  * on ({BILLED_MODEL_LABEL}, {TOKEN_TYPE_LABEL}) group_left\n"
        f"  {PRICE_RECORD}\n"
        f")"
    )


def priced_counters() -> str:
    """The token counters a price applies to."""
    types = "|".join(PRICED_TOKEN_TYPES)
    return f"{TOKEN_METRIC}{{{TOKEN_TYPE_LABEL}=~{promql_string(types)}}}"


def usd_rule(settings: StackSettings) -> dict[str, Any]:
    """USD per second by actor, requested and billed model."""
    by = grouping(settings, REQUESTED_MODEL_LABEL, BILLED_MODEL_LABEL)
    return {
        "record": USD_RECORD,
        "expr": usd_expression(f"rate({priced_counters()}[{RATE_WINDOW}])", by),
    }


def recording_group(settings: StackSettings) -> dict[str, Any]:
    """The PrometheusRule group of recording rules: the tokens rate, and with any price the weights and USD."""
    prices = price_rules(settings)
    rules = [*prices, tokens_rule(settings)]
    if prices:
        rules.append(usd_rule(settings))
    return {"name": RECORDING_GROUP, "rules": rules}

"""`agent-budgets:prices`: what one model costs per 1,000,000 tokens of each kind."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from core import money
from core.model_names import model_name_problem
from core.settings.base import ConfigModel


def _priced_model(name: str) -> str:
    problem = model_name_problem(name, "prices")
    if problem:
        raise ValueError(f"model name {name[:200]!r} {problem}. Write the name exactly as the provider bills it")
    return name


# A key of `prices`: a model name as routes hold them (core.model_names), checked key by key.
PricedModel = Annotated[str, AfterValidator(_priced_model)]


def _price(field: str) -> Any:
    def check(value: Any) -> Decimal:
        if value is None:
            raise ValueError(f"is empty (YAML null): give {field} in USD per 1,000,000 tokens, e.g. {field}: 2.50")
        if isinstance(value, str):
            raise ValueError(f"got {value!r}: write the price as a number without quotes or $, e.g. {field}: 2.50")
        try:
            return money.check_price(value, field)
        except money.MoneyError as error:
            raise ValueError(str(error)) from None

    return BeforeValidator(check)


class ModelPrices(ConfigModel):
    """What one model costs, in USD per 1,000,000 tokens of each kind, as the provider bills it."""

    input: Annotated[Decimal, _price("input")] = Field(
        description="Fresh input tokens (neither read from nor written to the prompt cache)."
    )
    output: Annotated[Decimal, _price("output")] = Field(
        description="Output tokens, reasoning (thinking) tokens included: both providers bill them as output."
    )
    cached_input: Annotated[Decimal, _price("cachedInput")] | None = Field(
        default=None, description="Input tokens read from the prompt cache; default: the input price."
    )
    cache_write: Annotated[Decimal, _price("cacheWrite")] | None = Field(
        default=None,
        description=(
            "Input tokens written to the prompt cache (Anthropic bills these above the input price); default: the "
            "input price."
        ),
    )

    def to_price(self) -> money.ModelPrice:
        """The checked prices, cache prices defaulted to the input price."""
        return money.ModelPrice.of(
            input=self.input, output=self.output, cached_input=self.cached_input, cache_write=self.cache_write
        )

"""What the mock model's fixed usage costs, priced the way the program prices it (core.money)."""

from __future__ import annotations

from core.money import ModelPrice, Usage, call_cost_mills
from mock_model.server import Settings as MockSettings

# Prices for the mock models in check 11: whole numbers (a float leaf would need `--type float`), chosen
# so a call costs a fraction of a mill more than a whole number: the rounding up shows in the counter.
MOCK_PRICE = {"input": 401, "output": 1000}


def mock_call_mills(tokens_per_call: int, price: dict[str, int] = MOCK_PRICE) -> int:
    """Mills one mock call is charged: its prompt/completion split (mock_model/server.py) at `price`."""
    usage = MockSettings(total_tokens=tokens_per_call).usage()
    return call_cost_mills(
        ModelPrice.of(input=price["input"], output=price["output"]),
        Usage(input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]),
    )

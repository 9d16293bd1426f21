"""What one call can cost: the output-token ceiling a route writes into every request, and the most one call
through a route can be charged.

Pure functions over plain data. Facts, each checked in upstream source:

* Agent Router applies a route backendRef's `bodyMutation` in its upstream (per-backend) filter, **after**
  translating the request into the backend's schema, to the body that goes to the provider: `remove` first,
  then `set`, top-level fields only, a value that looks like JSON inserted as JSON (envoyproxy/ai-gateway
  v1.1.0 `internal/bodymutator/body_mutator.go`, `internal/extproc/processor_impl.go` and `util.go`
  `applyBodyMutation`; merged over the AIServiceBackend's own with the route's winning,
  `internal/controller/gateway.go` `mergeBodyMutations`; CRD `api/v1beta1/ai_gateway_route.go`
  `HTTPBodyMutation`, at most 16 fields each). So the field is the one the *backend's* schema reads,
  whatever endpoint the agent called, and it replaces whatever the agent asked for, smaller values too.
  The mutation applies to every request the route forwards, whatever the endpoint.
* OpenAI schema: `max_completion_tokens` bounds the whole completion, reasoning tokens included; OpenAI's
  reasoning models (o1, o3, o4-mini, gpt-5) refuse `max_tokens` with 400 "Unsupported parameter: 'max_tokens'
  is not supported with this model. Use 'max_completion_tokens' instead" (e.g. openai/openai-python#2046), and
  the other chat models accept both, `max_tokens` deprecated. So the ceiling sets `max_completion_tokens`
  and removes `max_tokens`. It also sets `n` to 1: with `n` choices a call generates up to `n` completions,
  each up to the ceiling, and is charged for all of them.
* Anthropic schema: `max_tokens` (required by the Messages API) bounds the output, extended-thinking tokens
  included; `thinking.budget_tokens` must stay below it, so a ceiling under an agent's thinking budget makes
  those calls fail with 400.
* What still bounds the input is the model's context window: the provider refuses a call whose input and
  requested output do not fit. The gateway cannot enforce it; `routes[].contextWindow` declares it, and it
  bounds a call's tokens: input plus output never exceed the window.
* The in-cluster mock reports the same usage for every call (`mockModel.totalTokens`).
* Each kind of tokens a limit can count is part of the window: input (cache reads and writes included, as
  Agent Router reports `InputToken`), cached input (a part of the input) and output (reasoning included, at
  most the ceiling) are each at most the window, and the output at most the ceiling too.
* **A body that repeats a key escapes the ceiling.** The mutation writes with tidwall/sjson, which acts on the
  *first* copy of a key (`appendRawPaths` finds it with gjson's `Get`, which stops at the first match and
  compares escaped keys unescaped: sjson commit 13f6455, gjson v1.19.0 `parseObject`, the versions ai-gateway
  v1.1.0's go.mod pins); a `remove` deletes that first copy only. The pass-through translators forward the
  client's own bytes, changing at most `model` (`internal/translator/openai_openai.go`,
  `anthropic_anthropic.go` `RequestBody`). So `{"max_completion_tokens": 1, "max_completion_tokens": 100000,
  "n": 1, "n": 8}` reaches the provider with its last copies intact, and the parsers that keep the last copy
  of a key (Agent Router's own, sonic, and Python's json do) read 100,000 and 8. Only a cross-schema call is
  re-serialised from Agent Router's parsed struct (one copy of each key), and the agent picks the endpoint, so
  every route of the OpenAI or Anthropic schema can be reached through a pass-through one. Without
  `gateway.refuseDuplicateKeys` (core/body_guard.py) an Anthropic route's output is bounded by its window only,
  and an OpenAI route's not at all (any number of choices).
* **When the mutation fails, the body goes out unmutated** (`internal/extproc/util.go` `applyBodyMutation`
  logs the error and keeps the body). `Mutate` returns an error only when sjson does: a `remove` of a top-level
  key never fails (a missing key is "no change"), and a `set` fails only on a body that gjson reads as a
  top-level array ("cannot set array element for non-numeric key"); a body that is not JSON at all is replaced
  by an object holding the set fields. Every endpoint's `ParseBody` first unmarshals the body into its request
  struct (`internal/endpointspec/endpointspec.go`), which refuses an array with 400 before a backend is chosen,
  so no call that reaches a provider carries a failed ceiling: nothing to add to the bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.money import MAX_MILLS_PER_CALL, ModelPrice, Usage, call_cost_mills

ApiSchema = Literal["OpenAI", "Anthropic"]

OPENAI_CEILING_FIELD = "max_completion_tokens"
OPENAI_LEGACY_CEILING_FIELD = "max_tokens"
OPENAI_CHOICES_FIELD = "n"
ANTHROPIC_CEILING_FIELD = "max_tokens"


def api_schema(provider_kind: str) -> ApiSchema:
    """The AIServiceBackend schema of a provider kind: Anthropic's own API, or OpenAI's (the mock speaks it)."""
    return "Anthropic" if provider_kind == "anthropic" else "OpenAI"


def ceiling_body_mutation(provider_kind: str, max_output_tokens: int) -> dict[str, Any]:
    """The route backendRef `bodyMutation` that caps every call's output at `max_output_tokens`."""
    if api_schema(provider_kind) == "Anthropic":
        return {"set": [{"path": ANTHROPIC_CEILING_FIELD, "value": str(max_output_tokens)}]}
    return {
        "set": [
            {"path": OPENAI_CEILING_FIELD, "value": str(max_output_tokens)},
            {"path": OPENAI_CHOICES_FIELD, "value": "1"},
        ],
        "remove": [OPENAI_LEGACY_CEILING_FIELD],
    }


@dataclass(frozen=True)
class RouteFacts:
    """What the per-call bound of one route depends on, as plain data."""

    key: str
    """The route's configuration key, e.g. `routes[1]`, for messages."""
    name: str
    provider_kind: str
    models: tuple[str, ...]
    """The names the route's calls are priced by (its billed models)."""
    max_output_tokens: int | None
    context_window: int | None
    timeout_seconds: float
    served: tuple[str, ...] = ()
    """The names agents send to reach the route (what a per-model limit names); empty: any."""
    duplicate_keys_refused: bool = False
    """Whether the gateway refuses bodies that repeat a top-level key (`gateway.refuseDuplicateKeys`)."""


REFUSE_DUPLICATE_KEYS = "gateway.refuseDuplicateKeys"
"""The key whose guard makes a route's ceiling hold against a body that repeats a key."""


def ceiling_bypass(route: RouteFacts) -> str | None:
    """Why the route's `maxOutputTokens` does not bound a call whose body repeats a key, and what bounds it
    instead; None when the ceiling holds (or there is none, or the route is the mock)."""
    if route.max_output_tokens is None or route.duplicate_keys_refused or route.provider_kind == "mock":
        return None
    if api_schema(route.provider_kind) == "Anthropic":
        fields, instead = ANTHROPIC_CEILING_FIELD, f"output up to {route.key}.contextWindow"
    else:
        fields, instead = f"{OPENAI_CHOICES_FIELD} or {OPENAI_CEILING_FIELD}", "no bound"
    return (
        f"{route.key} ({route.name}): a body that repeats {fields} keeps its own last copy (the ceiling is "
        f"written into the first): {instead} (set {REFUSE_DUPLICATE_KEYS})"
    )


@dataclass(frozen=True)
class CallBound:
    """The most one call through a route can be charged, or what to set for there to be a most."""

    route: str
    tokens: int | None
    """The most total, input or cached-input tokens one call reports."""
    mills: int | None
    timeout_seconds: float
    missing: tuple[str, ...] = ()
    """The configuration keys that would bound it (empty when bounded)."""
    output_tokens: int | None = None
    """The most output tokens one call reports, when less than `tokens` (a ceiling)."""
    served: tuple[str, ...] = ()
    """The model names agents send to reach this route; empty: any."""
    bypass: str | None = None
    """Why the route's ceiling does not hold against a body that repeats a key (`ceiling_bypass`)."""

    @property
    def bounded(self) -> bool:
        return not self.missing

    def tokens_of(self, count: str) -> int | None:
        """The most tokens of one kind (`total`, `input`, `output`, `cachedInput`) one call reports."""
        if count == "output" and self.output_tokens is not None:
            return self.output_tokens
        return self.tokens

    def serves(self, models: Sequence[str]) -> bool:
        """Whether calls naming any of `models` (every model when empty) can go through this route."""
        return not models or not self.served or not set(models).isdisjoint(self.served)


def dearest_prices(models: Sequence[str], prices: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The dearest price of each token kind among `models` (what the route's cost expression charges a model it
    has no price for), or None when a model has no price at all."""
    if not models or any(model not in prices for model in models):
        return None
    kinds = [prices[model] for model in models]
    return ModelPrice(
        input=max(p.input for p in kinds),
        cached_input=max(p.cached_input for p in kinds),
        cache_write=max(p.cache_write for p in kinds),
        output=max(p.output for p in kinds),
    )


def _dearest_call_mills(window: int, ceiling: int, price: ModelPrice) -> int:
    """The priciest call that fits the window with at most `ceiling` output tokens: every input token at the
    dearest input kind, and all the output the ceiling allows (or none, if input is dearer)."""
    dearest_input = max(price.input, price.cached_input, price.cache_write)
    flat = ModelPrice(input=dearest_input, cached_input=dearest_input, cache_write=dearest_input, output=price.output)
    output = min(ceiling, window)
    return max(
        call_cost_mills(flat, Usage(input_tokens=window)),
        call_cost_mills(flat, Usage(input_tokens=window - output, output_tokens=output)),
    )


def call_bound(route: RouteFacts, prices: Mapping[str, ModelPrice], mock_total_tokens: int) -> CallBound:
    """The most one call through `route` can be charged, in tokens and (when every model is priced) in mills."""
    price = dearest_prices(route.models, prices)
    if route.provider_kind == "mock":
        # The mock reports the same total for every call; priced as if every token were of the dearest kind.
        mills = None if price is None else _dearest_call_mills(mock_total_tokens, mock_total_tokens, price)
        return CallBound(route.name, mock_total_tokens, mills, route.timeout_seconds, served=route.served)
    bypass = ceiling_bypass(route)
    missing: list[str] = []
    if route.context_window is None:
        missing.append(f"{route.key}.contextWindow")
    if api_schema(route.provider_kind) == "OpenAI":
        # Without the ceiling's `n: 1` one call can ask for many choices, each as long as the window allows;
        # and a body that repeats `n` keeps its own unless the gateway refuses it.
        if route.max_output_tokens is None:
            missing.append(f"{route.key}.maxOutputTokens")
        if not route.duplicate_keys_refused:
            missing.append(REFUSE_DUPLICATE_KEYS)
    if missing:
        return CallBound(
            route.name, None, None, route.timeout_seconds, tuple(missing), served=route.served, bypass=bypass
        )
    assert route.context_window is not None
    window = route.context_window
    # An Anthropic body that repeats `max_tokens` runs at its own last copy: only the window bounds it then.
    held = route.max_output_tokens if bypass is None else None
    ceiling = held if held is not None else window
    mills = None if price is None else min(_dearest_call_mills(window, ceiling, price), MAX_MILLS_PER_CALL)
    output = min(ceiling, window)
    return CallBound(
        route.name,
        window,
        mills,
        route.timeout_seconds,
        output_tokens=output if output < window else None,
        served=route.served,
        bypass=bypass,
    )

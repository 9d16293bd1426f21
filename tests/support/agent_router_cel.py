"""Agent Router's check of a cost expression, replayed with Google's CEL (PyPI `cel-expr-python`, cel-cpp).

What Agent Router does with an AIGatewayRoute `llmRequestCosts` entry of `type: CEL` (envoyproxy/ai-gateway
v1.1.0; theagentrouter/agent-router keeps it):

* `internal/llmcostcel/cel.go` declares the CEL environment: `model`, `backend`, `route_name` as strings and
  every token count as a uint (`DECLARATIONS` below, one set per source read). `NewProgram` compiles the
  expression with cel-go's checked compile, then evaluates it once with `model`, `backend` and `route_name`
  "dummy" and every count 0; `EvaluateProgram` accepts only an int >= 0 or a uint.
* `internal/controller/gateway.go:201-210` (`validateCELExpression`) runs `NewProgram` for every CEL cost, and
  an error aborts the rebuild of the whole Gateway's filter configuration (`:512-516`).
* At run time `evalCost` (`internal/extproc/processor_impl.go:850`, `:882`) passes the `x-ai-eg-model` header as
  `model`, after `SetBackend` rewrote it to the route's `modelNameOverride` (`:706-709`), and the counts as
  uint32.

cel-cpp is not cel-go, but both implement the same checked CEL (types, overloads, unsigned overflow as an
error), which cel-python (used for the CRD rules) does not check at compile time. `check_cost_expression`
does what the controller does; `evaluate` does what the external processor does for one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cel_expr_python import cel

from core.money import Usage

STRING, UINT = cel.Type.STRING, cel.Type.UINT
_V1_1_0 = {
    "model": STRING,
    "backend": STRING,
    "route_name": STRING,
    "input_tokens": UINT,
    "cached_input_tokens": UINT,
    "cache_creation_input_tokens": UINT,
    "output_tokens": UINT,
    "total_tokens": UINT,
    "reasoning_tokens": UINT,
}
DECLARATIONS: dict[str, dict[str, cel.Type]] = {
    # envoyproxy/ai-gateway v1.1.0 (c217da8a) internal/llmcostcel/cel.go:35-43.
    "envoyproxy/ai-gateway v1.1.0": _V1_1_0,
    # theagentrouter/agent-router 74fe06c9 internal/llmcostcel/cel.go: the same and the cache writes by TTL. The
    # deployed v1.2.1 has one of these two sets; an expression must compile under both.
    "theagentrouter/agent-router 74fe06c9": {
        **_V1_1_0,
        "cache_creation_5m_input_tokens": UINT,
        "cache_creation_1h_input_tokens": UINT,
    },
}
UINT32_MAX = 4_294_967_295
"""Agent Router passes every count as a Go uint32 (`EvaluateProgram`)."""

_ENVIRONMENTS = {source: cel.NewEnv(variables=declared) for source, declared in DECLARATIONS.items()}


class CostExpressionRefusedError(AssertionError):
    """What Agent Router's controller would refuse, freezing the Gateway's filter configuration."""


@dataclass(frozen=True)
class Call:
    """One call as Agent Router hands it to a cost expression."""

    model: str
    usage: Usage
    backend: str = "openai.agent-budgets"
    route_name: str = "agent-budgets/gpt"
    total_tokens: int | None = None

    def activation(self, declared: Mapping[str, cel.Type]) -> dict[str, object]:
        counts = {
            "input_tokens": self.usage.input_tokens,
            "cached_input_tokens": self.usage.cached_input_tokens,
            "cache_creation_input_tokens": self.usage.cache_creation_input_tokens,
            "output_tokens": self.usage.output_tokens,
            "total_tokens": (
                self.total_tokens
                if self.total_tokens is not None
                else min(UINT32_MAX, self.usage.input_tokens + self.usage.output_tokens)
            ),
            "reasoning_tokens": self.usage.reasoning_tokens,
        }
        for name, count in counts.items():
            if not 0 <= count <= UINT32_MAX:
                raise ValueError(f"{name} {count} is not a uint32, which is all Agent Router passes")
        values: dict[str, object] = {"model": self.model, "backend": self.backend, "route_name": self.route_name}
        values.update(counts)
        return {name: values.get(name, 0) for name in declared}


TRIAL_CALL = Call(model="dummy", usage=Usage(), backend="dummy", route_name="dummy", total_tokens=0)
"""`NewProgram`'s sanity run: "dummy" for every string, 0 for every count."""


def compile_cost(expression: str, source: str = "envoyproxy/ai-gateway v1.1.0") -> cel.Expression:
    """The checked compile of `expression` in Agent Router's environment; CostExpressionRefusedError on an error."""
    try:
        return _ENVIRONMENTS[source].compile(expression)
    except RuntimeError as error:
        raise CostExpressionRefusedError(f"{source} would not compile the cost expression: {error}") from None


def run(compiled: cel.Expression, call: Call, source: str = "envoyproxy/ai-gateway v1.1.0") -> int:
    """What the external processor stores for `call` from an expression `compile_cost` returned (raises when
    Agent Router would fail)."""
    result = compiled.eval(data=call.activation(DECLARATIONS[source]))
    kind = result.type()
    if kind == cel.Type.ERROR:
        raise CostExpressionRefusedError(f"{source}: evaluating for {call} failed: {result.value()}")
    if (kind == cel.Type.INT and result.value() >= 0) or kind == cel.Type.UINT:
        return int(result.value())
    raise CostExpressionRefusedError(f"{source}: the result {result.value()!r} for {call} is not an int >= 0 or a uint")


def check_cost_expression(expression: str) -> None:
    """What `NewProgram` checks, under every declaration set read: the compile, the result type, the trial run."""
    for source in DECLARATIONS:
        compiled = compile_cost(expression, source)
        if compiled.return_type() not in (cel.Type.UINT, cel.Type.INT):
            raise CostExpressionRefusedError(
                f"{source}: the expression's type is {compiled.return_type().name()}, not uint or int"
            )
        run(compiled, TRIAL_CALL, source)


def evaluate(expression: str, call: Call, source: str = "envoyproxy/ai-gateway v1.1.0") -> int:
    """What the external processor stores under the entry's metadata key for `call` (raises when it would fail)."""
    return run(compile_cost(expression, source), call, source)


def model_as_agent_router_sets_it(sent: str, model_name_override: str | None) -> str:
    """The CEL `model` of a call: the route's override when set, else the name the agent sent (`SetBackend`)."""
    return model_name_override or sent

"""A strict evaluator for the small part of PromQL the recording rules use, over the real parser's AST.

There is no Prometheus engine on PyPI, so the USD recording rules are checked by evaluating their parsed
expressions (`promql_parser`, the same parser the other tests use) against samples the test writes, the way
Prometheus v3 evaluates them. It follows prometheus/prometheus `promql/engine.go` and `promql/functions.go`:

* an instant selector takes each matching series' newest sample in the left-open lookback window
  (T - 5m, T] (`defaultLookbackDelta`);
* a range selector takes the samples in the left-open window (T - range, T];
* `rate` is `extrapolatedRate`: counter resets corrected, extrapolated toward the window's ends (only as far as
  1.1 average sample intervals, and never below a zero counter), divided by the window in seconds;
* `vector(s)`, number literals and unary minus;
* `sum by (...)`;
* binary arithmetic between a scalar and a vector, and between vectors one-to-one or many-to-one (`on (...)
  group_left`): the metric name is dropped, the right side must be unique per matching key;
* regex matchers in RE2 syntax, anchored at both ends (`model/labels/regexp.go`).

Anything else raises `UnsupportedError`, so a rule that grows a construct this module does not evaluate fails the test
instead of being evaluated wrongly. Recording rules are evaluated in order at one timestamp, each result stored
under its `record` name with the rule's `labels`, as Prometheus' rule group does (`rules/group.go`).
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import promql_parser
import re2

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
NAME = "__name__"
LOOKBACK_SECONDS = 300.0
_OPERATORS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


class UnsupportedError(NotImplementedError):
    """A construct the evaluator does not implement."""


def labels(**pairs: str) -> Labels:
    return frozenset(pairs.items())


@dataclass
class Store:
    """Series (labels including `__name__`) → samples (seconds, value), oldest first."""

    series: dict[Labels, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, series_labels: Mapping[str, str], t: float, value: float) -> None:
        self.series[frozenset({**series_labels, NAME: name}.items())].append((t, value))

    def named(self, name: str) -> Vector:
        """The newest sample of every series called `name`, without the name (for asserting on results)."""
        found: Vector = {}
        for key, samples in self.series.items():
            if dict(key).get(NAME) == name and samples:
                found[frozenset(item for item in key if item[0] != NAME)] = samples[-1][1]
        return found


def _matches(series: Labels, selector: Any) -> bool:
    values = dict(series)
    if selector.name and values.get(NAME) != selector.name:
        return False
    if selector.matchers.or_matchers:
        raise UnsupportedError("`or` matchers")
    for matcher in selector.matchers.matchers:
        value, op = values.get(matcher.name, ""), str(matcher.op)
        if op == "MatchOp.Equal":
            ok = value == matcher.value
        elif op == "MatchOp.NotEqual":
            ok = value != matcher.value
        elif op == "MatchOp.Re":
            ok = _anchored(matcher.value).search(value) is not None
        elif op == "MatchOp.NotRe":
            ok = _anchored(matcher.value).search(value) is None
        else:
            raise UnsupportedError(f"matcher {op}")
        if not ok:
            return False
    return True


def _anchored(pattern: str) -> Any:
    """A matcher's regex as Prometheus compiles it (`labels.NewFastRegexMatcher`): RE2, anchored, `.` matching `\\n`."""
    return re2.compile(f"^(?s:{pattern})$")


def _without_name(key: Labels) -> Labels:
    return frozenset(item for item in key if item[0] != NAME)


def extrapolated_rate(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """`rate` of one counter over the window (start, end], as promql/functions.go `extrapolatedRate` (v3): the
    gap to the window's start is cut to half a sample interval when it exceeds 1.1 intervals, and only then to
    the counter's extrapolated zero point (Prometheus v2 took the zero point first)."""
    if len(samples) < 2:
        return None
    result = samples[-1][1] - samples[0][1]
    for (_, before), (_, value) in itertools.pairwise(samples):
        if value < before:  # a counter reset
            result += before
    to_start, to_end = samples[0][0] - start, end - samples[-1][0]
    sampled = samples[-1][0] - samples[0][0]
    average = sampled / (len(samples) - 1)
    threshold = average * 1.1
    if to_start >= threshold:
        to_start = average / 2
    if result > 0 and samples[0][1] >= 0:
        to_start = min(to_start, sampled * (samples[0][1] / result))
    if to_end >= threshold:
        to_end = average / 2
    return result * ((sampled + to_start + to_end) / sampled) / (end - start)


def evaluate(node: Any, store: Store, t: float) -> float | Vector:
    """The value of a parsed expression at time `t`: a scalar or an instant vector."""
    if isinstance(node, promql_parser.NumberLiteral):
        return float(node.val)
    if isinstance(node, promql_parser.ParenExpr):
        return evaluate(node.expr, store, t)
    if isinstance(node, promql_parser.UnaryExpr):
        value = evaluate(node.expr, store, t)
        return -value if isinstance(value, float) else {k: -v for k, v in value.items()}
    if isinstance(node, promql_parser.VectorSelector):
        if node.offset or node.at:
            raise UnsupportedError("offset and @")
        result: Vector = {}
        for key, samples in store.series.items():
            if _matches(key, node):
                recent = [value for when, value in samples if t - LOOKBACK_SECONDS < when <= t]
                if recent:
                    result[key] = recent[-1]
        return result
    if isinstance(node, promql_parser.Call):
        return _call(node, store, t)
    if isinstance(node, promql_parser.AggregateExpr):
        return _aggregate(node, store, t)
    if isinstance(node, promql_parser.BinaryExpr):
        return _binary(node, store, t)
    raise UnsupportedError(type(node).__name__)


def _call(node: Any, store: Store, t: float) -> float | Vector:
    name = node.func.name
    if name == "vector":
        value = evaluate(node.args[0], store, t)
        if not isinstance(value, float):
            raise UnsupportedError("vector() of a vector")
        return {frozenset(): value}
    if name == "rate":
        [matrix] = node.args
        if not isinstance(matrix, promql_parser.MatrixSelector):
            raise UnsupportedError("rate of a subquery")
        window = matrix.range.total_seconds()
        result: Vector = {}
        for key, samples in store.series.items():
            if _matches(key, matrix.vector_selector):
                inside = [(when, value) for when, value in samples if t - window < when <= t]
                rate = extrapolated_rate(inside, t - window, t)
                if rate is not None:
                    result[_without_name(key)] = rate
        return result
    raise UnsupportedError(f"function {name}")


def _aggregate(node: Any, store: Store, t: float) -> Vector:
    if str(node.op) != "sum" or node.param is not None:
        raise UnsupportedError(f"aggregation {node.op}")
    modifier = node.modifier
    if modifier is None or str(modifier.type) != "AggModifierType.By":
        raise UnsupportedError("an aggregation without `by`")
    keep = set(modifier.labels)
    value = evaluate(node.expr, store, t)
    if isinstance(value, float):
        raise UnsupportedError("sum of a scalar")
    result: Vector = defaultdict(float)
    for key, sample in value.items():
        result[frozenset(item for item in key if item[0] in keep)] += sample
    return dict(result)


def _binary(node: Any, store: Store, t: float) -> float | Vector:
    apply = _OPERATORS.get(str(node.op))
    if apply is None:
        raise UnsupportedError(f"operator {node.op}")
    left, right = evaluate(node.lhs, store, t), evaluate(node.rhs, store, t)
    if isinstance(left, float) and isinstance(right, float):
        return apply(left, right)
    if isinstance(left, float):
        assert isinstance(right, dict)
        return {_without_name(k): apply(left, v) for k, v in right.items()}
    if isinstance(right, float):
        return {_without_name(k): apply(v, right) for k, v in left.items()}
    modifier = node.modifier
    matching = modifier.matching if modifier is not None else None
    if matching is None or str(matching.type) != "LabelModifierType.Include":
        raise UnsupportedError("vector matching without on (...)")
    card = str(modifier.card)
    if card not in ("VectorMatchCardinality.ManyToOne", "VectorMatchCardinality.OneToOne") or modifier.group_labels:
        raise UnsupportedError(f"matching {card}")
    on = set(matching.labels)

    def signature(key: Labels) -> Labels:
        return frozenset(item for item in key if item[0] in on)

    by_signature: dict[Labels, float] = {}
    for key, value in right.items():
        if signature(key) in by_signature:
            raise ValueError(f"many-to-many matching: the right side has two series for {sorted(signature(key))}")
        by_signature[signature(key)] = value
    result: Vector = {}
    for key, value in left.items():
        match = by_signature.get(signature(key))
        if match is None:
            continue
        out = _without_name(key) if card.endswith("ManyToOne") else signature(key)
        if out in result:
            raise ValueError(f"two left series give the same result {sorted(out)}: not one-to-one")
        result[out] = apply(value, match)
    return result


def evaluate_rules(rules: Iterable[Mapping[str, Any]], store: Store, t: float) -> None:
    """Evaluate recording rules in order at `t`, storing each result (Prometheus' rule group, `rules/group.go`)."""
    for rule in rules:
        value = evaluate(promql_parser.parse(rule["expr"]), store, t)
        if isinstance(value, float):
            value = {frozenset(): value}
        for key, sample in value.items():
            store.add(rule["record"], {**dict(key), **rule.get("labels", {})}, t, sample)

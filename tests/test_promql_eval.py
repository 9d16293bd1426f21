"""The PromQL evaluator of tests/support/promql_eval.py answers as Prometheus v3 does, on hand-worked cases.

Each expected value is worked out from prometheus/prometheus v3.0.0 (the same in v3.14) `promql/functions.go`
`extrapolatedRate`, `promql/engine.go` (lookback and range windows, vector matching) and
`model/labels/regexp.go`, not from the evaluator: the recording-rule test trusts this evaluator, so it must
be able to disagree with Prometheus only where it raises `UnsupportedError`.
"""

from __future__ import annotations

import pytest

from tests.support.promql_eval import Store, evaluate_rules, extrapolated_rate, labels


def rate_of(samples: list[tuple[float, float]], window: float = 60.0, at: float = 120.0) -> float | None:
    return extrapolated_rate([s for s in samples if at - window < s[0] <= at], at - window, at)


def test_the_gap_to_the_window_start_is_capped_before_the_zero_point_is_applied():
    """v3 order: a gap of 40 s (above 1.1 x the 10 s interval) becomes 5 s; the zero point, 10 s before the
    first sample, is not shorter, so 5 s stays. increase = 6 x (20 + 5 + 0) / 20 = 7.5 over 60 s. (Prometheus
    v2 took the zero point first and gave 6 x 30 / 20 = 9.)"""
    assert rate_of([(100, 3), (110, 6), (120, 9)]) == pytest.approx(7.5 / 60)


def test_the_zero_point_cuts_the_extrapolation_toward_the_start():
    """Gap 10 s (below the 11 s threshold); zero point 20 x 1 / 20 = 1 s: increase = 20 x 21 / 20 = 21 in 30 s."""
    assert rate_of([(100, 1), (110, 11), (120, 21)], window=30) == pytest.approx(21 / 30)


def test_a_counter_reset_adds_the_value_before_it():
    """5 → 8 → 2: 2 - 5 + 8 = 5; zero point 20 x 5 / 5 = 20 s is longer than the 10 s gap: 5 x 30 / 20 = 7.5."""
    assert rate_of([(100, 5), (110, 8), (120, 2)], window=30) == pytest.approx(7.5 / 30)


def test_a_series_that_stops_early_is_extrapolated_half_an_interval_at_its_end():
    """Samples at 60 and 70 in (50, 100]: start gap 10 s, zero point 0 s → 0; end gap 30 s → 5 s:
    10 x (10 + 0 + 5) / 10 = 15 in 50 s."""
    assert rate_of([(60, 0), (70, 10)], window=50, at=100) == pytest.approx(15 / 50)


def test_one_sample_has_no_rate_and_the_windows_are_left_open():
    assert rate_of([(120, 5)]) is None
    # (60, 120]: the sample exactly at 60 is outside, so one sample remains.
    assert rate_of([(60, 0), (120, 6)]) is None
    store = Store()
    store.add("m", {"a": "x"}, 100, 1.0)
    # Instant lookback (T - 5m, T]: at T = 400 the sample at 100 is just out of reach, at 399.999 in.
    evaluate_rules([{"record": "r", "expr": "m"}], store, 400.0)
    assert store.named("r") == {}
    evaluate_rules([{"record": "r", "expr": "m"}], store, 399.999)
    assert store.named("r") == {labels(a="x"): 1.0}


def test_regex_matchers_are_anchored_re2_with_dot_matching_newline():
    store = Store()
    for value in ("b", "abc", "x\ny"):
        store.add("m", {"a": value}, 100, 1.0)
    evaluate_rules([{"record": "r", "expr": 'sum by (a) (m{a=~"b|x.y"})'}], store, 100.0)
    assert store.named("r") == {labels(a="b"): 1.0, labels(a="x\ny"): 1.0}


def test_vector_matching_keeps_the_labels_prometheus_keeps_and_refuses_what_it_refuses():
    store = Store()
    store.add("left", {"k": "1", "pod": "p0"}, 100, 2.0)
    store.add("left", {"k": "1", "pod": "p1"}, 100, 3.0)
    store.add("right", {"k": "1", "extra": "e"}, 100, 10.0)
    # many-to-one: the left labels without the name.
    evaluate_rules([{"record": "r", "expr": "left * on (k) group_left right"}], store, 100.0)
    assert store.named("r") == {labels(k="1", pod="p0"): 20.0, labels(k="1", pod="p1"): 30.0}
    # one-to-one with on(): only the matching labels; two left series then collide.
    with pytest.raises(ValueError, match="not one-to-one"):
        evaluate_rules([{"record": "o", "expr": "left * on (k) right"}], store, 100.0)
    # A right side that is not unique per matching key is many-to-many.
    store.add("right", {"k": "1", "extra": "f"}, 100, 1.0)
    with pytest.raises(ValueError, match="many-to-many"):
        evaluate_rules([{"record": "x", "expr": "left * on (k) group_left right"}], store, 100.0)

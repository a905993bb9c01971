"""Action sanitising under SafeStep (robo_safe_rl.safety.sanitize), with expected values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robo_safe_rl.safety.sanitize import make_action_test, sanitize_action

NAN, INF = math.nan, math.inf
# Bounds of three components: symmetric, asymmetric, and one whose interval excludes 0.
LOW = np.array([-1.0, -2.0, 0.5])
HIGH = np.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # NaN -> 0 clamped into the bounds: 0 in [-1, 1] -> 0; 0 in [-2, 2] -> 0; 0 below [0.5, 3] -> 0.5.
        (NAN, [0.0, 0.0, 0.5]),
        # +Inf -> the upper bound of each component.
        (INF, [1.0, 2.0, 3.0]),
        # -Inf -> the lower bound of each component.
        (-INF, [-1.0, -2.0, 0.5]),
    ],
    ids=["nan", "+inf", "-inf"],
)
def test_nonfinite_components_go_to_zero_or_the_bound(value: float, expected: list[float]) -> None:
    result = sanitize_action(np.full(3, value), LOW, HIGH)
    np.testing.assert_array_equal(result.values, expected)
    assert (result.nonfinite, result.clipped) == (3, 0)


def test_mixed_action_counts_nonfinite_and_clipped_apart() -> None:
    # [NaN, 5.0, 0.7]: NaN -> 0 (non-finite), 5.0 -> 2.0 (clipped), 0.7 stays (inside [0.5, 3]).
    raw = np.array([NAN, 5.0, 0.7], dtype=np.float32)
    result = sanitize_action(raw, LOW, HIGH)
    np.testing.assert_array_equal(result.values, np.array([0.0, 2.0, 0.7], dtype=np.float32))
    assert (result.nonfinite, result.clipped) == (1, 1)
    assert math.isnan(raw[0]), "the input must not be modified"


def test_huge_finite_values_are_clipped_not_counted_as_nonfinite() -> None:
    result = sanitize_action(np.array([1e10, -1e10, 1e10]), LOW, HIGH)
    np.testing.assert_array_equal(result.values, [1.0, -2.0, 3.0])
    assert (result.nonfinite, result.clipped) == (0, 3)


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "+inf", "-inf"])
def test_unbounded_dimensions_take_zero_for_any_nonfinite_value(value: float) -> None:
    # A Box(-inf, inf): Inf cannot go to its bound (it would stay Inf), so it becomes 0 like NaN; 1e30 stays.
    result = sanitize_action(np.array([value, 1e30]), np.full(2, -INF), np.full(2, INF))
    np.testing.assert_array_equal(result.values, [0.0, 1e30])
    assert (result.nonfinite, result.clipped) == (1, 0)


def test_half_bounded_dimension() -> None:
    # [0, inf): +Inf has no finite upper bound -> 0 clamped -> 0; -Inf -> the finite lower bound 0; NaN -> 0.
    result = sanitize_action(np.array([INF, -INF, NAN]), np.zeros(3), np.full(3, INF))
    np.testing.assert_array_equal(result.values, [0.0, 0.0, 0.0])


def test_out_buffer_sets_dtype_and_is_returned() -> None:
    out = np.zeros(3, dtype=np.float32)
    result = sanitize_action(np.array([NAN, 1.5, -7.0]), LOW, HIGH, out=out)
    assert result.values is out
    np.testing.assert_array_equal(out, np.array([0.0, 1.5, 0.5], dtype=np.float32))


@pytest.mark.parametrize(
    ("low", "high"),
    [
        (np.full(8, -1.0), np.full(8, 1.0)),  # uniform bounds, list test
        (-1 - np.arange(8) / 8, 1 + np.arange(8) / 8),  # per-component bounds (exact in float32), list test
        (np.full(100, -1.0), np.full(100, 1.0)),  # long action: numpy test
        (np.full(8, -INF), np.full(8, INF)),  # unbounded: numpy test with isfinite
    ],
    ids=["uniform", "per-component", "long", "unbounded"],
)
@pytest.mark.parametrize("bad", [NAN, INF, -INF, 5.0], ids=["nan", "+inf", "-inf", "5.0"])
def test_action_test_is_exact(low: np.ndarray, high: np.ndarray, bad: float) -> None:
    ok = make_action_test(low, high)
    bounded = bool(np.isfinite(low).all())
    # The midpoint, or 0 for the unbounded case (where -inf + inf would be NaN).
    inside = ((low + high) / 2 if bounded else np.zeros(low.shape)).astype(np.float32)
    assert ok(inside)
    assert ok(high.astype(np.float32)) == bounded  # a bound itself is inside; +Inf (the unbounded "bound") is not
    worse = inside.copy()
    worse[-1] = bad
    # 5.0 lies outside every bounded case; in the unbounded one only NaN and Inf fail.
    assert ok(worse) is (not bounded and math.isfinite(bad))

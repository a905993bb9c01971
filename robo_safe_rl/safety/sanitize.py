"""Pure numerics of the env bridge: sanitise an action, and test cheaply whether it needs sanitising.

Nothing here steps an env; :class:`~robo_safe_rl.bridge.safe_step.SafeStep` calls these functions, and they are
tested alone.

Sanitising an action against a Box ``[low, high]`` (the rule :func:`sanitize_action` applies per component):

======================  ===========================================================================
input component         output
======================  ===========================================================================
finite, inside bounds   unchanged
finite, outside bounds  the nearer bound (counted as *clipped*)
NaN                     0 clamped into ``[low, high]`` (counted as *non-finite*)
+Inf                    ``high`` if it is finite, else 0 clamped into ``[low, high]`` (non-finite)
-Inf                    ``low`` if it is finite, else 0 clamped into ``[low, high]`` (non-finite)
======================  ===========================================================================

This is ``nan_to_num`` followed by a clamp, except that an infinite component of an unbounded dimension becomes 0
rather than the largest float (which would reach the physics engine as an absurd torque). ``np.clip`` alone passes
NaN through, which is why the non-finite components are replaced first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class SanitizedAction(NamedTuple):
    """The result of :func:`sanitize_action`."""

    values: np.ndarray
    """The clean action, finite and inside the bounds. Shape: like the input; dtype: ``out``'s or the input's."""
    nonfinite: int
    """Number of components that were NaN or +-Inf."""
    clipped: int
    """Number of finite components that lay outside ``[low, high]``."""


def sanitize_action(
    action: np.ndarray, low: np.ndarray, high: np.ndarray, out: np.ndarray | None = None
) -> SanitizedAction:
    """Replace non-finite components and clamp to ``[low, high]`` (the rule in the module docstring).

    Args:
        action: The raw action. Shape: (A,) or any shape broadcast-compatible with the bounds.
        low: Lower bounds (``-inf`` allowed). Shape: like ``action``.
        high: Upper bounds (``+inf`` allowed), ``high >= low``. Shape: like ``action``.
        out: Optional array to write the result into (it sets the output dtype); the input is never modified.

    Returns:
        The clean action and the counts of non-finite and clipped components.
    """
    raw = np.asarray(action)
    work = raw.astype(np.float64) if raw.dtype.kind != "f" else raw.copy()
    nonfinite_mask = ~np.isfinite(work)
    nonfinite = int(np.count_nonzero(nonfinite_mask))
    clipped = int(np.count_nonzero(~nonfinite_mask & ((work < low) | (work > high))))
    if nonfinite:
        zero_in_bounds = np.clip(np.zeros_like(work), low, high)
        finite_high = np.isfinite(high)
        finite_low = np.isfinite(low)
        work = np.where(np.isnan(work), zero_in_bounds, work)
        work = np.where(np.isposinf(work), np.where(finite_high, high, zero_in_bounds), work)
        work = np.where(np.isneginf(work), np.where(finite_low, low, zero_in_bounds), work)
    np.clip(work, low, high, out=work)
    if out is None:
        return SanitizedAction(work, nonfinite, clipped)
    out[...] = work
    return SanitizedAction(out, nonfinite, clipped)


# Below this many components the bounds test runs on a Python list: for an 8-joint robot that is 0.4 us against
# 1.7 us for numpy's min and max (two reductions, each with numpy's per-call overhead).
_LIST_TEST_MAX = 64


def make_action_test(low: np.ndarray, high: np.ndarray) -> Callable[[np.ndarray], bool]:
    """Build the cheapest exact test of "every component finite and inside ``[low, high]``" for these bounds.

    Exact: a NaN component fails (every comparison with NaN is false), an infinite one fails against finite bounds
    and is checked with ``isfinite`` where a bound is infinite.

    Args:
        low: Lower bounds. Shape: (A,) or any.
        high: Upper bounds. Shape: like ``low``.

    Returns:
        A function of an action of the bounds' shape returning ``True`` when it needs no sanitising.
    """
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    bounded = bool(np.isfinite(low).all() and np.isfinite(high).all())
    if bounded and low.ndim == 1 and 0 < low.size <= _LIST_TEST_MAX:
        if (low == low[0]).all() and (high == high[0]).all():
            lo, hi = float(low[0]), float(high[0])

            def uniform_test(action: np.ndarray) -> bool:
                return all(lo <= x <= hi for x in action.tolist())

            return uniform_test
        bounds = list(zip(low.tolist(), high.tolist(), strict=True))

        def list_test(action: np.ndarray) -> bool:
            return all(lo <= x <= hi for x, (lo, hi) in zip(action.tolist(), bounds))  # noqa: B905  (shapes checked)

        return list_test

    def array_test(action: np.ndarray) -> bool:
        if not bounded and not np.isfinite(action).all():
            return False
        return bool((action >= low).all() and (action <= high).all())

    return array_test

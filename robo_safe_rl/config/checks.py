"""Range checks shared by the config schemas: each failure names the key, the value and what was expected."""

from __future__ import annotations

import math
from typing import Any

from robo_safe_rl.errors import ConfigError


def require(ok: bool, key: str, value: Any, expected: str) -> None:
    """Raise :class:`ConfigError` (``invalid config value KEY=VALUE: expected ...``) unless ``ok``."""
    if not ok:
        raise ConfigError(f"invalid config value {key}={value!r}: expected {expected}")


def int_in(key: str, value: Any, low: int, high: int | None = None) -> None:
    """``value`` must be an int (not a bool) in ``[low, high]`` (``high=None``: no upper bound)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    require(ok, key, value, f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]")


def float_in(key: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    """``value`` must be a finite number in ``[low, high]``, or ``(low, high]`` with ``low_open``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    require(ok, key, value, f"a finite number in {'(' if low_open else '['}{low}, {high}]")

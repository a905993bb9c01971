"""What SafeStep reads from a task besides the gymnasium API: its physics-error types and its reward bound.

Both come from the task itself (attributes of the *unwrapped* env, see :mod:`robo_safe_rl.bridge.protocol`) or from
the user (``safety.step.physics_errors``, ``safety.step.reward_bound``); SafeStep never guesses them from what is
loaded in the process. An exception is a physics error only when the env's own engine declares it: a
``pybullet.error`` raised by a bug in an env that does not run PyBullet is a bug, and must surface as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from robo_safe_rl.config.safe_step import resolve_exception_type
from robo_safe_rl.errors import ConfigError, PhysicsError


def physics_error_types(unwrapped: object, extra: Iterable[str] = ()) -> tuple[type[BaseException], ...]:
    """The exception types SafeStep treats as physics-engine failures for this (unwrapped) env.

    :class:`~robo_safe_rl.errors.PhysicsError`, the types the env declares in ``physics_error_types`` (the
    simulator protocol; ``(pybullet.error,)`` for the PyBullet tasks), and the ones the user names in ``extra``
    (``safety.step.physics_errors``). Nothing else: an exception of another type propagates.

    Raises:
        ConfigError: If an ``extra`` name does not resolve to an exception class, or the env declares something
            that is not a tuple of exception classes.
    """
    types: list[type[BaseException]] = [PhysicsError]
    declared = getattr(unwrapped, "physics_error_types", ())
    exception_classes = all(isinstance(t, type) and issubclass(t, BaseException) for t in declared)
    if not (isinstance(declared, tuple) and exception_classes):
        raise ConfigError(
            f"{type(unwrapped).__name__}.physics_error_types must be a tuple of exception classes, got {declared!r}"
        )
    types.extend(declared)
    types.extend(resolve_exception_type(name) for name in extra)
    return tuple(dict.fromkeys(types))


def reward_bound(unwrapped: object, configured: float | None) -> float | None:
    """The bound on ``|reward|`` of one step beyond which a finite reward is implausible, or ``None`` for none.

    ``safety.step.reward_bound`` when set, else the env's own ``reward_bound`` attribute (the PyBullet tasks derive
    theirs from their reward terms and state limits).

    Raises:
        ConfigError: If the env declares a bound that is not a number > 0 (``inf`` means none).
    """
    if configured is not None:
        return float(configured)
    declared = getattr(unwrapped, "reward_bound", None)
    if declared is None:
        return None
    if isinstance(declared, bool) or not isinstance(declared, (int, float)) or not declared > 0:
        raise ConfigError(f"{type(unwrapped).__name__}.reward_bound must be a number > 0 or None, got {declared!r}")
    return None if math.isinf(declared) else float(declared)

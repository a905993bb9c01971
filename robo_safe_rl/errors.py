"""Every exception robo_safe_rl raises on purpose, in one place.

Catch :class:`RoboSafeRLError` to handle all of them. Each message says what failed, where, the offending value,
what was expected, and (where one exists) the command that explains more.
"""

from __future__ import annotations


class RoboSafeRLError(Exception):
    """Base class of all robo_safe_rl errors."""


class ConfigError(RoboSafeRLError, ValueError):
    """A configuration key is unknown, missing, or holds a value outside its allowed range."""


class NonFiniteError(RoboSafeRLError, FloatingPointError):
    """A NaN or Inf was found where the run cannot continue (gradient guard in ``raise`` mode, failed recovery)."""


class NonFiniteStateError(NonFiniteError):
    """The learning state (weights, optimizer state) turned non-finite during an update, which stopped there; a runner
    with snapshots rolls back (``SafeRunner`` does)."""


class PhysicsError(RoboSafeRLError, RuntimeError):
    """The physics engine failed: a dead client, an exception inside a step, or a state that blew up."""


class CheckpointError(RoboSafeRLError, OSError):
    """A checkpoint is missing, unreadable, truncated, refused (unsafe pickle) or not a checkpoint at all."""


class IncidentError(RoboSafeRLError, ValueError):
    """An incident record is missing, truncated or of an unknown format."""


class RecoveryError(RoboSafeRLError, RuntimeError):
    """Training could not recover from repeated non-finite state and stopped."""


class WorkerCrashError(PhysicsError):
    """An env worker process kept dying (or hanging) after being restarted: the run cannot go on."""

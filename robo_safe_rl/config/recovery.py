"""Config schemas of recovery (``safety.recovery``) and of the policy-side fire drill (``faults.policy``).

Recovery handles what gets past the gradient guard: non-finite weights, normaliser buffers or optimizer state after
an update, and non-finite actions coming out of the policy. Both roll the model back to the last good in-memory
snapshot and lower the learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from robo_safe_rl.config.checks import float_in, int_in, require


@dataclass
class RecoveryConfig:
    """``safety.recovery``: roll back to the last good state instead of training on from a NaN."""

    enabled: bool = True
    """Check after every update (and the actions of every rollout step) and roll back on a non-finite value.
    Off: a non-finite value after an update stops the run with :class:`~robo_safe_rl.errors.RecoveryError`."""
    snapshot_interval: int = 10
    """Take an in-memory snapshot (model, optimizer, normalisers, learning rate) every this many good iterations,
    and at every good checkpoint save. In [1, 1_000_000]."""
    lr_factor: float = 0.5
    """The learning rate after a rollback is the snapshot's times this factor, to the power of the rollbacks in a row
    (0.5, then 0.25, ...). In (0, 1]."""
    max_rollbacks: int = 3
    """Rollbacks in a row without a new good snapshot in between before the run stops with
    :class:`~robo_safe_rl.errors.RecoveryError`. In [1, 1000]."""

    def __post_init__(self) -> None:
        int_in("safety.recovery.snapshot_interval", self.snapshot_interval, 1, 1_000_000)
        float_in("safety.recovery.lr_factor", self.lr_factor, 0.0, 1.0)
        require(self.lr_factor > 0, "safety.recovery.lr_factor", self.lr_factor, "a number in (0, 1]")
        int_in("safety.recovery.max_rollbacks", self.max_rollbacks, 1, 1000)


@dataclass
class PolicyFaultConfig:
    """``faults.policy``: corrupt the policy where real corruption shows up, at given iterations (0-based).

    A weight element of the actor is set to NaN either right after the update of an iteration (the post-update
    check must catch it) or right before the rollout of an iteration (so the policy's actions turn non-finite and
    the action fuse must catch them before they reach an env).
    """

    nonfinite_weights_after_update: list[int] = field(default_factory=list)
    """Iterations after whose update one actor weight becomes NaN."""
    nonfinite_weights_before_rollout: list[int] = field(default_factory=list)
    """Iterations before whose rollout one actor weight becomes NaN (the policy then emits NaN actions)."""
    rank: int | None = None
    """Corrupt the policy on this global rank only (multi-process drills: the others must roll back with it);
    ``None`` on every rank."""

    def __post_init__(self) -> None:
        for key in ("nonfinite_weights_after_update", "nonfinite_weights_before_rollout"):
            values = list(getattr(self, key))
            require(
                all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values),
                f"faults.policy.{key}",
                values,
                "a list of iteration indices >= 0",
            )
            setattr(self, key, values)
        if self.rank is not None:
            int_in("faults.policy.rank", self.rank, 0)

    @property
    def enabled(self) -> bool:
        """Whether any policy fault is scheduled."""
        return bool(self.nonfinite_weights_after_update or self.nonfinite_weights_before_rollout)

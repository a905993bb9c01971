"""Recovery: finite checks of the learning state, in-memory snapshots, rollbacks, and finite-only checkpoints.

What the gradient guard cannot stop (a non-finite value that reached the weights, the normaliser buffers or the
optimizer's moments by another path, or a policy emitting non-finite actions) is handled here: the learning state
goes back to the last good snapshot, the learning rate is lowered, and after ``max_rollbacks`` rollbacks in a row
without a new good snapshot the run stops with a message that names the commands that explain it. A checkpoint is
written only when every tensor in it is finite, and atomically (:mod:`robo_safe_rl.fileio`), so the newest file of a
run is always a good one.

The state of one algorithm is its ``actor``, ``critic`` (normaliser buffers included: rsl-rl keeps them in the
models' state dicts) and ``optimizer`` state dicts plus ``learning_rate``; and the state dict of any module whose
statistics belong with them (the runner's reward scaler), so that a rollback or a snapshot written as a checkpoint
pairs the weights with the statistics they were trained with.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from robo_safe_rl.errors import RecoveryError
from robo_safe_rl.fileio import atomic_open
from robo_safe_rl.safety.finite import describe_nonfinite, find_nonfinite

log = logging.getLogger(__name__)


def models(alg: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The actor and critic modules whose state dicts are saved (rsl-rl keeps the uncompiled ones as ``_raw_*``)."""
    return getattr(alg, "_raw_actor", alg.actor), getattr(alg, "_raw_critic", alg.critic)


def nonfinite_layers(alg: Any) -> list[str]:
    """Names of the tensors of the learning state (parameters, normaliser buffers, optimizer state) that hold NaN or
    Inf, e.g. ``actor/mlp.0.weight``, ``optimizer/3/exp_avg``; empty when all are finite. One host-device
    synchronisation per device."""
    actor, critic = models(alg)
    state = {
        "actor": actor.state_dict(),
        "critic": critic.state_dict(),
        "optimizer": alg.optimizer.state_dict()["state"],
    }
    return [name for name, _ in find_nonfinite(state)]


def save_checkpoint_if_finite(obj: Any, path: str | os.PathLike[str]) -> list[str]:
    """Save a checkpoint atomically and durably, unless a tensor in it holds NaN or Inf.

    A refused checkpoint is not written, so the previous good file stays the newest; the reason is logged as a
    warning naming the file and the first offending tensors. Counting refusals is the caller's job.

    Args:
        obj: The checkpoint dict (weights, normaliser buffers, optimizer state, ...).
        path: Final file name.

    Returns:
        The names of the tensors that made it refuse; empty when the checkpoint was written.

    Raises:
        OSError: The write itself failed; ``path`` is untouched (see :func:`robo_safe_rl.fileio.atomic_open`).
    """
    bad = find_nonfinite(obj)
    if bad:
        shown = "; ".join(f"{name}: {describe_nonfinite(t, max_items=3)}" for name, t in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        log.warning(
            "checkpoint %s not written: %d tensor(s) hold non-finite values (%s%s); expected all finite. "
            "The previous checkpoint stays the newest.",
            path,
            len(bad),
            shown,
            more,
        )
        return [name for name, _ in bad]
    with atomic_open(path) as f:
        torch.save(obj, f)
    return []


@dataclass
class Snapshot:
    """A deep copy of the learning state, taken at ``iteration`` (on the same device as the model)."""

    iteration: int
    actor: dict[str, torch.Tensor]
    critic: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    learning_rate: float
    statistics: dict[str, torch.Tensor] | None = None

    @classmethod
    def take(cls, alg: Any, iteration: int, statistics: torch.nn.Module | None = None) -> Snapshot:
        """Copy the current learning state of ``alg`` (and the state dict of ``statistics``, when given)."""
        actor, critic = models(alg)
        return cls(
            iteration=iteration,
            actor=copy.deepcopy(actor.state_dict()),
            critic=copy.deepcopy(critic.state_dict()),
            optimizer=copy.deepcopy(alg.optimizer.state_dict()),
            learning_rate=float(alg.learning_rate),
            statistics=None if statistics is None else copy.deepcopy(statistics.state_dict()),
        )

    def restore(self, alg: Any, lr_factor: float, statistics: torch.nn.Module | None = None) -> float:
        """Load this state into ``alg`` (and ``statistics``) with the learning rate times ``lr_factor``; return the
        new rate."""
        actor, critic = models(alg)
        actor.load_state_dict(self.actor)
        critic.load_state_dict(self.critic)
        if statistics is not None and self.statistics is not None:
            statistics.load_state_dict(self.statistics)
        alg.optimizer.load_state_dict(copy.deepcopy(self.optimizer))
        alg.learning_rate = self.learning_rate * lr_factor
        # The first group is the one the schedule sets (all parameters, unless the critic has its own rate in a
        # second group: SafePPO's (8)); any other group is lowered from its own rate at the snapshot.
        groups = alg.optimizer.param_groups
        groups[0]["lr"] = alg.learning_rate
        for group in groups[1:]:
            group["lr"] *= lr_factor
        return alg.learning_rate


class Recovery:
    """Keeps the last good snapshot and performs bounded rollbacks.

    Args:
        lr_factor: Learning-rate factor applied at every rollback.
        max_rollbacks: Rollbacks in a row without a new good snapshot before :class:`RecoveryError`.
        run_dir: Named in the stop message (the commands to run on it).
        statistics: A module whose state dict is snapshotted and restored with the learning state (the runner's
            reward scaler); ``None`` for none.
    """

    def __init__(
        self,
        lr_factor: float,
        max_rollbacks: int,
        run_dir: str | None,
        statistics: torch.nn.Module | None = None,
    ) -> None:
        self.statistics = statistics
        self.lr_factor = lr_factor
        self.max_rollbacks = max_rollbacks
        self.run_dir = run_dir or "<run_dir>"
        self.snapshot: Snapshot | None = None
        self.rollbacks = 0
        self.in_a_row = 0

    def take(self, alg: Any, iteration: int) -> None:
        """Remember the current (checked, finite) state as the last good one."""
        self.snapshot = Snapshot.take(alg, iteration, self.statistics)
        self.in_a_row = 0

    def rollback(self, alg: Any, iteration: int, what: str) -> dict[str, Any]:
        """Restore the last good snapshot into ``alg`` and lower its learning rate.

        Args:
            alg: The algorithm (rsl-rl PPO or SafePPO).
            iteration: The iteration at which the fault was found.
            what: What was non-finite, for the record and the message.

        Returns:
            The event record (iteration, what, snapshot iteration, new learning rate, rollbacks in a row).

        Raises:
            RecoveryError: After ``max_rollbacks`` rollbacks in a row, or when no snapshot exists.
        """
        if self.snapshot is None or self.in_a_row >= self.max_rollbacks:
            tried = f"{self.in_a_row} rollback(s) in a row" if self.snapshot is not None else "no good snapshot"
            raise RecoveryError(
                f"training stopped at iteration {iteration}: {what}; {tried} did not get past it. "
                f"Find the last clean checkpoint with `python tools/inspect_checkpoint.py {self.run_dir}` and the "
                f"env incidents and their causes with `python tools/diagnose.py {self.run_dir}`"
            )
        self.rollbacks += 1
        self.in_a_row += 1
        lr = self.snapshot.restore(alg, self.lr_factor**self.in_a_row, self.statistics)
        log.warning(
            "iteration %d: %s; rolled back to the snapshot of iteration %d with learning rate %.3g "
            "(rollback %d in a row, at most %d)",
            iteration,
            what,
            self.snapshot.iteration,
            lr,
            self.in_a_row,
            self.max_rollbacks,
        )
        return {
            "iteration": iteration,
            "kind": "rollback",
            "what": what,
            "snapshot_iteration": self.snapshot.iteration,
            "learning_rate": lr,
            "in_a_row": self.in_a_row,
        }

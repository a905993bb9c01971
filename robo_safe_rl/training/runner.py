"""``SafeRunner``: rsl-rl's ``OnPolicyRunner`` with safe checkpoints, CPU multi-process and ``Safety/`` metrics.

What changes against rsl-rl (the rollout/update loop itself is rsl-rl's, unchanged):

- ``_configure_multi_gpu``: under ``torchrun``, CUDA ranks use NCCL on ``cuda:LOCAL_RANK`` as before, and CPU ranks
  use gloo, so multi-process training runs (and is tested) on a machine without a GPU.
- ``save``: a checkpoint holding any non-finite tensor (weights, normaliser buffers, optimizer moments) is refused
  and counted (``Safety/checkpoints_refused``); a good one is written atomically (temp file, fsync, rename), so a
  kill at any moment leaves the previous checkpoint loadable.
- the logger additionally writes ``Safety/*`` scalars every iteration and keeps the per-iteration mean episode
  return and reward for ``summary.json``.
"""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from rsl_rl.utils.logger import Logger

from robo_safe_rl.checkpoint.io import save_checkpoint_if_finite

log = logging.getLogger(__name__)


@dataclass
class IterationRecord:
    """What one iteration looked like, for ``summary.json`` (returns are ``None`` when no episode ended)."""

    iteration: int
    mean_return: float | None
    episodes: int
    mean_step_reward: float


class SafeLogger(Logger):
    """rsl-rl's logger plus ``Safety/*`` scalars and a per-iteration history of returns.

    Args:
        safety_scalars: Called once per iteration; returns tag suffixes and values written under ``Safety/``.
        on_iteration_end: Called with the iteration index after it was logged (the runner uses it to tell the
            incident recorder which iteration the next rollout belongs to).
        **kwargs: rsl-rl's ``Logger`` arguments.
    """

    def __init__(
        self,
        safety_scalars: Callable[[], dict[str, float]],
        on_iteration_end: Callable[[int], None],
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.safety_scalars = safety_scalars
        self.on_iteration_end = on_iteration_end
        self.history: list[IterationRecord] = []
        self._reward_sum = 0.0
        self._reward_count = 0

    def process_env_step(
        self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict, intrinsic_rewards: torch.Tensor | None = None
    ) -> None:
        """Book-keep one env step (rsl-rl's) and accumulate the step reward for the iteration's mean."""
        super().process_env_step(rewards, dones, extras, intrinsic_rewards)
        # One host sync per env step; the env (CPU PyBullet) already synchronises every step.
        self._reward_sum += float(rewards.sum())
        self._reward_count += rewards.numel()

    def log(self, it: int, *args: Any, **kwargs: Any) -> None:
        """Log rsl-rl's metrics, then ``Safety/*``, and record the iteration for the summary."""
        returns = [
            ep["Episode/return"]
            for ep in self.ep_extras
            if isinstance(ep, dict) and isinstance(ep.get("Episode/return"), torch.Tensor)
        ]
        finished = torch.cat(returns).tolist() if returns else []
        super().log(it, *args, **kwargs)
        scalars = self.safety_scalars()
        if self.writer is not None:
            for tag, value in scalars.items():
                self.writer.add_scalar(f"Safety/{tag}", value, it)
        self.history.append(
            IterationRecord(
                iteration=it,
                mean_return=statistics.fmean(finished) if finished else None,
                episodes=len(finished),
                mean_step_reward=self._reward_sum / max(self._reward_count, 1),
            )
        )
        self._reward_sum, self._reward_count = 0.0, 0
        self.on_iteration_end(it)


class SafeRunner(OnPolicyRunner):
    """On-policy runner whose checkpoints are always finite and whose metrics include ``Safety/*``.

    Args:
        env: Any rsl-rl ``VecEnv`` (the PyBullet adapter, or an Isaac Lab env).
        train_cfg: rsl-rl's runner dict (built by :func:`robo_safe_rl.training.rsl_cfg.build_rsl_rl_cfg`).
        log_dir: Run directory; ``None`` disables logging and checkpoints (as in rsl-rl).
        device: Torch device of the policy (``cpu``, ``cuda`` or ``cuda:N``).
        env_counters: Returns the env side's cumulative safety counters (SafeStep's), summed over envs.
        env_faults: Returns the env side's cumulative injected-fault counts (fire drills), summed over envs.
        on_iteration_end: Called after each logged iteration with its index.
    """

    def __init__(
        self,
        env: VecEnv,
        train_cfg: dict,
        log_dir: str | None = None,
        device: str = "cpu",
        env_counters: Callable[[], dict[str, int]] | None = None,
        env_faults: Callable[[], dict[str, int]] | None = None,
        on_iteration_end: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(env, train_cfg, log_dir, device)
        self.env_counters = env_counters or dict
        self.env_faults = env_faults or dict
        self.counters: dict[str, int] = {"checkpoints_refused": 0}
        self.last_clean_checkpoint: str | None = None
        self.final_checkpoint: str | None = None
        self.logger = SafeLogger(
            safety_scalars=self.safety_scalars,
            on_iteration_end=on_iteration_end or (lambda it: None),
            log_dir=log_dir,
            cfg=self.cfg,
            env_cfg=self.env.cfg,
            num_envs=self.env.num_envs,
            is_distributed=self.is_distributed,
            gpu_world_size=self.gpu_world_size,
            gpu_global_rank=self.gpu_global_rank,
            device=self.device,
        )

    def safety_counters(self) -> dict[str, int]:
        """Cumulative safety counters of the whole stack: gradient guard, env side and checkpoints."""
        counters: dict[str, int] = {}
        counters.update(getattr(self.alg, "safety_counters", {}))
        counters.update(self.env_counters())
        counters.update(self.counters)
        return counters

    def faults_injected(self) -> dict[str, int]:
        """Cumulative counts of injected faults per kind (empty when no drill runs)."""
        injected = dict(getattr(self.alg, "faults_injected", {}))
        injected.update(self.env_faults())
        return injected

    def safety_scalars(self) -> dict[str, float]:
        """The ``Safety/*`` scalars of one iteration: the guard's per-iteration metrics and every cumulative counter."""
        scalars: dict[str, float] = {k: float(v) for k, v in self.safety_counters().items()}
        iteration_metrics = getattr(self.alg, "iteration_metrics", None)
        if iteration_metrics is not None:
            scalars.update(iteration_metrics())
        return scalars

    def save(self, path: str, infos: dict | None = None) -> None:
        """Write rsl-rl's checkpoint format to ``path`` atomically, unless it holds a non-finite tensor."""
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        if save_checkpoint_if_finite(saved, path):
            self.last_clean_checkpoint = path
            self.final_checkpoint = path
            self.logger.save_model(path, self.current_learning_iteration)
        else:
            self.counters["checkpoints_refused"] += 1

    def _configure_multi_gpu(self) -> None:
        """Set up torch.distributed under torchrun: NCCL for CUDA ranks, gloo for CPU ranks."""
        multi_gpu_cfg = None
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from robo_safe_rl.training.distributed import init_distributed

            multi_gpu_cfg = init_distributed(self.device)
        self.cfg["multi_gpu"] = multi_gpu_cfg
        self.is_distributed = multi_gpu_cfg is not None
        if multi_gpu_cfg is None:
            self.gpu_world_size, self.gpu_local_rank, self.gpu_global_rank = 1, 0, 0
            return
        self.gpu_world_size = multi_gpu_cfg["world_size"]
        self.gpu_local_rank = multi_gpu_cfg["local_rank"]
        self.gpu_global_rank = multi_gpu_cfg["global_rank"]

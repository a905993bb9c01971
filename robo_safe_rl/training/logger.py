"""``SafeLogger``: rsl-rl's ``Logger`` with ``Safety/*`` scalars, a history of returns, and a chosen console display.

rsl-rl's ``Logger.log`` both writes the iteration's metrics and prints its 20-line block. :meth:`SafeLogger.log` is a
marked copy of it that writes the same metrics through the same writer and hands the figures to a
:class:`~robo_safe_rl.training.display.Display` instead of printing; :class:`~robo_safe_rl.training.display.RslDisplay`
prints rsl-rl's block from them, byte for byte.
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics
from typing import Any

import torch
from rsl_rl.utils.log_writer import LogWriter
from rsl_rl.utils.logger import Logger
from rsl_rl.utils.wandb_log_writer import WandbLogWriter

from robo_safe_rl.training.display import Display, IterationStats, RslDisplay


@dataclasses.dataclass
class IterationRecord:
    """What one iteration looked like, for ``summary.json`` (returns are ``None`` when no episode ended)."""

    iteration: int
    mean_return: float | None
    episodes: int
    mean_step_reward: float


class _EnvCfg(dict):
    """An env's plain-dict ``cfg`` with the ``to_dict()`` that rsl-rl's W&B and Neptune writers call on it.

    Isaac Lab's env configs have ``to_dict()``; a dict has neither it nor dataclass fields, so the writers' fallback
    (``dataclasses.asdict``) raises and the run dies at its first iteration.
    """

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


class SafeLogger(Logger):
    """rsl-rl's logger plus ``Safety/*`` and ``Train/reward_scale`` scalars, a per-iteration history of returns for
    ``summary.json``, and a console display.

    The scalars go through rsl-rl's writer, so they reach whichever ``runner.logger`` chose: TensorBoard, or W&B or
    Neptune (whose writers also keep TensorBoard files in the run directory). As in rsl-rl, only a logger with a
    writer (a log directory, rank 0 under torchrun) shows anything.

    Args:
        display: Shows each iteration; ``None``: rsl-rl's block (:class:`RslDisplay`), as ``OnPolicyRunner`` prints.
        **kwargs: rsl-rl's ``Logger`` arguments.
    """

    def __init__(self, display: Display | None = None, **kwargs: Any) -> None:
        env_cfg = kwargs.get("env_cfg")
        if isinstance(env_cfg, dict) and not hasattr(env_cfg, "to_dict"):
            kwargs["env_cfg"] = _EnvCfg(env_cfg)
        super().__init__(**kwargs)
        self.display = display if display is not None else RslDisplay()
        self.history: list[IterationRecord] = []
        self._reward_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self._reward_count = 0

    def process_env_step(
        self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict, intrinsic_rewards: torch.Tensor | None = None
    ) -> None:
        """Book-keep one env step (rsl-rl's) and accumulate the step reward for the iteration's mean."""
        super().process_env_step(rewards, dones, extras, intrinsic_rewards)
        # Summed on the device; read once per iteration, not once per step.
        self._reward_sum += rewards.sum()
        self._reward_count += rewards.numel()

    def discard_rollout(self) -> None:
        """Forget the episode logs and rewards of a rollout that was thrown away (a rollback)."""
        self.ep_extras.clear()
        self._reward_sum.zero_()
        self._reward_count = 0

    def log_iteration(
        self,
        it: int,
        safety: dict[str, float],
        counters: dict[str, int] | None = None,
        train: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Log rsl-rl's metrics, ``Safety/*`` and this project's ``Train/*`` additions, show the iteration, and record
        it for the summary.

        Args:
            it: The iteration.
            safety: Every ``Safety/*`` scalar: the cumulative counters and the gradient guard's metrics.
            counters: The cumulative event counters the display shows (``None``: none).
            train: Further ``Train/*`` scalars (the reward scale of ``runner.normalize_rewards``, the scheduled clip
                range of ``algorithm.clip_param_final``, the scheduled entropy bonus of
                ``algorithm.entropy_coef_final``); ``None``: none.
            **kwargs: rsl-rl's ``Logger.log`` arguments.
        """
        returns = [ep["Episode/return"] for ep in self.ep_extras if isinstance(ep.get("Episode/return"), torch.Tensor)]
        finished = torch.cat(returns).tolist() if returns else []
        stats = self.log(it=it, **kwargs)
        if self.writer is not None:
            for tag, value in safety.items():
                self.writer.add_scalar(f"Safety/{tag}", value, it)
            for tag, value in (train or {}).items():
                self.writer.add_scalar(f"Train/{tag}", value, it)
        if stats is not None:
            self.display.show(dataclasses.replace(stats, safety=dict(counters or {})))
        self.history.append(
            IterationRecord(
                iteration=it,
                mean_return=statistics.fmean(finished) if finished else None,
                episodes=len(finished),
                mean_step_reward=float(self._reward_sum) / max(self._reward_count, 1),
            )
        )
        self._reward_sum.zero_()
        self._reward_count = 0

    def log(
        self,
        it: int,
        start_it: int,
        total_it: int,
        collect_time: float,
        learn_time: float,
        loss_dict: dict,
        learning_rate: float,
        action_std: torch.Tensor,
        rnd_weight: float | None,
        print_minimal: bool = False,
        width: int = 80,
        pad: int = 40,
    ) -> IterationStats | None:  # type: ignore[override]  (rsl-rl's returns None; its callers ignore the result)
        """Write the iteration's metrics as rsl-rl does and return its figures for a display (``None`` without a
        writer). ``print_minimal``, ``width`` and ``pad`` are rsl-rl's print options; the display has its own."""
        # ---- Copied from rsl-rl 5.5.1 rsl_rl/utils/logger.py Logger.log (BSD-3-Clause, ETH Zurich and NVIDIA).
        # Changed: the console text is built by the display from the figures returned (marked "changed" below).
        if self.writer is None:
            return None
        collection_size = self.cfg["num_steps_per_env"] * self.num_envs * self.gpu_world_size
        iteration_time = collect_time + learn_time
        self.tot_timesteps += collection_size
        self.tot_time += iteration_time

        # Log episode extras
        episode_terms: list[tuple[str, float]] = []  # changed: the figures, not their text
        if self.ep_extras:
            for key in dict.fromkeys(k for ep_info in self.ep_extras for k in ep_info):
                infotensor = torch.tensor([], device=self.device)
                for ep_info in self.ep_extras:
                    if key not in ep_info:
                        continue
                    if not isinstance(ep_info[key], torch.Tensor):
                        ep_info[key] = torch.Tensor([ep_info[key]])
                    if len(ep_info[key].shape) == 0:
                        ep_info[key] = ep_info[key].unsqueeze(0)
                    infotensor = torch.cat((infotensor, ep_info[key].to(self.device)))
                value = torch.mean(infotensor)
                self.writer.add_scalar(key if "/" in key else "Episode/" + key, value, it)
                episode_terms.append((key, float(value)))

        # Log losses
        for key, value in loss_dict.items():
            self.writer.add_scalar(f"Loss/{key}", value, it)
        self.writer.add_scalar("Loss/learning_rate", learning_rate, it)

        # Log std
        mean_std = action_std.mean().item()
        self.writer.add_scalar("Policy/mean_std", mean_std, it)

        # Log performance
        fps = int(collection_size / (collect_time + learn_time))
        self.writer.add_scalar("Perf/total_fps", fps, it)
        self.writer.add_scalar("Perf/collection_time", collect_time, it)
        self.writer.add_scalar("Perf/learning_time", learn_time, it)

        # Log rewards and episode length
        rnd = bool(self.cfg["algorithm"].get("rnd_cfg"))
        means: dict[str, float | None] = dict.fromkeys(("return", "length", "extrinsic", "intrinsic"))  # changed
        if len(self.rewbuffer) > 0:
            means["return"] = statistics.mean(self.rewbuffer)
            means["length"] = statistics.mean(self.lenbuffer)
            if rnd:
                means["extrinsic"] = statistics.mean(self.erewbuffer)
                means["intrinsic"] = statistics.mean(self.irewbuffer)
                self.writer.add_scalar("Rnd/mean_extrinsic_reward", means["extrinsic"], it)
                self.writer.add_scalar("Rnd/mean_intrinsic_reward", means["intrinsic"], it)
                self.writer.add_scalar("Rnd/weight", rnd_weight, it)  # type: ignore
            self.writer.add_scalar("Train/mean_reward", means["return"], it)
            self.writer.add_scalar("Train/mean_episode_length", means["length"], it)
            if not isinstance(self.writer, WandbLogWriter):
                self.writer.add_scalar("Train/mean_reward/time", means["return"], int(self.tot_time))
                self.writer.add_scalar("Train/mean_episode_length/time", means["length"], int(self.tot_time))

        # Changed: rsl-rl prints its block here; the figures go to the display instead.
        done_it = it + 1 - start_it
        remaining_it = total_it - start_it - done_it
        stats = IterationStats(
            iteration=it,
            start_iteration=start_it,
            total_iterations=total_it,
            total_steps=self.tot_timesteps,
            steps_per_s=fps,
            collect_time=collect_time,
            learn_time=learn_time,
            elapsed_s=self.tot_time,
            eta_s=self.tot_time / done_it * remaining_it,
            losses={key: float(value) for key, value in loss_dict.items()},
            learning_rate=float(learning_rate),
            action_std=mean_std,
            mean_return=means["return"],
            mean_episode_length=means["length"],
            mean_extrinsic_return=means["extrinsic"],
            mean_intrinsic_return=means["intrinsic"],
            episode_terms=() if print_minimal else tuple(episode_terms),
            run_name=self.cfg.get("run_name") or None,
        )

        # Upload available videos to external logging service if supported
        if isinstance(self.writer, LogWriter):
            for video in pathlib.Path(self.log_dir).rglob("*.mp4"):  # type: ignore
                self.writer.save_video(video, it)

        # Clear extras buffer
        self.ep_extras.clear()
        # ---- End of the copy.
        return stats

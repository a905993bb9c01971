"""What rsl-rl's adaptive learning-rate schedule does within each update, measured on real short trainings.

rsl-rl 5.5's rule (``PPO.update``, kept in SafePPO's marked copy): before every mini-batch's step, the KL between the
rollout's action distribution (stored with the transitions) and the current policy's, averaged over the mini-batch,
is compared with ``desired_kl``: above twice the target the rate is divided by 1.5 (floor 1e-5), below half of it
multiplied by 1.5 (ceiling 1e-2). This probe trains in-process as ``tools/train.py`` does, with the actor built as a
subclass of the project's model whose ``get_kl_divergence`` records each KL it returns, and replays the rule on them
to get the rate each mini-batch's step ran at. Per update it keeps: the rate at its end (what
``Loss/learning_rate`` logs), the mean rate over its steps (what ran), the KL at the first mini-batch (0 when the
rollout's stored distribution and the current policy agree: it tests that the observation normaliser did not move
between the rollout and the update), the KL after one step, and the largest KL (where the update ended).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from typing import Any

import torch

from robo_safe_rl.training.models import ClippedMLPModel

#: rsl-rl's bounds and factor of the adaptive schedule (``rsl_rl.algorithms.ppo``).
LR_FLOOR, LR_CEILING, FACTOR = 1.0e-5, 1.0e-2, 1.5

_RECORDED: list[float] = []


class KLProbeModel(ClippedMLPModel):
    """The project's actor, recording the mean KL of every ``get_kl_divergence`` call (the schedule's input)."""

    def get_kl_divergence(self, old_params: tuple[torch.Tensor, ...], new_params: tuple[torch.Tensor, ...]) -> Any:
        kl = super().get_kl_divergence(old_params, new_params)
        _RECORDED.append(float(kl.mean()))
        return kl


@dataclass
class UpdateRecord:
    """One update: the rate it started with and the KL before each mini-batch's step."""

    lr_start: float
    kls: list[float]

    def rates(self, desired_kl: float) -> list[float]:
        """The rate of each mini-batch's step under rsl-rl's rule."""
        lr, rates = self.lr_start, []
        for kl in self.kls:
            if kl > desired_kl * 2.0:
                lr = max(LR_FLOOR, lr / FACTOR)
            elif 0.0 < kl < desired_kl / 2.0:
                lr = min(LR_CEILING, lr * FACTOR)
            rates.append(lr)
        return rates


def probe(overrides: list[str], iterations: int) -> dict[str, Any]:
    """Train ``iterations`` iterations of the composed config (``overrides`` over ``configs/train.yaml``) in this
    process, one torch thread, envs in the process, and summarise the schedule (module docstring)."""
    from robo_safe_rl.apps.train import seed_everything, to_train_config
    from robo_safe_rl.config.compose import compose
    from robo_safe_rl.training.env_builder import build_vec_env
    from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg
    from robo_safe_rl.training.runner import SafeRunner

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = to_train_config(compose([f"run_dir={run_dir}", "task.num_workers=0", *overrides]))
        seed_everything(cfg.seed)
        torch.set_num_threads(1)
        env = build_vec_env(cfg, incidents_dir=None)
        try:
            train_cfg = build_rsl_rl_cfg(cfg, run_dir)
            train_cfg["actor"]["class_name"] = f"{__name__}:KLProbeModel"
            runner = SafeRunner(env, train_cfg, log_dir=None, device="cpu")
            updates = []
            for _ in range(iterations):
                _RECORDED.clear()
                lr = runner.alg.learning_rate
                runner.learn(1)
                updates.append(UpdateRecord(lr, list(_RECORDED)))
        finally:
            env.close()
    return summarise(updates, cfg.algorithm.desired_kl or 0.0)


def summarise(updates: list[UpdateRecord], desired_kl: float) -> dict[str, Any]:
    """The per-update figures of the module docstring, as medians and shares over the updates."""
    ends = [u.rates(desired_kl)[-1] for u in updates]
    return {
        "updates": len(updates),
        "steps_per_update": len(updates[0].kls),
        "at_floor": sum(lr <= LR_FLOOR * 1.0001 for lr in ends) / len(ends),
        "lr_end_median": statistics.median(ends),
        "lr_ran_median": statistics.median(statistics.fmean(u.rates(desired_kl)) for u in updates),
        "kl_first_max": max(u.kls[0] for u in updates),
        "kl_one_step_first_update": updates[0].kls[1] if len(updates[0].kls) > 1 else None,
        "kl_end_median": statistics.median(max(u.kls) for u in updates),
        "steps_over_twice_target_median": statistics.median(sum(k > 2 * desired_kl for k in u.kls) for u in updates),
    }

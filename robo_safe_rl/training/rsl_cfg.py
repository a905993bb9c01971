"""The one place where our typed config becomes rsl-rl's runner dict.

rsl-rl's ``OnPolicyRunner`` mutates the dict it is given (``obs_groups``, ``multi_gpu``), so a fresh dict is built
for every runner and never shared.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from robo_safe_rl.config.schema import TrainConfig

#: rsl-rl resolves ``class_name`` strings; ours are fully qualified so no name search happens.
SAFE_PPO = "robo_safe_rl.training.ppo:SafePPO"
#: rsl-rl's MLPModel plus clipping of the normalised input (a no-op with ``obs_clip=None``).
MODEL = "robo_safe_rl.training.models:ClippedMLPModel"


def _plain(value: Any) -> Any:
    """Dataclasses and enums as plain dicts and strings (what rsl-rl and ``torch.save`` expect)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.value if isinstance(value, Enum) else value


def build_rsl_rl_cfg(cfg: TrainConfig, run_dir: str) -> dict[str, Any]:
    """Return rsl-rl 5.5's runner dict for ``cfg``.

    The algorithm is always :class:`~robo_safe_rl.training.ppo.SafePPO`: with ``safety.grad_guard.mode=off`` it is
    exactly rsl-rl's PPO (no hooks, no cost), and a fire drill still injects, so the failure can be watched.
    """
    algo = cfg.algo
    algorithm: dict[str, Any] = {
        "class_name": SAFE_PPO,
        "learning_rate": algo.learning_rate,
        "schedule": _plain(algo.schedule),
        "desired_kl": algo.desired_kl,
        "max_grad_norm": algo.max_grad_norm,
        "num_learning_epochs": algo.num_learning_epochs,
        "num_mini_batches": algo.num_mini_batches,
        "clip_param": algo.clip_param,
        "gamma": algo.gamma,
        "lam": algo.lam,
        "value_loss_coef": algo.value_loss_coef,
        "entropy_coef": algo.entropy_coef,
        "use_clipped_value_loss": algo.use_clipped_value_loss,
        "normalize_advantage_per_mini_batch": algo.normalize_advantage_per_mini_batch,
        "grad_guard": _plain(cfg.safety.grad_guard),
        "grad_faults": _plain(cfg.faults.grad),
        "dump_dir": run_dir,
    }
    distribution = {
        "class_name": "rsl_rl.modules.distribution:GaussianDistribution",
        "init_std": algo.init_std,
        "std_type": _plain(algo.std_type),
        "std_range": (algo.std_min, algo.std_max),
    }
    return {
        "num_steps_per_env": cfg.runner.num_steps_per_env,
        "save_interval": cfg.runner.save_interval,
        "check_for_nan": cfg.runner.check_for_nan,
        "experiment_name": cfg.runner.experiment_name,
        "run_name": "",
        "logger": "tensorboard",
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": algorithm,
        "reward_clip": algo.reward_clip,
        "actor": {
            "class_name": MODEL,
            "obs_clip": algo.obs_clip,
            "hidden_dims": list(algo.actor_hidden_dims),
            "activation": algo.activation,
            "obs_normalization": algo.obs_normalization,
            "distribution_cfg": distribution,
        },
        "critic": {
            "class_name": MODEL,
            "obs_clip": algo.obs_clip,
            "hidden_dims": list(algo.critic_hidden_dims),
            "activation": algo.activation,
            "obs_normalization": algo.obs_normalization,
        },
    }

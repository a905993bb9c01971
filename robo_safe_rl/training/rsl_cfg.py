"""The one place where our typed config becomes rsl-rl's train dict.

The config's ``runner``, ``algorithm``, ``actor`` and ``critic`` nodes have rsl-rl's shape and names
(:mod:`robo_safe_rl.config.agent`), so the dict is their ``dataclasses.asdict`` plus what only code knows: the class
names, the observation groups of the env adapter, the logger, and the safety settings SafePPO takes.
rsl-rl's ``OnPolicyRunner`` mutates the dict it is given (``obs_groups``, ``multi_gpu``), so a fresh dict is built for
every runner and never shared.
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
GAUSSIAN = "rsl_rl.modules.distribution:GaussianDistribution"
#: The env adapter yields one observation group, ``policy``, which both networks read.
OBS_GROUPS = {"actor": ["policy"], "critic": ["policy"]}


def _plain(node: Any) -> dict[str, Any]:
    """A config dataclass as a plain dict, enums as their values (what rsl-rl and ``torch.save`` expect)."""
    return dataclasses.asdict(
        node, dict_factory=lambda items: {k: v.value if isinstance(v, Enum) else v for k, v in items}
    )


def build_rsl_rl_cfg(cfg: TrainConfig, run_dir: str) -> dict[str, Any]:
    """Return rsl-rl 5.5's train dict for ``cfg``.

    The algorithm is always :class:`~robo_safe_rl.training.ppo.SafePPO`: with ``safety.grad_guard.mode=off`` it is
    exactly rsl-rl's PPO (no hooks, no cost), and a fire drill still injects, so the failure can be watched.
    """
    actor = {"class_name": MODEL, **_plain(cfg.actor)}
    actor["distribution_cfg"] = {"class_name": GAUSSIAN, **actor["distribution_cfg"]}
    return {
        **_plain(cfg.runner),
        "logger": "tensorboard",
        "obs_groups": {k: list(v) for k, v in OBS_GROUPS.items()},
        "algorithm": {
            "class_name": SAFE_PPO,
            **_plain(cfg.algorithm),
            "grad_guard": _plain(cfg.safety.grad_guard),
            "grad_faults": _plain(cfg.faults.grad),
            "dump_dir": run_dir,
        },
        "actor": actor,
        "critic": {"class_name": MODEL, **_plain(cfg.critic)},
    }

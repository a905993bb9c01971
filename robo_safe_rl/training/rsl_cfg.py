"""The one place where our typed config becomes rsl-rl's train dict.

The config's ``runner``, ``algorithm``, ``actor`` and ``critic`` nodes have rsl-rl's shape and names
(:mod:`robo_safe_rl.config.agent`), so the dict is their ``dataclasses.asdict`` plus what only code knows: the class
names, the observation groups of the env adapter, the logger in rsl-rl's form, and the safety settings SafePPO takes.
rsl-rl's ``OnPolicyRunner`` mutates the dict it is given (``obs_groups``, ``multi_gpu``), so a fresh dict is built for
every runner and never shared.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from enum import Enum
from typing import Any

from robo_safe_rl.config.agent import Logger, Noise, RunnerConfig, effective_std_range
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.training.symmetry import symmetry_cfg

#: rsl-rl resolves ``class_name`` strings; ours are fully qualified so no name search happens.
SAFE_PPO = "robo_safe_rl.training.ppo:SafePPO"
#: rsl-rl's MLPModel plus clipping of the normalised input (a no-op with ``obs_clip=None``).
MODEL = "robo_safe_rl.training.models:ClippedMLPModel"
GAUSSIAN = "rsl_rl.modules.distribution:GaussianDistribution"
#: The gSDE distribution (``actor.distribution_cfg.noise=gsde``), this project's.
GSDE = "robo_safe_rl.training.gsde:StateDependentNoiseDistribution"
#: The env adapter yields one observation group, ``policy``, which both networks read.
OBS_GROUPS = {"actor": ["policy"], "critic": ["policy"]}
#: rsl-rl's log writers of the non-default loggers (``rsl_rl.utils``), the package each needs and how to install it.
WRITERS = {
    Logger.wandb: ("WandbLogWriter", "wandb", "pip install 'robo-safe-rl[wandb]'"),
    Logger.neptune: ("NeptuneLogWriter", "neptune", "pip install neptune"),
}


def _plain(node: Any) -> dict[str, Any]:
    """A config dataclass as a plain dict, enums as their values (what rsl-rl and ``torch.save`` expect)."""
    return dataclasses.asdict(
        node, dict_factory=lambda items: {k: v.value if isinstance(v, Enum) else v for k, v in items}
    )


def logger_cfg(runner: RunnerConfig) -> str | dict[str, Any]:
    """rsl-rl's ``logger`` entry: ``"tensorboard"``, or the dict form of a log writer (rsl-rl 5.5 deprecates the
    plain ``"wandb"`` / ``"neptune"`` strings)."""
    if runner.logger is Logger.tensorboard:
        return "tensorboard"
    writer, _, _ = WRITERS[runner.logger]
    project = runner.wandb_project if runner.logger is Logger.wandb else runner.neptune_project
    return {"class_name": f"rsl_rl.utils:{writer}", "project_name": project}


def check_logger(runner: RunnerConfig) -> None:
    """Fail before anything is built when the chosen logger cannot start here (rsl-rl would fail at the first
    iteration, after the run directory was made).

    Raises:
        ConfigError: Naming ``runner.logger`` and what is missing.
    """
    if runner.logger is Logger.tensorboard:
        return
    _, package, install = WRITERS[runner.logger]
    if importlib.util.find_spec(package) is None:
        raise ConfigError(
            f"invalid config value runner.logger={runner.logger.value}: expected the `{package}` package to be "
            f"installed ({install})"
        )
    if runner.logger is Logger.neptune:
        missing = [name for name in ("NEPTUNE_API_TOKEN", "NEPTUNE_USERNAME") if not os.environ.get(name)]
        if missing:
            raise ConfigError(
                f"invalid config value runner.logger=neptune: expected {' and '.join(missing)} in the environment"
            )


def distribution_cfg(plain: dict[str, Any]) -> dict[str, Any]:
    """rsl-rl's ``distribution_cfg`` of the actor node's plain dict: the class of ``noise`` with its own keyword
    arguments (rsl-rl's Gaussian takes no ``noise_*``), ``std_floor`` folded into ``std_range``'s minimum."""
    kwargs = {k: v for k, v in plain.items() if k not in ("noise", "std_floor")}
    kwargs["std_range"] = effective_std_range(plain["std_range"], plain.get("std_floor"))
    if plain["noise"] == Noise.gsde.value:
        return {"class_name": GSDE, **kwargs}
    return {"class_name": GAUSSIAN, **{k: v for k, v in kwargs.items() if not k.startswith("noise_")}}


def build_rsl_rl_cfg(cfg: TrainConfig, run_dir: str) -> dict[str, Any]:
    """Return rsl-rl 5.5's train dict for ``cfg``.

    The algorithm is always :class:`~robo_safe_rl.training.ppo.SafePPO`: with ``safety.grad_guard.mode=off`` it is
    exactly rsl-rl's PPO (no hooks, no cost), and a fire drill still injects, so the failure can be watched.
    """
    actor = {"class_name": MODEL, **_plain(cfg.actor)}
    actor["distribution_cfg"] = distribution_cfg(actor["distribution_cfg"])
    return {
        **_plain(cfg.runner),
        "logger": logger_cfg(cfg.runner),
        "obs_groups": {k: list(v) for k, v in OBS_GROUPS.items()},
        "algorithm": {
            "class_name": SAFE_PPO,
            **_plain(cfg.algorithm),
            "symmetry_cfg": symmetry_cfg(cfg.algorithm.symmetry_cfg),
            "mirror_normalization": cfg.algorithm.symmetry_cfg.mirror_normalization,
            "grad_guard": _plain(cfg.safety.grad_guard),
            "grad_faults": _plain(cfg.faults.grad),
            "dump_dir": run_dir,
            "schedule_iterations": cfg.runner.max_iterations,
        },
        "actor": actor,
        "critic": {"class_name": MODEL, **_plain(cfg.critic)},
    }

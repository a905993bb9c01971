"""Build the vectorised, guarded envs of a run from its config.

Per env ``i`` (outermost first)::

    ActionFaultInjector   (only in a drill with faults.env.action_nonfinite > 0: a bad policy's action)
    SafeStep              (safety.step; sanitises actions, catches physics errors, records incidents)
    EnvFaultInjector      (only in a drill: physics errors, blow-ups, non-finite obs/reward from the task)
    gymnasium.make(task.env_id)

and the :class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv` over all of them. The library only knows the gymnasium
id: ``tools/train.py`` imports ``envs``, which registers the tasks.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector
from robo_safe_rl.bridge.incidents import IncidentRecorder
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError


def check_task_registered(cfg: TrainConfig) -> None:
    """Fail before anything is built or written if ``task.env_id`` is not a registered gymnasium id.

    Raises:
        ConfigError: Naming ``task.env_id`` and the registered RoboSafe ids.
    """
    try:
        gym.spec(cfg.task.env_id)
    except gym.error.Error as err:
        ours = sorted(k for k in gym.registry if k.startswith("RoboSafe/"))
        raise ConfigError(
            f"invalid config value task.env_id={cfg.task.env_id!r}: {err} Registered RoboSafe tasks: {ours} "
            "(tasks are registered by `import robosafe_tasks`, which tools/train.py does)"
        ) from err


def make_task_env(cfg: TrainConfig) -> gym.Env:
    """``gymnasium.make`` the task, with the configured time limit (the id must be registered)."""
    kwargs = dict(cfg.task.env_kwargs)
    if cfg.task.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.task.max_episode_steps
    # The passive checker only looks at the first step; the adapter checks spaces itself.
    return gym.make(cfg.task.env_id, disable_env_checker=True, **kwargs)


def check_task(cfg: TrainConfig) -> None:
    """Fail before anything is written if the task id is unknown or the env cannot be made with ``task.env_kwargs``.

    Raises:
        ConfigError: Naming ``task.env_id`` or ``task.env_kwargs`` and the reason.
    """
    check_task_registered(cfg)
    try:
        make_task_env(cfg).close()
    except (TypeError, ValueError, gym.error.Error) as err:
        raise ConfigError(
            f"invalid config value task.env_kwargs={dict(cfg.task.env_kwargs)!r}: expected keyword arguments that "
            f"{cfg.task.env_id} accepts ({type(err).__name__}: {err})"
        ) from err


def build_vec_env(cfg: TrainConfig, *, incidents_dir: str | Path | None, rank: int = 0) -> GymVecEnv:
    """Build ``task.num_envs`` guarded envs and their rsl-rl adapter (env i of rank r reset with seed + 1000 r + i).

    Incidents are recorded into ``incidents_dir`` (this rank's folder of the run directory); ``None`` records none.
    """
    check_task_registered(cfg)
    faults = cfg.faults.env
    recorder = None
    if cfg.safety.step.enabled and incidents_dir is not None:
        recorder = IncidentRecorder.from_config(Path(incidents_dir), cfg.safety.step)
    envs: list[gym.Env] = []
    try:
        for i in range(cfg.task.num_envs):
            index = 1000 * rank + i
            env = make_task_env(cfg)
            envs.append(env)
            if faults.env_enabled:
                env = EnvFaultInjector(env, faults, env_index=index)
            if cfg.safety.step.enabled:
                env = SafeStep(env, cfg.safety.step, env_index=index, recorder=recorder)
            if faults.action_enabled:
                env = ActionFaultInjector(env, faults, env_index=index)
            envs[-1] = env
        return GymVecEnv(envs, seed=cfg.seed + 1000 * rank, cfg={"task": cfg.task.name}, recorder=recorder)
    except BaseException:
        for env in envs:  # free the physics clients of the envs already made
            env.close()
        raise

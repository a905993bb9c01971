"""How a run builds each env: the task, wrapped in the fault injectors of a drill and SafeStep, outermost first::

    ActionFaultInjector   (only in a drill with faults.env.action_nonfinite > 0: a bad policy's action)
    SafeStep              (safety.step; sanitises actions, catches physics errors, records incidents)
    EnvFaultInjector      (only in a drill: physics errors, blow-ups, non-finite obs/reward from the task)
    gymnasium.make(spec)

:class:`TaskEnvFactory` is the one place that knows this chain. It pickles (a spec, keyword arguments, two config
dataclasses), so a worker process builds its envs itself, from the registered spec: the worker needs no
registration of the task, and imports neither torch nor rsl-rl to build it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig

#: A task's step clock: the attribute, on the unwrapped env, that counts the policy steps the env has taken in the run
#: (Isaac Lab's ``common_step_counter``, which a curriculum reads). A task without it has no clock to set.
STEP_CLOCK = "common_step_counter"


def start_clock(env: gym.Env, steps: int) -> None:
    """Set the step clock of ``env``'s task (:data:`STEP_CLOCK`) to ``steps``, if the task keeps one."""
    task = env.unwrapped
    if hasattr(task, STEP_CLOCK):
        setattr(task, STEP_CLOCK, int(steps))


@dataclass(frozen=True)
class TaskEnvFactory:
    """Builds env ``index`` of a run, wrapped as the module docstring shows; picklable, so that a worker process
    builds its envs itself (nothing but this factory crosses to it).

    Attributes:
        spec: The task's registered gymnasium spec.
        kwargs: Keyword arguments of ``gymnasium.make`` (``task.env_kwargs``, the time limit).
        step: SafeStep's config; ``None`` leaves the env unguarded (``safety.step.enabled=false``).
        faults: The env side of the fire drill.
        start_step: Policy steps each env of the run has taken before the envs this factory builds (a resumed run's,
            or a restarted worker's): their task's step clock starts there (:func:`start_clock`), so a curriculum
            goes on where it was rather than from its start.
    """

    spec: EnvSpec
    kwargs: dict[str, Any] = field(default_factory=dict)
    step: SafeStepConfig | None = None
    faults: EnvFaultConfig = field(default_factory=EnvFaultConfig)
    start_step: int = 0

    @classmethod
    def from_config(
        cls, spec: EnvSpec, task: Any, step: SafeStepConfig, faults: EnvFaultConfig, start_step: int = 0
    ) -> TaskEnvFactory:
        """The factory of a run: ``spec`` of ``task.env_id``, ``task`` (``env_kwargs``, ``max_episode_steps``),
        ``safety.step`` and ``faults.env``; ``start_step``: the steps each env took before (a resumed run)."""
        kwargs = dict(task.env_kwargs)
        if task.max_episode_steps is not None:
            kwargs["max_episode_steps"] = task.max_episode_steps
        return cls(spec, kwargs, step if step.enabled else None, faults, start_step)

    def after(self, steps: int) -> TaskEnvFactory:
        """This factory for envs made once the run's envs have taken ``steps`` more steps (a restarted worker's)."""
        return dataclasses.replace(self, start_step=self.start_step + steps)

    def make_task(self) -> gym.Env:
        """The bare task (``gymnasium.make``; the passive checker only looks at the first step, and the adapter
        checks the spaces itself), its step clock at ``start_step``."""
        env = gym.make(self.spec, disable_env_checker=True, **self.kwargs)
        if self.start_step:
            start_clock(env, self.start_step)
        return env

    def __call__(self, index: int, recorder: Any = None) -> gym.Env:
        """Build env ``index``, its SafeStep recording into ``recorder``."""
        env = self.make_task()
        try:
            if self.faults.env_enabled:
                env = EnvFaultInjector(env, self.faults, env_index=index)
            if self.step is not None:
                env = SafeStep(env, self.step, env_index=index, recorder=recorder)
            if self.faults.action_enabled:
                env = ActionFaultInjector(env, self.faults, env_index=index)
        except BaseException:
            env.close()
            raise
        return env

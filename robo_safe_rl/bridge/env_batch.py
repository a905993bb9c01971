"""A batch of gymnasium envs stepped in lock-step: the stepping half of the vector adapter.

:class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv` presents a batch to rsl-rl and keeps the adapter's semantics
(time-outs, episode logs, the incident recorder's step count) in one place; a batch only steps its envs and resets
the ones that ended. Two batches give the same numbers, bit for bit, for the same envs and seeds:

- :class:`LocalEnvBatch`: the envs in this process, stepped one after another (one core does all the physics);
- :class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch`: the envs in worker processes, each stepping its share at
  the same time, exchanging actions and results through shared memory.

This module imports neither torch nor rsl-rl: the worker processes import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.faults import sum_injected
from robo_safe_rl.bridge.mirror import Mirror
from robo_safe_rl.bridge.protocol import is_simulated
from robo_safe_rl.bridge.safe_step import sum_counters

#: Counters of the worker processes (``Safety/<name>``, ``summary.json``'s ``safety``): worker processes that died
#: or stopped answering, and the ones started in their place. Zero for a batch without workers, so that every rank
#: reports the same names (the runner sums them over ranks).
WORKER_COUNTER_NAMES: tuple[str, ...] = ("worker_crashes", "worker_restarts")


@dataclass(frozen=True)
class EnvInfo:
    """What the adapter and the crash records need to know of one env, without holding it (it may live in a worker).

    Attributes:
        observation_space: The env's observation space.
        action_space: The env's action space.
        max_episode_steps: The time limit of its spec (``None`` when unlimited).
        env_id: Its gymnasium id (``None`` without a spec).
        simulated: Whether the task implements the simulator protocol.
        action_names: One name per action component, when the task names them.
        reward_terms: Names of the reward terms the task reports per step in ``info["reward_terms"]`` (its
            ``reward_terms`` attribute; empty when it reports none).
        metric_names: Names of the quantities the task reports per step in ``info["metrics"]`` (its ``metric_names``
            attribute, e.g. the A1's tracking errors; empty when it reports none).
        step_dt: Simulated seconds of one env step (the task's ``step_dt``), when it says.
        mirror: The task's left-right mirror of observations and actions (:mod:`robo_safe_rl.bridge.mirror`), when
            it declares one.
    """

    observation_space: gym.Space
    action_space: gym.Space
    max_episode_steps: int | None
    env_id: str | None
    simulated: bool
    action_names: list[str] | None
    reward_terms: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = ()
    step_dt: float | None = None
    mirror: Mirror | None = None

    @classmethod
    def of(cls, env: gym.Env) -> EnvInfo:
        """Describe ``env`` (any wrapping of a task)."""
        spec = env.spec
        names = getattr(env.unwrapped, "action_names", None)
        return cls(
            observation_space=env.observation_space,
            action_space=env.action_space,
            max_episode_steps=int(spec.max_episode_steps) if spec and spec.max_episode_steps else None,
            env_id=spec.id if spec is not None else None,
            simulated=is_simulated(env.unwrapped),
            action_names=list(names) if names is not None else None,
            reward_terms=tuple(getattr(env.unwrapped, "reward_terms", ())),
            metric_names=tuple(getattr(env.unwrapped, "metric_names", ())),
            step_dt=getattr(env.unwrapped, "step_dt", None),
            mirror=Mirror.of(env.unwrapped, _size(env.observation_space), _size(env.action_space)),
        )


def _size(space: gym.Space) -> int:
    """Components of a flat space (the adapter refuses any other kind after this)."""
    return int(np.prod(space.shape)) if space.shape is not None else 0


@dataclass
class BatchStep:
    """One step of every env of a batch. Envs that ended are already reset.

    Attributes:
        obs: Observations; for an env that ended, the first of its new episode. Shape: (num_envs, num_obs), float32,
            a fresh array the batch never writes again.
        rewards: Rewards as the envs returned them. Shape: (num_envs,), float64 (exact for any float reward).
        terminated: Gymnasium's ``terminated``. Shape: (num_envs,), bool.
        truncated: Gymnasium's ``truncated``. Shape: (num_envs,), bool.
        terms: The step's reward terms (``EnvInfo.reward_terms``; zeros for a step SafeStep ended). Shape:
            (num_envs, num_terms), float64.
        metrics: The step's metrics (``EnvInfo.metric_names``; NaN for a step that reported none: one SafeStep
            ended, or a worker's crash). Shape: (num_envs, num_metrics), float64.
    """

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    terms: np.ndarray
    metrics: np.ndarray


class EnvBatch(Protocol):
    """What :class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv` needs of a batch of envs."""

    #: One per env, in order.
    infos: list[EnvInfo]

    def reset(self, seed: int) -> np.ndarray:
        """Reset env ``i`` with ``seed + i``; return the observations. Shape: (num_envs, num_obs), float32."""

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step env ``i`` with ``actions[i]`` (shape: (num_envs, num_actions), float32) and reset those that ended."""

    def set_iteration(self, iteration: int) -> None:
        """Training iteration written into later incident records."""

    def safety_counters(self) -> dict[str, int]:
        """Cumulative SafeStep counters summed over envs, plus :data:`WORKER_COUNTER_NAMES`."""

    def faults_injected(self) -> dict[str, int]:
        """Cumulative injected faults per armed kind, summed over envs (empty without a drill)."""

    def close(self) -> None:
        """Close every env (and stop the processes that host them)."""


def step_and_reset(
    env: gym.Env, action: np.ndarray, terms: np.ndarray, metrics: np.ndarray
) -> tuple[Any, float, bool, bool]:
    """Step one env and reset it when its episode ended; the adapter's per-env step, wherever the env lives.

    Args:
        env: The env.
        action: Its action.
        terms: Where the step's ``info["reward_terms"]`` is written (zeros when the info has none: a step SafeStep
            ended). Shape: (num_terms,), possibly (0,).
        metrics: Where the step's ``info["metrics"]`` is written, in the order of the task's ``metric_names`` (NaN
            when the info has none). Shape: (num_metrics,), possibly (0,).

    Returns:
        The observation (after the reset when the episode ended), the reward, terminated and truncated.
    """
    ob, reward, terminated, truncated, info = env.step(action)
    if terms.size:
        terms[:] = info.get("reward_terms", 0.0)
    if metrics.size:
        reported = info.get("metrics")
        metrics[:] = [reported[name] for name in env.unwrapped.metric_names] if reported is not None else np.nan
    # SafeStep already reset an env it recovered and returned the new episode's first observation.
    if (terminated or truncated) and not info.get("safe_step", {}).get("reset", False):
        ob, _ = env.reset()
    return ob, reward, terminated, truncated


class LocalEnvBatch:
    """The envs in this process, stepped one after another.

    Args:
        envs: The envs (possibly wrapped in SafeStep); the batch owns and closes them.
        recorder: The incident recorder shared by their SafeStep wrappers (told the iteration and the step count).
    """

    def __init__(self, envs: Sequence[gym.Env], recorder: Any = None) -> None:
        self.envs = list(envs)
        self.infos = [EnvInfo.of(env) for env in self.envs]
        self.recorder = recorder
        if recorder is not None:
            recorder.set_context(iteration=0, global_step=0)

    def reset(self, seed: int) -> np.ndarray:
        """Reset env ``i`` with ``seed + i``. Shape of the result: (num_envs, num_obs), float32."""
        return np.stack([np.asarray(env.reset(seed=seed + i)[0], dtype=np.float32) for i, env in enumerate(self.envs)])

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step every env with its row of ``actions`` (shape: (num_envs, num_actions)), in order."""
        n = len(self.envs)
        out = BatchStep(
            obs=np.empty((n, *self.infos[0].observation_space.shape), dtype=np.float32),
            rewards=np.empty(n, dtype=np.float64),
            terminated=np.empty(n, dtype=bool),
            truncated=np.empty(n, dtype=bool),
            terms=np.zeros((n, len(self.infos[0].reward_terms))),
            metrics=np.empty((n, len(self.infos[0].metric_names))),
        )
        for i, env in enumerate(self.envs):
            out.obs[i], out.rewards[i], out.terminated[i], out.truncated[i] = step_and_reset(
                env, actions[i], out.terms[i], out.metrics[i]
            )
        if self.recorder is not None:
            self.recorder.advance(n)
        return out

    def set_iteration(self, iteration: int) -> None:
        """Tell the incident recorder (if any) the training iteration of the coming steps."""
        if self.recorder is not None:
            self.recorder.set_context(iteration=iteration)

    def safety_counters(self) -> dict[str, int]:
        """SafeStep's counters summed over the envs, and zero worker counters (there are no workers)."""
        return {**sum_counters(self.envs), **dict.fromkeys(WORKER_COUNTER_NAMES, 0)}

    def faults_injected(self) -> dict[str, int]:
        """Injected faults per armed kind, summed over the envs."""
        return sum_injected(self.envs)

    def close(self) -> None:
        """Close every env (frees their physics clients)."""
        for env in self.envs:
            env.close()

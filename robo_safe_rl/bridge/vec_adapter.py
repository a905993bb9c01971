"""N gymnasium envs stepped in lock-step, presented to rsl-rl as its ``VecEnv``.

The adapter is deliberately thin, so that its cost stays close to the simulator's own stepping rate: one
tensor-to-numpy conversion of the actions, one ``env.step`` per env, one stacked observation array per step.
Episodes are reset in place when they end (gymnasium's terminated / truncated), and the step reports

- ``dones`` = terminated or truncated (``torch.long``, as Isaac Lab's wrapper does),
- ``extras["time_outs"]`` = truncated and not terminated, so rsl-rl bootstraps the value of time-limited episodes,
- ``extras["log"]`` = the return and length of the episodes that ended in this step (rsl-rl's logger averages them
  over the iteration and writes ``Episode/return`` and ``Episode/length``).

Observations are a TensorDict with one group, ``policy`` (used by actor and critic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from robo_safe_rl.bridge.faults import sum_injected
from robo_safe_rl.bridge.safe_step import sum_counters
from robo_safe_rl.errors import ConfigError


class GymVecEnv(VecEnv):
    """rsl-rl ``VecEnv`` over a list of gymnasium envs with flat Box spaces.

    Args:
        envs: The envs, all of the same task (possibly wrapped in SafeStep). The adapter owns and closes them.
        seed: Env ``i`` is first reset with ``seed + i``.
        device: Device of the returned tensors (the envs are on the CPU; rsl-rl moves them to its device).
        cfg: Anything to store as ``env.cfg`` (rsl-rl logs it with the run).
        recorder: The incident recorder shared by the envs' SafeStep wrappers, told the iteration of each rollout.

    Raises:
        ConfigError: If the list is empty or the spaces are not flat Boxes of one shape.
    """

    def __init__(
        self,
        envs: Sequence[gym.Env],
        seed: int = 0,
        device: str = "cpu",
        cfg: dict | None = None,
        recorder: Any = None,
    ) -> None:
        if len(envs) == 0:
            raise ConfigError("GymVecEnv needs at least one env, got an empty list")
        for i, env in enumerate(envs):
            for name, space in (("observation", env.observation_space), ("action", env.action_space)):
                if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                    raise ConfigError(f"env {i}: GymVecEnv requires a flat Box {name} space, got {space}")
            for name in ("observation_space", "action_space"):
                shape, first = getattr(env, name).shape, getattr(envs[0], name).shape
                if shape != first:
                    what = name.split("_")[0]
                    raise ConfigError(f"env {i}: {what} shape {shape} differs from env 0's {first}")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.num_actions = int(self.envs[0].action_space.shape[0])
        self.num_obs = int(self.envs[0].observation_space.shape[0])
        spec = self.envs[0].spec
        self.max_episode_length = int(spec.max_episode_steps) if spec and spec.max_episode_steps else 1_000_000
        self.device = device
        self.cfg = cfg if cfg is not None else {}
        self.recorder = recorder
        if recorder is not None:
            recorder.set_context(iteration=0, global_step=0)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self._episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self._obs = np.stack(
            [np.asarray(env.reset(seed=seed + i)[0], dtype=np.float32) for i, env in enumerate(self.envs)]
        )

    def get_observations(self) -> TensorDict:
        """Return the current observations. Shape of ``policy``: (num_envs, num_obs)."""
        return self._as_tensordict(self._obs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Step every env with its row of ``actions`` (shape: (num_envs, num_actions)); reset the envs that ended.

        Returns:
            Observations (after the reset for envs that ended), rewards (num_envs,), dones (num_envs,) as long,
            and extras with ``time_outs`` (num_envs,) bool and ``log``.
        """
        actions_np = actions.detach().to("cpu", torch.float32).numpy()
        obs = np.empty((self.num_envs, self.num_obs), dtype=np.float32)
        rewards = np.empty(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        finished_returns: list[float] = []
        finished_lengths: list[int] = []
        self.episode_length_buf += 1
        for i, env in enumerate(self.envs):
            ob, reward, term, trunc, info = env.step(actions_np[i])
            rewards[i] = reward
            self._episode_return[i] += reward
            if term or trunc:
                terminated[i], truncated[i] = term, trunc and not term
                finished_returns.append(float(self._episode_return[i]))
                finished_lengths.append(int(self.episode_length_buf[i]))
                self._episode_return[i] = 0.0
                self.episode_length_buf[i] = 0
                # SafeStep already reset an env it recovered and returned the new episode's first observation.
                if not info.get("safe_step", {}).get("reset", False):
                    ob, _ = env.reset()
            obs[i] = ob
        self._obs = obs
        if self.recorder is not None:
            self.recorder.advance(self.num_envs)
        log: dict[str, torch.Tensor] = {}
        if finished_returns:
            log["Episode/return"] = torch.tensor(finished_returns)
            log["Episode/length"] = torch.tensor(finished_lengths, dtype=torch.float32)
        dones = torch.from_numpy(terminated | truncated).to(self.device, torch.long)
        extras = {"time_outs": torch.from_numpy(truncated).to(self.device), "log": log}
        return self._as_tensordict(obs), torch.from_numpy(rewards).to(self.device), dones, extras

    def safety_counters(self) -> dict[str, int]:
        """Cumulative SafeStep counters, summed over envs (zeros when the envs are not wrapped)."""
        return sum_counters(self.envs)

    def faults_injected(self) -> dict[str, int]:
        """Cumulative injected-fault counts per armed kind, summed over envs (empty without a drill)."""
        return sum_injected(self.envs)

    def set_iteration(self, iteration: int) -> None:
        """Tell the incident recorder (if any) that the coming rollout belongs to training iteration ``iteration``
        (the runner calls this before each rollout; ``model_<iteration>.pt`` is saved after it)."""
        if self.recorder is not None:
            self.recorder.set_context(iteration=iteration)

    def close(self) -> None:
        """Close every env (frees their physics clients)."""
        for env in self.envs:
            env.close()

    def _as_tensordict(self, obs: np.ndarray) -> TensorDict:
        # A fresh array is made every step and never written again, so the tensor may share its memory.
        tensor = torch.from_numpy(obs).to(self.device)
        return TensorDict({"policy": tensor}, batch_size=[self.num_envs], device=self.device)

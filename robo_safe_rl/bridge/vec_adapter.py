"""N gymnasium envs stepped in lock-step, presented to rsl-rl as its ``VecEnv``.

The adapter is deliberately thin, so that its cost stays close to the simulator's own stepping rate: one
tensor-to-numpy conversion of the actions, one step of the env batch (:mod:`robo_safe_rl.bridge.env_batch`: the
envs in this process or in worker processes), one observation array per step. Episodes are reset in place when they
end (gymnasium's terminated / truncated), and the step reports

- ``dones`` = terminated or truncated (``torch.long``, as Isaac Lab's wrapper does),
- ``extras["time_outs"]`` = truncated and not terminated, so rsl-rl bootstraps the value of time-limited episodes,
- ``extras["log"]`` = the return and length of the episodes that ended in this step (rsl-rl's logger averages them
  over the iteration and writes ``Episode/return`` and ``Episode/length``), and for a task that reports named reward
  terms (``reward_terms`` on the env, ``info["reward_terms"]`` per step) each term's episode sum as
  ``Episode_Reward/<term>``, divided by the maximum episode length in seconds when the task gives its ``step_dt``
  (as Isaac Lab's ``RewardManager`` does, so a term that paid its full weight every second logs its weight), and for
  a task that reports metrics (``metric_names`` on the env, ``info["metrics"]`` per step: the A1's tracking errors)
  each one's mean over the episode's steps as ``Metrics/<name>``: the figure ``tools/evaluate.py`` reports per
  episode, here of the training episodes (Isaac Lab logs ``Metrics/base_velocity/<name>``, the episode's sum over the
  steps of one command period). Steps that reported none (ended by SafeStep) do not count.

Observations are a TensorDict with one group, ``policy`` (used by actor and critic). On a CUDA device, observations,
rewards, dones and time-outs travel in one host-to-device copy per step (one packed buffer, sliced on the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from robo_safe_rl.bridge.env_batch import EnvBatch, LocalEnvBatch
from robo_safe_rl.errors import ConfigError


class GymVecEnv(VecEnv):
    """rsl-rl ``VecEnv`` over gymnasium envs with flat Box spaces.

    Args:
        envs: The envs, all of the same task (possibly wrapped in SafeStep), or a batch that hosts them
            (:class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch`). The adapter owns and closes them.
        seed: Env ``i`` is first reset with ``seed + i``.
        device: Device of the returned tensors (the envs are on the CPU).
        cfg: Anything to store as ``env.cfg`` (rsl-rl logs it with the run).
        recorder: With a list of envs: the incident recorder shared by their SafeStep wrappers, told the iteration of
            each rollout (a batch keeps its own).
        packed: Hand over each step's observations, rewards, dones and time-outs in one host-to-device copy of one
            packed buffer, sliced on the device; ``None`` (default): when ``device`` is not the CPU.

    Raises:
        ConfigError: If there is no env or the spaces are not flat Boxes of one shape.
    """

    def __init__(
        self,
        envs: Sequence[gym.Env] | EnvBatch,
        seed: int = 0,
        device: str = "cpu",
        cfg: dict | None = None,
        recorder: Any = None,
        packed: bool | None = None,
    ) -> None:
        if isinstance(envs, Sequence):
            if len(envs) == 0:
                raise ConfigError("GymVecEnv needs at least one env, got an empty list")
            envs = LocalEnvBatch(envs, recorder)
        infos = envs.infos
        for i, info in enumerate(infos):
            for name, space in (("observation", info.observation_space), ("action", info.action_space)):
                if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                    raise ConfigError(f"env {i}: GymVecEnv requires a flat Box {name} space, got {space}")
            for name in ("observation_space", "action_space"):
                shape, first = getattr(info, name).shape, getattr(infos[0], name).shape
                if shape != first:
                    what = name.split("_")[0]
                    raise ConfigError(f"env {i}: {what} shape {shape} differs from env 0's {first}")
        self.batch: EnvBatch = envs
        self.num_envs = len(infos)
        self.num_actions = int(infos[0].action_space.shape[0])
        self.num_obs = int(infos[0].observation_space.shape[0])
        self.max_episode_length = infos[0].max_episode_steps or 1_000_000
        #: The task's left-right mirror (``observation_mirror`` / ``action_mirror`` on its env), or None: what
        #: symmetry augmentation reflects (:mod:`robo_safe_rl.training.symmetry`).
        self.mirror = infos[0].mirror
        self.device = device
        self.cfg = cfg if cfg is not None else {}
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self._episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self._term_names = infos[0].reward_terms
        self._episode_terms = np.zeros((self.num_envs, len(self._term_names)), dtype=np.float64)
        self._metric_names = infos[0].metric_names
        self._episode_metrics = np.zeros((self.num_envs, len(self._metric_names)), dtype=np.float64)
        self._metric_steps = np.zeros((self.num_envs, len(self._metric_names)), dtype=np.int64)
        step_dt = infos[0].step_dt
        # Isaac Lab's divisor, max_episode_length_s; a task without a step length logs plain episode sums.
        self._term_divisor = self.max_episode_length * step_dt if step_dt else 1.0
        # One packed host buffer per step for a device other than the CPU: [obs | rewards | dones | time-outs].
        self._staging: torch.Tensor | None = None
        if packed if packed is not None else torch.device(device).type != "cpu":
            size = self.num_envs * (self.num_obs + 3)
            self._staging = torch.empty(size, dtype=torch.float32, pin_memory=torch.cuda.is_available())
        self._obs = self.batch.reset(seed)

    def get_observations(self) -> TensorDict:
        """Return the current observations. Shape of ``policy``: (num_envs, num_obs)."""
        if self._staging is None:
            return self._as_tensordict(torch.from_numpy(self._obs))
        return self._as_tensordict(torch.from_numpy(self._obs).to(self.device))

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Step every env with its row of ``actions`` (shape: (num_envs, num_actions)); reset the envs that ended.

        Returns:
            Observations (after the reset for envs that ended), rewards (num_envs,), dones (num_envs,) as long,
            and extras with ``time_outs`` (num_envs,) bool and ``log``.
        """
        actions_np = actions.detach().to("cpu", torch.float32).numpy()
        self.episode_length_buf += 1
        out = self.batch.step(actions_np)
        # Summed in float64 from the rewards as the envs returned them, as one would per env.
        self._episode_return += out.rewards
        if self._term_names:
            self._episode_terms += out.terms
        if self._metric_names:
            reported = ~np.isnan(out.metrics)
            self._episode_metrics += np.where(reported, out.metrics, 0.0)
            self._metric_steps += reported
        ended = out.terminated | out.truncated
        truncated = out.truncated & ~out.terminated
        log: dict[str, torch.Tensor] = {}
        finished = np.flatnonzero(ended)
        if finished.size:
            rows = torch.from_numpy(finished)
            log["Episode/return"] = torch.from_numpy(self._episode_return[finished]).to(torch.float32)
            log["Episode/length"] = self.episode_length_buf[rows].to(torch.float32)
            self._episode_return[finished] = 0.0
            for j, name in enumerate(self._term_names):
                sums = self._episode_terms[finished, j] / self._term_divisor
                log[f"Episode_Reward/{name}"] = torch.from_numpy(sums).to(torch.float32)
            self._episode_terms[finished] = 0.0
            for j, name in enumerate(self._metric_names):
                steps = self._metric_steps[finished, j]
                means = self._episode_metrics[finished, j][steps > 0] / steps[steps > 0]
                if means.size:
                    log[f"Metrics/{name}"] = torch.from_numpy(means).to(torch.float32)
            self._episode_metrics[finished] = 0.0
            self._metric_steps[finished] = 0
            self.episode_length_buf[rows] = 0
        self._obs = out.obs
        rewards = out.rewards.astype(np.float32)
        if self._staging is None:
            # The batch makes fresh arrays every step and never writes them again: the tensors may share their memory.
            obs, rewards_t = torch.from_numpy(out.obs), torch.from_numpy(rewards)
            dones, time_outs = torch.from_numpy(ended).to(torch.long), torch.from_numpy(truncated)
        else:
            obs, rewards_t, dones, time_outs = self._to_device(out.obs, rewards, ended, truncated)
        extras = {"time_outs": time_outs, "log": log}
        return self._as_tensordict(obs), rewards_t, dones, extras

    def safety_counters(self) -> dict[str, int]:
        """Cumulative SafeStep counters, summed over envs (zeros when the envs are not wrapped), and the worker
        processes' ``worker_crashes`` / ``worker_restarts``."""
        return self.batch.safety_counters()

    def faults_injected(self) -> dict[str, int]:
        """Cumulative injected-fault counts per armed kind, summed over envs (empty without a drill)."""
        return self.batch.faults_injected()

    def set_iteration(self, iteration: int) -> None:
        """Tell the incident recorder(s) that the coming rollout belongs to training iteration ``iteration``
        (the runner calls this before each rollout; ``model_<iteration>.pt`` is saved after it)."""
        self.batch.set_iteration(iteration)

    def close(self) -> None:
        """Close every env (frees their physics clients, stops their worker processes)."""
        self.batch.close()

    def _to_device(
        self, obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray, time_outs: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pack the step's outputs into the staging buffer, copy it to the device once, and slice it there."""
        n, size = self.num_envs, obs.size
        staging = self._staging.numpy()
        staging[:size] = obs.reshape(-1)
        staging[size : size + n] = rewards
        staging[size + n : size + 2 * n] = dones
        staging[size + 2 * n :] = time_outs
        packed = self._staging.to(self.device)
        return (
            packed[:size].view(n, self.num_obs),
            packed[size : size + n],
            packed[size + n : size + 2 * n].to(torch.long),
            packed[size + 2 * n :].to(torch.bool),
        )

    def _as_tensordict(self, obs: torch.Tensor) -> TensorDict:
        return TensorDict({"policy": obs}, batch_size=[self.num_envs], device=self.device)

"""A tiny deterministic rsl-rl ``VecEnv`` on torch alone, for trainings that must run in seconds."""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

OBS, ACT = 4, 2


class TinyEnv(VecEnv):
    """A damped point in R^4 pushed by tanh(action) on its first two axes; reward -|x|^2 (times ``reward_scale``);
    episodes of 10 steps."""

    def __init__(self, seed: int, num_envs: int = 4, reward_scale: float = 1.0) -> None:
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, ACT, 10
        self.device, self.cfg = "cpu", {}
        self.reward_scale = reward_scale
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self._gen = torch.Generator().manual_seed(seed)
        self._x = torch.randn(num_envs, OBS, generator=self._gen)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self._x.clone()}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        push = torch.zeros_like(self._x)
        push[:, :ACT] = torch.tanh(actions)
        self._x = 0.9 * self._x + 0.1 * push
        reward = -self._x.square().sum(dim=1) * self.reward_scale
        self.episode_length_buf += 1
        done = self.episode_length_buf >= self.max_episode_length
        self._x[done] = torch.randn(int(done.sum()), OBS, generator=self._gen)
        self.episode_length_buf[done] = 0
        return self.get_observations(), reward, done.float(), {"time_outs": done.float()}


def train_cfg(algorithm: dict[str, Any], epochs: int = 2, mini_batches: int = 2) -> dict[str, Any]:
    """rsl-rl's runner dict for SafePPO on :class:`TinyEnv` (8 steps per env, MLPs of 16 x 16); ``algorithm`` holds
    SafePPO's extra keys (``grad_guard``, ``grad_faults``, ``dump_dir``)."""
    gauss = {"class_name": "rsl_rl.modules.distribution:GaussianDistribution", "init_std": 1.0}
    return {
        "num_steps_per_env": 8,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "robo_safe_rl.training.ppo:SafePPO",
            "num_learning_epochs": epochs,
            "num_mini_batches": mini_batches,
            **algorithm,
        },
        "actor": {"class_name": "rsl_rl.models:MLPModel", "hidden_dims": [16, 16], "distribution_cfg": gauss},
        "critic": {"class_name": "rsl_rl.models:MLPModel", "hidden_dims": [16, 16]},
    }

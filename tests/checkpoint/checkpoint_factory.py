"""Real rsl-rl 5.5 checkpoints, made by a short PPO training on random observations, and their known layout."""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.algorithms import PPO
from rsl_rl.models import MLPModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

NUM_ENVS, NUM_STEPS, OBS_DIM, ACT_DIM = 8, 4, 5, 3
HIDDEN = [8, 8]
# Tensors of the checkpoint below, in file order.
# actor_state_dict: obs_normalizer._mean/_var/_std/count, distribution.std_param, mlp.{0,2,4}.{weight,bias} = 11
# critic_state_dict: obs_normalizer._mean/_var/_std/count, mlp.{0,2,4}.{weight,bias}                          = 10
# optimizer_state_dict/state/<0..12>/{step,exp_avg,exp_avg_sq}: 13 parameters (7 actor, 6 critic) x 3         = 39
ACTOR_TENSORS, CRITIC_TENSORS, OPTIMIZER_TENSORS = 11, 10, 39
ALL_TENSORS = ACTOR_TENSORS + CRITIC_TENSORS + OPTIMIZER_TENSORS


def train_rsl_checkpoint(iterations: int = 2, seed: int = 0) -> dict[str, Any]:
    """Run ``iterations`` PPO updates (rollouts of random observations and rewards) and return rsl-rl's save dict.

    The dict is what ``OnPolicyRunner.save`` writes: ``{**alg.save(), "iter": it, "infos": None}``. Both networks
    normalise observations, so normaliser buffers are in it, and Adam's moments exist after the first update.
    """
    torch.manual_seed(seed)
    obs = TensorDict({"policy": torch.randn(NUM_ENVS, OBS_DIM)}, batch_size=[NUM_ENVS])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    distribution = {"class_name": "GaussianDistribution", "init_std": 1.0}
    actor = MLPModel(obs, groups, "actor", ACT_DIM, HIDDEN, obs_normalization=True, distribution_cfg=distribution)
    critic = MLPModel(obs, groups, "critic", 1, HIDDEN, obs_normalization=True)
    storage = RolloutStorage("rl", NUM_ENVS, NUM_STEPS, obs, [ACT_DIM], "cpu")
    alg = PPO(actor, critic, storage, num_learning_epochs=1, num_mini_batches=2)
    for _ in range(iterations):
        for _ in range(NUM_STEPS):
            alg.act(obs)
            obs = TensorDict({"policy": torch.randn(NUM_ENVS, OBS_DIM)}, batch_size=[NUM_ENVS])
            alg.process_env_step(obs, torch.randn(NUM_ENVS), torch.zeros(NUM_ENVS, dtype=torch.bool), {})
        alg.compute_returns(obs)
        alg.update()
    return {**alg.save(), "iter": iterations, "infos": None}

"""Every locomotion task against pybullet_envs, its reference: the same observations step by step, and the same
episode statistics under zero and random actions (so published pybullet_envs scores compare).

The reference runs unchanged from the pybullet_envs that ships with PyBullet (see ``reference_envs.py``). Episodes are
seeded alike, so both start from the same initial state.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from reference_envs import REFERENCE_CLASSES, make_reference

import robosafe_tasks  # noqa: F401  (registers the ids)

TASKS = sorted(REFERENCE_CLASSES)
#: The reference's episodes have no time limit of their own; its registrations add 1000 steps, as ours.
MAX_STEPS = 1000


def action_size(task_id: str) -> int:
    env = gymnasium.make(task_id)
    env.close()
    return env.action_space.shape[0]


def run_episode(task_id: str, seed: int, actions: np.ndarray, *, reference: bool) -> tuple[np.ndarray, np.ndarray]:
    """Observations (T + 1, obs_dim) and rewards (T,) of one seeded episode: until it ends or the actions run out."""
    if reference:
        env, obs = make_reference(task_id, seed)
    else:
        env = gymnasium.make(task_id).unwrapped
        obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    try:
        for action in actions:
            if reference:
                obs, reward, done, _ = env.step(action)
            else:
                obs, reward, done, _, _ = env.step(action)
            observations.append(obs)
            rewards.append(reward)
            if done:
                break
    finally:
        env.close()
    return np.array(observations), np.array(rewards)


@pytest.mark.parametrize("task_id", TASKS)
def test_observations_are_the_references_bit_for_bit(task_id: str) -> None:
    # float64 actions: the reference forms each torque as float(power * power_coef) * float(clip(a)) in float64. The
    # same torques give the same engine calls, so every observation is identical to the bit, termination included;
    # rewards agree to ~1e-7 (the reference multiplies float32 arrays in its costs, the tasks use float64).
    n = action_size(task_id)
    actions = np.random.default_rng(7).uniform(-1.0, 1.0, (150, n))
    ref_obs, ref_rewards = run_episode(task_id, 4, actions, reference=True)
    obs, rewards = run_episode(task_id, 4, actions, reference=False)
    np.testing.assert_array_equal(obs, ref_obs)
    np.testing.assert_allclose(rewards, ref_rewards, rtol=0, atol=1e-6)


def episode_statistics(task_id: str, kind: str, seeds: range, *, reference: bool) -> tuple[float, float]:
    """Mean return and mean length over one episode per seed, under zero or uniform random float32 actions."""
    n = action_size(task_id)
    returns, lengths = [], []
    for seed in seeds:
        if kind == "zero":
            actions = np.zeros((MAX_STEPS, n), dtype=np.float32)
        else:  # float32, as a policy's actions come
            actions = np.random.default_rng(seed).uniform(-1.0, 1.0, (MAX_STEPS, n)).astype(np.float32)
        _, rewards = run_episode(task_id, seed, actions, reference=reference)
        returns.append(rewards.sum())
        lengths.append(len(rewards))
    return float(np.mean(returns)), float(np.mean(lengths))


# 1000-step episodes (the Ant under random actions, the HalfCheetah always) take ~3 s each with the reference: slow.
STATISTICS_CASES = [
    pytest.param(task_id, kind, marks=pytest.mark.slow if long else (), id=f"{task_id.split('/')[1]}-{kind}")
    for task_id in TASKS
    for kind in ("zero", "random")
    for long in [task_id == "RoboSafe/HalfCheetah-v0" or (task_id == "RoboSafe/Ant-v0" and kind == "random")]
]


@pytest.mark.parametrize(("task_id", "kind"), STATISTICS_CASES)
def test_episode_statistics_match_the_reference(task_id: str, kind: str) -> None:
    # Measured: zero actions give identical episodes; random float32 actions give identical episodes where the torque
    # scale differs per joint (float64 torques, as the reference's), and for the Ant and the Hopper, whose one scale
    # multiplies the float32 action in float32, episodes that part after ~100 steps (the Ant's mean return over these
    # 3 seeds: 431.4 reference, 435.1 here; lengths 854 and 858). Over 3 episodes the means agree within 5%.
    ref_return, ref_length = episode_statistics(task_id, kind, range(3), reference=True)
    mean_return, mean_length = episode_statistics(task_id, kind, range(3), reference=False)
    assert mean_length == pytest.approx(ref_length, rel=0.05)
    assert mean_return == pytest.approx(ref_return, rel=0.05)

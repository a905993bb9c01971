"""The rsl-rl vector adapter: shapes, dtypes, resets, time-outs and episode logs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from worker_helpers import spec

from robo_safe_rl.bridge.env_factory import TaskEnvFactory
from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig
from robo_safe_rl.errors import ConfigError


def make_pendulums(n: int, max_episode_steps: int = 200) -> list[gym.Env]:
    return [gym.make("Pendulum-v1", max_episode_steps=max_episode_steps) for _ in range(n)]


def test_shapes_and_dtypes() -> None:
    vec = GymVecEnv(make_pendulums(3), seed=5)
    obs = vec.get_observations()
    assert isinstance(obs, TensorDict)
    assert obs["policy"].shape == (3, 3) and obs["policy"].dtype == torch.float32
    assert (vec.num_envs, vec.num_actions, vec.max_episode_length) == (3, 1, 200)
    obs, rewards, dones, extras = vec.step(torch.zeros(3, 1))
    assert obs["policy"].shape == (3, 3)
    assert rewards.shape == (3,) and rewards.dtype == torch.float32
    assert dones.shape == (3,) and dones.dtype == torch.long
    assert extras["time_outs"].shape == (3,) and extras["time_outs"].dtype == torch.bool
    assert extras["log"] == {}
    vec.close()


def test_first_observation_follows_the_seed() -> None:
    # Pendulum's reset draws theta and theta_dot from np_random: the same seed gives the same start, env i uses seed+i.
    a = GymVecEnv(make_pendulums(2), seed=11).get_observations()["policy"]
    b = GymVecEnv(make_pendulums(2), seed=11).get_observations()["policy"]
    single, _ = gym.make("Pendulum-v1").reset(seed=12)
    assert torch.equal(a, b)
    np.testing.assert_array_equal(a[1].numpy(), single.astype(np.float32))


def test_truncation_is_a_time_out_with_episode_log() -> None:
    vec = GymVecEnv(make_pendulums(2, max_episode_steps=3), seed=0)
    # The logged return of an episode is the sum of the rewards the adapter returned during it.
    expected = torch.zeros(2)
    for _ in range(3):
        _, rewards, dones, extras = vec.step(torch.zeros(2, 1))
        expected += rewards
    assert dones.tolist() == [1, 1]
    assert extras["time_outs"].tolist() == [True, True]
    torch.testing.assert_close(extras["log"]["Episode/return"], expected, rtol=0, atol=1e-5)
    assert extras["log"]["Episode/length"].tolist() == [3.0, 3.0]
    assert vec.episode_length_buf.tolist() == [0, 0]
    # After the automatic reset the next step starts a new episode.
    _, _, dones, extras = vec.step(torch.zeros(2, 1))
    assert dones.tolist() == [0, 0] and vec.episode_length_buf.tolist() == [1, 1]


@pytest.mark.parametrize(
    ("envs", "message"),
    [
        ([], "at least one env"),
        ([gym.make("CartPole-v1")], "flat Box action space"),
    ],
)
def test_rejects_unusable_envs(envs: list[gym.Env], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GymVecEnv(envs)


class Faller(gym.Env):
    """Terminates (the robot fell) at its 2nd step; the TimeLimit around it would truncate at the 5th."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(3, self.t, np.float32) / 10, 1.0, self.t == 2, False, {}


def test_termination_is_not_a_time_out() -> None:
    # A terminated episode must not be bootstrapped: time_outs stays False even when it ends in the same step the
    # time limit would have (rsl-rl adds gamma * V(s) to the reward of time-outs only).
    vec = GymVecEnv([gym.wrappers.TimeLimit(Faller(), 2), gym.wrappers.TimeLimit(Faller(), 5)], seed=0)
    vec.step(torch.zeros(2, 1))
    _, _, dones, extras = vec.step(torch.zeros(2, 1))
    assert dones.tolist() == [1, 1]
    assert extras["time_outs"].tolist() == [False, False]
    assert extras["log"]["Episode/return"].tolist() == [2.0, 2.0]


def test_no_second_reset_after_safe_step_recovered(make_fault_env) -> None:
    from robo_safe_rl.bridge.safe_step import SafeStep

    inner = make_fault_env({2: "nan_obs"})
    vec = GymVecEnv([SafeStep(inner)], seed=0)  # reset 1
    vec.step(torch.zeros(1, 2))
    obs, _, dones, _ = vec.step(torch.zeros(1, 2))  # SafeStep ends the episode and resets (reset 2)
    assert dones.tolist() == [1] and torch.isfinite(obs["policy"]).all()
    assert inner.resets == 2  # the adapter did not reset it a third time
    assert vec.safety_counters()["nonfinite_obs"] == 1


def test_rejects_mismatched_shapes() -> None:
    with pytest.raises(ConfigError, match="observation shape"):
        GymVecEnv([gym.make("Pendulum-v1"), gym.make("MountainCarContinuous-v0")])


def test_packed_hand_over_gives_the_same_tensors() -> None:
    # The one host-to-device copy per step of a CUDA run, exercised on the CPU: packing and slicing change nothing.
    plain = GymVecEnv(make_pendulums(3, max_episode_steps=4), seed=2)
    packed = GymVecEnv(make_pendulums(3, max_episode_steps=4), seed=2, packed=True)
    assert torch.equal(plain.get_observations()["policy"], packed.get_observations()["policy"])
    for t in range(5):
        actions = torch.full((3, 1), 0.5 * t - 1.0)
        a, b = plain.step(actions), packed.step(actions)
        assert torch.equal(a[0]["policy"], b[0]["policy"]) and b[0]["policy"].is_contiguous()
        for x, y in ((a[1], b[1]), (a[2], b[2]), (a[3]["time_outs"], b[3]["time_outs"])):
            assert x.dtype == y.dtype and torch.equal(x, y)
        # The 4-step limit truncates every episode at the 4th step: dones and time-outs both set there only.
        assert b[2].tolist() == [int(t == 3)] * 3 and b[3]["time_outs"].tolist() == [t == 3] * 3


def test_metrics_are_logged_as_their_episode_means() -> None:
    # A point mass pushed by a constant 0.5 on both axes gains 0.05 per step on each: after step k of its episode its
    # speed is 0.05 sqrt(2) k, so over 50 steps the mean speed is 0.05 sqrt(2) * 25.5 and the mean step number 25.5.
    # Accelerated from rest again in its second episode, it logs the same means: nothing carries over.
    vec = GymVecEnv([gym.make(spec("MeteredEnv")) for _ in range(2)], seed=0)
    for _ in range(2):
        for step in range(50):
            _, _, dones, extras = vec.step(torch.full((2, 2), 0.5))
            if step < 49:
                assert not any(name.startswith("Metrics/") for name in extras["log"])
        assert dones.tolist() == [1, 1]
        torch.testing.assert_close(extras["log"]["Metrics/episode_step"], torch.tensor([25.5, 25.5]))
        torch.testing.assert_close(extras["log"]["Metrics/speed"], torch.full((2,), 0.05 * 2**0.5 * 25.5))
    vec.close()


def test_a_step_safestep_ended_does_not_count_in_the_metrics() -> None:
    # Injected physics errors (the fire drill) end episodes part way: SafeStep's recovered step returns the next
    # episode's first observation and info, which holds no metrics. An episode of L steps whose last one failed logs
    # the mean step number of steps 1 .. L-1, L / 2; one that ran to its time limit, (L + 1) / 2.
    factory = TaskEnvFactory(
        spec("MeteredEnv"), step=SafeStepConfig(), faults=EnvFaultConfig(physics_error=0.05, seed=3)
    )
    vec = GymVecEnv([factory(i) for i in range(4)], seed=0)
    failed = timed_out = 0
    for _ in range(200):
        _, _, dones, extras = vec.step(torch.zeros(4, 2))
        if not dones.any():
            continue
        lengths = extras["log"]["Episode/length"].tolist()
        time_outs = extras["time_outs"][dones.bool()].tolist()
        expected = [(n + 1) / 2 if t else n / 2 for n, t in zip(lengths, time_outs, strict=True) if t or n > 1]
        assert extras["log"].get("Metrics/episode_step", torch.zeros(0)).tolist() == expected
        failed += sum(not t for t in time_outs)
        timed_out += sum(time_outs)
    assert failed > 0 and timed_out > 0
    vec.close()

"""The tensor-level guard around an rsl-rl VecEnv: actions, observation rows, rewards, records; CPU and CUDA."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from robo_safe_rl.bridge.incidents import IncidentRecorder, load_incident_arrays, read_incidents
from robo_safe_rl.bridge.tensor_guard import GuardedVecEnv, sanitize_action_tensor
from robo_safe_rl.config.safe_step import TensorGuardConfig
from robo_safe_rl.errors import ConfigError

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


class PointMassVecEnv(VecEnv):
    """N point masses on one device, as an Isaac Lab env would be; faults per step as {step: [(kind, row)]}.

    Observation groups: ``policy`` (N, 4) = state, ``critic`` (N, 5) = state and the step count.
    """

    def __init__(self, num_envs: int = 6, device: str = "cpu", faults: dict | None = None) -> None:
        self.num_envs, self.num_actions, self.device = num_envs, 2, device
        self.max_episode_length = 100
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.cfg = {"name": "point mass"}
        self.state = torch.zeros(num_envs, 4, device=device)
        self.faults = faults or {}
        self.steps = 0
        self.actions_seen: list[torch.Tensor] = []

    def get_observations(self) -> TensorDict:
        critic = torch.cat([self.state, torch.full((self.num_envs, 1), float(self.steps), device=self.device)], 1)
        return TensorDict({"policy": self.state.clone(), "critic": critic}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.steps += 1
        self.actions_seen.append(actions.clone())
        self.state[:, 2:] += 0.1 * actions
        self.state[:, :2] += 0.1 * self.state[:, 2:]
        obs = self.get_observations()
        rewards = torch.ones(self.num_envs, device=self.device)
        for kind, row in self.faults.get(self.steps, []):
            if kind == "nan_obs":
                obs["policy"][row, 1] = math.nan
            elif kind == "inf_critic":
                obs["critic"][row, 4] = math.inf
            elif kind == "nan_reward":
                rewards[row] = math.nan
        dones = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        return obs, rewards, dones, {"time_outs": torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)}


def test_sanitize_action_tensor_worked_example() -> None:
    # Bounds [-1, 1] x [-2, 2]: NaN -> 0, +Inf -> 2, -Inf -> -1, 5 -> 1 (clamped), 0.5 stays.
    actions = torch.tensor([[math.nan, math.inf], [-math.inf, 0.5], [5.0, -1.5]])
    low, high = torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0])
    clean, changed = sanitize_action_tensor(actions, low, high)
    torch.testing.assert_close(clean, torch.tensor([[0.0, 2.0], [-1.0, 0.5], [1.0, -1.5]]))
    assert changed.tolist() == [[True, True], [True, False], [True, False]]
    # Without bounds every non-finite component becomes 0 and finite ones stay, however large.
    clean, changed = sanitize_action_tensor(torch.tensor([[math.nan, 1e10, -math.inf]]), None, None)
    assert clean.tolist() == [[0.0, 1e10, 0.0]] and changed.tolist() == [[True, False, True]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("value", "applied"), [(math.nan, 0.0), (math.inf, 1.0), (-math.inf, -1.0)], ids=["nan", "+inf", "-inf"]
)
def test_actions_are_sanitised_counted_and_recorded(
    device: str, value: float, applied: float, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = PointMassVecEnv(device=device)
    guard = GuardedVecEnv(env, TensorGuardConfig(action_bound=1.0), recorder=recorder, env_id="PointMass")
    guard.get_observations()
    guard.step(torch.zeros(6, 2, device=device))
    actions = torch.full((6, 2), 0.25, device=device)
    actions[4, 1] = value
    actions[1, 0] = 3.0  # finite, clamped, no incident
    obs, rewards, _, _ = guard.step(actions)
    assert math.isnan(value) == bool(actions[4, 1].isnan()), "the caller's tensor must be left alone"
    seen = env.actions_seen[-1].cpu()
    assert seen[4].tolist() == [0.25, applied] and seen[1].tolist() == [1.0, 0.25]
    assert guard.counters == {
        "actions_sanitised": 2,
        "nonfinite_actions": 1,
        "nonfinite_obs": 0,
        "nonfinite_rewards": 0,
        "incidents_dropped": 0,
    }
    (record,) = read_incidents(run_dir / "incidents")
    assert (record["source"], record["kind"], record["env_index"], record["env_step"]) == (
        "tensor_guard",
        "nonfinite_action",
        4,
        2,
    )
    assert record["action"] == [0.25, applied] and record["env_id"] == "PointMass"
    assert record["obs_groups"] == ["critic", "policy"] and record["history_len"] == 2
    arrays = load_incident_arrays(run_dir / "incidents", record)
    assert arrays["history_obs.policy"].shape == (2, 4) and arrays["history_obs.critic"].shape == (2, 5)
    np.testing.assert_array_equal(arrays["history_actions"], [[0.0, 0.0], [0.25, applied]])
    assert str(obs["policy"].device).startswith(device) and rewards.shape == (6,)


@pytest.mark.parametrize("device", DEVICES)
def test_nonfinite_rows_are_zeroed_and_rewards_penalised(
    device: str, recorder: IncidentRecorder, run_dir: Path
) -> None:
    faults = {2: [("nan_obs", 1), ("inf_critic", 3), ("nan_reward", 3), ("nan_reward", 5)]}
    env = PointMassVecEnv(device=device, faults=faults)
    guard = GuardedVecEnv(env, TensorGuardConfig(penalty=-3.0), recorder=recorder)
    guard.get_observations()
    push = torch.full((6, 2), 0.5, device=device)
    guard.step(push)
    obs, rewards, dones, _ = guard.step(push)
    for group in ("policy", "critic"):
        assert bool(torch.isfinite(obs[group]).all())
        assert obs[group][[1, 3]].abs().sum().item() == 0.0  # the whole row, in every group
        assert obs[group][0].abs().sum().item() > 0.0
    assert rewards.cpu().tolist() == [1.0, 1.0, 1.0, -3.0, 1.0, -3.0]
    assert dones.cpu().tolist() == [0] * 6
    assert (guard.counters["nonfinite_obs"], guard.counters["nonfinite_rewards"]) == (2, 2)
    by_row = {r["env_index"]: r for r in read_incidents(run_dir / "incidents")}
    assert sorted(by_row) == [1, 3, 5]
    assert by_row[3]["kinds"] == ["nonfinite_obs", "nonfinite_reward"]
    assert by_row[3]["reason"] == "observation critic: 1 of 5 elements non-finite: [4]=inf; reward nan"
    assert by_row[1]["reason"] == "observation policy: 1 of 4 elements non-finite: [1]=nan"
    assert by_row[5]["kind"] == "nonfinite_reward" and by_row[5]["reward"] == "nan"


def test_get_observations_is_guarded_too(recorder: IncidentRecorder, run_dir: Path) -> None:
    env = PointMassVecEnv()
    env.state[2, 0] = math.nan
    guard = GuardedVecEnv(env, recorder=recorder)
    obs = guard.get_observations()
    assert bool(torch.isfinite(obs["policy"]).all()) and guard.counters["nonfinite_obs"] == 1
    (record,) = read_incidents(run_dir / "incidents")
    assert (record["phase"], record["env_index"], record["raw_action"]) == ("observe", 2, None)


def test_records_per_step_are_bounded(recorder: IncidentRecorder, run_dir: Path) -> None:
    env = PointMassVecEnv(num_envs=10, faults={1: [("nan_reward", row) for row in range(10)]})
    guard = GuardedVecEnv(env, recorder=recorder, max_records_per_step=4)
    guard.step(torch.zeros(10, 2))
    assert guard.counters["nonfinite_rewards"] == 10 and guard.counters["incidents_dropped"] == 6
    assert [r["env_index"] for r in read_incidents(run_dir / "incidents")] == [0, 1, 2, 3]


def test_clean_step_passes_the_env_tensors_through() -> None:
    env = PointMassVecEnv()
    guard = GuardedVecEnv(env)
    obs, rewards, dones, extras = guard.step(torch.zeros(6, 2))
    torch.testing.assert_close(obs["policy"], env.state, rtol=0, atol=0)
    assert rewards.tolist() == [1.0] * 6 and dones.tolist() == [0] * 6 and "time_outs" in extras
    assert guard.counters == dict.fromkeys(guard.counters, 0)


def test_vec_env_attributes_are_forwarded() -> None:
    env = PointMassVecEnv()
    guard = GuardedVecEnv(env)
    assert (guard.num_envs, guard.num_actions, guard.max_episode_length, guard.device) == (6, 2, 100, "cpu")
    assert guard.cfg == {"name": "point mass"} and guard.faults == {}
    guard.episode_length_buf = torch.randint_like(env.episode_length_buf, high=100)  # as rsl-rl's runner does
    assert guard.episode_length_buf is env.episode_length_buf
    assert isinstance(guard, VecEnv)


def test_bounds_are_checked() -> None:
    env = PointMassVecEnv()
    with pytest.raises(ConfigError, match="needs both action_low and action_high, or neither"):
        GuardedVecEnv(env, action_low=torch.zeros(2))
    with pytest.raises(ConfigError, match=r"action_high must be 2 finite values \(num_actions\), got \[1\.0, inf\]"):
        GuardedVecEnv(env, action_low=torch.zeros(2), action_high=torch.tensor([1.0, math.inf]))
    with pytest.raises(ConfigError, match=r"action_low \[0\.0, 3\.0\] exceeds action_high \[1\.0, 2\.0\]"):
        GuardedVecEnv(env, action_low=np.array([0.0, 3.0]), action_high=np.array([1.0, 2.0]))
    guard = GuardedVecEnv(env, action_low=np.array([-0.5, 0.0]), action_high=np.array([0.5, 1.0]))
    guard.step(torch.tensor([[math.inf, -math.inf]] * 6))
    assert env.actions_seen[-1][0].tolist() == [0.5, 0.0]


class NestedVecEnv(PointMassVecEnv):
    """Observations as nested groups, as some Isaac Lab tasks define them."""

    def get_observations(self) -> TensorDict:
        flat = super().get_observations()
        return TensorDict({"policy": {"pos": flat["policy"][:, :2], "vel": flat["policy"][:, 2:]}}, batch_size=[6])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        _, rewards, dones, extras = super().step(actions)
        obs = self.get_observations()
        if self.steps == 2:
            obs["policy", "vel"][0, 1] = math.nan
        return obs, rewards, dones, extras


def test_nested_observation_groups(recorder: IncidentRecorder, run_dir: Path) -> None:
    guard = GuardedVecEnv(NestedVecEnv(), recorder=recorder)
    guard.get_observations()
    guard.step(torch.ones(6, 2))
    obs, *_ = guard.step(torch.ones(6, 2))
    assert obs["policy", "vel"][0].tolist() == [0.0, 0.0] and obs["policy", "pos"][0].tolist() == [0.0, 0.0]
    assert obs["policy", "pos"][1].abs().sum().item() > 0
    (record,) = read_incidents(run_dir / "incidents")
    assert record["obs_groups"] == ["policy.pos", "policy.vel"]
    assert record["reason"] == "observation policy.vel: 1 of 2 elements non-finite: [1]=nan"
    arrays = load_incident_arrays(run_dir / "incidents", record)
    assert arrays["history_obs.policy.vel"].shape == (2, 2)

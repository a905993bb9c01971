"""Training through SafeRunner on a torch-native VecEnv (what an Isaac Lab user has) wrapped by GuardedVecEnv.

The env below is batched in torch and follows rsl-rl's ``VecEnv`` contract as Isaac Lab's ``RslRlVecEnvWrapper``
does: TensorDict observations, per-env episodes that reset themselves, ``dones`` and ``extras["time_outs"]``. It
writes NaN into observation rows and +Inf into rewards at chosen vector steps, as a blown-up simulation would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from robo_safe_rl.bridge.incidents import IncidentRecorder, read_incidents
from robo_safe_rl.bridge.tensor_guard import GuardedVecEnv
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.runner import SafeRunner

NUM_ENVS, STEPS_PER_ENV, ITERATIONS = 8, 8, 3


class ReachVecEnv(VecEnv):
    """Point masses in the plane, pushed by their actions towards the origin; one episode lasts 10 steps.

    Args:
        faults: ``{vector step (1-based): [(kind, row), ...]}`` with kind ``"nan_obs"`` or ``"inf_reward"``.
    """

    def __init__(self, faults: dict[int, list[tuple[str, int]]]) -> None:
        self.num_envs, self.num_actions, self.device = NUM_ENVS, 2, "cpu"
        self.max_episode_length = 10
        self.episode_length_buf = torch.zeros(NUM_ENVS, dtype=torch.long)
        self.cfg = {"task": "reach"}
        self.faults = faults
        self.steps = 0
        self.generator = torch.Generator().manual_seed(0)
        self.pos = torch.zeros(NUM_ENVS, 2)
        self.vel = torch.zeros(NUM_ENVS, 2)
        self._reset(torch.ones(NUM_ENVS, dtype=torch.bool))

    def _reset(self, rows: torch.Tensor) -> None:
        self.pos[rows] = torch.rand(int(rows.sum()), 2, generator=self.generator) * 2 - 1
        self.vel[rows] = 0.0
        self.episode_length_buf[rows] = 0

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": torch.cat([self.pos, self.vel], dim=1)}, batch_size=[NUM_ENVS])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        assert bool(torch.isfinite(actions).all()), "the guard lets no non-finite action through"
        self.steps += 1
        self.vel = 0.9 * self.vel + 0.1 * actions.clamp(-1.0, 1.0)
        self.pos = self.pos + 0.1 * self.vel
        rewards = -self.pos.norm(dim=1)
        self.episode_length_buf += 1
        dones = self.episode_length_buf >= self.max_episode_length
        self._reset(dones)
        obs = self.get_observations()
        for kind, row in self.faults.get(self.steps, []):
            if kind == "nan_obs":
                obs["policy"][row, 1] = float("nan")
            else:
                rewards[row] = float("inf")
        return obs, rewards, dones.long(), {"time_outs": dones.clone()}


def train_cfg() -> dict[str, Any]:
    """rsl-rl 5.5's runner dict, as an Isaac Lab agent config's ``to_dict()`` gives it, with SafePPO."""
    mlp = {"class_name": "MLPModel", "hidden_dims": [16, 16], "activation": "elu", "obs_normalization": True}
    return {
        "num_steps_per_env": STEPS_PER_ENV,
        "save_interval": 1,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "logger": "tensorboard",
        "algorithm": {"class_name": "robo_safe_rl.training.ppo:SafePPO", "num_mini_batches": 2},
        "actor": {**mlp, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": mlp,
    }


def test_safe_runner_trains_on_a_guarded_torch_vec_env(tmp_path: Path) -> None:
    # 3 iterations x 8 steps = vector steps 1..24. Injected: NaN observations in rows 2 and 5 at step 3 and row 2 at
    # step 17 (iteration 2); +Inf rewards in row 7 at steps 5 and 9 (iterations 0 and 1) and row 5 at step 3 (the
    # same row as a bad observation: one record with two kinds). Rows counted: 3 obs, 3 rewards; records: 5.
    faults = {3: [("nan_obs", 2), ("nan_obs", 5), ("inf_reward", 5)], 5: [("inf_reward", 7)], 9: [("inf_reward", 7)]}
    faults[17] = [("nan_obs", 2)]
    run = RunDir(tmp_path / "run")
    run_dir = run.root
    guard = GuardedVecEnv(ReachVecEnv(faults), recorder=IncidentRecorder(run.incidents_dir()), env_id="Reach")
    runner = SafeRunner(guard, train_cfg(), str(run_dir), "cpu", files=run)
    runner.learn(ITERATIONS)

    assert guard.counters == {
        "actions_sanitised": 0,
        "nonfinite_actions": 0,
        "nonfinite_obs": 3,
        "nonfinite_rewards": 3,
        "incidents_dropped": 0,
    }
    # The guard's counters are what SafeRunner reports (Safety/* in TensorBoard, summary.json's safety).
    safety = runner.safety_counters()
    assert safety["nonfinite_obs"] == 3 and safety["nonfinite_rewards"] == 3 and safety["rollbacks"] == 0
    records = read_incidents(run.incidents_dir())
    assert [(r["iteration"], r["global_step"], r["env_index"], r["kinds"]) for r in records] == [
        (0, 16, 2, ["nonfinite_obs"]),
        (0, 16, 5, ["nonfinite_obs", "nonfinite_reward"]),
        (0, 32, 7, ["nonfinite_reward"]),
        (1, 64, 7, ["nonfinite_reward"]),
        (2, 128, 2, ["nonfinite_obs"]),
    ]
    assert all(r["source"] == "tensor_guard" and r["env_id"] == "Reach" for r in records)
    # No NaN reached the policy (rsl-rl's check would have stopped the run) and every checkpoint is finite.
    saved = run.checkpoints()
    assert [p.name for p in saved] == ["model_0.pt", "model_1.pt", "model_2.pt"]
    for path in saved:
        actor = torch.load(path, weights_only=True)["actor_state_dict"]
        assert all(bool(torch.isfinite(t).all()) for t in actor.values())
    json.dumps(records, allow_nan=False)

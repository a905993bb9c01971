"""The two returns of rsl-rl's iteration block, on a worked example: ``Mean reward`` averages the last 100 episodes
that ended (across iterations and rollbacks), ``Episode/return`` the episodes that ended in this iteration; both are
the env's rewards, before ``runner.reward_clip``. README's "Two returns in each iteration block" says the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from tiny_env import train_cfg

from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.config.recovery import PolicyFaultConfig
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.runner import SafeRunner

README = Path(__file__).resolve().parents[2] / "README.md"
EPISODE = 5  # steps per episode, and per rollout: every env ends exactly one episode in each iteration
ENVS = 20


class CountingEnv(gym.Env[np.ndarray, np.ndarray]):
    """Pays ``k`` per step during its ``k``-th episode, whatever the action: episode ``k`` returns ``5 k``."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.episode = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode += 1
        return np.zeros(4, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(4, np.float32), float(self.episode), False, False, {}


def printed(text: str, label: str) -> list[float]:
    """The value of ``label`` in each iteration block rsl-rl printed (``nan`` for a block without it)."""
    blocks = text.split("Learning iteration")[1:]
    found = [re.search(rf"^\s*{re.escape(label)}:\s+(\S+)", block, re.MULTILINE) for block in blocks]
    return [float(m.group(1)) if m else float("nan") for m in found]


def test_mean_reward_is_a_window_of_100_episodes_and_episode_return_this_iterations_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = GymVecEnv([gym.wrappers.TimeLimit(CountingEnv(), EPISODE) for _ in range(ENVS)], seed=0)
    cfg = {**train_cfg({}), "num_steps_per_env": EPISODE, "reward_clip": 1.0}  # PPO sees at most 1 per step
    runner = SafeRunner(
        env,
        cfg,
        log_dir=str(tmp_path),
        device="cpu",
        policy_faults=PolicyFaultConfig(nonfinite_weights_after_update=[2]),  # iteration 2 is rolled back, repeated
        files=RunDir(tmp_path),
    )
    runner.learn(num_learning_iterations=5)
    out = capsys.readouterr().out
    # Worked example. Each iteration every env ends one episode, its k-th, returning 5 k (unclipped: the clip of 1
    # applies to what PPO learns from, not to what is logged). Iterations 0, 1 end episodes 1, 2 (returns 5, 10); the
    # first attempt at iteration 2 ends episode 3 (15) and is rolled back; iteration 2 then ends episode 4 (20),
    # 3 ends 5 (25), 4 ends 6 (30).
    # Episode/return, the episodes of the iteration (those of the discarded rollout dropped): 5, 10, 20, 25, 30.
    assert printed(out, "Episode/return") == [5.0, 10.0, 20.0, 25.0, 30.0]
    # Mean reward, the last 100 episodes that ended (20 per iteration, the discarded rollout's included):
    # 5; (5+10)/2; (5+10+15+20)/4; (5+10+15+20+25)/5; (10+15+20+25+30)/5, the 20 episodes of return 5 out of the window.
    assert printed(out, "Mean reward") == [5.0, 7.5, 12.5, 15.0, 20.0]
    assert runner.safety_counters()["rollbacks"] == 1
    # summary.json's return_first / return_last are the Episode/return figure.
    assert [h.mean_return for h in runner.logger.history] == [5.0, 10.0, 20.0, 25.0, 30.0]
    env.close()


def test_readme_says_which_return_is_which() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    section = text.split("### Two returns in each iteration block", 1)[1].split("##", 1)[0]
    for claim in (
        "`Mean reward`",
        "`Episode/return`",
        "the last 100 episodes that ended",
        "the episodes that ended in this iteration",
        "before `runner.reward_clip`",
        "rolled back",
    ):
        assert claim in section, claim

"""tools/evaluate.py: the one evaluation protocol (deterministic policy, full episodes, seeds training never uses)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.evaluate import (
    EVAL_SEED_BASE,
    MAX_EPISODES,
    VALIDATION_SEED_BASE,
    Evaluation,
    evaluate,
    evaluation_seeds,
    max_training_seed,
)
from robo_safe_rl.apps.evaluate import main as evaluate_main
from robo_safe_rl.apps.play import play
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import CONFIG_FILE, TRAIN_CFG_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("evaluate") / "run"
    # The task of this run: the Ant with a time limit of 60 steps (gymnasium.make's own keyword, through env_kwargs),
    # so that a full episode is cheap; training cut its episodes shorter still (task.max_episode_steps), which is
    # for learning, not for judging.
    args = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", f"run_dir={run}"]
    args += ["+task.env_kwargs.max_episode_steps=60", "task.max_episode_steps=20"]
    assert train_main(args) == 0
    return run


def test_summary_statistics_of_a_worked_example() -> None:
    # Returns 1, 2, 3, 6: mean 3; squared deviations 4, 1, 0, 9 -> population variance 14/4 = 3.5.
    result = Evaluation("m.pt", 1, "X-v0", [0, 1, 2, 3], returns=[1.0, 2.0, 3.0, 6.0], lengths=[10, 10, 20, 40])
    assert result.return_stats == {"mean": 3.0, "std": math.sqrt(3.5), "min": 1.0, "max": 6.0}
    # Lengths 10, 10, 20, 40: mean 20; deviations 100, 100, 0, 400 -> variance 150.
    assert result.length_stats == {"mean": 20.0, "std": math.sqrt(150.0), "min": 10.0, "max": 40.0}


def test_evaluation_seeds_are_above_every_training_seed() -> None:
    # Training resets env i of rank r with seed + 1000 r + i; the schema caps seed at 2**32 - 1.
    with pytest.raises(ConfigError, match="seed"):
        TrainConfig(seed=2**32, run_dir="x")
    assert max_training_seed(num_envs=1, world_size=1) == 2**32 - 1
    # A million envs on each of a hundred thousand ranks still stays below the first evaluation seed.
    assert max_training_seed(num_envs=10**6, world_size=10**5) < min(evaluation_seeds(16)) == EVAL_SEED_BASE
    assert evaluation_seeds(3) == [EVAL_SEED_BASE, EVAL_SEED_BASE + 1, EVAL_SEED_BASE + 2]
    # Tuning compares policies on the validation range, which the longest test evaluation never reaches.
    assert (
        max(evaluation_seeds(MAX_EPISODES)) < min(evaluation_seeds(MAX_EPISODES, "validation")) == VALIDATION_SEED_BASE
    )
    with pytest.raises(ConfigError, match="unknown evaluation split 'train'"):
        evaluation_seeds(1, "train")


def test_evaluates_full_episodes_deterministically(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_main([str(run_dir), "--episodes", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["checkpoint"] == str(run_dir / "model_1.pt") and doc["iteration"] == 1
    assert doc["task"] == "RoboSafe/Ant-v0" and doc["seeds"] == evaluation_seeds(2)
    # An episode ends at the task's limit (60 here) or when the torso falls: not at training's limit of 20.
    assert len(doc["returns"]) == 2 and all(0 < n <= 60 for n in doc["lengths"]) and max(doc["lengths"]) > 20
    assert doc["return"]["min"] == min(doc["returns"]) and doc["return"]["max"] == max(doc["returns"])
    assert doc["return"]["mean"] == pytest.approx(sum(doc["returns"]) / 2)
    assert doc["nonfinite_action_at"] is None
    assert doc["metrics"] == {} and doc["metric"] == {}  # the Ant reports no metrics
    # The mean action and fixed seeds: the same numbers again, bit for bit.
    again = evaluate(run_dir / "model_1.pt", episodes=2)
    assert again.returns == doc["returns"] and again.lengths == doc["lengths"]


def test_the_task_metrics_are_averaged_per_episode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "a1"
    args = ["task=a1_flat", "task.num_envs=2", "task.num_workers=0", "runner.num_steps_per_env=8"]
    args += ["runner.max_iterations=1", f"run_dir={run}", "+task.env_kwargs.max_episode_steps=30"]
    assert train_main(args) == 0
    capsys.readouterr()
    assert evaluate_main([str(run), "--episodes", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["metrics"]) == ["error_vel_xy", "error_vel_yaw"]
    errors = doc["metrics"]["error_vel_xy"]
    assert len(errors) == 2 and all(e > 0.0 for e in errors)  # a barely trained A1 does not follow its commands
    assert doc["metric"]["error_vel_xy"]["mean"] == pytest.approx(sum(errors) / 2)
    assert evaluate_main([str(run), "--episodes", "1"]) == 0
    assert "error_vel_xy (episode means): mean " in capsys.readouterr().out


def test_the_rewards_are_those_of_the_checkpoints_step_clock(tmp_path: Path) -> None:
    # Only the two tracking terms count, and a curriculum takes both to 0 once each env has taken 4 policy steps: the
    # checkpoint of iteration 0 (8 steps an env) was trained past that, so its evaluation earns exactly 0. Evaluated
    # on envs whose clock starts at 0 it would earn the tracking terms again.
    off = "{weight:0.0,num_steps:4}"
    penalties = ["lin_vel_z_l2", "ang_vel_xy_l2", "dof_torques_l2", "dof_acc_l2", "action_rate_l2", "feet_air_time"]
    penalties += ["undesired_contacts", "flat_orientation_l2"]
    run = tmp_path / "a1"
    args = ["task=a1_flat", "task.num_envs=2", "task.num_workers=0", "runner.num_steps_per_env=8"]
    args += ["runner.max_iterations=1", f"run_dir={run}", "+task.env_kwargs.max_episode_steps=30"]
    args += [f"task.env_kwargs.rewards.{name}=0" for name in penalties]
    args += [f"+task.env_kwargs.curriculum.{name}={off}" for name in ("track_lin_vel_xy_exp", "track_ang_vel_z_exp")]
    assert train_main(args) == 0
    result = evaluate(run / "model_0.pt", episodes=2)
    assert result.lengths == [30, 30] and result.returns == [0.0, 0.0]
    played = play(run / "model_0.pt", episodes=2, max_steps=30)  # tools/play.py's returns likewise
    assert played.lengths == [30, 30] and played.returns == [0.0, 0.0]


def test_text_output_names_the_statistics(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_main([str(run_dir / "model_1.pt"), "--episodes", "1", "--split", "validation"]) == 0
    out = capsys.readouterr().out
    assert "1 episodes, deterministic policy" in out and "return: mean" in out and "length: mean" in out


def test_a_nan_policy_is_stopped_and_reported(run_dir: Path, tmp_path: Path) -> None:
    checkpoint = torch.load(run_dir / "model_1.pt", weights_only=True)
    checkpoint["actor_state_dict"]["mlp.0.weight"][0, 0] = float("nan")
    torch.save(checkpoint, tmp_path / "model_9.pt")  # written without the finite-only check, on purpose
    for name in (CONFIG_FILE, TRAIN_CFG_FILE):
        shutil.copy(run_dir / name, tmp_path / name)
    assert evaluate_main([str(tmp_path / "model_9.pt"), "--episodes", "1"]) == 1


@pytest.mark.parametrize(
    ("path", "args", "why"),
    [
        ("missing_dir", [], "no such checkpoint file or run directory"),
        ("empty_dir", [], "no checkpoints"),
        ("no_config", [], f"{CONFIG_FILE}: missing or unreadable"),
        ("run", ["--episodes", "0"], "episodes must be in [1, 10000], got 0"),
    ],
)
def test_unusable_input_exits_2(
    run_dir: Path, path: str, args: list[str], why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty_dir").mkdir()
    shutil.copytree(run_dir, tmp_path / "no_config")
    (tmp_path / "no_config" / CONFIG_FILE).unlink()
    shutil.copytree(run_dir, tmp_path / "run")
    assert evaluate_main([str(tmp_path / path), *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("evaluate: ") and why in line


def test_tool_runs_as_a_subprocess(run_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "tools/evaluate.py", str(run_dir), "--episodes", "1", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["seeds"] == [EVAL_SEED_BASE]

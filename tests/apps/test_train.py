"""Real trainings of the PyBullet Ant through the training entry: run directory, summary, TensorBoard, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import SUMMARY_SCHEMA_VERSION, TRAIN_CFG_FILE

REPO = Path(__file__).resolve().parents[2]
#: A few iterations of a small batch: enough for every file of the run directory, seconds of CPU.
TINY = ["task.num_envs=4", "runner.num_steps_per_env=16", "runner.max_iterations=3", "runner.save_interval=2"]
SUMMARY_KEYS = {
    "schema_version",
    "status",
    "error",
    "iterations",
    "env_steps",
    "wall_s",
    "device",
    "return_first",
    "return_last",
    "reward_per_step_first",
    "reward_per_step_last",
    "final_checkpoint",
    "last_clean_checkpoint",
    "safety",
    "faults_injected",
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    assert main([*TINY, f"run_dir={run_dir}", "seed=3"]) == 0
    return run_dir


def test_run_directory_holds_every_file(tiny_run: Path) -> None:
    # save_interval=2 over iterations 0..2: rsl-rl saves at 0 and 2, and the final save is iteration 2 again.
    assert sorted(p.name for p in tiny_run.glob("model_*.pt")) == ["model_0.pt", "model_2.pt"]
    assert (tiny_run / "config.yaml").is_file()
    assert list(tiny_run.glob("events.out.tfevents.*"))
    assert (tiny_run / "incidents").is_dir()
    assert (tiny_run / TRAIN_CFG_FILE).is_file()
    ckpt = torch.load(tiny_run / "model_2.pt", weights_only=True)
    assert ckpt["iter"] == 2
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict", "iter", "infos"} <= set(ckpt)


def test_summary_describes_the_run(tiny_run: Path) -> None:
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS and summary["schema_version"] == SUMMARY_SCHEMA_VERSION
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary["iterations"] == 3
    assert summary["env_steps"] == 3 * 4 * 16
    assert summary["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")  # device=auto
    assert summary["final_checkpoint"] == str(tiny_run / "model_2.pt")
    assert summary["last_clean_checkpoint"] == str(tiny_run / "model_2.pt")
    assert summary["faults_injected"] == {}
    assert all(isinstance(v, int) for v in summary["safety"].values())
    assert summary["safety"]["checkpoints_refused"] == 0 and summary["safety"]["physics_errors"] == 0


def test_resolved_config_is_saved(tiny_run: Path) -> None:
    text = (tiny_run / "config.yaml").read_text()
    assert "num_envs: 4" in text and "env_id: RoboSafe/Ant-v0" in text and "${" not in text


def test_tensorboard_has_rsl_rl_and_safety_scalars(tiny_run: Path) -> None:
    events = EventAccumulator(str(tiny_run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"Loss/value", "Loss/surrogate", "Loss/learning_rate", "Perf/total_fps"} <= tags
    assert {"Safety/physics_errors", "Safety/checkpoints_refused", "Safety/actions_sanitised"} <= tags
    assert [e.step for e in events.Scalars("Safety/physics_errors")] == [0, 1, 2]


def test_same_seed_same_weights(tiny_run: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main([*TINY, f"run_dir={again}", "seed=3"]) == 0
    a = torch.load(tiny_run / "model_2.pt", weights_only=True)["actor_state_dict"]
    b = torch.load(again / "model_2.pt", weights_only=True)["actor_state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_tool_runs_as_a_subprocess_with_hydra_output_inside_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "tools/train.py", *TINY, "runner.max_iterations=1", f"run_dir={run_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run_dir / "hydra" / "overrides.yaml").is_file()
    assert (run_dir / "summary.json").is_file() and (run_dir / "model_0.pt").is_file()
    assert not (REPO / "outputs").exists()  # Hydra's default second tree is not created


@pytest.mark.parametrize(("override", "needle"), [("task.num_envs=0", "task.num_envs"), ("task.num_env=3", "num_env")])
def test_tool_exits_2_on_invalid_config(override: str, needle: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "tools/train.py", override, f"run_dir={tmp_path / 'never'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert needle in done.stderr
    # Checked before Hydra makes the run directory for its own record: nothing is left behind.
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_short_training_raises_the_return(tmp_path: Path) -> None:
    # The Ant's tuned values (configs/agent/bullet_locomotion.yaml): 60 iterations x 16 envs x 64 steps = 61,440 env
    # steps with 200-step episodes (so episodes end every ~3 iterations). Measured here with seed 3: reward per step
    # 0.43 -> 0.53 and the mean return of finished 200-step episodes 86 -> 109 (the first episodes are the initial
    # policy's: alive bonus +1 minus the electricity cost of std-1 actions). The bounds leave room for noise, not for a
    # policy that does not learn.
    run_dir = tmp_path / "learn"
    assert main(["runner.max_iterations=60", "task.max_episode_steps=200", f"run_dir={run_dir}", "seed=3"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_per_step_last"] > summary["reward_per_step_first"] + 0.05
    assert summary["return_last"] > summary["return_first"] + 10.0

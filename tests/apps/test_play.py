"""tools/play.py: a trained policy plays full episodes; a NaN policy is reported; bad input exits 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.play import main as play_main
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.rundir import CONFIG_FILE, TRAIN_CFG_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("play") / "run"
    args = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", f"run_dir={run}"]
    assert train_main(args) == 0
    return run


def test_plays_full_episodes_from_a_run_directory(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert play_main([str(run_dir), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"] == str(run_dir / "model_1.pt")  # the newest clean checkpoint
    assert result["task"] == "RoboSafe/Ant-v0" and len(result["returns"]) == 2
    # An Ant episode ends at 1000 steps or when the torso drops below 0.26 m; either way it ended.
    assert all(0 < n <= 1000 for n in result["lengths"]) and result["nonfinite_action_at"] is None


def test_frames_are_written(run_dir: Path, tmp_path: Path) -> None:
    assert play_main([str(run_dir / "model_1.pt"), "--episodes", "1", "--frames", str(tmp_path), "--every", "100"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png"))[:1] == ["frame_00100.png"]


def test_a_nan_policy_is_stopped_and_reported(run_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "model_9.pt"
    checkpoint = torch.load(run_dir / "model_1.pt", weights_only=True)
    checkpoint["actor_state_dict"]["mlp.0.weight"][0, 0] = float("nan")
    torch.save(checkpoint, bad)  # written without the finite-only check, on purpose
    for name in (CONFIG_FILE, TRAIN_CFG_FILE):
        shutil.copy(run_dir / name, tmp_path / name)
    assert play_main([str(bad), "--episodes", "1"]) == 1


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("missing_dir", "no such checkpoint file or run directory"),
        ("empty_dir", "no checkpoints"),
        # A run of an older version: checkpoints, no saved train dict. Refused, not rebuilt from guessed sizes.
        ("old_run", f"no {TRAIN_CFG_FILE} beside it"),
        ("foreign/model_1.pt", "not an rsl-rl checkpoint"),
    ],
)
def test_unusable_input_exits_2(
    run_dir: Path, path: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty_dir").mkdir()
    shutil.copytree(run_dir, tmp_path / "old_run")
    (tmp_path / "old_run" / TRAIN_CFG_FILE).unlink()
    (tmp_path / "foreign").mkdir()
    shutil.copy(run_dir / TRAIN_CFG_FILE, tmp_path / "foreign" / TRAIN_CFG_FILE)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign" / "model_1.pt")
    assert play_main([str(tmp_path / path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("play: ") and why in line


def test_tool_runs_as_a_subprocess(run_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "tools/play.py", str(run_dir), "--episodes", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 episodes" in done.stdout and "return: mean" in done.stdout
    # On a pipe: no progress bar, no control code.
    assert "play:" not in done.stderr and "\x1b" not in done.stderr + done.stdout


def test_a_terminal_shows_the_progress_of_the_episodes(run_dir: Path, on_terminal: Callable[..., Any]) -> None:
    done = on_terminal([sys.executable, "tools/play.py", str(run_dir), "--episodes", "2"], cwd=REPO)
    assert done.returncode == 0, done.terminal[-2000:]
    # Before: a minute of silence for 16 episodes. Now a bar of the steps (of the 1000-step limit) on stderr.
    assert "play: 0/2 episodes done" in done.terminal and "/1000" in done.terminal and "━" in done.terminal
    assert "2 episodes" in done.stdout and "\x1b" not in done.stdout  # the results stay plain text

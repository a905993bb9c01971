"""Every task trains through the training entry, and `tools/train.py --list-tasks` lists the tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers the tasks' ids)
from robo_safe_rl.apps.train import main

REPO = Path(__file__).resolve().parents[2]
#: Two iterations of a small batch in the trainer's process: seconds of CPU, every part of a run exercised. Four
#: mini-batches of 16 (the Walker2D's own 64 would make them of 1, and its 20 epochs 2,560 optimizer steps).
SHORT = ["task.num_envs=4", "task.num_workers=0", "runner.num_steps_per_env=16", "runner.max_iterations=2"]
SHORT += ["algorithm.num_mini_batches=4"]
#: (task option, gymnasium id, observation size, action size): 8 + 2 per motor + 1 per observed foot.
TASKS = [
    # name, id, observation and action sizes, whether it declares a mirror (the Hopper is one leg; the HalfCheetah's
    # front and back legs differ, and it has no left and right)
    ("a1_flat", "RoboSafe/A1Flat-v0", 48, 12, "yes"),
    ("a1_rough", "RoboSafe/A1Rough-v0", 235, 12, "yes"),
    ("ant", "RoboSafe/Ant-v0", 28, 8, "yes"),
    ("half_cheetah", "RoboSafe/HalfCheetah-v0", 26, 6, "no"),
    ("hopper", "RoboSafe/Hopper-v0", 15, 3, "no"),
    ("walker2d", "RoboSafe/Walker2D-v0", 22, 6, "yes"),
]


@pytest.mark.parametrize("task", ["half_cheetah", "hopper", "walker2d"])
def test_each_walker_trains(task: str, tmp_path: Path) -> None:
    run_dir = tmp_path / task
    assert main([f"task={task}", *SHORT, f"run_dir={run_dir}", "seed=1"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 2
    assert summary["env_steps"] == 2 * 4 * 16
    assert (run_dir / "model_1.pt").is_file()
    assert f"experiment_name: {task}" in (run_dir / "config.yaml").read_text()


@pytest.mark.slow  # the same path as test_train.py's fast subprocess run of the Ant, with another task option
def test_tool_trains_a_walker_as_a_subprocess(tmp_path: Path) -> None:
    run_dir = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "tools/train.py", "task=half_cheetah", *SHORT, f"run_dir={run_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["iterations"] == 2


def table_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_list_tasks_prints_name_id_and_sizes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--list-tasks"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows[0] == ["task", "gymnasium", "id", "observation", "action", "mirror"]
    for name, env_id, obs, act, mirror in TASKS:
        assert [name, env_id, str(obs), str(act), mirror] in rows[1:]
    assert list(tmp_path.iterdir()) == []  # no run directory, no Hydra output
    # The README's task table states the same names, ids and sizes.
    documented = []
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[1].startswith("RoboSafe/"):
            documented.append([cells[0], cells[1], cells[3], cells[4], cells[5]])
    assert documented == rows[1:]


def test_list_tasks_takes_no_other_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-tasks", "task=ant"]) == 2
    assert "--list-tasks takes no other arguments" in capsys.readouterr().err


def test_tool_lists_tasks_without_making_a_run_directory(tmp_path: Path) -> None:
    # Run from an empty folder: a run directory would land in its logs/ (Hydra's outputs/ without the project's
    # run dir). The repository's own logs/ is no witness: the suite's other processes train into it meanwhile.
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "train.py"), "--list-tasks"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = table_rows(done.stdout)
    for name, env_id, obs, act, mirror in TASKS:
        assert [name, env_id, str(obs), str(act), mirror] in rows
    assert list(tmp_path.iterdir()) == []


def test_a_task_whose_mirror_is_refused_is_listed_with_the_reason() -> None:
    import gymnasium

    from robo_safe_rl.apps.task_list import env_row, format_rows

    env = gymnasium.make("RoboSafe/Ant-v0", disable_env_checker=True)
    try:
        good = env_row("ant", env)
        env.unwrapped.action_mirror = None  # half a declaration, which the trainer refuses
        bad = env_row("ant", env)
    finally:
        env.close()
    assert good.mirror is True and good.problem is None
    assert bad.mirror is None
    assert bad.problem == "AntEnv declares a mirror without action_mirror: expected both or neither"
    assert table_rows(format_rows([good, bad])) == [
        ["task", "gymnasium", "id", "observation", "action", "mirror"],
        ["ant", "RoboSafe/Ant-v0", "28", "8", "yes"],
        ["ant", "RoboSafe/Ant-v0", "28", "8", "?"],
        ["ant:", *bad.problem.split()],
    ]

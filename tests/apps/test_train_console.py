"""Where is my run: the start banner, the final line, ``train.log`` holding what the run showed, and no folder left
behind by a rejected configuration; through ``apps.train.main`` and through ``tools/train.py``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.banner import banner, preset_of
from robo_safe_rl.apps.run_log import RunLog
from robo_safe_rl.apps.train import compose, main, to_train_config
from robo_safe_rl.rundir import LOGS_DIR, TRAIN_LOG, RunDir

REPO = Path(__file__).resolve().parents[2]
TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2"]
CONTROL = re.compile(r"\x1b\[[0-9;]*m")


def banner_rows(text: str) -> dict[str, str]:
    """The banner's ``Label: value`` rows (rsl-rl's layout: labels right-aligned to column 40)."""
    block = text.split("Training run", 1)[1].split("\n\n", 2)[1]
    return dict(line.strip().split(": ", 1) for line in block.splitlines())


def test_main_prints_a_banner_and_a_final_line_and_keeps_them_in_train_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, f"run_dir={run_dir}", "seed=5", "safety.grad_guard.mode=zero"]) == 0
    out = capsys.readouterr().out
    assert banner_rows(out) == {
        "Run directory": str(run_dir),
        "Task": "ant (RoboSafe/Ant-v0), 2 envs, stepped in this process",  # 2 envs: too few for workers
        "Device": "cuda:0" if torch.cuda.is_available() else "cpu",  # device=auto
        "Preset": "ppo",
        "Gradient guard": "zero",
        "Seed": "5",
        "Iterations": "2",
    }
    last = out.rstrip("\n").splitlines()[-1]
    assert last == (
        f"train: exit code 0 (completed); run directory {run_dir}; final checkpoint {run_dir / 'model_1.pt'}; "
        f"last clean checkpoint {run_dir / 'model_1.pt'}"
    )
    log = (run_dir / TRAIN_LOG).read_text(encoding="utf-8")
    # The iterations' lines are print()ed: before, the file held none of them (and none at all without Hydra).
    assert log.count("iteration 1/2 |") == 1 and log.count("iteration 2/2 |") == 1 and log.count("Training run") == 1
    assert "[robo_safe_rl.apps.train][INFO] - run finished" in log  # the log records too
    assert log.rstrip("\n").splitlines()[-1] == last
    assert "\x1b" not in log  # rsl-rl's bold title reaches the file as text


def test_a_run_stopped_by_a_safety_error_names_its_last_clean_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    faults = ["safety.recovery.enabled=false", "faults.policy.nonfinite_weights_after_update=[2]"]
    assert main([*TINY, "runner.max_iterations=4", "runner.save_interval=1", f"run_dir={run_dir}", *faults]) == 1
    captured = capsys.readouterr()
    last = captured.out.rstrip("\n").splitlines()[-1]
    # Iterations 0 and 1 completed and were saved; the update of iteration 2 made the weights non-finite.
    assert last == (
        f"train: exit code 1 (stopped before its end, summary.json says why); run directory {run_dir}; "
        f"final checkpoint {run_dir / 'model_1.pt'}; last clean checkpoint {run_dir / 'model_1.pt'}"
    )
    log = (run_dir / TRAIN_LOG).read_text(encoding="utf-8")
    assert "train: stopped: training stopped at iteration 2" in log  # what went to stderr is in the log too
    assert captured.err.count("train: stopped:") == 1


def test_the_tool_shows_each_line_once_and_keeps_the_same_text_in_train_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "tools/train.py", *TINY, f"run_dir={run_dir}", "algo=ppo_safe", "algorithm.gamma=0.98"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert banner_rows(done.stdout)["Preset"] == "ppo_safe, changed: algorithm.gamma=0.98"
    assert done.stdout.count("iteration 2/2 |") == 1
    assert done.stdout.count("run finished") == 1  # the console handler writes around the tee, not through it
    log = (run_dir / TRAIN_LOG).read_text(encoding="utf-8")
    # Before: Hydra's job log held one line ("run finished"). Now the file is what the console showed on stdout.
    assert log == CONTROL.sub("", done.stdout)
    assert not (run_dir / "hydra" / f"{TRAIN_LOG}").exists()


@pytest.mark.parametrize(
    "override",
    [
        "task.env_id=Nope-v0",  # refused by the run's own checks, after Hydra made the run directory
        "faults.grad.param=actor.nope",  # refused by the algorithm's constructor, after the envs were built
    ],
)
def test_a_configuration_rejected_late_leaves_no_timestamped_folder(override: str, tmp_path: Path) -> None:
    extra = ["faults.grad.at_updates=[1]"] if override.startswith("faults") else []
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "train.py"), *TINY, override, *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    # Before: logs/ant/<timestamp>/ stayed behind with Hydra's record and a train.log.
    assert list((tmp_path / LOGS_DIR).glob("*/*")) == []


def test_main_rejecting_late_leaves_no_run_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, f"run_dir={run_dir}", "faults.grad.at_updates=[1]", "faults.grad.param=actor.nope"]) == 2
    assert not run_dir.exists()


#: ppo_conservative's floor as a run from before ``std_floor`` has it: in ``std_range`` itself.
OLD_FLOOR = ["actor.distribution_cfg.std_floor=null", "actor.distribution_cfg.std_range=[0.05,1000000.0]"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], "ppo"),
        (["algo=ppo_conservative"], "ppo_conservative"),
        (["algo=ppo_safe", "algorithm.learning_rate=1e-4"], "ppo_safe, changed: algorithm.learning_rate=0.0001"),
        (["algo=ppo_safe", "runner.reward_clip=5.0"], "ppo_safe, changed: runner.reward_clip=5.0"),
        # A ppo_conservative run from before std_floor, its floor in std_range (as a resume adopts it), is the preset
        # where the bounds rsl-rl gets are the same (the Hopper: [0.05, 1e6] either way), and not on the Ant, whose
        # preset now keeps its floor of 0.4.
        (["task=hopper", "algo=ppo_conservative", *OLD_FLOOR], "ppo_conservative"),
        (
            ["algo=ppo_conservative", *OLD_FLOOR],
            "ppo_conservative, changed: actor.distribution_cfg.std_range=[0.05, 1000000.0]",
        ),
    ],
)
def test_the_banner_names_the_preset_the_values_are(overrides: list[str], expected: str) -> None:
    assert preset_of(compose(overrides)) == expected


def test_a_run_log_passes_text_on_unchanged_and_files_it_without_control_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / TRAIN_LOG
    with RunLog(path):
        print("\033[1m title \033[0m")
        print("to stderr", file=sys.stderr)
    with RunLog(path):  # a resumed run continues its run's log
        print("second")
    captured = capsys.readouterr()
    assert captured.out == "\033[1m title \033[0m\nsecond\n" and captured.err == "to stderr\n"
    assert path.read_text(encoding="utf-8") == " title \nto stderr\nsecond\n"
    assert RunDir(tmp_path).train_log_path == path


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full, a file every write to fails")
def test_a_log_file_that_cannot_be_written_stops_the_log_not_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    with RunLog(Path("/dev/full")):
        print("iteration 0")
        logging.getLogger("robo_safe_rl.test").info("a record")
        print("iteration 1", file=sys.stderr)
    captured = capsys.readouterr()
    assert captured.out == "iteration 0\n"  # everything still reaches the console, once
    assert captured.err.count("/dev/full is no longer written: [Errno 28] No space left on device") == 1
    assert captured.err.endswith("iteration 1\n") and "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("overrides", "task"),
    [
        (["task.num_workers=2"], "ant (RoboSafe/Ant-v0), 16 envs, 2 env worker processes"),
        (["task.num_workers=1", "task.num_envs=3"], "ant (RoboSafe/Ant-v0), 3 envs, 1 env worker process"),
        (["task.num_workers=0"], "ant (RoboSafe/Ant-v0), 16 envs, stepped in this process"),
    ],
)
def test_the_banner_says_where_the_envs_step(overrides: list[str], task: str) -> None:
    node = compose(overrides)
    assert banner_rows(banner(node, to_train_config(node), "cpu"))["Task"] == task

"""Trainings through env workers: a worker killed mid-run is survived, too many crashes stop the run with exit 1,
and no worker outlives its trainer (normal end, exception, SIGINT, SIGKILL).

Real Ant trainings, real worker processes, real signals; the workers are found through ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import gymnasium as gym
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from worker_helpers import alive, env_workers, wait_until

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.bridge.incidents import read_incidents
from robo_safe_rl.diagnose.cli import main as diagnose
from robo_safe_rl.diagnose.inputs import resolve

REPO = Path(__file__).resolve().parents[2]
SHORT = ["task.num_envs=4", "task.num_workers=2", "runner.num_steps_per_env=16", "runner.save_interval=1"]


def restore_sigint() -> None:
    """Give the child the default SIGINT: a suite started in the background of a non-interactive shell (``make test &``)
    runs with SIGINT ignored, children inherit that, and a run keeps an inherited ignore on purpose (as under nohup);
    these tests are about a terminal's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_worker_killed_during_training_is_survived(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    seen: list[int] = []
    killed: list[int] = []

    def kill_one_after_the_first_iteration() -> None:
        wait_until(lambda: (run_dir / "model_0.pt").exists(), 300, "the first checkpoint")
        seen.extend(env_workers(os.getpid()))
        os.kill(seen[-1], signal.SIGKILL)
        killed.append(seen[-1])

    killer = threading.Thread(target=kill_one_after_the_first_iteration, daemon=True)
    killer.start()
    assert main([*SHORT, "runner.max_iterations=6", f"run_dir={run_dir}"]) == 0
    killer.join(5)
    assert len(seen) == 2 and killed

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 6
    assert summary["safety"]["worker_crashes"] == 1 and summary["safety"]["worker_restarts"] == 1
    # The killed worker hosted two of the four envs: one record each, in the trainer's part.
    records = read_incidents(run_dir / "incidents")
    assert [r["kind"] for r in records] == ["worker_crash", "worker_crash"]
    assert {r["env_index"] for r in records} in ({0, 1}, {2, 3})
    assert all(r["extra"]["signal"] == "SIGKILL" and r["extra"]["pid"] == killed[0] for r in records)
    assert all(r["iteration"] >= 1 and r["terminated"] and r["source"] == "env_worker" for r in records)
    # diagnose reads every part of the run, and does not blame the actions for a dead process (exit 0).
    assert [i.record["kind"] for i in resolve(str(run_dir)).incidents] == ["worker_crash", "worker_crash"]
    assert diagnose([str(run_dir), "--json"]) == 0
    assert '"cause": "env_fault"' in capsys.readouterr().out
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert events.Scalars("Safety/worker_crashes")[-1].value == 1.0
    # Normal end: no worker is left, the killed one included.
    assert not any(alive(pid) for pid in seen) and env_workers(os.getpid()) == []


@pytest.fixture
def aborting_task() -> str:
    """A registered task whose envs abort their process in their first step."""
    env_id = "WorkerTest/Abort-v0"
    gym.register(env_id, entry_point="worker_helpers:AbortingEnv", max_episode_steps=50, kwargs={"fault_at": 1})
    yield env_id
    del gym.registry[env_id]


def test_too_many_crashes_in_a_row_stop_the_run_with_exit_1(
    tmp_path: Path, aborting_task: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = [*SHORT, "task.max_worker_crashes=2", f"task.env_id={aborting_task}", "runner.max_iterations=3"]
    args.append("algorithm.symmetry_cfg.use_data_augmentation=false")  # the test env has no mirror
    assert main([*args, f"run_dir={run_dir}"]) == 1
    err = capsys.readouterr().err
    assert "train: stopped: env worker" in err and "(SIGABRT) during a step: 2 crashes in a row" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["error"].startswith("WorkerCrashError")
    assert env_workers(os.getpid()) == []


def test_an_exception_in_the_trainer_leaves_no_worker(tmp_path: Path) -> None:
    # faults.grad.param is checked when the algorithm is built, after the envs and their workers (exit 2).
    args = [*SHORT, "runner.max_iterations=1", "faults.grad.every=1", "faults.grad.param=no.such.param"]
    assert main([*args, f"run_dir={tmp_path / 'run'}"]) == 2
    assert env_workers(os.getpid()) == []


def start_training(run_dir: Path) -> tuple[subprocess.Popen, list[int]]:
    """``tools/train.py`` with two workers, for long; returns once it has finished an iteration."""
    cmd = [sys.executable, "tools/train.py", *SHORT, "runner.max_iterations=100000", f"run_dir={run_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    trainer = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=restore_sigint
    )
    wait_until(lambda: (run_dir / "model_0.pt").exists() or trainer.poll() is not None, 300, "the first iteration")
    assert trainer.poll() is None, trainer.stderr.read()[-3000:]
    workers = env_workers(trainer.pid)
    assert len(workers) == 2
    return trainer, workers


@pytest.mark.parametrize("signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_stops_the_trainer_and_its_workers(tmp_path: Path, signum: signal.Signals) -> None:
    trainer, workers = start_training(tmp_path / "run")
    trainer.send_signal(signum)
    trainer.wait(120)
    wait_until(lambda: not any(alive(pid) for pid in workers), 30, "the workers to exit")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "stopped"


@pytest.mark.slow
def test_workers_leave_when_their_trainer_is_killed(tmp_path: Path) -> None:
    trainer, workers = start_training(tmp_path / "run")
    trainer.kill()  # no finally, no atexit: the workers must notice on their own
    trainer.wait(60)
    wait_until(lambda: not any(alive(pid) for pid in workers), 30, "the orphaned workers to exit")


@pytest.mark.slow
def test_under_torchrun_each_rank_has_its_workers_and_incident_parts(tmp_path: Path) -> None:
    run_dir = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "tools/train.py",
           "device=cpu", "task.num_envs=2", "task.num_workers=1", "runner.num_steps_per_env=8",
           "runner.max_iterations=2", "faults.env.obs_nonfinite=0.2", f"run_dir={run_dir}"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    injected = summary["faults_injected"]["obs_nonfinite"]
    # Both ranks' workers inject and catch: the counters are summed over ranks, the records are in each rank's part.
    assert injected == summary["safety"]["nonfinite_obs"] > 0
    parts = {d: len(read_incidents(run_dir / d)) for d in ("incidents_worker0", "incidents_rank1_worker0")}
    assert all(parts.values()) and sum(parts.values()) == injected
    assert len(resolve(str(run_dir)).incidents) == injected

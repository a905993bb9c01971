"""Recovery: rollbacks on non-finite learning state or policy output, the stop message, resume after SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.interrupt import RunInterrupted
from robo_safe_rl.apps.train import compose, main, to_train_config
from robo_safe_rl.errors import RecoveryError
from robo_safe_rl.rundir import EVENTS_FILE, RunDir
from robo_safe_rl.training.env_builder import build_vec_env
from robo_safe_rl.training.recovery import nonfinite_layers
from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg
from robo_safe_rl.training.runner import SafeRunner

REPO = Path(__file__).resolve().parents[2]
SMALL = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.save_interval=2"]


def read_events(run_dir: Path) -> list[dict]:
    path = run_dir / EVENTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def make_runner(run_dir: Path, *overrides: str) -> SafeRunner:
    cfg = to_train_config(compose([*SMALL, f"run_dir={run_dir}", *overrides]))
    files = RunDir(run_dir)
    env = build_vec_env(cfg, incidents_dir=files.incidents_dir())
    return SafeRunner(env, build_rsl_rl_cfg(cfg, str(run_dir)), str(run_dir), "cpu", cfg.safety.recovery, files=files)


def test_nonfinite_weights_after_an_update_roll_back_and_training_continues(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                *SMALL,
                "runner.max_iterations=4",
                f"run_dir={run_dir}",
                "faults.policy.nonfinite_weights_after_update=[1]",
            ]
        )
        == 0
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["faults_injected"] == {"policy_weights_after_update": 1}
    assert summary["safety"]["rollbacks"] == 1 and summary["safety"]["nonfinite_updates"] == 1
    assert summary["safety"]["checkpoints_refused"] == 0
    assert summary["iterations"] == 4  # the rolled-back attempt is repeated, not counted
    final = torch.load(run_dir / "model_3.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in final["actor_state_dict"].values())
    (event,) = read_events(run_dir)
    assert event["kind"] == "rollback" and event["iteration"] == 1 and event["snapshot_iteration"] == 0
    assert event["layers"][0] == "actor/mlp.0.weight"
    # The snapshot is the state after iteration 0 (a save iteration); after one rollback the learning rate is the
    # one logged for iteration 0 times lr_factor (0.5).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    lr_after_0 = events.Scalars("Loss/learning_rate")[0]
    assert lr_after_0.step == 0
    assert event["learning_rate"] == pytest.approx(0.5 * lr_after_0.value)


def test_nonfinite_policy_output_never_reaches_an_env(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                *SMALL,
                "runner.max_iterations=3",
                f"run_dir={run_dir}",
                "faults.policy.nonfinite_weights_before_rollout=[1]",
            ]
        )
        == 0
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["faults_injected"] == {"policy_weights_before_rollout": 1}
    assert summary["safety"]["policy_fuse_trips"] == 1 and summary["safety"]["rollbacks"] == 1
    # SafeStep, which sits in front of every env, never saw a non-finite action.
    assert summary["safety"]["nonfinite_actions"] == 0
    assert [e["kind"] for e in read_events(run_dir)] == ["rollback"]


def test_nan_action_std_is_caught_by_the_fuse_not_by_torch(tmp_path: Path) -> None:
    # rsl-rl switches distribution argument validation off; a NaN std then surfaces inside torch's sampler as
    # "normal expects all elements of std >= 0.0". The fuse must see it first and roll back.
    runner = make_runner(tmp_path / "run")
    runner.learn(1)
    with torch.no_grad():
        runner.alg.actor.distribution.std_param.fill_(float("nan"))
    runner.learn(2)
    assert runner.counters["policy_fuse_trips"] == 1 and runner.recovery.rollbacks == 1
    assert nonfinite_layers(runner.alg) == []
    runner.env.close()


def test_repeated_failures_stop_with_the_promised_message(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    runner = make_runner(run_dir, "safety.recovery.max_rollbacks=2")

    def poison_every_update(alg: object, iteration: int) -> None:
        with torch.no_grad():
            next(alg.actor.parameters()).view(-1)[0] = float("nan")

    runner.policy_faults.after_update = poison_every_update  # a fault that recurs at every attempt
    with pytest.raises(RecoveryError) as caught:
        runner.learn(3)
    message = str(caught.value)
    assert "training stopped at iteration 0" in message and "2 rollback(s) in a row" in message
    assert f"python tools/inspect_checkpoint.py {run_dir}" in message
    assert f"python tools/diagnose.py {run_dir}" in message
    assert [e["kind"] for e in read_events(run_dir)] == ["rollback", "rollback", "recovery_failed"]
    runner.env.close()


def test_recovery_off_stops_at_once_with_exit_1_and_a_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code = main(
        [
            *SMALL,
            "runner.max_iterations=4",
            f"run_dir={run_dir}",
            "safety.recovery.enabled=false",
            "faults.policy.nonfinite_weights_after_update=[2]",
        ]
    )
    assert code == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and "RecoveryError" in summary["error"]
    assert summary["iterations"] == 2 and summary["last_clean_checkpoint"] == str(run_dir / "model_0.pt")


@pytest.mark.slow  # trains in a subprocess until model_6.pt, then resumes: ~4 s alone
def test_resume_after_sigkill_loses_at_most_save_interval(tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    # -u: every line the run printed before the kill is in the log, whatever the buffering of a redirected stdout.
    cmd = [sys.executable, "-u", "tools/train.py", *SMALL, "runner.max_iterations=1000", f"run_dir={run_dir}"]
    cmd.append("display=rsl")  # a block for every iteration (plain lines come every 10)
    log_path = tmp_path / "killed.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not (run_dir / "model_6.pt").exists():
                assert proc.poll() is None and time.monotonic() < deadline, "training did not reach model_6.pt"
                time.sleep(0.05)
            time.sleep(0.3)  # kill it somewhere in the middle of later iterations, maybe inside a save
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    saved = sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt"))
    newest = saved[-1]
    # The last iteration the killed run logged (rsl-rl prints "Learning iteration k/1000" after each).
    logged = [int(m) for m in re.findall(r"Learning iteration (\d+)/", log_path.read_text())]
    assert newest >= 6 and logged
    assert logged[-1] - newest <= 2  # at most save_interval (2) iterations since the newest checkpoint are lost
    # The killed run trained on device=auto's choice (CUDA where there is a GPU), the resumed runner is on the CPU.
    checkpoint = torch.load(run_dir / f"model_{newest}.pt", map_location="cpu", weights_only=True)

    resumed = tmp_path / "resumed"
    runner = make_runner(resumed, f"resume={run_dir}")
    # The run directory's newest clean checkpoint is taken, with optimizer state and iteration counter.
    from robo_safe_rl.apps.train import resolve_resume

    runner.load(str(resolve_resume(str(run_dir))))
    assert runner.next_iteration == newest + 1
    actor = runner.alg.actor.state_dict()
    assert all(torch.equal(actor[k], checkpoint["actor_state_dict"][k]) for k in actor)
    assert (
        runner.alg.optimizer.state_dict()["state"][0]["step"] == checkpoint["optimizer_state_dict"]["state"][0]["step"]
    )
    runner.env.close()

    assert main([*SMALL, "runner.max_iterations=2", f"run_dir={resumed}", f"resume={run_dir}"]) == 0
    assert (resumed / f"model_{newest + 2}.pt").exists()
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["iterations"] == 2


def test_resume_of_a_missing_path_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, f"run_dir={tmp_path / 'run'}", f"resume={tmp_path / 'nowhere'}"]) == 2
    assert "resume=" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_non_finite_checkpoint_is_refused_and_the_previous_stays_newest(tmp_path: Path) -> None:
    from robo_safe_rl.checkpoint.report import inspect_run_dir

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runner = make_runner(run_dir)
    runner.learn(3)  # saves model_0.pt and model_2.pt
    with torch.no_grad():
        runner.alg.critic.mlp[0].bias.fill_(float("inf"))  # weights forced non-finite outside any update
    runner.current_learning_iteration = 3
    runner.save(str(run_dir / "model_3.pt"))
    assert not (run_dir / "model_3.pt").exists()
    assert runner.counters["checkpoints_refused"] == 1
    assert runner.last_clean_checkpoint == str(run_dir / "model_2.pt")
    report = inspect_run_dir(run_dir)
    assert report.first_corrupt is None and report.last_clean.path.name == "model_2.pt"
    (event,) = [e for e in read_events(run_dir) if e["kind"] == "checkpoint_refused"]
    assert event["layers"] == ["critic_state_dict/mlp.0.bias"]
    runner.env.close()


def test_a_stop_saves_the_last_good_snapshot_not_the_live_weights(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Snapshots after iterations 0 (a save iteration), 1 and 3 (every 2 good ones); checkpoints only at 0 and the end.
    runner = make_runner(run_dir, "runner.save_interval=100", "safety.recovery.snapshot_interval=2")

    def stop_after_iteration_2(it: int, policy: object) -> None:
        if it == 2:
            raise RunInterrupted(signal.SIGTERM)

    runner.on_iteration = stop_after_iteration_2
    try:
        with pytest.raises(RunInterrupted):
            runner.learn(num_learning_iterations=10)
        snapshot = runner.recovery.snapshot
        assert snapshot is not None and snapshot.iteration == 1
        expected = {k: v.clone() for k, v in snapshot.actor.items()}
        with torch.no_grad():  # the live weights, as a signal in the middle of an update could leave them
            for p in runner.alg.actor.parameters():
                p.fill_(123.0)
        assert runner.save_last_snapshot() == str(run_dir / "model_1.pt")
        saved = torch.load(run_dir / "model_1.pt", weights_only=True)
        assert saved["iter"] == 1
        actor = saved["actor_state_dict"]
        assert actor.keys() == expected.keys() and all(torch.equal(actor[k], expected[k]) for k in expected)
        assert runner.final_checkpoint == runner.last_clean_checkpoint == str(run_dir / "model_1.pt")
        assert runner.save_last_snapshot() is None  # saved already: nothing written twice
        # A resume from it continues at iteration 2, as the run would have.
        resumed = make_runner(tmp_path / "again")
        resumed.load(str(run_dir / "model_1.pt"))
        assert resumed.next_iteration == 2
        resumed.env.close()
    finally:
        runner.env.close()

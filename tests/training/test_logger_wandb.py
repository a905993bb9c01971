"""`runner.logger=wandb`: rsl-rl's W&B writer gets rsl-rl's metrics and ours (`Safety/*`), offline here."""

from __future__ import annotations

from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main

wandb = pytest.importorskip("wandb")


@pytest.mark.slow  # W&B starts a service process: about 5-10 s in all
def test_safety_metrics_reach_weights_and_biases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")  # no account, no network: the run is written to disk only
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    args = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", "runner.logger=wandb"]
    assert main([*args, "runner.wandb_project=robo_safe_rl_test", f"run_dir={run_dir}"]) == 0
    # rsl-rl's writer ends the run with wandb.finish(), which can return before W&B's service process has written the
    # run file (seen: only its header); teardown waits for the service to exit.
    wandb.teardown()
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    # The offline run file is W&B's record log: each history row holds its metric names as plain strings.
    record = runs[0].read_bytes()
    for tag in (b"Safety/physics_errors", b"Safety/actions_sanitised", b"Loss/learning_rate"):
        assert tag in record, tag
    assert list(run_dir.glob("events.out.tfevents.*"))  # W&B's writer keeps the TensorBoard files too
    assert (run_dir / "summary.json").is_file()

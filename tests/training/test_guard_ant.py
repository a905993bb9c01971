"""A real PyBullet Ant training through the training entry, with gradient and loss faults injected (a fire drill)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main

# 4 envs x 16 steps, 3 iterations of 5 epochs x 4 mini-batches: update indices 0..59.
TINY = ["task.num_envs=4", "runner.num_steps_per_env=16", "runner.max_iterations=3", "runner.save_interval=2"]


@pytest.mark.slow
def test_a_drilled_ant_run_ends_finite_with_every_fault_accounted_for(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    drill = ["faults.grad.at_updates=[3,25]", "faults.grad.value=-inf", "faults.grad.loss_at_updates=[9]"]
    assert main([*TINY, *drill, f"run_dir={run_dir}", "seed=3"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 3
    assert summary["faults_injected"] == {"grad_nonfinite": 2, "loss_nonfinite": 1}
    safety = summary["safety"]
    assert safety["grad_steps_skipped"] == safety["grad_nonfinite_steps"] == 3  # one per injected fault
    assert safety["loss_nonfinite"] == 1
    checkpoint = torch.load(summary["final_checkpoint"], weights_only=True)
    for key in ("actor_state_dict", "critic_state_dict"):
        assert all(torch.isfinite(t).all() for t in checkpoint[key].values())
    assert all(
        torch.isfinite(t).all() for s in checkpoint["optimizer_state_dict"]["state"].values() for t in s.values()
    )
    events = EventAccumulator(str(run_dir)).Reload()
    skipped = [e.value for e in events.Scalars("Safety/grad_steps_skipped")]
    assert len(skipped) == 3
    assert all(math.isfinite(e.value) for e in events.Scalars("Safety/grad_norm_preclip"))
    for group in ("actor", "critic"):  # each clip group's own norm, and the fraction of its steps the clip scaled
        assert len([e for e in events.Scalars(f"Safety/grad_norm_preclip_{group}") if e.value > 0]) == 3
        assert all(0.0 <= e.value <= 1.0 for e in events.Scalars(f"Safety/grad_clip_binds_{group}"))
    # The logged mean losses leave the skipped mini-batches out, so a contained NaN loss does not turn them NaN.
    assert all(math.isfinite(e.value) for e in events.Scalars("Loss/value"))

"""The fire drill (+drill=gauntlet): every injector at once on a real Ant training; every fault is accounted for."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.checkpoint.report import Status, inspect_run_dir

#: Which safety counter answers which injected fault kind (one event each).
ACCOUNTED_BY = {
    "action_nonfinite": "nonfinite_actions",
    "obs_nonfinite": "nonfinite_obs",
    "reward_nonfinite": "nonfinite_rewards",
    "physics_error": "physics_errors",
    "state_blowup": "implausible_states",
    "policy_weights_after_update": "nonfinite_updates",
    "policy_weights_before_rollout": "policy_fuse_trips",
}


def test_gauntlet_short_form_finishes_clean_and_accounts_for_every_fault(tmp_path: Path) -> None:
    run_dir = tmp_path / "drill"
    args = ["+drill=gauntlet", "task.num_envs=4", "runner.max_iterations=12", "runner.save_interval=4"]
    assert main([*args, f"run_dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    injected, safety = summary["faults_injected"], summary["safety"]
    assert summary["status"] == "completed" and summary["iterations"] == 12

    # Every kind of the gauntlet fired (12 iterations x 4 envs x 24 steps = 1152 env steps, 240 mini-batches).
    assert set(injected) == {*ACCOUNTED_BY, "grad_nonfinite", "loss_nonfinite"}
    for kind, counter in ACCOUNTED_BY.items():
        assert safety[counter] == injected[kind], (kind, counter)
    # A NaN gradient element and a NaN loss each make the guard skip one mini-batch (they never share one).
    assert safety["grad_nonfinite_steps"] == safety["grad_steps_skipped"]
    assert safety["grad_steps_skipped"] == injected["grad_nonfinite"] + injected["loss_nonfinite"]
    assert safety["rollbacks"] == safety["nonfinite_updates"] + safety["policy_fuse_trips"]
    assert safety["env_rebuilds"] >= safety["physics_errors"] + safety["implausible_states"]
    assert safety["checkpoints_refused"] == 0

    report = inspect_run_dir(run_dir)
    assert report.checkpoints and all(c.status is Status.CLEAN for c in report.checkpoints)
    assert report.first_corrupt is None
    final = torch.load(summary["final_checkpoint"], weights_only=True)
    for part in ("actor_state_dict", "critic_state_dict"):
        assert all(torch.isfinite(t).all() for t in final[part].values())

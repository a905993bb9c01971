"""The fire drill (+drill=gauntlet): every injector at once on a real Ant training; every fault is accounted for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.checkpoint.report import Status, inspect_run_dir
from robo_safe_rl.diagnose.inputs import resolve

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


@pytest.fixture(scope="module")
def drill_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The short gauntlet with the envs in the trainer ("0"), in two env workers ("2"), and in one worker beside the
    trainer's own block ("1+", ``task.trainer_block``)."""
    args = ["+drill=gauntlet", "task.num_envs=4", "runner.max_iterations=12", "runner.save_interval=4"]
    variants = {"0": ["task.num_workers=0"], "2": ["task.num_workers=2"]}
    variants["1+"] = ["task.num_workers=1", "task.trainer_block=true"]
    runs = {}
    for name, overrides in variants.items():
        runs[name] = tmp_path_factory.mktemp("drill") / f"workers{name}"
        assert main([*args, *overrides, f"run_dir={runs[name]}"]) == 0
    return runs


def test_gauntlet_short_form_finishes_clean_and_accounts_for_every_fault(drill_runs: dict[str, Path]) -> None:
    run_dir = drill_runs["0"]
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


@pytest.mark.parametrize(
    ("name", "folders"),
    [("2", {"incidents_worker0", "incidents_worker1"}), ("1+", {"incidents", "incidents_worker0"})],
)
def test_gauntlet_through_env_workers_is_the_same_run(drill_runs: dict[str, Path], name: str, folders: set) -> None:
    in_process, workers = (json.loads((drill_runs[w] / "summary.json").read_text()) for w in ("0", name))
    # The same seeds give the same faults, the same transitions, hence the same updates, returns and counters.
    for key in set(in_process) - {"wall_s", "final_checkpoint", "last_clean_checkpoint"}:
        assert workers[key] == in_process[key], key
    assert workers["safety"]["worker_crashes"] == 0
    # Each worker wrote its own part of the incidents (the trainer's block into the rank's folder); diagnose reads
    # them all: the same records as in one process.
    parts = resolve(str(drill_runs[name])).incidents
    assert {i.directory.name for i in parts} == folders

    def key(record: dict) -> tuple:
        return record["global_step"], record["env_index"], record["kind"], record["reason"]

    records = sorted(key(i.record) for i in resolve(str(drill_runs["0"])).incidents)
    assert sorted(key(i.record) for i in parts) == records and records

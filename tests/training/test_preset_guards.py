"""ppo_conservative's bounds (inputs clipped to +-10, an action-std floor of 0.05 under the Ant's own 0.4) change
nothing while they do not bind: its training is ``ppo``'s bit for bit until the first input beyond the clip.

Measured on the Ant (seed 2, the tuned rollout of 16 envs x 64 steps, 60 iterations): the two trainings logged the
same losses for 11 iterations, then parted; at 1M env steps their seeds' returns still go together (BENCHMARKS.md,
"Presets": correlation 0.92 over six seeds). Here, two iterations: the bounds do not bind yet. A preset that changes
a healthy update parts from ppo at the first one: ppo_safe (its adaptive rate starts at 3e-5, not 1e-3; its reward
clip of 10 is far above the Ant's 1-3 per step) does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import RunDir

#: Two updates of the Ant's tuned rollout (2 x 16 x 64 env steps), one thread: seconds.
SHORT = ["task=ant", "runner.max_iterations=2", "torch_threads=1", "task.num_workers=0", "seed=2"]


def _tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The networks' and the optimizer's tensors of a checkpoint, by path of keys."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            flat[prefix] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)

    for key in ("actor_state_dict", "critic_state_dict", "optimizer_state_dict"):
        walk(key, state[key])
    return flat


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("preset_guards")
    for preset in ("ppo", "ppo_conservative", "ppo_safe"):
        assert main([*SHORT, f"algo={preset}", f"run_dir={root / preset}"]) == 0
    return {preset: root / preset for preset in ("ppo", "ppo_conservative", "ppo_safe")}


@pytest.fixture(scope="module")
def finals(runs: dict[str, Path]) -> dict[str, dict[str, torch.Tensor]]:
    return {preset: _tensors(Path(RunDir(run).read_summary()["final_checkpoint"])) for preset, run in runs.items()}


def test_the_conservative_run_carries_its_bounds(runs: dict[str, Path]) -> None:
    # What makes the bit-for-bit test below mean something: the bounds are in the run, not lost on the way.
    def actor(preset: str) -> dict:
        return RunDir(runs[preset]).read_train_cfg().train_cfg["actor"]

    conservative, ppo = actor("ppo_conservative"), actor("ppo")
    assert conservative["obs_clip"] == 10.0 and ppo["obs_clip"] is None
    # The preset's std floor is in the run (its config), and the Ant's own floor (0.4, configs/agent/ant.yaml), above
    # it, is what rsl-rl got.
    assert RunDir(runs["ppo_conservative"]).read_config()["actor"]["distribution_cfg"]["std_floor"] == 0.05
    assert conservative["distribution_cfg"]["std_range"][0] == ppo["distribution_cfg"]["std_range"][0] == 0.4


def test_conservative_bounds_that_do_not_bind_leave_the_training_as_ppos(finals: dict) -> None:
    ppo, conservative = finals["ppo"], finals["ppo_conservative"]
    assert ppo.keys() == conservative.keys() and len(ppo) > 10
    differing = [key for key in ppo if not torch.equal(ppo[key], conservative[key])]
    assert differing == []


def test_a_preset_that_changes_the_update_parts_from_ppo_at_once(finals: dict) -> None:
    # The same comparison sees a change of the update: ppo_safe's first step is taken at 3e-5, not 1e-3 (checked after
    # the two iterations).
    ppo, safe = finals["ppo"], finals["ppo_safe"]
    assert ppo.keys() == safe.keys()
    assert not torch.equal(ppo["actor_state_dict/mlp.0.weight"], safe["actor_state_dict/mlp.0.weight"])

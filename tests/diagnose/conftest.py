"""Fixtures of the diagnose tests: run directories with real Ant incidents, built once per session.

Tests that change a run directory (corrupt it, write scripts into it) take a copy (``copy_run``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from diagnose_factory import act, drive_ant, make_actor, save_policy, write_config, write_events

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0, as tools/diagnose.py does)

#: The bad actions of the ``bad_actions_run``: step -> (component, value); 1e10 at step 40 is clamped, not recorded.
BAD_ACTIONS: dict[int, tuple[int, float]] = {5: (2, np.nan), 9: (0, np.inf), 30: (7, -np.inf), 40: (3, 1.0e10)}


@pytest.fixture(scope="session")
def bad_actions_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """45 Ant steps with a NaN (step 5, hip_2), +Inf (step 9, hip_1), -Inf (step 30, ankle_4) and 1e10 (step 40)
    action component: three ``nonfinite_action`` records (ids 0, 1, 2), iterations 0, 0 and 3."""
    run = tmp_path_factory.mktemp("bad_actions") / "run"
    recorder = drive_ant(run, 45, bad=BAD_ACTIONS)
    assert recorder.written == 3
    return run


@pytest.fixture(scope="session")
def policy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose policy went NaN: ``model_10.pt`` with a NaN in ``mlp.0.weight`` (saved without the finite-only
    check), a clean ``model_5.pt``, the saved train dict, ``config.yaml``, a gradient-guard event at iteration 9 and
    a rollback at 11, and the incidents of that policy acting in the Ant at iteration 12 (5 steps, so 5 records)."""
    run = tmp_path_factory.mktemp("nan_policy") / "run"
    save_policy(make_actor(), run / "model_5.pt", 5)
    actor = make_actor(nan_layer="mlp.0.weight")
    save_policy(actor, run / "model_10.pt", 10)
    write_config(run)
    write_events(
        run,
        [
            {"iteration": 3, "kind": "checkpoint_refused", "path": "model_3.pt", "layers": []},
            {"iteration": 9, "kind": "grad_guard", "grad_nonfinite_steps": 3, "grad_steps_skipped": 3},
            {"iteration": 11, "kind": "rollback", "what": "non-finite learning state", "snapshot_iteration": 5},
            {"iteration": 20, "kind": "grad_guard", "grad_nonfinite_steps": 1},
        ],
    )
    recorder = drive_ant(run, 5, policy=lambda obs: act(actor, obs), iteration=lambda t: 12)
    assert recorder.written == 5
    return run


@pytest.fixture
def copy_run(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a session run directory into this test's ``tmp_path`` (free to change)."""

    def copy(run: Path) -> Path:
        target = tmp_path / run.parent.name / run.name
        shutil.copytree(run, target)
        return target

    return copy

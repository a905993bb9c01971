"""The clip schedule (``algorithm.clip_param_final``) in a real SafeRunner: each iteration's clip in TensorBoard."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_env import TinyEnv, train_cfg

from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.runner import SafeRunner


def runner(log_dir: Path, **algorithm: float) -> SafeRunner:
    torch.manual_seed(0)
    return SafeRunner(
        TinyEnv(seed=1, num_envs=4), train_cfg(algorithm), log_dir=str(log_dir), device="cpu", files=RunDir(log_dir)
    )


def test_tensorboard_shows_the_clip_of_each_iteration_and_a_resume_carries_on(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # A schedule from 0.3 to 0.1 over 4 iterations (worked: 0.3 - 0.2 * (i + 1) / 4), run as 3 iterations and then
    # 3 more, as a resumed run continues its iteration count: the last two stay at the final value.
    scheduled = runner(tmp_path / "scheduled", clip_param=0.3, clip_param_final=0.1, schedule_iterations=4)
    scheduled.learn(3)
    scheduled.learn(3)
    events = EventAccumulator(str(tmp_path / "scheduled"))
    events.Reload()
    logged = events.Scalars("Train/clip_param")
    assert [e.step for e in logged] == [0, 1, 2, 3, 4, 5]
    assert [e.value for e in logged] == pytest.approx([0.25, 0.2, 0.15, 0.1, 0.1, 0.1], abs=1e-7)
    constant = runner(tmp_path / "constant", clip_param=0.3)
    constant.learn(2)
    events = EventAccumulator(str(tmp_path / "constant"))
    events.Reload()
    assert "Train/clip_param" not in events.Tags()["scalars"] and constant.alg.clip_param == 0.3

"""The clip and entropy schedules (``algorithm.clip_param_final``, ``algorithm.entropy_coef_final``) in a real
SafeRunner and through a real resume of ``tools/train.py``'s ``main``: each iteration's value in TensorBoard."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_env import TinyEnv, train_cfg

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0 for main(); the file may run alone)
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.runner import SafeRunner


def runner(log_dir: Path, **algorithm: float) -> SafeRunner:
    torch.manual_seed(0)
    return SafeRunner(
        TinyEnv(seed=1, num_envs=4), train_cfg(algorithm), log_dir=str(log_dir), device="cpu", files=RunDir(log_dir)
    )


def logged(run_dir: Path, tag: str = "Train/clip_param") -> dict[int, float]:
    """A ``Train/*`` scalar of a run by iteration (rounded to 1e-6); empty when it was not logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return {}
    return {e.step: round(e.value, 6) for e in events.Scalars(tag)}


def test_tensorboard_shows_the_clip_of_each_iteration_and_a_resume_carries_on(tmp_path: Path) -> None:
    # A schedule from 0.3 to 0.1 over 4 iterations (worked: 0.3 - 0.2 * (i + 1) / 4), run as 3 iterations and then
    # 3 more, as a resumed run continues its iteration count: the last two stay at the final value.
    scheduled = runner(tmp_path / "scheduled", clip_param=0.3, clip_param_final=0.1, schedule_iterations=4)
    scheduled.learn(3)
    scheduled.learn(3)
    assert logged(tmp_path / "scheduled") == {0: 0.25, 1: 0.2, 2: 0.15, 3: 0.1, 4: 0.1, 5: 0.1}
    assert logged(tmp_path / "scheduled", "Train/entropy_coef") == {}  # only a scheduled value is logged
    constant = runner(tmp_path / "constant", clip_param=0.3)
    constant.learn(2)
    assert logged(tmp_path / "constant") == {} and constant.alg.clip_param == 0.3


def test_tensorboard_shows_the_entropy_bonus_of_each_iteration(tmp_path: Path) -> None:
    # A bonus from 0.01 to 0 over 4 iterations (worked: 0.01 - 0.01 * (i + 1) / 4), the clip left constant; the fifth
    # iteration is past the span and keeps 0.
    scheduled = runner(tmp_path / "entropy", entropy_coef=0.01, entropy_coef_final=0.0, schedule_iterations=4)
    scheduled.learn(5)
    assert logged(tmp_path / "entropy", "Train/entropy_coef") == {0: 0.0075, 1: 0.005, 2: 0.0025, 3: 0.0, 4: 0.0}
    assert logged(tmp_path / "entropy") == {} and scheduled.alg.clip_param == 0.2


def test_scheduled_values_resume_on_their_own_schedule(tmp_path: Path) -> None:
    # The same clip schedule in tools/train.py's main (the Ant, 2 envs x 8 steps), with an entropy bonus from 0.01 to 0
    # beside it, stopped after iteration 1 and resumed from its checkpoint with the same runner.max_iterations:
    # iterations 2 and 3 get the original run's 0.15 and 0.1 (bonus 0.0025 and 0), and the two iterations past the
    # span keep the final values.
    schedule = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=4"]
    schedule += ["algorithm.clip_param=0.3", "algorithm.clip_param_final=0.1"]
    schedule += ["algorithm.entropy_coef=0.01", "algorithm.entropy_coef_final=0.0"]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main([*schedule, "runner.save_interval=1", f"run_dir={whole}"]) == 0
    assert logged(whole) == {0: 0.25, 1: 0.2, 2: 0.15, 3: 0.1}
    assert main([*schedule, f"resume={whole / 'model_1.pt'}", f"run_dir={resumed}"]) == 0
    assert logged(resumed) == {2: 0.15, 3: 0.1, 4: 0.1, 5: 0.1}
    assert logged(resumed, "Train/entropy_coef") == {2: 0.0025, 3: 0.0, 4: 0.0, 5: 0.0}

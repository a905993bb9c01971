"""tools/sweep.py: Hydra multirun with the Optuna sweeper, each trial scored by the evaluation protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.cli import LEARNING_STEPS
from benchmarks.learning import task_iterations
from robo_safe_rl.apps.evaluate import evaluate
from robo_safe_rl.apps.sweep import OBJECTIVE_KEY, SWEEP_SPLIT, exit_if_unavailable, plugin_missing
from robo_safe_rl.config.compose import compose, config_source
from robo_safe_rl.config.schema import register_configs
from robo_safe_rl.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]


def test_the_sweep_config_composes_over_the_tasks_values() -> None:
    if plugin_missing():
        pytest.skip("hydra-optuna-sweeper is not installed (the `sweep` extra)")
    node = compose(["+sweep=ant", "run_dir=x"])
    assert node.runner.max_iterations == 293 and node.task.num_workers == 0 and node.torch_threads == 1
    assert node.runner.num_steps_per_env == 64  # the Ant's tuned rollout, which the sweep does not change


def test_the_seed_screen_runs_the_learning_budget_on_seeds_no_bench_uses() -> None:
    if plugin_missing():
        pytest.skip("hydra-optuna-sweeper is not installed (the `sweep` extra)")
    node = compose(["+sweep=ant_seeds", "run_dir=x", "algorithm.critic_learning_rate=1e-3"])
    # The learning bench's budget for the Ant (977 iterations of 16 envs x 64 steps), one core a trial.
    assert node.runner.max_iterations == task_iterations("ant", LEARNING_STEPS)
    assert node.task.num_workers == 0 and node.torch_threads == 1
    assert node.algorithm.critic_learning_rate == 1e-3  # the change comes from the command line, beside the grid
    # The seeds: a grid dimension of the sweeper, none of the six the learning and presets benches train.
    sweep = yaml.safe_load((REPO / "configs/sweep/ant_seeds.yaml").read_text(encoding="utf-8"))
    choice = sweep["hydra"]["sweeper"]["params"]["seed"]
    seeds = {int(s) for s in choice.removeprefix("choice(").removesuffix(")").split(",")}
    assert len(seeds) == 4 and not seeds & set(range(1, 7))


#: The sweeps of configs/sweep/: every file but the shared base.
SWEEPS = sorted(p.stem for p in (REPO / "configs/sweep").glob("*.yaml") if p.stem != "base")


@pytest.mark.parametrize("name", SWEEPS)
def test_every_sweep_takes_the_shared_base(name: str) -> None:
    # configs/sweep/base.yaml holds what the sweeps share; a sweep file that does not take it first would run trials
    # on both cores with a sweeper that stops at the first failed trial (Hydra's and the sweeper's own defaults).
    if plugin_missing():
        pytest.skip("hydra-optuna-sweeper is not installed (the `sweep` extra)")
    register_configs()
    with initialize_config_dir(config_dir=config_source(), version_base="1.3"):
        node = hydra_compose("train", overrides=[f"+sweep={name}", "run_dir=x"], return_hydra_config=True)
    sweeper = node.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert sweeper.storage is None and sweeper.n_jobs == 2 and sweeper.max_failure_rate == 1.0
    assert node.task.num_workers == 0 and node.torch_threads == 1
    assert sweeper.params  # each sweep brings its own params; the base has none


def test_without_the_sweeper_the_tool_says_what_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    if not plugin_missing():
        pytest.skip("hydra-optuna-sweeper is installed here")
    with pytest.raises(SystemExit) as stop:
        exit_if_unavailable()
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("sweep: ") and "robo-safe-rl[sweep]" in line


def sweep_tiny(*args: str) -> subprocess.CompletedProcess[str]:
    """``tools/sweep.py --multirun`` with ``args`` over tiny trials: 2 envs x 8 steps x 2 iterations of the Ant with
    20-step episodes, so each trial trains and is scored in seconds."""
    tiny = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2"]
    tiny += ["+task.env_kwargs.max_episode_steps=20"]
    return subprocess.run(
        [sys.executable, "tools/sweep.py", "--multirun", *args, *tiny],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )


@pytest.mark.slow
def test_a_two_trial_sweep_reports_the_evaluation_return(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep_dir = tmp_path / "sweep"
    sweep = ["hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", f"hydra.sweep.dir={sweep_dir}"]
    done = sweep_tiny("+sweep=ant", *sweep)
    assert done.returncode == 0, done.stderr[-2000:]
    reported = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(f'{{"{OBJECTIVE_KEY}"')]
    assert [Path(r["run_dir"]).name for r in reported] == ["0", "1"]
    for r in reported:
        # Each trial is a run directory of its own, and its objective is the evaluation protocol's mean return of
        # its final checkpoint on the validation seeds: evaluated again here, the same number.
        assert RunDir(r["run_dir"]).read_summary()["status"] == "completed"
        assert evaluate(r["run_dir"], split=SWEEP_SPLIT).mean_return == r[OBJECTIVE_KEY]
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text(encoding="utf-8"))
    assert best["best_value"] == max(r[OBJECTIVE_KEY] for r in reported)


@pytest.mark.slow
def test_a_grid_sweep_runs_its_trials_in_parallel_processes(tmp_path: Path) -> None:
    # The grid sweep with Hydra's joblib launcher: each trial runs in a worker process, which registers the tasks
    # itself (before that fix every trial exited 2 there). The grid is narrowed to two trials on the command line (a
    # command-line choice() replaces the config's dimension of that key).
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep_dir = tmp_path / "sweep"
    grid = [
        "algorithm.use_clipped_value_loss=choice(true)",
        "actor.distribution_cfg.init_std=choice(1.0)",
        "algorithm.num_learning_epochs=choice(1,2)",
    ]
    launcher = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep_dir}"]
    done = sweep_tiny("+sweep=ant_grid", *grid, *launcher)
    assert done.returncode == 0, done.stderr[-2000:]
    trained = [d for d in sorted(sweep_dir.iterdir()) if d.is_dir() and RunDir(d).checkpoints()]
    assert len(trained) == 2
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text(encoding="utf-8"))
    assert best["best_value"] == max(evaluate(d, split=SWEEP_SPLIT).mean_return for d in trained)


@pytest.mark.slow
def test_a_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # Three trials of Optuna's seeded TPE over 1 or 0 learning epochs propose 0, 0, 1 (optuna 2.10, seed 1). Training
    # refuses 0 (exit 2): the trial raises TrialFailed, the sweeper records it as failed (max_failure_rate: 1.0), and
    # the sweep ends normally with the third trial as the best. Returning NaN instead stopped the whole sweep.
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep_dir = tmp_path / "sweep"
    choices = [
        "algorithm.use_clipped_value_loss=choice(true)",
        "actor.distribution_cfg.init_std=choice(1.0)",
        "algorithm.num_learning_epochs=choice(1,0)",
    ]
    tpe = ["hydra/sweeper/sampler=tpe", "hydra.sweeper.sampler.seed=1", "hydra.sweeper.n_trials=3"]
    done = sweep_tiny("+sweep=ant_grid", *tpe, "hydra.sweeper.n_jobs=1", *choices, f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert said.count("Failed experiment: trial") == 2  # the sweeper's record of each refused trial
    assert "algorithm.num_learning_epochs" in said  # and training's one line naming the refused key
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text(encoding="utf-8"))
    assert best["best_params"]["algorithm.num_learning_epochs"] == 1
    (trained,) = [d for d in sorted(sweep_dir.iterdir()) if d.is_dir() and RunDir(d).checkpoints()]
    assert best["best_value"] == evaluate(trained, split=SWEEP_SPLIT).mean_return

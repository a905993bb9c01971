"""Resume by run, experiment folder or `latest`, keeping the saved run's task, algorithm and networks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.resume import find_run
from robo_safe_rl.apps.train import main
from robo_safe_rl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
#: Seconds of CPU: 2 envs x 8 steps, one iteration.
TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=1"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<tmp>/logs/exp/first``: a ppo_conservative run with 50-step episodes (not the task's 1000), as ``make train``
    shortens them; only ``model_0.pt``."""
    root = tmp_path_factory.mktemp("resume") / "logs"
    first = root / "exp" / "first"
    args = [*TINY, "algo=ppo_conservative", "task.max_episode_steps=50", "runner.experiment_name=exp"]
    args.append("algorithm.entropy_coef=0.003")  # an algorithm value of the saved run's own (the task's is 0.005)
    assert main([*args, f"run_dir={first}", "seed=3"]) == 0
    return root


def _config(run_dir: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))


def test_resuming_an_experiment_folder_takes_its_newest_run_and_its_settings(logs: Path, tmp_path: Path) -> None:
    # Without `algo=ppo_conservative` this died with a cut-off "Error(s) in loading state_dict" (the saved networks
    # had observation normalisers, the generic defaults have none), and the 50-step episodes silently became 1000-step
    # ones.
    resumed = tmp_path / "resumed"
    assert main([*TINY, f"resume={logs / 'exp'}", "algorithm.learning_rate=1e-4", f"run_dir={resumed}"]) == 0
    config = _config(resumed)
    assert config["resume"] == str(logs / "exp" / "first")
    assert config["task"]["max_episode_steps"] == 50
    assert config["actor"]["obs_normalization"] is True and config["critic"]["obs_clip"] == 10.0
    assert config["actor"]["distribution_cfg"]["std_floor"] == 0.05  # the saved preset's value ...
    assert config["algorithm"]["entropy_coef"] == 0.003  # ... and the saved run's own ...
    assert config["algorithm"]["learning_rate"] == 1e-4  # ... except where the command line says otherwise
    assert torch.load(resumed / "model_1.pt", weights_only=True)["iter"] == 1  # continued after iteration 0


def test_resume_latest_is_the_newest_run_of_this_experiment(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(logs.parent)  # `latest` looks in logs/<runner.experiment_name>, as the default run_dir writes
    second = Path("logs/exp/second")
    try:
        assert main([*TINY, "runner.experiment_name=exp", "resume=latest", f"run_dir={second}"]) == 0
        assert _config(second)["resume"] == str(Path("logs/exp/first"))
        assert _config(second)["actor"]["obs_normalization"] is True
    finally:
        shutil.rmtree(second, ignore_errors=True)  # the module's runs stay as the other tests expect them


@pytest.mark.parametrize(
    ("override", "mine", "saved"),
    [
        ("actor.obs_normalization=false", "actor.obs_normalization=False", "actor.obs_normalization=True"),
        ("actor.hidden_dims=[64,64]", "actor.hidden_dims=[64, 64]", "actor.hidden_dims=[256, 256]"),
        ("task.env_id=RoboSafe/Other-v0", "task.env_id='RoboSafe/Other-v0'", "task.env_id='RoboSafe/Ant-v0'"),
        ("runner.normalize_rewards=false", "runner.normalize_rewards=False", "runner.normalize_rewards=True"),
        (
            "actor.distribution_cfg.noise=gsde",
            "actor.distribution_cfg.noise='gsde'",
            "actor.distribution_cfg.noise='gaussian'",
        ),
    ],
)
def test_an_override_that_changes_the_networks_or_the_task_is_refused(
    override: str, mine: str, saved: str, logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "never"
    assert main([*TINY, f"resume={logs / 'exp' / 'first'}", override, f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"invalid config value {mine}: resume=" in err and f"was trained with {saved}" in err
    assert not run_dir.exists()


def test_the_tool_refuses_a_conflicting_resume_before_hydra_makes_the_run_dir(logs: Path, tmp_path: Path) -> None:
    never = tmp_path / "never"
    done = subprocess.run(
        [
            sys.executable,
            "tools/train.py",
            *TINY,
            f"resume={logs / 'exp'}",
            "actor.obs_normalization=false",
            f"run_dir={never}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "invalid config value actor.obs_normalization=False: resume=" in line
    assert not never.exists()


def test_the_newest_run_is_the_one_that_saved_last_not_the_first_name(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = tmp_path / "exp"
    for name, age in (("a_newer", 0), ("b_older", 3600)):
        run = experiment / name
        shutil.copytree(logs / "exp" / "first", run)
        stamp = (run / "model_0.pt").stat().st_mtime - age
        os.utime(run / "model_0.pt", (stamp, stamp))
    (experiment / "c_newest_without_checkpoint").mkdir()  # e.g. the folder Hydra makes for the new run itself
    assert find_run(str(experiment), "exp") == (experiment / "a_newer", experiment / "a_newer")
    assert find_run(str(experiment / "b_older" / "model_0.pt"), "exp")[1] == experiment / "b_older"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs" / "empty").mkdir(parents=True)
    with pytest.raises(
        ConfigError, match=r"resume='latest': logs/empty holds no model_<iter>\.pt and no run directory"
    ):
        find_run("latest", "empty")


def test_a_saved_config_of_another_layout_is_refused_naming_the_key(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    shutil.copytree(logs / "exp" / "first", old)
    config = _config(old)
    config["algo"] = {"learning_rate": 3e-4, **config.pop("algorithm")}  # the flat `algo` node of earlier versions
    (old / "config.yaml").write_text(OmegaConf.to_yaml(config))
    assert main([*TINY, f"resume={old}", f"run_dir={tmp_path / 'never'}"]) == 2
    err = capsys.readouterr().err
    assert "config.yaml: invalid config key algo." in err and "did you mean algorithm." in err


def test_a_run_saved_before_reward_scaling_existed_resumes_without_it(logs: Path, tmp_path: Path) -> None:
    # A run of an earlier version: its config has no runner.normalize_rewards and its checkpoint no scaler statistics.
    # It trained without scaling, so it resumes without it although the Ant's recipe now turns it on.
    old = tmp_path / "old"
    shutil.copytree(logs / "exp" / "first", old)
    config = _config(old)
    assert config["runner"].pop("normalize_rewards") is True
    (old / "config.yaml").write_text(OmegaConf.to_yaml(config))
    checkpoint = torch.load(old / "model_0.pt", weights_only=True)
    del checkpoint["reward_scaler_state_dict"]
    torch.save(checkpoint, old / "model_0.pt")
    resumed = tmp_path / "resumed"
    assert main([*TINY, f"resume={old}", f"run_dir={resumed}"]) == 0
    assert _config(resumed)["runner"]["normalize_rewards"] is False
    assert "reward_scaler_state_dict" not in torch.load(resumed / "model_1.pt", weights_only=True)


def test_a_resumed_run_goes_on_with_the_tasks_curriculum(tmp_path: Path) -> None:
    # The A1's action-rate penalty joins once each env has taken 8 policy steps (2 iterations of 4 steps); episodes of
    # 4 steps log it every iteration. Resumed after those 2 iterations, the run pays it from its first iteration: a
    # resumed env whose step clock counted from 0 again would pay nothing for 2 more iterations.
    from benchmarks.runs import scalars

    change = "{weight:-0.01,num_steps:8}"
    args = ["task=a1_flat", "task.num_envs=2", "runner.num_steps_per_env=4", "task.max_episode_steps=4"]
    args += ["task.env_kwargs.rewards.action_rate_l2=0", f"+task.env_kwargs.curriculum.action_rate_l2={change}"]
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    assert main([*args, "runner.max_iterations=2", f"run_dir={first}"]) == 0
    assert main(["runner.max_iterations=1", f"resume={first}", f"run_dir={resumed}"]) == 0
    tag = "Episode_Reward/action_rate_l2"
    assert [(it, value) for it, _, value in scalars(first, tag)] == [(0, 0.0), (1, 0.0)]
    [(iteration, _, paid)] = scalars(resumed, tag)
    assert iteration == 2 and paid < 0.0

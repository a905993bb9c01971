"""Config validation: a typo or an out-of-range value fails before anything is built, naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0: the task is checked before a run starts)
from robo_safe_rl.apps.train import main, to_train_config
from robo_safe_rl.config.agent import AlgorithmConfig, DistributionConfig
from robo_safe_rl.config.compose import compose
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError


def test_defaults_compose_to_the_documented_values(tmp_path: Path) -> None:
    cfg = to_train_config(compose([f"run_dir={tmp_path}"]))
    assert isinstance(cfg, TrainConfig)
    assert (cfg.task.name, cfg.task.env_id, cfg.task.num_envs) == ("ant", "RoboSafe/Ant-v0", 16)
    # rsl-rl / Isaac Lab locomotion defaults (the schema's), with the KL target and entropy of
    # configs/agent/bullet_locomotion.yaml.
    algo = cfg.algorithm
    assert (algo.learning_rate, algo.schedule.value, algo.desired_kl, algo.max_grad_norm) == (
        1e-3,
        "adaptive",
        0.02,
        1.0,
    )
    assert (algo.num_learning_epochs, algo.num_mini_batches, algo.clip_param) == (5, 4, 0.2)
    assert (algo.gamma, algo.lam, algo.entropy_coef) == (0.99, 0.95, 0.005)
    assert cfg.runner.normalize_rewards is True
    assert cfg.runner.experiment_name == "ant"
    assert cfg.safety.grad_guard.mode.name == "skip"
    assert not cfg.faults.env.enabled and not cfg.faults.grad.enabled


def test_default_run_dir_is_under_logs_experiment() -> None:
    cfg = to_train_config(compose(["runner.experiment_name=probe"]))
    parts = Path(cfg.run_dir).parts
    assert parts[:2] == ("logs", "probe") and len(parts) == 3


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("task.num_envs=0", "task.num_envs"),
        ("algorithm.learning_rate=-1e-3", "algorithm.learning_rate"),
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("algorithm.desired_kl=0", "algorithm.desired_kl"),
        ("actor.hidden_dims=[]", "actor.hidden_dims"),
        ("critic.obs_clip=0", "critic.obs_clip"),
        ("actor.distribution_cfg.std_range=[0.5,0.1]", "actor.distribution_cfg.std_range[1]"),
        ("runner.reward_clip=-1", "runner.reward_clip"),
        ("runner.max_iterations=0", "runner.max_iterations"),
        ("device=gpu", "device"),
        ("faults.env.obs_nonfinite=2", "faults.env.obs_nonfinite"),
        ("safety.step.penalty=5", "safety.step.penalty"),
        ("critic.activation=relu6", "critic.activation"),
        ("task.num_envs=1 runner.num_steps_per_env=2", "algorithm.num_mini_batches"),
        ("+task.env_kwargs.bogus=1", "task.env_kwargs"),
    ],
)
def test_invalid_values_exit_2_naming_the_key(
    override: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main([*override.split(), f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert key in err and "expected" in err
    assert not run_dir.exists()  # nothing was built or written


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("task.num_env=4", "num_env"),  # a typo of num_envs
        ("algorithm.learning_rat=1e-3", "learning_rat"),
        ("task.num_envs=many", "num_envs"),
        ("algo=ppo_fast", "ppo_fast"),
        ("safety.grad_guard.mode=sometimes", "sometimes"),
    ],
)
def test_unknown_keys_and_bad_types_exit_2(override: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_schema_checks_hold_outside_hydra_too() -> None:
    with pytest.raises(
        ConfigError, match=r"actor\.distribution_cfg\.std_range\[1\]=0\.5: expected a finite number in \(1\.0, "
    ):
        DistributionConfig(std_range=[1.0, 0.5])
    with pytest.raises(
        ConfigError, match=re.escape("algorithm.desired_kl=None: expected a number when algorithm.schedule=adaptive")
    ):
        AlgorithmConfig(desired_kl=None)
    with pytest.raises(
        ConfigError, match=re.escape("algorithm.clip_param_final=1.5: expected a finite number in [0.0, 1.0]")
    ):
        AlgorithmConfig(clip_param_final=1.5)
    with pytest.raises(
        ConfigError, match=re.escape("algorithm.entropy_coef_final=-0.01: expected a finite number in [0.0, 1000.0]")
    ):
        AlgorithmConfig(entropy_coef_final=-0.01)
    with pytest.raises(
        ConfigError, match=re.escape("algorithm.critic_learning_rate=0.0: expected a finite number in (0.0, 1.0]")
    ):
        AlgorithmConfig(critic_learning_rate=0.0)
    for floor in (0.0, 2.0):  # a floor must leave the std room under std_range's maximum
        with pytest.raises(
            ConfigError,
            match=re.escape(f"actor.distribution_cfg.std_floor={floor}: expected a finite number in (0.0, 1.0]"),
        ):
            DistributionConfig(std_range=[0.1, 1.0], std_floor=floor)


def test_resume_refuses_a_corrupt_or_foreign_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    bad = tmp_path / "model_5.pt"
    torch.save({"actor_state_dict": {"mlp.0.weight": torch.full((2, 2), float("nan"))}, "iter": 5}, bad)
    text = tmp_path / "model_6.pt"
    text.write_text("not a checkpoint")
    for path, needle in ((bad, "non-finite tensor"), (text, "model_6.pt")):
        run_dir = tmp_path / f"run_{path.stem}"
        assert main([f"resume={path}", f"run_dir={run_dir}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "resume=" in err and needle in err
        assert not run_dir.exists()

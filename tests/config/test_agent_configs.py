"""Per-task tuned values: ``task=X`` brings ``configs/agent/X.yaml``; presets and overrides change them; a task without
one keeps the schema's generic defaults; a bad value in an agent file fails typed, naming the key."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import yaml
from hydra.errors import HydraException
from omegaconf import DictConfig

from robo_safe_rl.apps.train import to_train_config
from robo_safe_rl.config.agent import AlgorithmConfig, Noise, RunnerConfig, StdType
from robo_safe_rl.config.compose import compose, config_source
from robo_safe_rl.config.schema import register_configs
from robo_safe_rl.errors import ConfigError

#: The Bullet locomotion recipe, which each of the four tasks' agent files starts from.
AGENT_ANT = yaml.safe_load((Path(config_source()) / "agent" / "bullet_locomotion.yaml").read_text(encoding="utf-8"))


def test_the_ant_brings_its_tuned_values() -> None:
    cfg = to_train_config(compose(["run_dir=x"]))
    assert cfg.runner.num_steps_per_env == AGENT_ANT["runner"]["num_steps_per_env"] != RunnerConfig().num_steps_per_env
    assert cfg.runner.normalize_rewards is AGENT_ANT["runner"]["normalize_rewards"] is True
    assert RunnerConfig().normalize_rewards is False
    assert cfg.algorithm.use_clipped_value_loss is AGENT_ANT["algorithm"]["use_clipped_value_loss"] is False
    assert cfg.actor.hidden_dims == AGENT_ANT["actor"]["hidden_dims"] == cfg.critic.hidden_dims
    # The recipe's KL target and entropy, over the schema's generic ones.
    assert cfg.algorithm.desired_kl == AGENT_ANT["algorithm"]["desired_kl"] == 0.02 != AlgorithmConfig().desired_kl
    assert (
        cfg.algorithm.entropy_coef == AGENT_ANT["algorithm"]["entropy_coef"] == 0.005 != AlgorithmConfig().entropy_coef
    )


def test_the_half_cheetah_brings_the_locomotion_recipe() -> None:
    cfg = to_train_config(compose(["task=half_cheetah", "run_dir=x"]))
    assert cfg.runner.num_steps_per_env == AGENT_ANT["runner"]["num_steps_per_env"]
    assert cfg.actor.obs_normalization is AGENT_ANT["actor"]["obs_normalization"] is True
    assert (cfg.algorithm.desired_kl, cfg.algorithm.entropy_coef) == (0.02, 0.005)  # the recipe's, as the Ant's


@pytest.mark.parametrize("task", ["hopper", "walker2d"])
def test_the_hopper_and_the_walker2d_bring_rl_zoos_recipe_over_the_shared_one(task: str) -> None:
    cfg = to_train_config(compose([f"task={task}", "run_dir=x"]))
    # rl-baselines3-zoo's values for both (hyperparams/ppo.yml), in rsl-rl's terms: n_steps 512 with 16
    # envs, batch_size 128 = 8,192 / 64 mini-batches, a constant rate, clip_range's start value.
    assert cfg.task.num_envs * cfg.runner.num_steps_per_env == 8192
    assert cfg.task.num_envs * cfg.runner.num_steps_per_env // cfg.algorithm.num_mini_batches == 128
    algo = cfg.algorithm
    assert (algo.schedule.value, algo.learning_rate, algo.num_learning_epochs) == ("fixed", 3e-5, 20)
    assert (algo.clip_param, algo.entropy_coef, algo.lam, algo.max_grad_norm, algo.value_loss_coef) == (
        0.4,
        0.0,
        0.9,
        0.5,
        0.5,
    )
    assert cfg.actor.activation == cfg.critic.activation == "relu"
    # What it shares with the locomotion recipe.
    assert cfg.runner.normalize_rewards is AGENT_ANT["runner"]["normalize_rewards"] is True
    assert cfg.actor.hidden_dims == AGENT_ANT["actor"]["hidden_dims"] == cfg.critic.hidden_dims
    assert cfg.algorithm.use_clipped_value_loss is False


def test_the_hopper_and_the_walker2d_explore_with_gsde_and_the_others_with_the_gaussian() -> None:
    for task in ("ant", "half_cheetah", "hopper", "walker2d"):
        dist = to_train_config(compose([f"task={task}", "run_dir=x"])).actor.distribution_cfg
        gsde = task in ("hopper", "walker2d")
        assert (dist.noise, dist.std_type) == ((Noise.gsde, StdType.log) if gsde else (Noise.gaussian, StdType.scalar))
        # The locomotion recipe's initial std, or rl-zoo's start (configs/agent/bullet_zoo.yaml).
        assert dist.init_std == (0.35 if gsde else AGENT_ANT["actor"]["distribution_cfg"]["init_std"])


def test_the_zoo_recipes_init_std_is_stable_baselines3s_initial_action_std() -> None:
    # rl-zoo's log_std_init -2 scales Stable-Baselines3's gSDE features, the raw last hidden layer ([256, 256] ReLU,
    # torch's default init); on inputs of unit variance (normalised observations, the Walker2D's 22) their norm sets
    # the initial action std. This distribution's unit-norm features make init_std that std itself.
    import torch
    from torch import nn

    init_std = to_train_config(compose(["task=walker2d", "run_dir=x"])).actor.distribution_cfg.init_std
    starts = []
    for seed in range(5):
        torch.manual_seed(seed)
        hidden = nn.Sequential(nn.Linear(22, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        with torch.no_grad():
            starts.append(math.exp(-2.0) * hidden(torch.randn(4096, 22)).norm(dim=1).median().item())
    assert min(starts) > 0.34 and max(starts) < 0.38  # 0.349-0.373 over these seeds (BENCHMARKS.md)
    assert min(starts) - 0.01 <= init_std <= max(starts)


def test_an_override_and_a_preset_change_the_tuned_values() -> None:
    cfg = to_train_config(compose(["run_dir=x", "runner.num_steps_per_env=32", "algo=ppo_conservative"]))
    assert cfg.runner.num_steps_per_env == 32  # the user's, over the task's
    assert cfg.actor.obs_clip == 10.0  # the preset's change
    assert cfg.runner.normalize_rewards is AGENT_ANT["runner"]["normalize_rewards"]  # the task's; the preset keeps it


def test_without_the_agent_file_the_generic_defaults_apply() -> None:
    cfg = to_train_config(compose(["run_dir=x", "~agent"]))
    assert cfg.runner.num_steps_per_env == RunnerConfig().num_steps_per_env
    assert cfg.algorithm.use_clipped_value_loss is AlgorithmConfig().use_clipped_value_loss
    assert cfg.runner.normalize_rewards is RunnerConfig().normalize_rewards


def _compose_in(configs: Path, overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A copy of the configs with a new task, ``hop``, which has no agent file yet."""
    root = tmp_path / "configs"
    shutil.copytree(config_source(), root)
    (root / "task" / "hop.yaml").write_text("name: hop\nenv_id: RoboSafe/Ant-v0\n", encoding="utf-8")
    return root


def test_a_new_task_gets_the_generic_defaults_then_its_own_file(configs: Path) -> None:
    cfg = to_train_config(_compose_in(configs, ["task=hop", "run_dir=x"]))
    assert cfg.runner.num_steps_per_env == RunnerConfig().num_steps_per_env and cfg.task.name == "hop"
    (configs / "agent" / "hop.yaml").write_text("# @package _global_\nalgorithm:\n  lam: 0.9\n", encoding="utf-8")
    cfg = to_train_config(_compose_in(configs, ["task=hop", "run_dir=x"]))
    assert cfg.algorithm.lam == 0.9 and cfg.runner.num_steps_per_env == RunnerConfig().num_steps_per_env
    # The preset changes its keys over the new task's values, and leaves lam to the task.
    cfg = to_train_config(_compose_in(configs, ["task=hop", "run_dir=x", "algo=ppo_conservative"]))
    assert cfg.algorithm.lam == 0.9 and cfg.actor.obs_clip == 10.0


def test_a_bad_agent_file_fails_naming_the_key(configs: Path) -> None:
    agent = configs / "agent" / "hop.yaml"
    # A value out of range: the schema's check, at conversion (tools/train.py: exit 2 with this line).
    agent.write_text("# @package _global_\nalgorithm:\n  learning_rate: -1.0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"algorithm\.learning_rate"):
        to_train_config(_compose_in(configs, ["task=hop", "run_dir=x"]))
    # A misspelt key: the structured config refuses it while composing (tools/train.py: exit 2, Hydra's reason).
    agent.write_text("# @package _global_\nalgorithm:\n  learnin_rate: 1.0e-3\n", encoding="utf-8")
    with pytest.raises(HydraException, match=r"In 'agent/hop'.*\n.*learnin_rate"):
        _compose_in(configs, ["task=hop", "run_dir=x"])

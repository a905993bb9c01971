"""The config maps onto rsl-rl's train dict by path, and the presets set what their YAML says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rsl_rl.utils import WandbLogWriter, resolve_callable

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main, to_train_config
from robo_safe_rl.config.compose import compose
from robo_safe_rl.config.keys import leaf_keys
from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg

#: The prefixes of the actor's distribution keys that are this project's: noise, noise_features, noise_interval, and
#: std_floor (folded into std_range's minimum).
OWN_DISTRIBUTION_KEYS = ("actor.distribution_cfg.noise", "actor.distribution_cfg.std_floor")


def _cfg(*overrides: str) -> Any:
    return to_train_config(compose([*overrides, "run_dir=unused"]))


def _at(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


@pytest.mark.parametrize("preset", ["ppo", "ppo_conservative", "ppo_safe"])
def test_every_key_lands_at_its_path_in_rsl_rls_dict(preset: str) -> None:
    node = compose([f"algo={preset}", "run_dir=unused"])
    train = build_rsl_rl_cfg(to_train_config(node), "unused")
    config = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    checked = 0
    for key in leaf_keys():
        section, _, rest = key.partition(".")
        if section not in ("runner", "algorithm", "actor", "critic") or key == "runner.logger":
            continue  # runner.logger takes rsl-rl's own form (below)
        if key.startswith(OWN_DISTRIBUTION_KEYS):
            continue  # the distribution's choice and gSDE's keys: not for rsl-rl's Gaussian (below)
        if key.startswith("algorithm.symmetry_cfg."):
            continue  # rsl-rl's symmetry_cfg is None while both uses are off (below)
        # The runner's keys are the top level of rsl-rl's dict; the others keep their node.
        expected = _at(config, key)
        if key == "actor.distribution_cfg.std_range" and _at(config, "actor.distribution_cfg.std_floor") is not None:
            expected = [max(expected[0], _at(config, "actor.distribution_cfg.std_floor")), expected[1]]
        assert _at(train, rest if section == "runner" else key) == expected, key
        checked += 1
    # Counted in config/agent.py: 11 runner keys (logger apart: 10), 16 algorithm (symmetry_cfg's 4 apart), 11 actor
    # (7 of them in distribution_cfg, 4 of those the choice of distribution, gSDE's and the floor), 4 critic.
    assert checked == 10 + 16 + (11 - 4) + 4
    assert set(train["actor"]["distribution_cfg"]) == {"class_name", "init_std", "std_type", "std_range"}


def test_symmetry_reaches_rsl_rl_only_when_used() -> None:
    off = "algorithm.symmetry_cfg.use_data_augmentation=false"  # the Ant's recipe (the default task) turns it on
    assert build_rsl_rl_cfg(_cfg(off), "unused")["algorithm"]["symmetry_cfg"] is None  # rsl-rl builds no extension
    on = [off, "algorithm.symmetry_cfg.use_mirror_loss=true", "algorithm.symmetry_cfg.mirror_loss_coeff=0.5"]
    algorithm = build_rsl_rl_cfg(_cfg(*on), "unused")["algorithm"]
    assert algorithm["symmetry_cfg"] == {
        "data_augmentation_func": "robo_safe_rl.training.symmetry:mirror_batch",
        "use_data_augmentation": False,
        "use_mirror_loss": True,
        "mirror_loss_coeff": 0.5,
    }
    # The project's addition goes to SafePPO, not into rsl-rl's Symmetry (which takes no such keyword).
    assert algorithm["mirror_normalization"] is False
    over = [*on, "algorithm.symmetry_cfg.mirror_normalization=true"]
    assert build_rsl_rl_cfg(_cfg(*over), "unused")["algorithm"]["mirror_normalization"] is True


def test_gsde_gets_its_own_class_and_keys() -> None:
    over = ["actor.distribution_cfg.noise=gsde", "actor.distribution_cfg.noise_interval=8"]
    assert build_rsl_rl_cfg(_cfg(*over), "unused")["actor"]["distribution_cfg"] == {
        "class_name": "robo_safe_rl.training.gsde:StateDependentNoiseDistribution",
        "init_std": 0.5,
        "std_type": "scalar",
        "std_range": [0.4, 1.0e6],  # the Ant's floor (configs/agent/ant.yaml)
        "noise_features": 64,
        "noise_interval": 8,
    }


def test_the_schedules_span_the_runs_iterations() -> None:
    # SafePPO's schedules need the run's length: runner.max_iterations goes with every algorithm dict.
    cfg = _cfg("runner.max_iterations=7", "algorithm.clip_param_final=0.1", "algorithm.entropy_coef_final=0.002")
    algorithm = build_rsl_rl_cfg(cfg, "unused")["algorithm"]
    assert algorithm["clip_param_final"] == 0.1 and algorithm["schedule_iterations"] == 7
    assert algorithm["entropy_coef_final"] == 0.002
    default = build_rsl_rl_cfg(_cfg(), "unused")["algorithm"]
    assert default["clip_param_final"] is None and default["entropy_coef_final"] is None


def test_the_critics_rate_reaches_safeppo() -> None:
    algorithm = build_rsl_rl_cfg(_cfg("algorithm.critic_learning_rate=0.0003"), "unused")["algorithm"]
    assert algorithm["critic_learning_rate"] == 3e-4
    assert build_rsl_rl_cfg(_cfg(), "unused")["algorithm"]["critic_learning_rate"] is None


def test_presets_set_what_their_yaml_says() -> None:
    # Worked from configs/agent/bullet_locomotion.yaml and ant.yaml (the task's tuned values over the schema's
    # defaults) and configs/algo/*.yaml (changes over them): ppo changes nothing, ppo_conservative three things (its
    # std floor of 0.05 under the Ant's own 0.4, which stays), ppo_safe two more.
    plain = build_rsl_rl_cfg(_cfg(), "unused")
    assert plain["num_steps_per_env"] == 64 and plain["algorithm"]["entropy_coef"] == 0.005  # the recipe's
    assert plain["algorithm"]["learning_rate"] == 1.0e-3 and plain["algorithm"]["desired_kl"] == 0.02  # the recipe's
    assert plain["normalize_rewards"] is True
    assert plain["algorithm"]["num_mini_batches"] == 4 and plain["algorithm"]["num_learning_epochs"] == 5
    assert plain["actor"]["hidden_dims"] == [256, 256] and plain["critic"]["obs_normalization"] is True
    assert plain["actor"]["obs_clip"] is None and plain["algorithm"]["max_grad_norm"] == 1.0
    assert plain["algorithm"]["use_clipped_value_loss"] is False
    assert plain["actor"]["distribution_cfg"] == {
        "class_name": "rsl_rl.modules.distribution:GaussianDistribution",
        "init_std": 0.5,
        "std_type": "scalar",
        "std_range": [0.4, 1.0e6],
    }
    conservative = build_rsl_rl_cfg(_cfg("algo=ppo_conservative"), "unused")
    assert conservative["algorithm"]["learning_rate"] == 1.0e-3 and conservative["algorithm"]["desired_kl"] == 0.02
    assert conservative["algorithm"]["max_grad_norm"] == 1.0 and conservative["reward_clip"] is None  # the task's
    for model in ("actor", "critic"):
        assert conservative[model]["obs_normalization"] is True and conservative[model]["obs_clip"] == 10.0
        assert conservative[model]["hidden_dims"] == [256, 256]  # the task's, unchanged by the preset
    assert conservative["actor"]["distribution_cfg"]["std_range"] == [0.4, 1.0e6]  # the Ant's floor, not 0.05
    assert conservative["num_steps_per_env"] == 64 and conservative["algorithm"]["entropy_coef"] == 0.005
    assert conservative["normalize_rewards"] is True
    safe = build_rsl_rl_cfg(_cfg("algo=ppo_safe"), "unused")
    assert safe["algorithm"]["learning_rate"] == 3.0e-5 and safe["algorithm"]["desired_kl"] == 0.02
    assert safe["algorithm"]["max_grad_norm"] == 1.0
    assert safe["actor"]["distribution_cfg"]["std_range"] == [0.4, 1.0e6]  # as ppo_conservative's
    assert safe["reward_clip"] == 10.0 and safe["actor"]["obs_clip"] == 10.0 and safe["num_steps_per_env"] == 64


def test_a_presets_std_floor_raises_a_tasks_floor_and_never_lowers_it() -> None:
    # ppo_conservative's std_floor is 0.05. The Hopper has no floor of its own (rsl-rl's 1e-6): the preset's becomes
    # std_range's minimum. The Ant's and the HalfCheetah's own floor of 0.4 is above it and stays. A range set under
    # it (0.02) is raised to it, and its maximum kept.
    def std_range(*overrides: str) -> list[float]:
        return build_rsl_rl_cfg(_cfg(*overrides), "unused")["actor"]["distribution_cfg"]["std_range"]

    assert std_range("task=hopper") == [1.0e-6, 1.0e6]
    assert std_range("task=hopper", "algo=ppo_conservative") == [0.05, 1.0e6]
    assert std_range("task=ant", "algo=ppo_conservative") == [0.4, 1.0e6]
    assert std_range("task=half_cheetah", "algo=ppo_conservative") == [0.4, 1.0e6]
    assert std_range("algo=ppo_conservative", "actor.distribution_cfg.std_range=[0.02,5.0]") == [0.05, 5.0]


def test_the_logger_is_rsl_rls_choice() -> None:
    assert build_rsl_rl_cfg(_cfg(), "unused")["logger"] == "tensorboard"
    wandb = build_rsl_rl_cfg(_cfg("runner.logger=wandb", "runner.wandb_project=legs"), "unused")["logger"]
    # rsl-rl 5.5's dict form (its plain "wandb" string is deprecated): the writer class it resolves, and its kwargs.
    assert resolve_callable(wandb["class_name"]) is WandbLogWriter and wandb["project_name"] == "legs"


def test_a_logger_that_cannot_start_here_fails_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEPTUNE_API_TOKEN", raising=False)
    run_dir = tmp_path / "run"
    assert main(["runner.logger=neptune", f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert "runner.logger=neptune" in err and "expected" in err
    assert not run_dir.exists()

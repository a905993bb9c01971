"""A key the schema does not know fails before anything is built, whatever its Hydra prefix, naming the closest key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main, to_train_config
from robo_safe_rl.config.compose import compose
from robo_safe_rl.config.keys import closest_key, is_known, schema_keys
from robo_safe_rl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("override", "key", "closest"),
    [
        # Hydra adds a `+` or `++` key to the composed config and to_object dropped it: these trained as if unset.
        ("+task.num_env=4", "task.num_env", "task.num_envs"),
        ("++task.num_env=4", "task.num_env", "task.num_envs"),
        ("+algo.learning_rat=1e-4", "algo.learning_rat", "algorithm.learning_rate"),
        ("+runner.save_intervall=5", "runner.save_intervall", "runner.save_interval"),
        ("+runner.loger=wandb", "runner.loger", "runner.logger"),
        ("+actor.distribution_cfg.std_min=0.1", "actor.distribution_cfg.std_min", "actor.distribution_cfg.std_range"),
        # Without a prefix Hydra refuses them too, but its hint is the `+` form; ours names the key meant.
        ("task.num_env=4", "task.num_env", "task.num_envs"),
        ("~task.max_episode_step", "task.max_episode_step", "task.max_episode_steps"),
        # The keys of the older flat `algo` node point to where they went.
        ("algo.learning_rate=3e-4", "algo.learning_rate", "algorithm.learning_rate"),
        ("algo.obs_clip=10", "algo.obs_clip", "actor.obs_clip"),
        # A misspelt config group is a key nobody knows either.
        ("alg=ppo_safe", "alg", "algo"),
    ],
)
def test_unknown_keys_exit_2_naming_the_key_and_the_closest(
    override: str, key: str, closest: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main([override, f"run_dir={run_dir}", "runner.max_iterations=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"invalid config key {key} " in err and f"did you mean {closest}?" in err
    assert not run_dir.exists()  # nothing was built or written


def test_a_plus_on_a_known_key_is_refused_not_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `+` appends; Hydra refuses it for a key that exists. `++` sets it, and the value is really used.
    assert main(["+runner.logger=wandb", f"run_dir={tmp_path / 'run'}"]) == 2
    assert "runner.logger" in capsys.readouterr().err
    assert to_train_config(compose(["++task.num_envs=4", f"run_dir={tmp_path}"])).task.num_envs == 4


def test_the_composed_config_is_checked_too(tmp_path: Path) -> None:
    # compose() itself lets `+` through (as Hydra does); the conversion, which every entry goes through, refuses it.
    node = compose(["+task.num_env=4", "+safety.step.bogus.deep=1", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"invalid config key task\.num_env: .*did you mean task\.num_envs\?") as err:
        to_train_config(node)
    assert "safety.step.bogus.deep" in str(err.value)  # the second unknown key is named as well


def test_open_dicts_take_any_key_and_leaves_none() -> None:
    assert is_known("task.env_kwargs.render_mode") and is_known("task.env_kwargs")
    assert not is_known("task.num_envs.x") and not is_known("actor.distribution_cfg.std_min")
    # Every node of rsl-rl's train dict is in the schema, with rsl-rl's names.
    keys = schema_keys()
    assert {
        "runner.logger",
        "algorithm.desired_kl",
        "actor.distribution_cfg.std_type",
        "critic.obs_normalization",
    } <= set(keys)
    assert closest_key("zzzz") is None


def test_the_tool_refuses_a_plus_typo_before_hydra_makes_a_folder(tmp_path: Path) -> None:
    never = tmp_path / "never"
    done = subprocess.run(
        [sys.executable, "tools/train.py", "+task.num_env=3", f"run_dir={never}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "invalid config key task.num_env " in done.stderr and "did you mean task.num_envs?" in done.stderr
    assert not never.exists()

"""The one policy loader: the actor training built, from the saved train dict and the weights, and nothing else."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import compose, main, to_train_config
from robo_safe_rl.checkpoint.policy import load_policy
from robo_safe_rl.errors import CheckpointError, ConfigError
from robo_safe_rl.rundir import TRAIN_CFG_FILE
from robo_safe_rl.training.env_builder import build_vec_env
from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg
from robo_safe_rl.training.runner import SafeRunner

#: The conservative preset normalises observations and clips the normalised input at 10: both must come back.
ARGS = ["algo=ppo_conservative", "task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("loader") / "run"
    assert main([*ARGS, f"run_dir={run_dir}"]) == 0
    return run_dir


@pytest.fixture
def edited(run: Path, tmp_path: Path) -> Callable[[Callable[[dict], None]], Path]:
    """A copy of the run's newest checkpoint beside its train dict, changed by ``edit(doc)``."""

    def make(edit: Callable[[dict], None]) -> Path:
        shutil.copy(run / "model_1.pt", tmp_path / "model_1.pt")
        doc = json.loads((run / TRAIN_CFG_FILE).read_text())
        edit(doc)
        (tmp_path / TRAIN_CFG_FILE).write_text(json.dumps(doc))
        return tmp_path / "model_1.pt"

    return make


def test_the_loaded_policy_is_the_one_rsl_rl_loads_into_the_training_runner(run: Path, tmp_path: Path) -> None:
    # The reference is Isaac Lab's play idiom: a runner built as training builds it, runner.load, get_inference_policy.
    cfg = to_train_config(compose([*ARGS, f"run_dir={tmp_path}"]))
    runner = SafeRunner(build_vec_env(cfg, incidents_dir=None), build_rsl_rl_cfg(cfg, str(tmp_path)), None, "cpu")
    try:
        runner.load(str(run / "model_1.pt"))
        reference = runner.get_inference_policy("cpu")
    finally:
        runner.env.close()
    policy = load_policy(run)  # a run directory: its newest clean checkpoint
    assert policy.checkpoint == run / "model_1.pt" and policy.iteration == 1
    assert type(policy.actor) is type(reference) and not policy.actor.training
    # Observations far outside the trained statistics: normalised, the input hits the clip of 10.
    obs = TensorDict({"policy": torch.randn(64, 28) * 1e3}, batch_size=[64])
    with torch.inference_mode():
        assert torch.equal(policy.actor(obs), reference(obs))
        assert float(policy.actor.get_latent(obs).abs().max()) == 10.0
    assert int(policy.actor.obs_normalizer.count) == 2 * 2 * 8  # the statistics of two rollouts of 2 envs x 8 steps
    assert policy.act(obs["policy"][0].numpy()).shape == (8,) and policy.act(np.zeros((3, 28))).shape == (3, 8)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("this:Zen", "refused: only classes of rsl_rl and robo_safe_rl are built"),  # importing `this` prints
        ("os:system", "refused"),
        ("builtins.eval", "refused"),
        ("robo_safe_rl.training.models:ClippedMLPModel.__init__", "refused"),
        ("robo_safe_rl.rundir:RunDir", "is not a torch module class"),
        ("rsl_rl.models:NoSuchModel", "not found"),
        (["rsl_rl.models:MLPModel"], "refused"),
    ],
)
def test_class_names_from_disk_are_not_imported_unless_ours(
    edited: Callable, name: object, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = edited(lambda doc: doc["train_cfg"]["actor"].update(class_name=name))
    with pytest.raises(ConfigError) as err:
        load_policy(checkpoint)
    assert str(err.value).startswith(str(checkpoint.parent / TRAIN_CFG_FILE)) and why in str(err.value)
    assert "this" not in sys.modules and capsys.readouterr().out == ""


def test_the_distributions_class_name_is_checked_too(edited: Callable) -> None:
    checkpoint = edited(lambda doc: doc["train_cfg"]["actor"]["distribution_cfg"].update(class_name="subprocess:Popen"))
    with pytest.raises(ConfigError, match="'subprocess:Popen' refused"):
        load_policy(checkpoint)


def test_the_saved_sizes_allocate_nothing(edited: Callable) -> None:
    # 2^20 x 2^20 float32 weights are 4 TiB: built for real, the constructor would fail to allocate them (a
    # ConfigError "does not build a model"). Built on the meta device, the actor exists and only the weights disagree.
    checkpoint = edited(lambda doc: doc["train_cfg"]["actor"].update(hidden_dims=[2**20, 2**20]))
    with pytest.raises(CheckpointError, match=r"mlp.0.weight is \(256, 28\) torch.float32, expected \(1048576, 28\)"):
        load_policy(checkpoint)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda doc: doc.update(num_actions=6), r"distribution.std_param is \(8,\) torch.float32, expected \(6,\)"),
        (lambda doc: doc["obs_shapes"].update(policy=[30]), r"expected \(1, 30\)"),
        (lambda doc: doc["train_cfg"]["actor"].update(obs_normalization=False), "unexpected obs_normalizer._mean"),
    ],
)
def test_weights_that_do_not_fit_the_saved_actor_are_refused(edited: Callable, edit: Callable, why: str) -> None:
    with pytest.raises(CheckpointError, match=f"does not fit the actor of {TRAIN_CFG_FILE} .*{why}"):
        load_policy(edited(edit))


def test_weights_of_another_dtype_are_refused(edited: Callable) -> None:
    checkpoint = edited(lambda doc: None)
    saved = torch.load(checkpoint, weights_only=True)
    saved["actor_state_dict"] = {
        k: v.double() if v.is_floating_point() else v for k, v in saved["actor_state_dict"].items()
    }
    torch.save(saved, checkpoint)
    with pytest.raises(CheckpointError, match=r"torch\.float64, expected"):
        load_policy(checkpoint)


def test_an_actor_entry_the_model_rejects_is_a_config_error(edited: Callable) -> None:
    checkpoint = edited(lambda doc: doc["train_cfg"]["actor"].update(obs_clip=-1.0))
    with pytest.raises(ConfigError, match=r"its actor entry does not build a model \(ConfigError: .*actor\.obs_clip"):
        load_policy(checkpoint)
    checkpoint = edited(lambda doc: doc["train_cfg"]["actor"].update(no_such_argument=1))
    with pytest.raises(ConfigError, match=r"does not build a model .*TypeError.*no_such_argument"):
        load_policy(checkpoint)

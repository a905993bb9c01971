"""Finite-only checkpoints: a clean one is written atomically, a non-finite one refused with a clear warning."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from rsl_rl.algorithms import PPO
from rsl_rl.models import MLPModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.training.recovery import save_checkpoint_if_finite

NAN, INF = float("nan"), float("inf")
NONFINITE = pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "posinf", "neginf"])


@pytest.fixture
def checkpoint() -> dict[str, Any]:
    """rsl-rl's save dict after one PPO update on random data: weights, normaliser buffers and Adam's moments."""
    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.randn(4, 5)}, batch_size=[4])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    gaussian = {"class_name": "GaussianDistribution", "init_std": 1.0}
    actor = MLPModel(obs, groups, "actor", 3, [8], obs_normalization=True, distribution_cfg=gaussian)
    critic = MLPModel(obs, groups, "critic", 1, [8], obs_normalization=True)
    alg = PPO(actor, critic, RolloutStorage("rl", 4, 2, obs, [3], "cpu"), num_learning_epochs=1, num_mini_batches=1)
    for _ in range(2):
        alg.act(obs)
        alg.process_env_step(obs, torch.randn(4), torch.zeros(4, dtype=torch.bool), {})
    alg.compute_returns(obs)
    alg.update()
    return {**alg.save(), "iter": 2, "infos": None}


def test_clean_checkpoint_is_written_atomically(tmp_path: Path, checkpoint: dict[str, Any]) -> None:
    path = tmp_path / "model_2.pt"
    assert save_checkpoint_if_finite(checkpoint, path) == []
    loaded = torch.load(path, weights_only=True)
    assert loaded["iter"] == 2 and loaded["optimizer_state_dict"]["state"]  # Adam's moments are in it
    assert torch.equal(loaded["actor_state_dict"]["mlp.0.weight"], checkpoint["actor_state_dict"]["mlp.0.weight"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_2.pt"]  # no temporary file left behind


@NONFINITE
def test_non_finite_checkpoint_is_refused_and_logged(
    tmp_path: Path, checkpoint: dict[str, Any], caplog: pytest.LogCaptureFixture, value: float
) -> None:
    good = tmp_path / "model_100.pt"
    assert save_checkpoint_if_finite(checkpoint, good) == []
    before = good.read_bytes()
    checkpoint["actor_state_dict"]["distribution.std_param"][0] = value  # (3,): element 0 of 3
    # Adam's state 1 belongs to the actor's first weight, (8 hidden, 5 obs) = 40 elements: all bad, 3 shown.
    checkpoint["optimizer_state_dict"]["state"][1]["exp_avg"].fill_(value)
    bad = tmp_path / "model_150.pt"
    with caplog.at_level(logging.WARNING, logger="robo_safe_rl.training.recovery"):
        refused = save_checkpoint_if_finite(checkpoint, bad)
    assert refused == ["actor_state_dict/distribution.std_param", "optimizer_state_dict/state/1/exp_avg"]
    assert caplog.messages == [
        f"checkpoint {bad} not written: 2 tensor(s) hold non-finite values "
        f"(actor_state_dict/distribution.std_param: 1 of 3 elements non-finite: [0]={value}; "
        f"optimizer_state_dict/state/1/exp_avg: 40 of 40 elements non-finite: [0]={value}, [1]={value}, "
        f"[2]={value}, ... (37 more)); expected all finite. The previous checkpoint stays the newest."
    ]
    assert not bad.exists() and good.read_bytes() == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@NONFINITE
def test_cuda_checkpoint(tmp_path: Path, checkpoint: dict[str, Any], value: float) -> None:
    on_gpu = {
        key: {k: v.cuda() for k, v in part.items()} if key.endswith("state_dict") and "optimizer" not in key else part
        for key, part in checkpoint.items()
    }
    path = tmp_path / "model_2.pt"
    assert save_checkpoint_if_finite(on_gpu, path) == []
    assert torch.load(path, weights_only=True)["actor_state_dict"]["mlp.0.weight"].device.type == "cuda"
    on_gpu["critic_state_dict"]["mlp.0.weight"][1, 2] = value
    assert save_checkpoint_if_finite(on_gpu, tmp_path / "model_3.pt") == ["critic_state_dict/mlp.0.weight"]
    assert not (tmp_path / "model_3.pt").exists()

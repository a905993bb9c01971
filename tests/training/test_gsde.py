"""The gSDE distribution: its std, log-probability and held noise from worked examples, and a real training with it
that evaluates and exports as its mean."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from hydra.errors import ConfigCompositionException

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.export import main as export_main
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.apps.train import to_train_config
from robo_safe_rl.checkpoint.policy import load_policy
from robo_safe_rl.config.compose import compose
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import POLICY_JIT_FILE, POLICY_ONNX_FILE
from robo_safe_rl.training.gsde import StateDependentNoiseDistribution

#: sigma of the worked examples: 2 features x 2 actions.
SIGMA = torch.tensor([[0.3, 0.1], [0.4, 0.2]])


def _worked(interval: int = 4, std_type: str = "scalar") -> StateDependentNoiseDistribution:
    dist = StateDependentNoiseDistribution(
        2, init_std=0.5, std_type=std_type, noise_features=2, noise_interval=interval
    )
    with torch.no_grad():
        if std_type == "scalar":
            dist.sigma_param.copy_(SIGMA)
        else:
            dist.log_sigma_param.copy_(SIGMA.log())
    return dist


def _output(mean: list[float], features: list[float]) -> torch.Tensor:
    """One MLP output row: the mean, then the (unnormalised) features."""
    return torch.tensor([[*mean, *features]])


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_std_and_log_prob_of_a_worked_example(std_type: str) -> None:
    dist = _worked(std_type=std_type)
    # Features (3, 4) have norm 5: unit features (0.6, 0.8). std_a = sqrt(0.36 sigma_0a^2 + 0.64 sigma_1a^2):
    # action 0: sqrt(0.36 * 0.09 + 0.64 * 0.16) = sqrt(0.1348); action 1: sqrt(0.36 * 0.01 + 0.64 * 0.04) =
    # sqrt(0.0292).
    dist.update(_output([1.0, -1.0], [3.0, 4.0]))
    std = [math.sqrt(0.1348), math.sqrt(0.0292)]
    torch.testing.assert_close(dist.std, torch.tensor([std]), rtol=1e-6, atol=0)
    # log N(a; mean, std) summed over actions, at a = mean + (0.1, -0.2).
    want = sum(
        -0.5 * (d / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi) for d, s in zip((0.1, -0.2), std, strict=True)
    )
    got = dist.log_prob(torch.tensor([[1.1, -1.2]]))
    torch.testing.assert_close(got, torch.tensor([want]), rtol=1e-5, atol=0)  # float32: 1.1 is 1.10000002
    want_entropy = sum(0.5 + 0.5 * math.log(2 * math.pi) + math.log(s) for s in std)
    torch.testing.assert_close(dist.entropy, torch.tensor([want_entropy]), rtol=1e-5, atol=0)
    # The same features at any scale give the same std: only their direction counts.
    dist.update(_output([1.0, -1.0], [0.003, 0.004]))
    torch.testing.assert_close(dist.std, torch.tensor([std]), rtol=1e-6, atol=0)


def test_the_initial_std_is_init_std_in_every_state() -> None:
    dist = StateDependentNoiseDistribution(3, init_std=0.5, noise_features=16)
    dist.update(torch.randn(100, 3 + 16, generator=torch.Generator().manual_seed(0)) * 10.0)
    torch.testing.assert_close(dist.std, torch.full((100, 3), 0.5), rtol=1e-6, atol=0)


def test_the_noise_is_held_for_its_interval_and_follows_the_state() -> None:
    torch.manual_seed(0)
    dist = _worked(interval=4)
    noise = []
    for features in ([3.0, 4.0], [3.0, 4.0], [4.0, 3.0], [0.0, 5.0], [3.0, 4.0], [3.0, 4.0]):
        dist.update(_output([1.0, -1.0], features))
        noise.append(dist.sample() - torch.tensor([[1.0, -1.0]]))
    # Samples 1 and 2 share the state and the draw: the same noise.
    torch.testing.assert_close(noise[1], noise[0], rtol=0, atol=0)
    # Samples 1-4 share the draw eps: the noise is the unit features times eps. Solved from samples 1 and 3 (two
    # states, two equations), eps predicts the noise of sample 4's third state, (0, 1).
    eps = torch.linalg.solve(torch.tensor([[0.6, 0.8], [0.8, 0.6]]), torch.cat([noise[0], noise[2]]))
    torch.testing.assert_close(noise[3], eps[1:2], rtol=1e-5, atol=1e-6)
    # Sample 5 is a new draw (interval 4): the same state as sample 1, another noise; sample 6 holds it.
    assert not torch.allclose(noise[4], noise[0])
    torch.testing.assert_close(noise[5], noise[4], rtol=0, atol=0)
    # A batch of another size (an update's mini-batch) draws anew at once.
    dist.update(torch.tensor([[1.0, -1.0, 3.0, 4.0]] * 2))
    again = dist.sample() - torch.tensor([[1.0, -1.0]])
    assert again.shape == (2, 2) and not torch.allclose(again[0], noise[5][0])


def test_the_samples_have_the_std_it_reports() -> None:
    # One draw per row (interval 1 and a batch of 40,000 rows of one state): the spread of the actions is the std.
    torch.manual_seed(1)
    dist = _worked(interval=1)
    dist.update(_output([1.0, -1.0], [3.0, 4.0]).repeat(40_000, 1))
    actions = dist.sample()
    torch.testing.assert_close(actions.mean(0), torch.tensor([1.0, -1.0]), rtol=0, atol=0.01)
    torch.testing.assert_close(actions.std(0), dist.std[0], rtol=0.02, atol=0)


def test_kl_of_the_same_distribution_is_zero_and_grows_with_the_mean() -> None:
    dist = _worked()
    dist.update(_output([1.0, -1.0], [3.0, 4.0]))
    same = dist.params
    assert dist.kl_divergence(same, same).item() == 0.0
    dist.update(_output([1.1, -1.0], [3.0, 4.0]))  # the mean of action 0 moved by 0.1: 0.01 / (2 * 0.1348)
    assert dist.kl_divergence(same, dist.params).item() == pytest.approx(0.01 / (2 * 0.1348), rel=1e-5)


@pytest.mark.parametrize("key", ["noise_features", "noise_interval"])
def test_bad_settings_name_their_key(key: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"invalid config value actor\.distribution_cfg\.{key}=0: expected an integer"
    ):
        to_train_config(compose([f"actor.distribution_cfg.{key}=0", "run_dir=unused"]))
    # An unknown distribution is refused by the schema's enum when the config is composed, naming the choices.
    with pytest.raises(ConfigCompositionException) as err:
        compose(["actor.distribution_cfg.noise=brownian", "run_dir=unused"])
    assert "expected one of [gaussian, gsde]" in str(err.value.__cause__)


def test_a_training_with_gsde_evaluates_and_exports_its_mean(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["actor.distribution_cfg.noise=gsde", "actor.distribution_cfg.std_type=log", "task.num_envs=2"]
    args += ["runner.num_steps_per_env=8", "runner.max_iterations=2", "task.num_workers=0", f"run_dir={run}"]
    assert train_main(args) == 0
    policy = load_policy(run)
    assert isinstance(policy.actor.distribution, StateDependentNoiseDistribution)
    obs = np.random.default_rng(0).normal(size=(16, 28)).astype(np.float32)
    mean = policy.act(obs)
    with torch.inference_mode():
        output = policy.actor.mlp(policy.actor.get_latent({"policy": torch.from_numpy(obs)}))
    assert output.shape == (16, 8 + 64)  # the mean, then the features
    np.testing.assert_allclose(mean, output[:, :8].numpy(), rtol=1e-6, atol=1e-6)
    assert export_main([str(run), "--out", str(tmp_path / "export")]) == 0
    scripted = torch.jit.load(tmp_path / "export" / POLICY_JIT_FILE)
    with torch.inference_mode():
        np.testing.assert_allclose(scripted(torch.from_numpy(obs)).numpy(), mean, rtol=1e-5, atol=1e-5)
    session = onnxruntime.InferenceSession(
        str(tmp_path / "export" / POLICY_ONNX_FILE), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(session.run(["actions"], {"obs": obs})[0], mean, rtol=1e-5, atol=1e-5)

"""``runner.normalize_rewards``: the return scaler's arithmetic on worked examples, and what a training does with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_env import TinyEnv, train_cfg

from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.reward_scale import CLIP, START_COUNT, ReturnScaler
from robo_safe_rl.training.runner import REWARD_SCALER_KEY, SafeRunner


def test_one_env_worked_example() -> None:
    # gamma 0.5, a reward of 2 per step, the episode ending at step 3: the returns are 2, 3, 3.5, then 2 again (the
    # sum restarts at the episode end). After step 3 the variance is that of {2, 3, 3.5}: 7/18 (the starting count
    # of 1e-4 weighs ~1e-4), so step 3's reward is scaled to 2 / sqrt(7/18) = 3.2071.
    scaler = ReturnScaler(1, gamma=0.5)
    two, no, yes = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0])
    scaler(two, no)
    scaler(two, no)
    third = scaler(two, yes)
    assert float(scaler.var) == pytest.approx(7 / 18, rel=1e-3)
    assert float(scaler.mean) == pytest.approx(8.5 / 3, rel=1e-3)
    assert float(third) == pytest.approx(2 / (7 / 18) ** 0.5, rel=1e-3)
    assert float(scaler.returns) == 0.0
    scaler(two, no)
    assert float(scaler.returns) == 2.0  # not 2 + 0.5 * 3.5: the episode ended
    assert float(scaler.count) == pytest.approx(4.0, abs=1e-3)


def test_envs_keep_their_own_returns_and_share_the_statistics() -> None:
    # Two envs, gamma 0.9: env 0 earns 1 per step, env 1 earns -1 and ends every step. Returns after two steps:
    # env 0 1 then 1.9, env 1 -1 and -1. Pooled: {1, -1, 1.9, -1}: mean 0.225, population variance
    # 6.61 / 4 - 0.225^2 = 1.601875.
    scaler = ReturnScaler(2, gamma=0.9)
    rewards, dones = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0])
    scaler(rewards, dones)
    scaled = scaler(rewards, dones)
    assert scaler.returns.tolist() == pytest.approx([1.9, 0.0])
    assert float(scaler.var) == pytest.approx(1.601875, rel=1e-3)
    assert scaled.tolist() == pytest.approx([1 / 1.601875**0.5, -1 / 1.601875**0.5], rel=1e-3)
    assert scaled.dtype == rewards.dtype


def test_a_reward_far_outside_the_returns_seen_is_clipped() -> None:
    scaler = ReturnScaler(4, gamma=0.99)
    dones = torch.zeros(4)
    for _ in range(200):
        scaler(torch.full((4,), 0.01), dones)
    scaled = scaler(torch.tensor([1.0e6, -1.0e6, 0.0, 0.01]), dones)
    assert scaled[:2].tolist() == [CLIP, -CLIP]
    assert float(scaled[2]) == 0.0 and 0.0 < float(scaled[3]) < CLIP


def runner(normalize: bool, reward_scale: float, num_envs: int = 4, log_dir: Path | None = None) -> SafeRunner:
    torch.manual_seed(0)
    cfg = {**train_cfg({}), "normalize_rewards": normalize}
    env = TinyEnv(seed=1, num_envs=num_envs, reward_scale=reward_scale)
    if log_dir is None:
        return SafeRunner(env, cfg, log_dir=None, device="cpu")
    return SafeRunner(env, cfg, log_dir=str(log_dir), device="cpu", files=RunDir(log_dir))


def test_tensorboard_shows_the_divisor_of_each_iteration(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scaled, plain = runner(True, 1.0e4, log_dir=tmp_path / "scaled"), runner(False, 1.0e4, log_dir=tmp_path / "plain")
    scaled.learn(2)
    plain.learn(2)
    events = EventAccumulator(str(tmp_path / "scaled"))
    events.Reload()
    logged = events.Scalars("Train/reward_scale")
    assert [e.step for e in logged] == [0, 1]
    assert scaled.reward_scaler is not None
    assert logged[-1].value == pytest.approx(float(scaled.reward_scaler.var) ** 0.5, rel=1e-5)
    assert logged[-1].value > 100.0  # rewards x 1e4: the returns' spread is in the thousands
    events = EventAccumulator(str(tmp_path / "plain"))
    events.Reload()
    plain_tags = events.Tags()["scalars"]
    assert "Loss/learning_rate" in plain_tags  # the plain run did log ...
    assert "Train/reward_scale" not in plain_tags  # ... but without the scaling there is no divisor to show


def test_ppo_trains_on_scaled_rewards_and_the_checkpoint_keeps_the_statistics(tmp_path: Path) -> None:
    # TinyEnv's rewards times 1e4: PPO's stored rewards stay within the clip, while the raw ones are in the thousands.
    scaled, plain = runner(True, 1.0e4), runner(False, 1.0e4)
    scaled.learn(2)
    plain.learn(2)
    assert float(plain.alg.storage.rewards.abs().max()) > 100.0
    assert float(scaled.alg.storage.rewards.abs().max()) <= CLIP
    assert scaled.reward_scaler is not None and float(scaled.reward_scaler.var) ** 0.5 > 100.0
    assert plain.reward_scaler is None and REWARD_SCALER_KEY not in plain.alg.save()

    path = tmp_path / "model_1.pt"
    scaled.save(str(path))
    saved = torch.load(path, weights_only=True)[REWARD_SCALER_KEY]
    assert sorted(saved) == ["count", "mean", "var"]  # not the per-env returns of the episodes under way
    # A resume with more envs: the statistics carry over, the returns start at 0 for the new episodes.
    resumed = runner(True, 1.0e4, num_envs=6)
    resumed.load(str(path))
    assert resumed.reward_scaler is not None
    for name, value in scaled.reward_scaler.state_dict().items():
        assert torch.equal(resumed.reward_scaler.state_dict()[name], value), name
    assert resumed.reward_scaler.returns.tolist() == [0.0] * 6


def test_a_resume_across_a_switch_of_the_scaling_is_refused(tmp_path: Path) -> None:
    # The critic predicts returns on the scale it was trained with; either direction is refused, naming the key.
    for trained, resumed in ((False, True), (True, False)):
        path = tmp_path / f"model_{trained}.pt"
        first = runner(trained, 1.0)
        first.learn(1)
        first.save(str(path))
        with pytest.raises(ValueError, match=f"runner.normalize_rewards={str(trained).lower()}.*expected the same"):
            runner(resumed, 1.0).load(str(path))


def test_a_rollback_takes_the_statistics_back_with_the_weights() -> None:
    # The second learn() snapshots the state it starts from (iteration 0's); its iteration moves the statistics on
    # (8 more steps of 4 envs); a rollback restores them with the weights (the discarded rollout's rewards leave them)
    # and leaves the per-env returns, which follow the envs.
    scaled = runner(True, 1.0)
    scaled.learn(1)
    assert scaled.reward_scaler is not None
    after_first = {k: v.clone() for k, v in scaled.reward_scaler.state_dict().items()}
    assert float(after_first["count"]) == pytest.approx(8 * 4 + START_COUNT)
    scaled.learn(1)
    assert float(scaled.reward_scaler.count) == pytest.approx(16 * 4 + START_COUNT)
    returns = scaled.reward_scaler.returns.clone()
    scaled.recovery.rollback(scaled.alg, 2, "a test")
    for name, value in after_first.items():
        assert torch.equal(scaled.reward_scaler.state_dict()[name], value), name
    assert torch.equal(scaled.reward_scaler.returns, returns)


def test_a_non_finite_reward_does_not_poison_the_statistics() -> None:
    scaler = ReturnScaler(2, gamma=0.9)
    scaled = scaler(torch.tensor([float("nan"), 1.0]), torch.zeros(2))
    assert torch.isnan(scaled[0]) and torch.isfinite(scaled[1])  # PPO's guard sees the NaN as it is
    assert all(torch.isfinite(t).all() for t in scaler.state_dict().values())
    assert scaler.returns.tolist() == [0.0, 1.0]


def test_the_runner_scales_by_the_returns_of_ppos_own_discount() -> None:
    cfg = {**train_cfg({"gamma": 0.9}), "normalize_rewards": True}
    scaled = SafeRunner(TinyEnv(seed=1), cfg, log_dir=None, device="cpu")
    assert scaled.reward_scaler is not None and scaled.reward_scaler.gamma == scaled.alg.gamma == 0.9

"""The A1's reward terms on worked examples, their weighting, zero weights, and Episode_Reward/<term> (and its
tracking errors' Metrics/<name>) logging."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from a1_helpers import A1_ID, QUIET, place, quiet_a1

from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robosafe_tasks.a1 import rewards
from robosafe_tasks.a1.config import TERM_NAMES, A1Config, RewardConfig, build
from robosafe_tasks.a1.limits import A1_LIMITS, reward_bound

CFG = RewardConfig()


def state(**values: object) -> rewards.StepState:
    """A step state at rest (level, standing, no command) with ``values`` replaced."""
    base = {
        "lin_vel_b": np.zeros(3),
        "ang_vel_b": np.zeros(3),
        "gravity_b": np.array([0.0, 0.0, -1.0]),
        "command": [0.0, 0.0, 0.0],
        "joint_pos": np.zeros(12),
        "torques": np.zeros(12),
        "joint_acc": np.zeros(12),
        "action": np.zeros(12),
        "last_action": np.zeros(12),
        "first_contact": np.zeros(4, dtype=bool),
        "last_air_time": np.zeros(4),
        "thigh_forces": np.zeros(4),
        "soft_low": np.full(12, -1.0),
        "soft_high": np.full(12, 1.0),
    }
    base.update(values)
    return rewards.StepState(**base)


# Worked examples (std^2 = 0.25, air-time threshold 0.5 s, contact threshold 1 N):
@pytest.mark.parametrize(
    ("term", "values", "expected"),
    [
        # |(1, 0) - (0.5, 0)|^2 = 0.25 -> exp(-0.25 / 0.25) = e^-1
        ("track_lin_vel_xy_exp", {"command": [1.0, 0.0, 0.0], "lin_vel_b": np.array([0.5, 0.0, 0.0])}, math.exp(-1)),
        ("track_lin_vel_xy_exp", {"command": [0.3, -0.2, 0.0], "lin_vel_b": np.array([0.3, -0.2, 5.0])}, 1.0),
        # (1 - 0)^2 / 0.25 = 4 -> e^-4
        ("track_ang_vel_z_exp", {"command": [0.0, 0.0, 1.0]}, math.exp(-4)),
        ("lin_vel_z_l2", {"lin_vel_b": np.array([9.0, 9.0, 2.0])}, 4.0),
        ("ang_vel_xy_l2", {"ang_vel_b": np.array([1.0, 2.0, 9.0])}, 5.0),
        ("dof_torques_l2", {"torques": np.full(12, 2.0)}, 48.0),  # 12 * 2^2
        ("dof_acc_l2", {"joint_acc": np.full(12, 10.0)}, 1200.0),  # 12 * 10^2
        ("action_rate_l2", {"action": np.ones(12), "last_action": np.zeros(12)}, 12.0),
        # Two touch-downs after swings of 0.8 s and 0.3 s: (0.8 - 0.5) + (0.3 - 0.5) = 0.1; feet 3, 4 did not land.
        (
            "feet_air_time",
            {
                "command": [1.0, 0.0, 0.0],
                "first_contact": np.array([True, True, False, False]),
                "last_air_time": np.array([0.8, 0.3, 2.0, 2.0]),
            },
            0.1,
        ),
        # The same touch-downs while commanded to (nearly) stand: nothing.
        (
            "feet_air_time",
            {
                "command": [0.05, 0.05, 1.0],
                "first_contact": np.array([True, True, False, False]),
                "last_air_time": np.array([0.8, 0.3, 2.0, 2.0]),
            },
            0.0,
        ),
        ("undesired_contacts", {"thigh_forces": np.array([0.0, 2.0, 0.5, 3.0])}, 2.0),  # two above 1 N
        ("flat_orientation_l2", {"gravity_b": np.array([0.6, 0.0, -0.8])}, 0.36),
        ("dof_pos_limits", {"joint_pos": np.array([1.5, -1.25, *[0.0] * 10])}, 0.75),  # 0.5 + 0.25 beyond +-1
        ("termination_penalty", {"terminated": True}, 1.0),
        ("termination_penalty", {}, 0.0),
    ],
)
def test_each_term_on_a_worked_example(term: str, values: dict, expected: float) -> None:
    assert rewards.TERMS[term](state(**values), CFG) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_terms_at_rest_and_the_signs_of_their_weights() -> None:
    # Standing level at rest with a zero command tracks perfectly and costs nothing.
    values = rewards.weighted_terms(state(), rewards.active_terms(CFG.weights()), CFG, 0.02)
    by_name = dict(zip([n for n, _ in rewards.active_terms(CFG.weights())], values, strict=True))
    assert by_name.pop("track_lin_vel_xy_exp") == pytest.approx(1.5 * 0.02)  # weight * 1 * dt
    assert by_name.pop("track_ang_vel_z_exp") == pytest.approx(0.75 * 0.02)
    assert all(v == 0.0 for v in by_name.values())
    # Everything bad at once: each task term is smaller, each penalty negative, and feet air time positive.
    bad = state(
        command=[1.0, 0.0, 0.0],
        lin_vel_b=np.array([0.0, 0.0, 1.0]),
        ang_vel_b=np.array([1.0, 1.0, 0.0]),
        gravity_b=np.array([0.6, 0.0, -0.8]),
        torques=np.ones(12),
        joint_acc=np.ones(12),
        action=np.ones(12),
        first_contact=np.ones(4, dtype=bool),
        last_air_time=np.ones(4),
        thigh_forces=np.full(4, 5.0),
    )
    terms = rewards.active_terms(CFG.weights())
    signed = dict(zip([n for n, _ in terms], rewards.weighted_terms(bad, terms, CFG, 0.02), strict=True))
    assert 0.0 < signed["track_lin_vel_xy_exp"] < 1.5 * 0.02
    assert signed["feet_air_time"] == pytest.approx(0.25 * 4 * 0.5 * 0.02)
    penalties = set(signed) - {"track_lin_vel_xy_exp", "track_ang_vel_z_exp", "feet_air_time"}
    assert penalties and all(signed[name] < 0.0 for name in penalties)


def test_a_zero_weight_term_is_never_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_run(s: rewards.StepState, cfg: RewardConfig) -> float:
        raise AssertionError("a term with weight 0 was computed")

    monkeypatch.setitem(rewards.TERMS, "feet_air_time", must_not_run)
    env = quiet_a1(rewards={"feet_air_time": 0.0})
    assert "feet_air_time" not in env.reward_terms and len(env.reward_terms) == 9  # dof_pos_limits is 0 by default
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(12, np.float32))
    assert info["reward_terms"].shape == (9,) and reward == pytest.approx(float(info["reward_terms"].sum()))
    env.close()
    with pytest.raises(AssertionError, match="weight 0 was computed"):
        on = quiet_a1()
        on.reset(seed=0)
        on.step(np.zeros(12, np.float32))


def test_reward_bound_is_derived_from_the_weights() -> None:
    only_tracking = {name: 0.0 for name in TERM_NAMES} | {"track_lin_vel_xy_exp": 1.0}
    cfg = build(A1Config, {"rewards": only_tracking}, "env_kwargs")
    # Worked example: 2 (margin) * |1.0| * 1 (largest kernel value) * 0.02 s.
    assert reward_bound(cfg, A1_LIMITS) == pytest.approx(0.04)
    default = reward_bound(A1Config(), A1_LIMITS)
    # Far above what random and bang-bang actions earn (|reward| <= 4.1 measured), still far from a bug's 1e30.
    assert 50.0 < default < 1000.0


# Worked example: a term at 0 for the env's first 4 steps, then ramped to -0.01 over 2 steps (Isaac Lab's
# modify_reward_weight has ramp_steps 0: the whole change at once).
@pytest.mark.parametrize(
    ("ramp_steps", "expected"),
    [(0, [0.0] * 4 + [-0.01] * 4), (2, [0.0] * 4 + [-0.005, -0.01, -0.01, -0.01])],
)
def test_the_curriculum_changes_a_weight_after_its_steps(ramp_steps: int, expected: list[float]) -> None:
    change = {"weight": -0.01, "num_steps": 4, "ramp_steps": ramp_steps}
    env = quiet_a1(rewards={"action_rate_l2": 0.0}, curriculum={"action_rate_l2": change})
    j = env.reward_terms.index("action_rate_l2")  # active from the start, at weight 0
    # Actions 0.5, 1.0, 1.5, 2.0 from an episode's last action 0: action_rate_l2 = weight * 12 * 0.5^2 * 0.02 s.
    rate = 12 * 0.5**2 * 0.02
    weights = []
    for episode in range(2):  # the clock runs over episodes: a reset does not restart it
        env.reset(seed=episode)
        for step in range(4):
            _, _, _, _, info = env.step(np.full(12, 0.5 * (step + 1), np.float32))
            weights.append(info["reward_terms"][j] / rate)
    np.testing.assert_allclose(weights, expected, rtol=1e-12, atol=1e-15)
    assert env.common_step_counter == 8
    # The bound on one step's reward takes the larger weight of the two.
    plain = build(A1Config, {"rewards": {"action_rate_l2": -0.01}}, "env_kwargs")
    assert env.reward_bound == pytest.approx(reward_bound(plain, A1_LIMITS))
    env.close()


def test_episode_reward_terms_are_logged_per_episode() -> None:
    # Episodes of 3 steps through the adapter; twins of its envs (same seeds) stepped alone give the terms it saw.
    envs = [gymnasium.make(A1_ID, max_episode_steps=3, **QUIET) for _ in range(2)]
    names = envs[0].unwrapped.reward_terms
    vec = GymVecEnv(envs, seed=5)
    twins = [quiet_a1() for _ in range(2)]
    for i, twin in enumerate(twins):
        twin.reset(seed=5 + i)
    sums, errors = np.zeros((2, len(names))), np.zeros((2, 2))
    for step in range(3):
        actions = np.full((2, 12), 0.5 * step, dtype=np.float32)
        _, _, dones, extras = vec.step(torch.from_numpy(actions))
        for i, twin in enumerate(twins):
            info = twin.step(actions[i])[4]
            sums[i] += info["reward_terms"]
            errors[i] += [info["metrics"]["error_vel_xy"], info["metrics"]["error_vel_yaw"]]
    assert dones.tolist() == [1, 1]
    log = extras["log"]
    # Isaac Lab's RewardManager: the episode sum over max_episode_length_s = 3 steps * 0.02 s.
    for j, name in enumerate(names):
        np.testing.assert_allclose(log[f"Episode_Reward/{name}"].numpy(), sums[:, j] / 0.06, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(log["Episode/return"].numpy(), sums.sum(axis=1), rtol=1e-6)
    # The tracking errors: each one's mean over the episode's steps, as tools/evaluate.py reports them.
    np.testing.assert_allclose(log["Metrics/error_vel_xy"].numpy(), errors[:, 0] / 3, rtol=1e-6)
    np.testing.assert_allclose(log["Metrics/error_vel_yaw"].numpy(), errors[:, 1] / 3, rtol=1e-6)
    # The next episode starts from zero sums.
    _, _, dones, extras = vec.step(torch.zeros(2, 12))
    assert dones.tolist() == [0, 0] and "Episode_Reward/lin_vel_z_l2" not in extras["log"]
    vec.close()
    for twin in twins:
        twin.close()


def test_only_positive_clips_the_total_not_the_terms() -> None:
    # Dropped from 0.42 m, the first steps pay vertical-speed penalties: a negative total, clipped to 0 when asked.
    plain, clipped = quiet_a1(), quiet_a1(rewards={"only_positive": True})
    for env in (plain, clipped):
        env.reset(seed=0)
    totals = []
    for _ in range(5):
        _, r_plain, _, _, info_plain = plain.step(np.zeros(12, np.float32))
        _, r_clipped, _, _, info_clipped = clipped.step(np.zeros(12, np.float32))
        np.testing.assert_array_equal(info_plain["reward_terms"], info_clipped["reward_terms"])
        assert r_clipped == max(r_plain, 0.0)
        totals.append(r_plain)
    assert min(totals) < 0.0  # the example does clip
    plain.close()
    clipped.close()


def test_termination_penalty_is_paid_once_and_survives_the_clip() -> None:
    # Rolled 1.2 rad (beyond the 1.0 limit) in the air: the first step terminates. With Isaac Lab's humanoid weight of
    # -200 the penalty is -200 * 1 * 0.02 s = -4, and legged_gym's clip of the total leaves it (it is added after).
    for only_positive in (False, True):
        env = quiet_a1(rewards={"termination_penalty": -200.0, "only_positive": only_positive})
        assert env.reward_terms[-1] == "termination_penalty"
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(np.zeros(12, np.float32))
        assert not terminated and info["reward_terms"][-1] == 0.0
        place(env, z=1.0, roll=1.2)
        _, reward, terminated, _, info = env.step(np.zeros(12, np.float32))
        assert terminated and info["reward_terms"][-1] == pytest.approx(-4.0)
        rest = float(info["reward_terms"][:-1].sum())
        assert reward == pytest.approx((max(rest, 0.0) if only_positive else rest) - 4.0)
        env.close()

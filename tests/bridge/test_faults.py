"""Fault injectors on the fault env: what they inject, reproducibility, and the accounting through SafeStep."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robo_safe_rl import SafeStep
from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector, sum_injected
from robo_safe_rl.bridge.incidents import IncidentRecorder, read_incidents
from robo_safe_rl.bridge.safe_step import sum_counters
from robo_safe_rl.config.safe_step import EnvFaultConfig, NonFiniteValue
from robo_safe_rl.errors import PhysicsError
from robo_safe_rl.safety.incident_kinds import COUNTER_OF_KIND, KIND_OF_FAULT

MakeEnv = Callable[..., gym.Env]
PUSH = np.array([0.5, -0.25], dtype=np.float32)


@pytest.mark.parametrize(
    ("value", "check"),
    [(NonFiniteValue.nan, math.isnan), (NonFiniteValue.posinf, lambda x: x == math.inf),
     (NonFiniteValue.neginf, lambda x: x == -math.inf)],
    ids=["nan", "+inf", "-inf"],
)  # fmt: skip
def test_action_injector_corrupts_a_copy(value: NonFiniteValue, check: Callable, make_fault_env: MakeEnv) -> None:
    env = ActionFaultInjector(make_fault_env(), EnvFaultConfig(action_nonfinite=1.0, value=value))
    env.reset(seed=0)
    action = PUSH.copy()
    env.step(action)
    np.testing.assert_array_equal(action, PUSH)  # the caller's array is untouched
    seen = env.unwrapped.actions_seen[-1]
    assert sum(check(x) for x in seen) == 1 and np.isfinite(seen).sum() == 1
    assert env.injected == {"action_nonfinite": 1}


def test_injection_is_reproducible_and_differs_per_env(make_fault_env: MakeEnv) -> None:
    cfg = EnvFaultConfig(obs_nonfinite=0.3, reward_nonfinite=0.3, seed=11)

    def trace(env_index: int) -> list[tuple[bool, bool]]:
        env = EnvFaultInjector(make_fault_env(), cfg, env_index=env_index)
        env.reset(seed=0)
        out = []
        for _ in range(40):
            obs, reward, *_ = env.step(PUSH)
            out.append((bool(np.isfinite(obs).all()), math.isfinite(reward)))
        return out

    assert trace(0) == trace(0)
    assert trace(0) != trace(1)


def test_env_injector_physics_error_kills_the_engine(make_fault_env: MakeEnv) -> None:
    env = EnvFaultInjector(make_fault_env(), EnvFaultConfig(physics_error=1.0, obs_nonfinite=1.0))
    env.reset(seed=0)
    with pytest.raises(Exception, match="Not connected to physics server") as info:
        env.step(PUSH)
    assert type(info.value).__name__ == "FaultEngineError" and not env.unwrapped.alive
    # A physics error ends the step: the observation fault drawn with it is neither injected nor counted.
    assert env.injected == {"physics_error": 1, "state_blowup": 0, "obs_nonfinite": 0, "reward_nonfinite": 0}


def test_sum_injected_lists_armed_kinds_only(make_fault_env: MakeEnv) -> None:
    plain = make_fault_env()
    armed = EnvFaultInjector(make_fault_env(), EnvFaultConfig(reward_nonfinite=1.0))
    armed.reset(seed=0)
    armed.step(PUSH)
    assert sum_injected([plain]) == {}
    # The chain under the (unarmed) action injector is searched; only the armed kind is listed.
    assert sum_injected([plain, ActionFaultInjector(armed, EnvFaultConfig())]) == {"reward_nonfinite": 1}


def test_env_injector_on_a_plain_env(make_fault_env: MakeEnv, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="robo_safe_rl.bridge.faults"):
        env = EnvFaultInjector(make_fault_env(simulated=False), EnvFaultConfig(physics_error=1.0, state_blowup=0.5))
    assert "faults.env.state_blowup=0.5 ignored for FaultEnv: it needs the simulator protocol" in caplog.text
    env.reset(seed=0)
    with pytest.raises(PhysicsError, match=r"injected physics error \(fire drill, faults\.env\.physics_error\)"):
        env.step(PUSH)


def test_state_blowup_throws_the_base(make_fault_env: MakeEnv) -> None:
    env = EnvFaultInjector(make_fault_env(), EnvFaultConfig(state_blowup=1.0, blowup_scale=4.0))
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.float32))
    # perturb_state sets the velocity to 4 x the limit 10 = 40 along x before the step; a zero action keeps it.
    assert env.unwrapped.state[2] == 40.0 and env.injected["state_blowup"] == 1
    assert env.unwrapped.check_state() == "base speed 40 m/s exceeds the limit 10 m/s"


def build(make_fault_env: MakeEnv, cfg: EnvFaultConfig, i: int, recorder: IncidentRecorder) -> gym.Env:
    """The order the vector adapter builds: action faults, SafeStep, env faults, task."""
    inner = EnvFaultInjector(make_fault_env(max_episode_steps=50), cfg, env_index=i)
    return ActionFaultInjector(SafeStep(inner, env_index=i, recorder=recorder), cfg, env_index=i)


def test_every_injected_fault_is_counted_and_recorded_or_dropped(make_fault_env: MakeEnv, run_dir: Path) -> None:
    cfg = EnvFaultConfig(
        action_nonfinite=0.05, obs_nonfinite=0.05, reward_nonfinite=0.05, physics_error=0.03, state_blowup=0.03, seed=3
    )
    recorder = IncidentRecorder(run_dir / "incidents", max_records=150)
    envs = [build(make_fault_env, cfg, i, recorder) for i in range(4)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    for _ in range(500):
        for env in envs:
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert np.isfinite(obs).all() and math.isfinite(reward)
            if terminated or truncated:
                env.reset()
    injected = sum_injected(envs)
    assert set(injected) == set(KIND_OF_FAULT) and min(injected.values()) >= 30, injected  # every kind many times
    counters = sum_counters(envs)
    for fault, kind in KIND_OF_FAULT.items():
        assert counters[COUNTER_OF_KIND[kind]] == injected[fault], fault
        recorded = recorder.written_by_kind.get(kind.value, 0) + recorder.dropped_by_kind.get(kind.value, 0)
        assert recorded == injected[fault], fault
    assert recorder.dropped > 0 and recorder.written == 150 == len(read_incidents(run_dir / "incidents"))
    assert counters["incidents_dropped"] == recorder.dropped

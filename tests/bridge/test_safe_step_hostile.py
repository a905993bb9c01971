"""SafeStep against hostile and broken envs and callers: foreign engine errors, implausible rewards, envs that fail
forever, actions that are not numbers, use after close, pickling."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pybullet
import pytest

from robo_safe_rl import SafeStep
from robo_safe_rl.bridge.incidents import IncidentRecorder, read_incidents
from robo_safe_rl.config.safe_step import SafeStepConfig
from robo_safe_rl.errors import ConfigError, RecoveryError

MakeEnv = Callable[..., gym.Env]
PUSH = np.array([0.5, -0.25], dtype=np.float32)


class LeftoverPyBulletCall(gym.Env[np.ndarray, np.ndarray]):
    """A point mass that runs no PyBullet, with a bug: a leftover PyBullet call on a client nobody connected."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = np.zeros(2, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos[:] = 0.0
        return self.pos.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.pos += 0.1 * np.asarray(action, dtype=np.float32)
        pybullet.getNumBodies(physicsClientId=987)  # the bug: a real pybullet.error ("Not connected ...")
        return self.pos.copy(), 1.0, False, False, {}


# ------------------------------------------------------------------------------------------ physics-error attribution
def test_pybullet_error_from_a_bug_in_a_non_pybullet_env_propagates() -> None:
    env = SafeStep(LeftoverPyBulletCall())
    env.reset(seed=0)
    with pytest.raises(pybullet.error, match="Not connected to physics server"):
        env.step(PUSH)
    assert env.counters["physics_errors"] == 0 and env.counters["recoveries"] == 0


def test_pybullet_error_is_a_physics_error_when_the_user_says_so() -> None:
    env = SafeStep(LeftoverPyBulletCall(), SafeStepConfig(physics_errors=["pybullet.error"]))
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(PUSH)
    assert terminated and reward == SafeStepConfig().penalty
    assert info["safe_step"]["incident"] == "physics_error"
    assert info["safe_step"]["reason"] == "pybullet.error: Not connected to physics server."
    assert env.counters["physics_errors"] == 1


def test_a_simulated_env_catches_only_its_declared_engine_errors(make_fault_env: MakeEnv) -> None:
    # The fault env declares FaultEngineError; a pybullet.error from a bug in it is not its engine's.
    env = SafeStep(make_fault_env())
    env.reset(seed=0)
    env.unwrapped.step = lambda action: pybullet.getNumBodies(physicsClientId=987)  # a bug inside the task
    with pytest.raises(pybullet.error):
        env.step(PUSH)
    assert env.counters["physics_errors"] == 0


def test_the_ants_real_physics_errors_are_still_caught(ant_env_id: str) -> None:
    env = SafeStep(gym.make(ant_env_id))
    env.reset(seed=0)
    env.unwrapped.break_simulation()  # the engine's client dies behind the env's back
    _, _, terminated, _, info = env.step(np.zeros(8, dtype=np.float32))
    assert terminated and info["safe_step"]["reason"] == "pybullet.error: Not connected to physics server."
    assert env.counters["physics_errors"] == 1 and env.counters["env_rebuilds"] == 1
    env.close()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz.Error", r"cannot import module 'no_such_module_xyz'"),
        ("math.nothing_here", r"module 'math' has no 'nothing_here'"),
        ("math.pi", r"pi is a float, not an exception class"),
        ("Error", r"expected an exception class as 'module.Name'"),
    ],
)
def test_physics_errors_config_names_the_key(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"safety\.step\.physics_errors='{name}': .*{message}"):
        SafeStepConfig(physics_errors=[name])
    assert SafeStepConfig(physics_errors=["pybullet:error"]).physics_errors == ["pybullet:error"]


# ------------------------------------------------------------------------------------------ implausible rewards
def test_finite_but_implausible_reward_is_an_incident(
    make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = SafeStep(make_fault_env({3: "huge_reward"}), SafeStepConfig(reward_bound=100.0), recorder=recorder)
    env.reset(seed=0)
    for _ in range(2):
        assert "safe_step" not in env.step(PUSH)[4]
    obs, reward, terminated, truncated, info = env.step(PUSH)
    assert terminated and not truncated and reward == -10.0 and np.isfinite(obs).all()
    assert info["safe_step"]["kinds"] == ["implausible_reward"] and info["safe_step"]["rebuilt"] is False
    assert info["safe_step"]["reason"] == "reward 1e+30 beyond the plausible bound +-100"
    assert env.counters["implausible_rewards"] == 1 and env.counters["env_rebuilds"] == 0
    (record,) = read_incidents(run_dir / "incidents")
    assert record["kind"] == "implausible_reward" and record["reward"] == 1.0e30 and record["penalty"] == -10.0


def test_without_a_bound_a_huge_finite_reward_passes(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env({1: "huge_reward"}))
    assert env.reward_bound is None  # the fault env declares none, and none is configured
    env.reset(seed=0)
    assert env.step(PUSH)[1] == 1.0e30


def test_the_ant_declares_its_reward_bound_and_a_reward_bug_is_caught(ant_env_id: str) -> None:
    from robosafe_tasks.ant import ANT_REWARD_BOUND, AntEnv

    class AntWithRewardBug(AntEnv):
        def alive_bonus(self, z: float, pitch: float) -> float:
            return 1.0e30  # a reward term gone wrong: finite, and impossible for this robot

    env = SafeStep(gym.wrappers.TimeLimit(AntWithRewardBug(), 1000))
    assert env.reward_bound == ANT_REWARD_BOUND == SafeStep(gym.make(ant_env_id)).reward_bound
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(8, dtype=np.float32))
    assert terminated and reward == -10.0 and info["safe_step"]["incident"] == "implausible_reward"
    # The configured bound wins over the task's.
    assert SafeStep(gym.make(ant_env_id), SafeStepConfig(reward_bound=5.0)).reward_bound == 5.0
    env.close()


def test_the_ants_reward_stays_within_its_bound_near_the_state_limits() -> None:
    # ANT_REWARD_BOUND's worked bound (envs/ant.py), at a plausible state near the limits: the base at 95% of its
    # speed limit straight at the target, the joints at half theirs (faster ones throw the base past its angular
    # limit within the step), full actions along each joint's motion (the largest electricity cost). Progress is at
    # most 0.95 * 20 m/s * 21/22 = 18.1 from the base (the link transforms lag, so less), electricity at most
    # 2.0 * 0.1 * 40 = 8, joints at their limit at most 0.8: the reward is far inside the bound.
    from robosafe_tasks.ant import ANT_LIMITS, ANT_REWARD_BOUND, AntEnv

    env = AntEnv()
    env.reset(seed=0)
    c, robot = env.client_id, env.robot_id
    pybullet.resetBaseVelocity(robot, [0.95 * ANT_LIMITS.base_speed, 0, 0], [0, 0, 0], physicsClientId=c)
    signs = [1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0]
    for sign, joint in zip(signs, env.joints.indices, strict=True):
        q = pybullet.getJointState(robot, joint, physicsClientId=c)[0]
        pybullet.resetJointState(robot, joint, q, sign * 0.5 * ANT_LIMITS.joint_speed, physicsClientId=c)
    _, reward, _, _, info = env.step(np.array(signs, dtype=np.float32))
    assert env.check_state() is None
    assert 5.0 < info["reward_progress"] < 18.1 and -8.0 - 0.1 <= info["reward_electricity"] < 0.0
    assert abs(reward) < ANT_REWARD_BOUND / 10
    env.close()


# ------------------------------------------------------------------------------------------ envs that keep failing
@pytest.mark.parametrize(("fault", "kind"), [("nan_obs", "nonfinite_obs"), ("physics_error", "physics_error")])
def test_an_env_that_fails_every_step_is_stopped(
    fault: str, kind: str, make_fault_env: MakeEnv, recorder: IncidentRecorder
) -> None:
    cfg = SafeStepConfig(max_consecutive_failures=5)
    env = SafeStep(make_fault_env(lambda step, action: [fault]), cfg, env_index=3, recorder=recorder)
    env.reset(seed=0)
    for _ in range(4):  # each is recovered, and counted towards the streak
        assert env.step(PUSH)[2]
    with pytest.raises(RecoveryError) as caught:
        env.step(PUSH)
    message = str(caught.value)
    assert message.startswith("env 3 (SimFaultEnv) is broken: 5 steps in a row ended by SafeStep")
    assert f"({kind} x5; the last: {kind}: " in message
    assert "safety.step.max_consecutive_failures=5" in message and str(recorder.directory) in message
    assert env.counters["recoveries"] == 5


def test_a_clean_step_ends_the_streak(make_fault_env: MakeEnv) -> None:
    # Every other step fails: 20 failures in all, never 2 in a row.
    every_other = make_fault_env(lambda step, action: ["nan_obs"] if step % 2 else [])
    env = SafeStep(every_other, SafeStepConfig(max_consecutive_failures=2))
    env.reset(seed=0)
    for _ in range(40):
        env.step(PUSH)
    assert env.counters["nonfinite_obs"] == 20


def test_max_consecutive_failures_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"safety\.step\.max_consecutive_failures=0: expected an integer in \[1, "):
        SafeStepConfig(max_consecutive_failures=0)
    with pytest.raises(ConfigError, match=r"safety\.step\.reward_bound=-1\.0: expected a finite number in \(0\.0"):
        SafeStepConfig(reward_bound=-1.0)


# ------------------------------------------------------------------------------------------ hostile actions
@pytest.mark.parametrize(
    ("action", "dtype"),
    [
        (np.array([0.5 + 1j, 0.0]), "complex128"),
        (np.array(["0.5", "1"]), "<U3"),
        (None, "object"),
        (np.array([0.5, None]), "object"),
        ([0.5, [1.0, 2.0]], "object"),  # ragged: numpy cannot make an array of it
    ],
    ids=["complex", "string", "none", "object", "ragged"],
)
def test_actions_that_are_not_real_numbers_are_refused_clearly(
    action: Any, dtype: str, make_fault_env: MakeEnv
) -> None:
    env = SafeStep(make_fault_env(), env_index=2)
    env.reset(seed=0)
    with pytest.raises(TypeError, match=rf"^env 2 \(SimFaultEnv\): action of dtype {dtype} \(") as caught:
        env.step(action)
    assert "expected real numbers of shape (2,) for the action space Box(-1.0, 1.0, (2,), float32)" in str(caught.value)
    assert env.unwrapped.steps == 0  # nothing reached the env


def test_integer_and_bool_actions_are_numbers(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env())
    env.reset(seed=0)
    env.step(np.array([1, -1]))
    env.step(np.array([True, False]))
    np.testing.assert_array_equal(env.unwrapped.actions_seen, [[1.0, -1.0], [1.0, 0.0]])


# ------------------------------------------------------------------------------------------ close and pickle
def test_step_and_reset_after_close_raise_instead_of_building_a_new_simulation(ant_env_id: str) -> None:
    env = SafeStep(gym.make(ant_env_id))
    env.reset(seed=0)
    env.close()
    with pytest.raises(gym.error.ClosedEnvironmentError, match=r"env 0 \(RoboSafe/Ant-v0\): step\(\) after close"):
        env.step(np.zeros(8, dtype=np.float32))
    with pytest.raises(gym.error.ClosedEnvironmentError, match=r"reset\(\) after close"):
        env.reset()
    assert env.unwrapped.client_id == -1 and env.counters["env_rebuilds"] == 0


def test_pickle_round_trip_keeps_counters_and_history() -> None:
    env = SafeStep(gym.make("Pendulum-v1"), SafeStepConfig(history_len=4, state_interval=2), env_index=7)
    env.reset(seed=0)
    for torque in (0.5, 1.0, 3.0, math.nan):  # 3.0 is clamped to the bound 2, NaN sanitised to 0
        env.step(np.array([torque], dtype=np.float32))
    copy = pickle.loads(pickle.dumps(env))
    assert copy.counters == env.counters
    assert (copy.counters["actions_sanitised"], copy.counters["nonfinite_actions"]) == (2, 1)
    assert copy.env_index == 7 and copy.cfg == env.cfg
    np.testing.assert_array_equal(copy._history.read()[1], [[0.5], [1.0], [2.0], [0.0]])
    # The copy works on its own: its action test (rebuilt) still sanitises, and the original does not see it.
    _, _, _, _, info = copy.step(np.array([math.inf], dtype=np.float32))
    assert info["safe_step"]["incident"] == "nonfinite_action"
    assert copy.counters["nonfinite_actions"] == env.counters["nonfinite_actions"] + 1 == 2


def test_pickle_of_the_ant_gives_the_copy_its_own_world(ant_env_id: str) -> None:
    env = SafeStep(gym.make(ant_env_id))
    env.reset(seed=0)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.unwrapped.client_id != env.unwrapped.client_id
    assert pybullet.isConnected(physicsClientId=copy.unwrapped.client_id)
    # Same seed, same first steps: the copy is an independent Ant of the same task.
    obs_a = [env.reset(seed=3)[0], env.step(np.full(8, 0.5, dtype=np.float32))[0]]
    obs_b = [copy.reset(seed=3)[0], copy.step(np.full(8, 0.5, dtype=np.float32))[0]]
    np.testing.assert_array_equal(obs_a, obs_b)
    copy.close()
    env.step(np.zeros(8, dtype=np.float32))  # the original's world is untouched by the copy's close
    env.close()


def test_pickle_with_a_recorder_is_refused_with_the_reason(make_fault_env: MakeEnv, recorder: IncidentRecorder) -> None:
    env = SafeStep(make_fault_env(), recorder=recorder)
    with pytest.raises(TypeError, match=r"cannot be pickled: the recorder is the one writer of .*recorder=None"):
        pickle.dumps(env)

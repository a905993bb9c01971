"""The planar walkers' own rules, from the reference's source: free root joints, the Hopper/Walker2D height-and-pitch
rule and the HalfCheetah's contact rule that never ends an episode. (The per-joint torques are checked by the
reference comparison: PyBullet reports no applied torque under TORQUE_CONTROL, and the observations only agree bit
for bit with the reference's when every torque does.)"""

from __future__ import annotations

import gymnasium
import numpy as np
import pybullet
import pytest

import robosafe_tasks  # noqa: F401  (registers the ids)
from robosafe_tasks import physics


def test_engine_fact_the_root_joints_default_motors_hold_the_hopper_up() -> None:
    # Why find_motor_joints frees the ignore* joints, as the reference's addToScene does: left alone, PyBullet's default
    # velocity motors on the x and z slides and the pitch hinge keep the torso where it was loaded.
    client = physics.connect_direct()
    try:
        settings = physics.PhysicsSettings()
        physics.configure_engine(client, settings)
        physics.load_stadium(client, settings)
        held = physics.load_mjcf_robot(client, "hopper.xml")
        free = physics.load_mjcf_robot(client, "hopper.xml")
        pybullet.resetBasePositionAndOrientation(free, [0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0], physicsClientId=client)
        physics.find_motor_joints(client, free)
        for _ in range(60):  # 1 s
            pybullet.stepSimulation(physicsClientId=client)
        torso = 3  # link index of "torso" (after the three root joints)
        held_z = pybullet.getLinkState(held, torso, physicsClientId=client)[0][2]
        free_z = pybullet.getLinkState(free, torso, physicsClientId=client)[0][2]
        assert held_z == pytest.approx(1.25, abs=0.01)
        assert free_z < 1.0  # a free one-legged hopper with limp joints collapses
    finally:
        pybullet.disconnect(physicsClientId=client)


@pytest.mark.parametrize("task_id", ["RoboSafe/Hopper-v0", "RoboSafe/Walker2D-v0"])
def test_hopper_and_walker_live_while_the_torso_is_above_08_m_and_pitch_below_1_rad(task_id: str) -> None:
    # With limp joints the robot topples; each step's alive bonus must follow the torso's state after the step:
    # +1 iff z > 0.8 m and |pitch| < 1 rad, and the first -1 ends the episode.
    env = gymnasium.make(task_id).unwrapped
    try:
        env.reset(seed=0)
        zero = np.zeros(len(env.action_names), dtype=np.float32)
        for step in range(1, 200):
            obs, _, terminated, _, info = env.step(zero)
            z = float(obs[0]) + env.get_sim_state()["initial_z"]
            pitch = float(obs[7])
            alive = 1.0 if z > 0.8 and abs(pitch) < 1.0 else -1.0
            assert info["reward_alive"] == alive, step
            assert terminated == (alive < 0)
            if terminated:
                break
        assert terminated and step > 10  # it takes a while to fall
    finally:
        env.close()


def test_half_cheetah_alive_follows_its_contacts_and_never_ends_the_episode() -> None:
    # The cheetah settles onto its legs; its knees and thighs touch the floor on the way (alive -1), which never
    # ends the episode. Alive is +1 iff |pitch| < 1 rad and none of fshin, fthigh, bshin, bthigh (contact slots
    # 1, 2, 4, 5 of the six observed) is shown touching the floor.
    env = gymnasium.make("RoboSafe/HalfCheetah-v0", max_episode_steps=300)
    try:
        env.reset(seed=0)
        seen = set()
        for _ in range(300):
            obs, _, terminated, truncated, info = env.step(env.action_space.sample())
            contacts = obs[20:26]
            alive = 1.0 if abs(obs[7]) < 1.0 and not contacts[[1, 2, 4, 5]].any() else -1.0
            assert info["reward_alive"] == alive
            assert not terminated
            seen.add(alive)
        assert truncated and seen == {1.0, -1.0}
    finally:
        env.close()

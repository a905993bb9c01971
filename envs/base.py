"""Base class of the PyBullet locomotion tasks: a port of pybullet_envs' ``WalkerBaseBulletEnv`` to gymnasium.

Observation, reward, termination, action scaling, physics settings and reset randomisation follow pybullet_envs
(``gym_locomotion_envs.WalkerBaseBulletEnv``, ``robot_locomotors.WalkerBase``, ``robot_bases``, ``scene_stadium``)
exactly, quirks included, so that returns compare with published pybullet_envs numbers:

- The observation's foot contacts lag one step: the reference builds the observation before it updates the
  contacts (zeros right after a reset).
- The "body" x, y used for the walk target's angle and distance (hence progress) is the mean over the robot's parts
  *and the floor*: the reference adds the ground plane to its parts dict, so the floor origin is one of the averaged
  points (22 points for the Ant, so progress is 21/22 of the mean robot part's speed towards the target).
- Electricity and stall costs use the action as given, not the clipped one (the torques use the clipped one), and
  the joint speeds scaled by 0.1 as in the observation (unclipped, float32).

Deliberate differences from the reference:

- ``info`` holds the reward terms (``reward_alive``, ``reward_progress``, ``reward_electricity`` (electricity and
  stall torque costs together, as the reference's term), ``reward_joints_at_limit``, ``reward_feet_collision``
  (always 0.0, as in the reference)); the reference returns ``{}``.
- A non-finite action is not rejected (the reference asserts): it reaches the engine, which is the fault the safety
  layer exists to catch. An episode also terminates when the *raw* state is non-finite (the reference checks the
  observation after clipping to [-5, 5], which turns Inf into 5 and only sees NaN).
- After a step left a non-finite state, ``reset()`` rebuilds the world first: PyBullet 3.2.7 cannot be reset in
  place after a NaN (see :meth:`LocomotionEnv.rebuild_simulation`).
- Episodes are not time-limited here; the gymnasium registration adds ``TimeLimit``.
"""

from __future__ import annotations

import logging
import math
import os
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pybullet

from envs import physics

logger = logging.getLogger(__name__)

# Observation entries are clipped to +-5, as in WalkerBase.calc_state.
_OBS_CLIP = 5.0
# A joint whose relative position (-1..+1 between its limits) is beyond this counts as "at its limit".
_AT_LIMIT = 0.99
# WalkerBase scales velocities to make them roughly -1..+1: 0.3 for the base, 0.1 for the joints.
_BASE_VEL_SCALE = 0.3
_JOINT_VEL_SCALE = 0.1
# Keys of get_sim_state() and their shapes; "n" is the number of motors, "f" the number of feet.
_STATE_KEYS = (
    "base_pos",
    "base_orn",
    "base_lin_vel",
    "base_ang_vel",
    "joint_pos",
    "joint_vel",
    "initial_z",
    "potential",
    "walk_target",
    "feet_contact",
    "feet_contact_obs",
    "elapsed_steps",
)


@dataclass(frozen=True)
class StateLimits:
    """Bounds of a plausible state; :meth:`LocomotionEnv.check_state` reports anything outside.

    Attributes:
        base_height: (min, max) height of the base in m.
        base_speed: Bound on the norm of the base's linear velocity in m/s.
        base_angular_speed: Bound on the norm of the base's angular velocity in rad/s.
        joint_speed: Bound on the absolute speed of each motor joint in rad/s.
    """

    base_height: tuple[float, float]
    base_speed: float
    base_angular_speed: float
    joint_speed: float


@dataclass(frozen=True)
class WalkerSpec:
    """What makes one locomotion task (the constants of a ``robot_locomotors.WalkerBase`` subclass).

    Attributes:
        mjcf_file: Robot file under pybullet_data's ``mjcf/`` folder.
        foot_names: Links whose contact with the floor is observed, in observation order.
        power: Torque scale of the robot (``WalkerBase.power``); torque = power * power_coef * clip(action).
        limits: Plausible state bounds for :meth:`LocomotionEnv.check_state`.
        power_coef: Per-joint torque scale in N m (``XmlBasedRobot.addToScene`` sets 100 for every joint). The
            MJCF actuator gear is not used, as in the reference. Default 100.0.
        electricity_cost: Weight of mean |action * 0.1 joint speed|. Default -2.0.
        stall_torque_cost: Weight of mean action^2. Default -0.1.
        joints_at_limit_cost: Weight of the number of joints at their limit. Default -0.1.
        walk_target: (x, y) of the walk target in m; 1 km down the x axis. Default (1000.0, 0.0).
    """

    mjcf_file: str
    foot_names: tuple[str, ...]
    power: float
    limits: StateLimits
    power_coef: float = 100.0
    electricity_cost: float = -2.0
    stall_torque_cost: float = -0.1
    joints_at_limit_cost: float = -0.1
    walk_target: tuple[float, float] = (1e3, 0.0)


class LocomotionEnv(gymnasium.Env[np.ndarray, np.ndarray]):
    """A torque-controlled MJCF walker on the stadium floor, in its own DIRECT PyBullet client.

    Subclasses set :attr:`walker` and implement :meth:`alive_bonus`. Besides the gymnasium API the env implements
    the simulator protocol of the safety layer (``robo_safe_rl.env.protocol.SimulatedEnv``, by duck typing).

    Observation (float32, shape (8 + 2 n + f,) for n motors and f feet; 28 for the Ant), each entry clipped to
    [-5, 5]: torso height minus its height at reset (m); sin and cos of the angle from the torso's heading to the
    walk target; base linear velocity rotated into the yaw frame, times 0.3 (m/s); roll and pitch (rad); per motor
    its position scaled to [-1, 1] between its limits and its speed times 0.1 (rad/s), interleaved; per foot 1.0 if
    it touched the floor after the previous step.

    Action (float32, shape (n,)): motor torques as fractions of ``power * power_coef``, clipped to [-1, 1].

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels. Default 320.
        render_height: Height of rendered images in pixels. Default 240.
        settings: Engine settings; the default is the pybullet_envs stadium scene.

    Raises:
        ValueError: If ``render_mode`` is not supported.
    """

    walker: ClassVar[WalkerSpec]
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["rgb_array"],
        "render_fps": 1.0 / physics.PhysicsSettings().dt,
    }
    #: Exceptions the engine raises (a dead client raises ``pybullet.error: Not connected to physics server.``).
    physics_error_types: tuple[type[BaseException], ...] = (pybullet.error,)

    def __init__(
        self,
        render_mode: str | None = None,
        render_width: int = 320,
        render_height: int = 240,
        settings: physics.PhysicsSettings | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.render_width = render_width
        self.render_height = render_height
        self.settings = settings if settings is not None else physics.PhysicsSettings()
        self._client = physics.NO_CLIENT
        self._pid = os.getpid()
        self._build_world()

        n = len(self.action_names)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (n,), np.float32)
        obs_dim = 8 + 2 * n + len(self.walker.foot_names)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)

        # torque = power * power_coef * clip(a): the product is formed first, as in WalkerBase.apply_action.
        self._torque_scale = self.walker.power * self.walker.power_coef
        # Joint observation from the interleaved raw (position, velocity) pairs as (raw - offset) * scale:
        # position -> 2 (q - mid) / (upper - lower), velocity -> 0.1 qdot.
        mid = 0.5 * (self.joints.lower + self.joints.upper)
        self._j_offset = np.stack([mid, np.zeros(n)], axis=1).ravel()
        self._j_scale = np.stack([2.0 / (self.joints.upper - self.joints.lower), np.full(n, _JOINT_VEL_SCALE)], 1).ravel()
        self._target_x, self._target_y = self.walker.walk_target
        self._inv_dt = 1.0 / self.settings.dt

        # Episode bookkeeping (set properly by reset()).
        self._initial_z = 0.0
        self._potential = 0.0
        self._walk_target_dist = 0.0
        self._elapsed_steps = 0
        self._feet_contact = np.zeros(len(self.walker.foot_names), dtype=np.float32)
        self._feet_contact_obs = self._feet_contact.copy()
        self._joint_speeds = np.zeros(n, dtype=np.float32)
        self._joints_at_limit = 0
        self._pitch = 0.0
        self._state_finite = True

    # ------------------------------------------------------------------ world
    def _build_world(self) -> None:
        """Empty the world (or make a new client if ours is gone) and load floor and robot."""
        start = pybullet.getSystemInfo if False else None  # noqa: F841  (placeholder removed below)
        if physics.is_connected(self._client):
            # resetSimulation deletes and recreates the dynamics world (broadphase included), which clears a NaN
            # as a new client does, for a quarter of the cost (connect(DIRECT) alone takes ~8 ms).
            pybullet.resetSimulation(physicsClientId=self._client)
        else:
            self._client = physics.connect_direct()
            physics.claim_client(self._client, self._forget_client)
        c = self._client
        physics.configure_engine(c, self.settings)
        self._ground = physics.load_stadium(c, self.settings)
        self._robot = physics.load_mjcf_robot(c, self.walker.mjcf_file)
        self.joints = physics.find_motor_joints(c, self._robot)
        self.action_names: list[str] = list(self.joints.names)
        self._motor_ids = self.joints.indices
        feet = physics.find_links(c, self._robot, self.walker.foot_names)
        self._foot_slot = {link: i for i, link in enumerate(feet)}
        # Every link is a "part" in the reference's body-centre mean, plus the base and the floor.
        self._link_ids = list(range(pybullet.getNumJoints(self._robot, physicsClientId=c)))
        floor_pos, _ = pybullet.getBasePositionAndOrientation(self._ground, physicsClientId=c)
        self._floor_x, self._floor_y = floor_pos[0], floor_pos[1]
        self._num_parts = len(self._link_ids) + 2
        # The loaded pose, restored by every reset; restoreState also drops the contact cache of the last episode,
        # so an episode does not depend on what ran before it.
        self._initial_state = pybullet.saveState(physicsClientId=c)
        self._state_finite = True

    def _forget_client(self) -> None:
        """Called when another env was handed our (dead) client id: never touch that world."""
        self._client = physics.NO_CLIENT

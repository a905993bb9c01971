"""Base class of the PyBullet locomotion tasks: a port of pybullet_envs' ``WalkerBaseBulletEnv`` to gymnasium.

Observation, reward, termination, action scaling, physics settings and reset randomisation follow pybullet_envs
(``gym_locomotion_envs.WalkerBaseBulletEnv``, ``robot_locomotors.WalkerBase``, ``robot_bases``, ``scene_stadium``)
exactly, quirks included, so that returns compare with published pybullet_envs numbers:

- The observation's foot contacts lag one step: the reference builds the observation before it updates the
  contacts (zeros right after a reset).
- The "body" x, y used for the walk target's angle and distance (hence progress) is the mean over the robot's parts
  *and the floor*: the reference adds the ground plane to its parts dict, so the floor origin is one of the averaged
  points (22 points for the Ant, so progress is 21/22 of the mean robot part's speed towards the target).
- Link positions are PyBullet's cached link transforms (``getLinkState`` without ``computeForwardKinematics``),
  which lag the base by one substep after ``stepSimulation``; steady motion is unaffected, a step that starts a
  motion sees 3/4 of it in the links.
- The torso is the base of a floating-base robot (the Ant), and for the planar robots (Hopper, Walker2D,
  HalfCheetah) the link ``torso``, carried over a fixed base at the origin by three free root joints (x slide,
  z slide, pitch hinge): its pose is the cached link transform, its speed is computed (``computeLinkVelocity``), and
  the fixed base is not one of the body-centre parts (the reference's parts dict files the link ``torso`` under the
  key where it first put the base). The root joints are not observed or actuated; each reset restores them to the
  loaded pose at rest.
- Electricity and stall costs use the action as given, not the clipped one (the torques use the clipped one), and
  the joint speeds scaled by 0.1 as in the observation (before its clipping to [-5, 5]). They are computed in
  float64 where the reference multiplies float32 arrays (a difference of ~1e-7 relative).

Deliberate differences from the reference:

- Where every motor has the same torque scale (the Ant, the Hopper), a float32 action gives float32 torques (the
  scale is a Python float, which numpy 2 keeps weak); the reference forms each torque in float64. With float64
  actions the observations are the reference's bit for bit (tested); with float32 ones these two tasks' trajectories
  part from the reference's after ~100 steps, their episode statistics do not (tested). Kept as the Ant always was.
- ``info`` holds the reward terms (``reward_alive``, ``reward_progress``, ``reward_electricity`` (electricity and
  stall torque costs together, as the reference's term), ``reward_joints_at_limit``, ``reward_feet_collision``
  (always 0.0, as in the reference)); the reference returns ``{}``.
- A non-finite action is not rejected (the reference asserts): it reaches the engine, which is the fault the safety
  layer exists to catch. An episode also terminates when the *raw* state is non-finite (the reference checks the
  observation after clipping to [-5, 5], which turns Inf into 5 and only sees NaN).
- After a step left a non-finite state, ``reset()`` rebuilds the world first: PyBullet 3.2.7 cannot be reset in
  place after a NaN (see :meth:`LocomotionEnv.rebuild_simulation`).
- Episodes are not time-limited here; the gymnasium registration adds ``TimeLimit``.
- ``render()`` uses PyBullet's EGL plugin when it loads and is faster, else its software renderer
  (ER_TINY_RENDERER); both work headless (:mod:`robosafe_tasks.render`). The reference asks for the OpenGL one. Same
  camera: 3 m from the torso, yaw 0, pitch -30 degrees, 60 degree field of view.
- Each env owns one DIRECT client; the reference's default connect tries shared memory first.
"""

from __future__ import annotations

import contextlib
import logging
import math
from abc import abstractmethod
from operator import itemgetter, mul, sub, truediv
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pybullet

from robosafe_tasks import physics, render
from robosafe_tasks.spec import WalkerSpec
from robosafe_tasks.state import StateQuery, check_limits, validate_state

logger = logging.getLogger(__name__)

# Observation entries are clipped to +-5, as in WalkerBase.calc_state.
_OBS_CLIP = 5.0
# A joint whose relative position (-1..+1 between its limits) is beyond this counts as "at its limit".
_AT_LIMIT = 0.99
# WalkerBase scales velocities to make them roughly -1..+1: 0.3 for the base, 0.1 for the joints.
_BASE_VEL_SCALE = 0.3
_JOINT_VEL_SCALE = 0.1
# The step's per-element work runs as map() chains over these C callables (no Python frame per element). _FIRST and
# _SECOND pick a link state's centre of mass and a position's x and y, or a joint state's position and speed;
# _LINK_A a contact point's link on body A (the robot).
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_LINK_A = itemgetter(3)
_TWICE = (2.0).__mul__
_SCALE_JOINT_VEL = _JOINT_VEL_SCALE.__mul__
_AS_FLOAT = (0.0, 1.0).__getitem__  # a bool as 0.0 or 1.0


class LocomotionEnv(gymnasium.Env[np.ndarray, np.ndarray]):
    """A torque-controlled MJCF walker on the stadium floor, in its own DIRECT PyBullet client.

    Subclasses set :attr:`walker` and implement :meth:`alive_bonus`. Besides the gymnasium API the env implements
    the simulator protocol of the safety layer (``robo_safe_rl.bridge.protocol.SimulatedEnv``, by duck typing).

    Observation (float32, shape (8 + 2 n + f,) for n motors and f feet; 28 for the Ant), each entry clipped to
    [-5, 5]: torso height minus its height at reset (m); sin and cos of the angle from the torso's heading (yaw) to
    the walk target as seen from the body centre; base linear velocity rotated into the yaw frame, times 0.3 (m/s);
    roll and pitch (rad); per motor its position scaled to [-1, 1] between its limits and its speed times 0.1
    (rad/s), interleaved; per foot 1.0 if it touched the floor after the previous step.

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
    #: Resident memory one env costs, in bytes, for sizing a run before it is built. Measured with PyBullet 3.2.7:
    #: 29.3 MiB per Ant env (RSS growth over 1 to 64 envs, each reset and stepped), of which 28.0 MiB is the DIRECT
    #: client itself (its command and status buffers, whatever the robot); rounded up.
    memory_per_env: ClassVar[int] = 32 * 2**20

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
        # The frame rate of a video is the control rate of this env's own settings, not of the defaults.
        self.metadata = {**self.metadata, "render_fps": 1.0 / self.settings.dt}
        # What a pickled env is rebuilt from (see __getstate__).
        self._init_kwargs: dict[str, Any] = {
            "render_mode": render_mode,
            "render_width": render_width,
            "render_height": render_height,
            "settings": settings,
        }
        self._closed = False
        self._client = physics.NO_CLIENT
        self._renderer: tuple[int, str] | None = None  # (client, "egl" or "tiny") of a rendering env
        self._build_world()

        n = len(self.action_names)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (n,), np.float32)
        obs_dim = 8 + 2 * n + len(self.walker.foot_names)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)

        self._action_shape = self.action_space.shape
        self._target_x, self._target_y = self.walker.walk_target
        self._dt = self.settings.dt

        # Episode bookkeeping (set properly by reset()). Hot-path values are Python floats and lists: for arrays of
        # 8 to 28 elements, numpy's per-call overhead costs more than the arithmetic.
        self._initial_z = 0.0
        self._potential = 0.0
        self._walk_target_dist = 0.0
        self._elapsed_steps = 0
        self._feet_contact = [0.0] * len(self.walker.foot_names)
        self._feet_contact_shown = list(self._feet_contact)
        self._joint_rel: list[float] = [0.0] * n
        self._joint_speed: list[float] = [0.0] * n
        self._joint_slots = [0.0] * (2 * n)  # the observation's joint entries, interleaved (refilled every step)
        self._pitch = 0.0
        self._state_finite = True

    # ------------------------------------------------------------------ world
    def _build_world(self) -> None:
        """Empty the world (or make a new client if ours is gone) and load floor and robot."""
        self._client, new_client = physics.empty_world(self._client, self._forget_client)
        if new_client:
            self._renderer = None
        c = self._client
        if self.render_mode == "rgb_array" and self._renderer is None:
            self._renderer = (c, render.attach(c))  # before the bodies: the EGL plugin only draws what loads after it
        physics.configure_engine(c, self.settings)
        self._ground = physics.load_stadium(c, self.settings)
        self._robot = physics.load_mjcf_robot(c, self.walker.mjcf_file)
        self.joints = physics.find_motor_joints(c, self._robot)
        self.action_names: list[str] = list(self.joints.names)
        self._motor_ids = self.joints.indices
        self._torque_scale = self._torque_scales()
        w = self.walker
        # The torso: the base (None), or a link carried by the planar root joints over a fixed base at the origin.
        self._torso = None if w.torso_link is None else physics.find_links(c, self._robot, (w.torso_link,))[0]
        self._torso_is_link = int(self._torso is not None)  # the link query then also computes link velocities
        self._root_ids = physics.find_joints(c, self._robot, w.root_joints)
        self._joint_mid = (0.5 * (self.joints.lower + self.joints.upper)).tolist()
        self._joint_span = (self.joints.upper - self.joints.lower).tolist()
        self._feet = physics.find_links(c, self._robot, self.walker.foot_names)
        # Every link is a "part" in the reference's body-centre mean, plus the floor, plus the base when it is the
        # torso. (The reference's addToScene files the base under the robot's name "torso" at the first joint; a
        # link named "torso", as in the planar robots, replaces that entry, so their fixed base is no part.)
        self._link_ids = list(range(pybullet.getNumJoints(self._robot, physicsClientId=c)))
        floor_pos, _ = pybullet.getBasePositionAndOrientation(self._ground, physicsClientId=c)
        self._floor_x, self._floor_y = floor_pos[0], floor_pos[1]
        self._num_parts = len(self._link_ids) + (2 if self._torso is None else 1)
        # The loaded pose, restored by every reset; restoreState also drops the contact cache of the last episode,
        # so an episode does not depend on what ran before it.
        self._initial_state = pybullet.saveState(physicsClientId=c)
        self._state_finite = True
        self._last_query: StateQuery | None = None

    def _torque_scales(self) -> float | np.ndarray:
        """``power * power_coef`` per motor (the product formed first, as in ``WalkerBase.apply_action``).

        One float when every motor shares it (the Ant, the Hopper): a float32 action then gives float32 torques
        (numpy 2 keeps a Python float weak), as the Ant always had; else a float64 array, one entry per motor.

        Raises:
            ValueError: If ``walker.joint_power_coefs`` names a joint that is not a motor of the robot.
        """
        w = self.walker
        unknown = sorted(set(w.joint_power_coefs) - set(self.action_names))
        if unknown:
            raise ValueError(f"joint_power_coefs names {unknown}, which are not motors; motors: {self.action_names}")
        scales = [w.power * w.joint_power_coefs.get(name, w.power_coef) for name in self.action_names]
        return scales[0] if len(set(scales)) == 1 else np.array(scales, dtype=np.float64)

    def _forget_client(self, client: int) -> None:
        """Called when another env was handed the (dead) client id ``client``: never touch that world."""
        if self._client == client:
            self._client = physics.NO_CLIENT

    def __getstate__(self) -> dict[str, Any]:
        """Pickle support: an env pickles as its constructor arguments (gymnasium's ``EzPickle`` rule).

        A physics world cannot travel, and copying the client id would make two envs drive one world; the copy
        builds its own and must be reset before stepping.
        """
        return {"init_kwargs": dict(self._init_kwargs)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Build a fresh env from the pickled constructor arguments (its own physics client)."""
        self.__init__(**state["init_kwargs"])  # type: ignore[misc]  # the one way to build the world

    @property
    def reward_bound(self) -> float:
        """Bound on ``|reward|`` of one step for any state within the task's limits (``walker.reward_bound``)."""
        return self.walker.reward_bound

    @property
    def client_id(self) -> int:
        """The PyBullet client id of this env's world (-1 when closed)."""
        return self._client

    @property
    def robot_id(self) -> int:
        """The body id of the robot in :attr:`client_id`."""
        return self._robot

    @property
    def ground_id(self) -> int:
        """The body id of the floor in :attr:`client_id`."""
        return self._ground

    @property
    def observed_feet_contact(self) -> list[float]:
        """The foot contacts the current observation shows (those after the previous step), one 0.0 or 1.0 per foot.

        What the reference's ``alive_bonus`` sees too: it runs before the contacts are updated.
        """
        return self._feet_contact_shown

    @abstractmethod
    def alive_bonus(self, z: float, pitch: float) -> float:
        """Reward for staying up: +1 while alive, -1 when it fell (``WalkerBase.alive_bonus``); with
        ``walker.fall_ends_episode`` -1 also ends the episode.

        Args:
            z: Torso height in m.
            pitch: Torso pitch in rad.

        Returns:
            +1.0 or -1.0.
        """

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Put the robot back at its loaded pose with joints at uniform(-0.1, 0.1) rad, all velocities zero.

        Args:
            seed: Seeds :attr:`np_random` (gymnasium semantics).
            options: Unused.

        Returns:
            The observation (shape (obs_dim,), float32) and an empty info dict.

        Raises:
            pybullet.error: If the physics client is gone (call :meth:`rebuild_simulation`).
            gymnasium.error.ClosedEnvironmentError: After :meth:`close`.
        """
        self._check_open("reset")
        super().reset(seed=seed)
        if not self._state_finite:
            logger.info("the last step left a non-finite state; rebuilding the world before the reset")
            self.rebuild_simulation()
        c, robot = self._client, self._robot
        pybullet.restoreState(self._initial_state, physicsClientId=c)
        q = self.np_random.uniform(low=-0.1, high=0.1, size=len(self._motor_ids))
        for joint, qj in zip(self._motor_ids, q.tolist(), strict=True):
            pybullet.resetJointState(robot, joint, qj, 0.0, physicsClientId=c)
        self._feet_contact = [0.0] * len(self._feet_contact)
        self._feet_contact_shown = list(self._feet_contact)
        self._elapsed_steps = 0
        self._initial_z = self._torso_position()[2]
        obs = self._observe(self._feet_contact)
        self._potential = -self._walk_target_dist / self._dt
        return obs, {}

    def raw_step(self, action: np.ndarray) -> None:
        """Only the simulation part of :meth:`step`: clip, scale to torques, apply, advance one env step.

        This is the baseline of the overhead benchmark; it computes no observation or reward.

        Args:
            action: Shape (n,). Values outside [-1, 1] are clipped; NaN passes through to the engine.
        """
        # maximum/minimum clip like np.clip (NaN passes through) at a third less overhead for 8 elements.
        torques = self._torque_scale * np.minimum(np.maximum(action, -1.0), 1.0)
        pybullet.setJointMotorControlArray(
            self._robot, self._motor_ids, pybullet.TORQUE_CONTROL, forces=torques.tolist(), physicsClientId=self._client
        )
        # One call runs settings.frame_skip substeps; the torques hold for all of them.
        pybullet.stepSimulation(physicsClientId=self._client)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, float]]:
        """Apply motor torques for one env step (``settings.dt`` s) and return the usual gymnasium tuple.

        PyBullet 3.2.7 does not raise on a NaN or Inf torque: the whole robot state is NaN after the step, the
        episode terminates, and the next :meth:`reset` rebuilds the world. (Huge finite torques stay finite, and
        actions are clipped anyway.)

        Args:
            action: Shape (n,), nominally in [-1, 1].

        Returns:
            observation (shape (obs_dim,), float32), reward, terminated, truncated (always False; the registration's
            TimeLimit truncates), info with the reward terms.

        Raises:
            ValueError: If the action has the wrong shape.
            pybullet.error: If the physics client is gone.
            gymnasium.error.ClosedEnvironmentError: After :meth:`close`.
        """
        if self._closed:
            self._check_open("step")
        a = np.asarray(action)
        if a.shape != self._action_shape:
            raise ValueError(f"action must have shape {self._action_shape}, got {a.shape}")
        self.raw_step(a)
        self._elapsed_steps += 1
        shown = self._feet_contact
        obs = self._observe(shown)
        # The contacts after this step are shown by the next observation (the reference's one-step lag).
        self._feet_contact_shown = shown
        self._feet_contact = self._touching_feet()
        w = self.walker

        # obs[0] + initial_z rather than the torso z: the reference judges the float32 observation entry.
        alive = self.alive_bonus(obs.item(0) + self._initial_z, self._pitch)
        terminated = (alive < 0.0 and w.fall_ends_episode) or not self._state_finite
        potential_old = self._potential
        self._potential = -self._walk_target_dist / self._dt
        progress = float(self._potential - potential_old)
        # The costs use the action as given (unclipped) and the joint speeds as observed (0.1 rad/s units).
        act = a.tolist()
        n = len(act)
        electricity = w.electricity_cost * (sum(map(abs, map(mul, act, self._joint_speed))) / n)
        electricity += w.stall_torque_cost * (sum(map(mul, act, act)) / n)
        joints_at_limit = w.joints_at_limit_cost * sum(map(_AT_LIMIT.__lt__, map(abs, self._joint_rel)))

        reward = alive + progress + electricity + joints_at_limit
        info = {
            "reward_alive": alive,
            "reward_progress": progress,
            "reward_electricity": electricity,
            "reward_joints_at_limit": joints_at_limit,
            "reward_feet_collision": 0.0,
        }
        return obs, reward, terminated, False, info

    def _observe(self, feet_contact: list[float]) -> np.ndarray:
        """Query the robot and build the observation (``WalkerBase.calc_state``).

        Also sets what the reward needs: ``_walk_target_dist`` (m), ``_pitch`` (rad), ``_joint_rel`` and
        ``_joint_speed`` (the unclipped joint entries of the observation, float64) and ``_state_finite``.

        Args:
            feet_contact: The foot contacts to show, one 0.0 or 1.0 per foot.

        Returns:
            The observation, shape (obs_dim,), float32, clipped to [-5, 5].
        """
        c, robot = self._client, self._robot
        # Each query is one round trip to the engine that copies the whole body's state, so a step makes as few as
        # the reference's numbers allow: the links (with their velocities when the torso is one of them: the same
        # numbers as the torso's own computeLinkVelocity query), the motor joints, and for a floating base its pose
        # and velocity (no link query returns the base). Measured on the Ant (PyBullet 3.2.7): ~1.3 us per round trip
        # plus ~0.4 us per link returned (seven new tuples each), and right after stepSimulation every query, and the
        # Python around it, runs 1.5 to 3 times slower than in a tight loop (cold caches); the queries the reference's
        # numbers need cost ~10% of the Ant's raw stepping time and ~18% of the Hopper's, before any Python.
        links = pybullet.getLinkStates(
            robot, self._link_ids, computeLinkVelocity=self._torso_is_link, physicsClientId=c
        )
        states = pybullet.getJointStates(robot, self._motor_ids, physicsClientId=c)
        if self._torso is None:
            pos, orn = pybullet.getBasePositionAndOrientation(robot, physicsClientId=c)
            lin, ang = pybullet.getBaseVelocity(robot, physicsClientId=c)
        else:
            # The reference's torso part: its pose is the cached link transform (as every part's), its speed is
            # computed (computeLinkVelocity).
            pos, orn, _, _, _, _, lin, ang = links[self._torso]
        roll, pitch, yaw = pybullet.getEulerFromQuaternion(orn)
        # check_state() reads this record instead of querying the engine again.
        self._last_query = (pos, orn, lin, ang, states)
        x, y, z = pos
        vx, vy, vz = lin

        # Body centre: mean over the reference's parts (links at their centre of mass, the floor, the base when it is
        # the torso); each sum keeps the reference's order (base first, then the floor, then the links in order).
        centres = list(map(_FIRST, links))
        link_x, link_y = sum(map(_FIRST, centres)), sum(map(_SECOND, centres))
        if self._torso is None:
            body_x = (x + self._floor_x + link_x) / self._num_parts
            body_y = (y + self._floor_y + link_y) / self._num_parts
        else:
            body_x = (self._floor_x + link_x) / self._num_parts
            body_y = (self._floor_y + link_y) / self._num_parts
        dx, dy = self._target_x - body_x, self._target_y - body_y
        self._walk_target_dist = math.sqrt(dy * dy + dx * dx)
        angle_to_target = math.atan2(dy, dx) - yaw
        # Base velocity rotated by -yaw into the heading frame.
        cos_yaw, sin_yaw = math.cos(yaw), math.sin(yaw)
        forward = cos_yaw * vx + sin_yaw * vy
        sideways = cos_yaw * vy - sin_yaw * vx
        # Per motor: position scaled to -1..+1 between the limits, speed * 0.1 (Joint.current_relative_position).
        # (A comprehension would cost a function object and a frame per call on Python 3.11.)
        rel = list(map(truediv, map(_TWICE, map(sub, map(_FIRST, states), self._joint_mid)), self._joint_span))
        speed = list(map(_SCALE_JOINT_VEL, map(_SECOND, states)))
        self._joint_rel, self._joint_speed = rel, speed
        self._pitch = pitch
        # NaN or Inf anywhere makes this sum non-finite (a finite overflow would need values near 1e307).
        finite = math.isfinite(x + y + z + vx + vy + vz + roll + pitch + yaw + sum(rel) + sum(speed))
        self._state_finite = finite

        joints = self._joint_slots
        joints[0::2] = rel
        joints[1::2] = speed
        values = [
            z - self._initial_z,
            math.sin(angle_to_target),
            math.cos(angle_to_target),
            _BASE_VEL_SCALE * forward,
            _BASE_VEL_SCALE * sideways,
            _BASE_VEL_SCALE * vz,
            roll,
            pitch,
            *joints,
            *feet_contact,
        ]
        obs = np.fromiter(values, np.float32, len(values))
        # Clipping is a no-op when every finite float64 value is within +-5 (rounding to float32 cannot cross 5.0,
        # which float32 represents): two Python passes over ~28 floats cost less than numpy's two ufunc calls.
        if not (finite and min(values) >= -_OBS_CLIP and max(values) <= _OBS_CLIP):
            # minimum/maximum rather than np.clip (a Python-level wrapper, twice as slow here); both keep NaN.
            np.minimum(obs, _OBS_CLIP, out=obs)
            np.maximum(obs, -_OBS_CLIP, out=obs)
        return obs

    def _touching_feet(self) -> list[float]:
        """Which feet touch the floor now, one 0.0 or 1.0 per foot."""
        touching = set(map(_LINK_A, pybullet.getContactPoints(self._robot, self._ground, physicsClientId=self._client)))
        return list(map(_AS_FLOAT, map(touching.__contains__, self._feet)))

    # ------------------------------------------------------------------ rendering and life cycle
    def render(self) -> np.ndarray | None:
        """Render the scene from a camera 3 m behind and above the torso, looking at it (the reference's camera).

        Returns:
            With ``render_mode="rgb_array"``, an image of shape (render_height, render_width, 3), uint8; else None.
        """
        if self.render_mode != "rgb_array":
            return None
        c = self._client
        torso = self._torso_position()
        view = pybullet.computeViewMatrixFromYawPitchRoll(
            cameraTargetPosition=torso, distance=3.0, yaw=0.0, pitch=-30.0, roll=0.0, upAxisIndex=2, physicsClientId=c
        )
        proj = pybullet.computeProjectionMatrixFOV(
            fov=60.0, aspect=self.render_width / self.render_height, nearVal=0.1, farVal=100.0, physicsClientId=c
        )
        # The EGL plugin, once loaded, renders whatever the flag says, and may print on the way.
        with self._egl_quiet():
            _, _, rgba, _, _ = pybullet.getCameraImage(
                self.render_width,
                self.render_height,
                viewMatrix=view,
                projectionMatrix=proj,
                renderer=pybullet.ER_TINY_RENDERER,
                physicsClientId=c,
            )
        image = np.asarray(rgba, dtype=np.uint8).reshape(self.render_height, self.render_width, 4)
        return np.ascontiguousarray(image[:, :, :3])

    def _egl_quiet(self) -> contextlib.AbstractContextManager[None]:
        """:func:`robosafe_tasks.render.quiet` when this env's client renders with the EGL plugin (which prints)."""
        egl = self._renderer is not None and self._renderer[1] == "egl"
        return render.quiet() if egl else contextlib.nullcontext()

    def close(self) -> None:
        """Disconnect this env's physics client and free it. Safe to call more than once; afterwards ``step``,
        ``reset`` and ``rebuild_simulation`` raise ``gymnasium.error.ClosedEnvironmentError``."""
        self._closed = True
        client, self._client = self._client, physics.NO_CLIENT
        physics.release_client(client, self._forget_client)
        # A client killed behind our back (break_simulation) is already gone; disconnecting it again would raise.
        if physics.is_connected(client):
            with self._egl_quiet():
                pybullet.disconnect(physicsClientId=client)

    def __del__(self) -> None:
        # Envs are cheap to forget in notebooks and tests; do not leak one physics world per forgotten env.
        # Interpreter shutdown may have torn pybullet down already.
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------ simulator protocol
    def rebuild_simulation(self) -> None:
        """Throw the physics world away and build it again; call :meth:`reset` before stepping.

        PyBullet 3.2.7 facts: after a NaN reached the engine, resetting the robot in place or ``restoreState`` leaves
        it falling through the floor, so the world itself must go. If the client is alive it is emptied with
        ``resetSimulation`` (which recreates the dynamics world) and reloaded: ~3.4 ms for the Ant, reset included.
        If it is dead (``pybullet.error: Not connected to physics server.``), a new DIRECT client is made: ~4 ms, up
        to ~15 ms when the allocator has to map fresh memory for it.

        Raises:
            gymnasium.error.ClosedEnvironmentError: After :meth:`close` (a closed env stays closed).
        """
        self._check_open("rebuild_simulation")
        self._build_world()

    def _check_open(self, method: str) -> None:
        if self._closed:
            raise gymnasium.error.ClosedEnvironmentError(
                f"{type(self).__name__}.{method}() after close(); make a new env"
            )

    def get_sim_state(self) -> dict[str, np.ndarray]:
        """Return everything needed to continue this exact moment in another env of the same task.

        Returns:
            float64 arrays: ``base_pos`` (3,) m, ``base_orn`` (4,) quaternion xyzw, ``base_lin_vel`` (3,) m/s,
            ``base_ang_vel`` (3,) rad/s, ``joint_pos`` (n,) rad, ``joint_vel`` (n,) rad/s, ``initial_z`` () m,
            ``potential`` () (the progress potential after the last step), ``walk_target`` (2,) m,
            ``feet_contact`` (f,) (contacts after the last step, shown by the next observation),
            ``feet_contact_obs`` (f,) (contacts shown by the current observation), ``elapsed_steps`` () steps
            since the reset; for a torso on root joints also ``root_joint_pos`` (r,) (m, m, rad) and ``root_joint_vel``
            (r,) (m/s, m/s, rad/s), and ``base_*`` are the torso link's.

        Raises:
            pybullet.error: If the physics client is gone.
        """
        pos, orn, lin, ang, states = self._query_state()
        f64 = np.float64
        state = {
            "base_pos": np.array(pos, dtype=f64),
            "base_orn": np.array(orn, dtype=f64),
            "base_lin_vel": np.array(lin, dtype=f64),
            "base_ang_vel": np.array(ang, dtype=f64),
            "joint_pos": np.array([s[0] for s in states], dtype=f64),
            "joint_vel": np.array([s[1] for s in states], dtype=f64),
            "initial_z": np.array(self._initial_z, dtype=f64),
            "potential": np.array(self._potential, dtype=f64),
            "walk_target": np.array((self._target_x, self._target_y), dtype=f64),
            "feet_contact": np.array(self._feet_contact, dtype=f64),
            "feet_contact_obs": np.array(self._feet_contact_shown, dtype=f64),
            "elapsed_steps": np.array(self._elapsed_steps, dtype=f64),
        }
        if self._root_ids:
            roots = pybullet.getJointStates(self._robot, self._root_ids, physicsClientId=self._client)
            state["root_joint_pos"] = np.array([s[0] for s in roots], dtype=f64)
            state["root_joint_vel"] = np.array([s[1] for s in roots], dtype=f64)
        return state

    def set_sim_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """Restore a state from :meth:`get_sim_state` into this env's world (call after :meth:`reset`).

        Stepping the same action from the restored state reproduces the original next state to ~1e-13 (not
        bitwise: the engine's contact warm-start cache is not part of the state). The potential is restored as
        stored, not recomputed: it was computed from link positions that lag the base by a substep (see the module
        docstring), which a restore cannot recreate; for the same reason the returned observation matches the
        original one to ~1e-6, not exactly. A torso that is a link (the planar robots) is read from that cache too,
        so the restored observation's torso entries show the torso a substep later than the original did (8 mm for a
        torso falling at 2 m/s); the next step reads both alike.

        Args:
            state: As returned by :meth:`get_sim_state`.

        Returns:
            The observation at that moment, shape (obs_dim,), float32.

        Raises:
            ValueError: If a key is missing, an array has the wrong shape, or a value is not finite (a non-finite
                state would poison the world).
            pybullet.error: If the physics client is gone.
        """
        values = validate_state(state, len(self._motor_ids), len(self._feet_contact), len(self._root_ids))
        c, robot = self._client, self._robot
        if self._root_ids:
            # The torso's pose and velocity follow from its root joints; the base_* entries are read, not written.
            for joint, q, qd in zip(self._root_ids, values["root_joint_pos"], values["root_joint_vel"], strict=True):
                pybullet.resetJointState(robot, joint, float(q), float(qd), physicsClientId=c)
        else:
            pybullet.resetBasePositionAndOrientation(robot, values["base_pos"], values["base_orn"], physicsClientId=c)
            pybullet.resetBaseVelocity(robot, values["base_lin_vel"], values["base_ang_vel"], physicsClientId=c)
        for joint, q, qd in zip(self._motor_ids, values["joint_pos"], values["joint_vel"], strict=True):
            pybullet.resetJointState(robot, joint, float(q), float(qd), physicsClientId=c)
        self._initial_z = float(values["initial_z"])
        self._potential = float(values["potential"])
        self._target_x, self._target_y = (float(v) for v in values["walk_target"])
        self._feet_contact = values["feet_contact"].tolist()
        self._feet_contact_shown = values["feet_contact_obs"].tolist()
        self._elapsed_steps = int(values["elapsed_steps"])
        return self._observe(self._feet_contact_shown)

    def check_state(self) -> str | None:
        """Check the current state against the task's :class:`~envs.spec.StateLimits`.

        The state is the one the last :meth:`step`, :meth:`reset` or :meth:`set_sim_state` read from the engine
        for its observation (the same query, so the check costs no engine call), or a fresh query after
        :meth:`perturb_state` or :meth:`rebuild_simulation`. Code that moves the robot with raw PyBullet calls
        should step or reset before checking.

        Returns:
            None if the state is finite and within the limits, else a one-line reason naming the quantity, its
            value and the limit.

        Raises:
            pybullet.error: If the state must be queried and the physics client is gone.
        """
        query = self._last_query if self._last_query is not None else self._query_state()
        return check_limits(query, self.walker.limits, self.action_names)

    def _query_state(self) -> StateQuery:
        """Query torso pose, torso velocity and motor joint states, as :meth:`_observe` records them."""
        c, robot = self._client, self._robot
        if self._torso is None:
            pos, orn = pybullet.getBasePositionAndOrientation(robot, physicsClientId=c)
            lin, ang = pybullet.getBaseVelocity(robot, physicsClientId=c)
        else:
            pos, orn, *_, lin, ang = pybullet.getLinkState(robot, self._torso, computeLinkVelocity=1, physicsClientId=c)
        states = pybullet.getJointStates(robot, self._motor_ids, physicsClientId=c)
        return pos, orn, lin, ang, states

    def _torso_position(self) -> tuple[float, float, float]:
        """The torso's position in m: the base's, or the torso link's centre of mass (its cached transform)."""
        if self._torso is None:
            return pybullet.getBasePositionAndOrientation(self._robot, physicsClientId=self._client)[0]
        return pybullet.getLinkState(self._robot, self._torso, physicsClientId=self._client)[0]

    def break_simulation(self) -> None:
        """Fault injection: disconnect the physics client behind the env's back, as a crashed engine would.

        The next PyBullet call raises ``pybullet.error: Not connected to physics server.``;
        :meth:`rebuild_simulation` makes a new client.
        """
        pybullet.disconnect(physicsClientId=self._client)

    def perturb_state(self, scale: float) -> None:
        """Fault injection: throw the base at ``scale`` times the speed limits (a state blow-up).

        The linear and angular velocities are set to ``scale * base_speed`` and ``scale * base_angular_speed``
        along the diagonal (1, 1, 1) / sqrt(3); with ``scale > 1`` :meth:`check_state` reports the base speed. A torso
        on planar root joints is thrown through them: the x and z slides get ``scale * base_speed`` along
        (1, 0, 1) / sqrt(2), without spin (pitch rate 0). A spin past the angular bound swings the legs into the floor
        at PyBullet's 100 rad/s cap on joint speeds, and the contacts brake the throw within the step (measured: at
        10x, 5 of 50 throws with spin left a plausible state after the step; none without).

        Args:
            scale: Multiple of the speed limits.
        """
        lim = self.walker.limits
        c, robot = self._client, self._robot
        self._last_query = None
        if self._root_ids:
            speed = scale * lim.base_speed / math.sqrt(2.0)
            self._set_root_velocity((speed, speed, 0.0))
            return
        unit = 1.0 / math.sqrt(3.0)
        lin = [scale * lim.base_speed * unit] * 3
        ang = [scale * lim.base_angular_speed * unit] * 3
        pybullet.resetBaseVelocity(robot, lin, ang, physicsClientId=c)

    def _set_root_velocity(self, velocities: tuple[float, ...]) -> None:
        """Set the root joints' velocities (x slide m/s, z slide m/s, pitch hinge rad/s), keeping their positions."""
        c, robot = self._client, self._robot
        for joint, qd in zip(self._root_ids, velocities, strict=True):
            q = pybullet.getJointState(robot, joint, physicsClientId=c)[0]
            pybullet.resetJointState(robot, joint, q, qd, physicsClientId=c)

"""``RoboSafe/A1Flat-v0``: Isaac Lab's flat velocity-tracking task for the Unitree A1, on PyBullet.

Per policy step (50 Hz), in Isaac Lab's ``ManagerBasedRLEnv.step`` order: joint targets = standing pose + 0.25 *
action; 4 physics substeps of 5 ms, each with the PD torques of :func:`~robosafe_tasks.a1.robot.pd_torques`; the
reward terms and terminations on the new state with the command of the step; then the command manager (count down,
resample, heading controller) and the interval event (pushes); then the observation.

Observation (48,), float32, Isaac Lab's ``PolicyCfg`` order: base linear velocity (3, m/s) and angular velocity
(3, rad/s) in the base frame, gravity direction in the base frame (3), command (vx, vy, yaw rate), joint positions
minus the standing pose (12, rad), joint velocities (12, rad/s), last action (12); with ``obs_noise`` uniform noise
of +-0.1, 0.2, 0.05, -, 0.01, 1.5, - per group. Action (12,) in [-10, 10].

Deliberate differences from Isaac Lab: contacts (feet air time, trunk and thigh contacts) are read once per policy
step rather than every substep, so air times have a 20 ms resolution; friction and added mass are drawn at every
reset rather than once at start-up; ``info["reward_terms"]`` carries the weighted terms of the step (the adapter
sums them per episode into ``Episode_Reward/<term>``). A non-finite action is not rejected: it reaches the engine,
which is the fault the safety layer in front of the task exists to catch.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pybullet

from robosafe_tasks.a1 import commands, rewards, robot
from robosafe_tasks.a1.config import A1Config, TerrainConfig, build
from robosafe_tasks.a1.limits import A1_LIMITS, AIR_TIME_CAP, reward_bound
from robosafe_tasks.a1.sim_state import SimulatorProtocol
from robosafe_tasks.a1.world import A1World, base_frame, joint_arrays, yaw_of
from robosafe_tasks.spec import StateLimits
from robosafe_tasks.state import StateQuery

#: Uniform observation noise half-widths per group (``PolicyCfg``'s ``Unoise``), commands and actions noiseless.
_NOISE = np.concatenate([np.full(3, 0.1), np.full(3, 0.2), np.full(3, 0.05), np.zeros(3), np.full(12, 0.01),
                         np.full(12, 1.5), np.zeros(12)])  # fmt: skip
# uniform(low, high) draws low + (high - low) * random(), so these give Generator.uniform(-_NOISE, _NOISE)'s values
# bit for bit at a seventh of its cost (1.0 us against 7.1: its array arguments go through broadcasting machinery).
_NOISE_LOW, _NOISE_SPAN = -_NOISE, _NOISE - -_NOISE
_UP = (0.0, 0.0, -1.0)

# The A1's mirror image in its sagittal plane (y -> -y), for rsl-rl's symmetry augmentation (robo_safe_rl.bridge.mirror;
# algorithm.symmetry_cfg), as signed permutations: mirrored[i] = sign[i] * x[index[i]]. The legs trade sides (FR <-> FL,
# RR <-> RL); a hip turns about x, and a turn about x reflected in y -> -y is the other way (-1: the standing pose's
# hips, -0.1 right and +0.1 left, are each other's reflection); the upper and lower joints turn about y, which the
# reflection keeps (+1). Joints in action order FR, FL, RR, RL x (hip, upper, lower):
_JOINT_MIRROR = ((3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8), (-1, 1, 1) * 4)
# Observation: linear velocity (vx, -vy, vz); angular velocity, a pseudovector (-wx, wy, -wz); gravity (gx, -gy, gz);
# command (vx, -vy, -yaw rate); then joint positions, joint velocities and the last action, each as the joints.
_OBSERVATION_MIRROR = (
    (
        *range(12),
        *(12 + j for j in _JOINT_MIRROR[0]),
        *(24 + j for j in _JOINT_MIRROR[0]),
        *(36 + j for j in _JOINT_MIRROR[0]),
    ),
    (1, -1, 1, -1, 1, -1, 1, -1, 1, 1, -1, -1, *_JOINT_MIRROR[1] * 3),
)


class A1FlatEnv(SimulatorProtocol, gymnasium.Env[np.ndarray, np.ndarray]):
    """The A1 tracking commanded base velocities on flat ground (module docstring), with the simulator protocol.

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels.
        render_height: Height of rendered images in pixels.
        **cfg: The sections of :class:`~robosafe_tasks.a1.config.A1Config` as mappings (``task.env_kwargs``).

    Raises:
        ValueError: On an unknown render mode or a bad setting (naming its key).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 50}
    physics_error_types: tuple[type[BaseException], ...] = (pybullet.error,)
    #: Resident memory of one env in bytes, for sizing a run before it is built. Measured with PyBullet 3.2.7: 52 MiB
    #: per A1 env (RSS growth over 16 envs, each reset and stepped; the Ant's is 29 MiB, the URDF's meshes make the
    #: rest); rounded up.
    memory_per_env: ClassVar[int] = 56 * 2**20
    action_names: list[str] = list(robot.JOINT_NAMES)  # noqa: RUF012  (read-only, the protocol's attribute)
    #: The keys of ``info["metrics"]``, in order: the bridge logs each one's episode mean as ``Metrics/<name>``.
    metric_names: tuple[str, ...] = ("error_vel_xy", "error_vel_yaw")
    observation_mirror = _OBSERVATION_MIRROR
    action_mirror = _JOINT_MIRROR
    #: What ``task.env_kwargs`` builds, and the observation's size.
    config_class: ClassVar[type[A1Config]] = A1Config
    num_obs: ClassVar[int] = 48
    #: Plausible state bounds (SafeStep's ``check_state``).
    limits: StateLimits = A1_LIMITS

    def __init__(
        self, render_mode: str | None = None, render_width: int = 320, render_height: int = 240, **cfg: Any
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self._init_kwargs = {"render_mode": render_mode, "render_width": render_width, "render_height": render_height}
        self._init_kwargs.update(cfg)
        self.render_mode, self.render_width, self.render_height = render_mode, render_width, render_height
        self.cfg: A1Config = build(self.config_class, cfg, "env_kwargs")
        ctl = self.cfg.control
        self.step_dt = ctl.step_dt
        clip = ctl.action_clip
        self.action_space = gymnasium.spaces.Box(-clip, clip, (12,), np.float32)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.num_obs,), np.float32)
        self._terms = rewards.active_terms(self.cfg.rewards.weights(), self.cfg.curriculum)
        #: Policy steps the env has taken in the run, over all its episodes: the curriculum's clock. It starts at 0;
        #: a resumed run's or a restarted worker's env is set to where the run was (``robo_safe_rl``'s env factory).
        self.common_step_counter = 0
        self._curriculum_end = self.cfg.curriculum_end()
        self._weights_final = not self.cfg.curriculum  # the weights no longer change (or never did)
        #: Names of the reward terms computed (non-zero weight, or a curriculum), in the order of
        #: ``info["reward_terms"]``.
        self.reward_terms: tuple[str, ...] = tuple(name for name, _ in self._terms)
        self._penalty_index = (
            self.reward_terms.index("termination_penalty") if "termination_penalty" in self.reward_terms else None
        )
        self.reward_bound = reward_bound(self.cfg, A1_LIMITS)
        self._default_q = np.array(robot.DEFAULT_JOINT_POS)
        self._world = A1World(self.cfg, renders=render_mode == "rgb_array", terrain=self._terrain())
        span = self._world.joint_high - self._world.joint_low
        mid = 0.5 * (self._world.joint_high + self._world.joint_low)
        factor = self.cfg.rewards.soft_joint_limit_factor
        self._soft_low, self._soft_high = mid - 0.5 * span * factor, mid + 0.5 * span * factor
        self._zero_episode_state()

    def _zero_episode_state(self) -> None:
        self._command = commands.Command([0.0, 0.0, 0.0])
        self._last_action = np.zeros(12)
        # Per foot, in s (lists: four Python floats cost less to update than numpy's per-call overhead).
        self._air_time, self._contact_time, self._last_air_time = [0.0] * 4, [0.0] * 4, [0.0] * 4
        self._push_time_left = math.inf
        self._elapsed_steps = 0
        self._friction, self._added_mass = 1.0, 0.0
        self._last_query: StateQuery | None = None
        self._state_finite = True
        # Set by raw_step: the last substep's torques (N m) and the joint velocities before it (rad/s).
        self._torques, self._qd_before = np.zeros(12), np.zeros(12)

    # ------------------------------------------------------------------ life cycle
    @property
    def client_id(self) -> int:
        """The PyBullet client id of this env's world (-1 when closed)."""
        return self._world.client

    @property
    def robot_id(self) -> int:
        """The body id of the A1 in :attr:`client_id`."""
        return self._world.robot

    def __getstate__(self) -> dict[str, Any]:
        """An env pickles as its constructor arguments; the copy builds its own world (reset it before stepping)."""
        return {"init_kwargs": dict(self._init_kwargs)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["init_kwargs"])  # type: ignore[misc]  # the one way to build the world

    def close(self) -> None:
        """Disconnect the physics client; later ``step``/``reset`` raise ``ClosedEnvironmentError``."""
        self._world.close()

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Standing pose (randomised by the enabled events), a fresh command, zero velocities.

        Raises:
            pybullet.error: If the physics client is gone (call :meth:`rebuild_simulation`).
        """
        self._world.check_open(type(self).__name__, "reset")
        super().reset(seed=seed)
        spawn = self._begin_episode(seed is not None)
        w, ev, rng = self._world, self.cfg.events, self.np_random
        pybullet.restoreState(w.initial_state, physicsClientId=w.client)
        self._zero_episode_state()
        q = self._default_q.copy()
        if ev.joint_scale.enabled:
            q = np.clip(q * rng.uniform(*ev.joint_scale.range, size=12), w.joint_low, w.joint_high)
        yaw = float(rng.uniform(*ev.yaw.range)) if ev.yaw.enabled else 0.0
        orn = pybullet.getQuaternionFromEuler((0.0, 0.0, yaw))
        w.reset_pose(spawn, orn, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), q, np.zeros(12))
        self._friction = float(rng.uniform(*ev.friction.range)) if ev.friction.enabled else 1.0
        self._added_mass = float(rng.uniform(*ev.added_mass.range)) if ev.added_mass.enabled else 0.0
        w.set_friction(self._friction)
        w.set_added_mass(self._added_mass)
        if ev.push_interval_s.enabled:
            self._push_time_left = float(rng.uniform(*ev.push_interval_s.range))
        self._command = commands.sample(self.cfg.commands, rng)
        commands.update(self._command, yaw, self.cfg.commands)
        return self._observe(), {}

    def _terrain(self) -> TerrainConfig | None:
        """The terrain the world holds (``None``: flat ground, a plane)."""
        return None

    def _begin_episode(self, seeded: bool) -> tuple[float, float, float]:
        """Prepare the world for the next episode and return the trunk's spawn position (m), before the world's state
        is reset: the state the last episode ended in is still there. Here: rebuild a poisoned world; spawn above
        the origin.

        Args:
            seeded: The reset was given a seed.
        """
        if not self._state_finite:
            self.rebuild_simulation()
        return (0.0, 0.0, robot.SPAWN_HEIGHT)

    def raw_step(self, action: np.ndarray) -> None:
        """Only the simulation part of :meth:`step`: PD torques and ``decimation`` physics substeps.

        The first substep's joint states come from the last query when there is one: :meth:`reset`, :meth:`step`
        and :meth:`set_sim_state` end with a query of the state they leave (a push changes only the base), and the
        env's other ways of changing the state clear it. State written into the engine behind the env's back is
        therefore not seen by the first substep's PD torques; change it through the env.

        Args:
            action: Shape (12,). NaN passes through to the engine (and poisons it).
        """
        w, ctl = self._world, self.cfg.control
        target = self._default_q + ctl.action_scale * np.asarray(action, dtype=np.float64)
        query, self._last_query = self._last_query, None  # stale once the engine steps
        for substep in range(ctl.decimation):
            q, qd = joint_arrays(query[4]) if substep == 0 and query is not None else w.joint_arrays()
            self._torques = robot.pd_torques(target, q, qd, ctl)
            w.apply_torques(self._torques)
            pybullet.stepSimulation(physicsClientId=w.client)
        self._qd_before = qd

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one policy step (module docstring).

        Returns:
            Observation (48,), reward (sum of the active weighted terms), terminated (trunk contact, bad orientation
            or a non-finite state), truncated (always False: the registration's time limit truncates),
            ``info["reward_terms"]``: the weighted terms, float64, shape (len(reward_terms),), and ``info["metrics"]``:
            ``error_vel_xy`` (m/s, the norm of commanded minus actual planar base velocity, base frame) and
            ``error_vel_yaw`` (rad/s), of the step's command.

        Raises:
            ValueError: If the action does not have shape (12,).
            pybullet.error: If the physics client is gone.
        """
        self._world.check_open(type(self).__name__, "step")
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (12,):
            raise ValueError(f"action must have shape (12,), got {a.shape}")
        self.raw_step(a)
        self._elapsed_steps += 1
        self.common_step_counter += 1
        w, cfg, dt = self._world, self.cfg, self.step_dt
        if not self._weights_final:
            weights = cfg.weights_at(self.common_step_counter)
            self._terms = [(name, weights[name]) for name, _ in self._terms]
            self._weights_final = self.common_step_counter > self._curriculum_end
        query = w.query()
        self._last_query = query
        pos, orn, lin, ang, _ = query
        lin_b, ang_b, grav_b, q, qd = _read(query)
        forces = robot.link_contact_forces(w.client, w.robot, w.ground, w.num_links)
        threshold = cfg.rewards.contact_threshold
        first_contact = self._update_air_time([f > threshold for f in w.foot_forces(forces)])
        joints = sum(q.tolist()) + sum(qd.tolist())  # (two numpy reductions cost more at this size)
        self._state_finite = math.isfinite(sum(pos) + sum(orn) + sum(lin) + sum(ang) + joints)
        terminated = not self._state_finite or self._terminated(forces, grav_b)
        s = rewards.StepState(
            lin_vel_b=lin_b, ang_vel_b=ang_b, gravity_b=grav_b, command=list(self._command.velocity), joint_pos=q,
            torques=self._torques, joint_acc=(qd - self._qd_before) / cfg.control.sim_dt, action=a,
            last_action=self._last_action, first_contact=first_contact, last_air_time=list(self._last_air_time),
            thigh_forces=w.thigh_forces(forces), soft_low=self._soft_low, soft_high=self._soft_high,
            terminated=terminated,
        )  # fmt: skip
        terms = rewards.weighted_terms(s, self._terms, cfg.rewards, dt)
        reward = float(sum(terms))
        if cfg.rewards.only_positive:
            # legged_gym clips the total before it adds the termination penalty, which stays negative.
            penalty = terms[self._penalty_index] if self._penalty_index is not None else 0.0
            reward = max(reward - penalty, 0.0) + penalty  # NaN stays NaN: max(nan, 0.0) is nan
        self._last_action = a
        self._command = commands.advance(self._command, dt, yaw_of(orn), cfg.commands, self.np_random)
        pushed = self._push_if_due(lin, ang)
        # The terms of Isaac Lab's UniformVelocityCommand metrics, for the step's command: how far the planar base
        # velocity and the yaw rate are from what was commanded (tools/evaluate.py reports their means over an
        # episode; Isaac Lab logs their episode sums divided by the steps of one command period).
        cmd = s.command
        metrics = {
            "error_vel_xy": math.hypot(cmd[0] - lin_b[0], cmd[1] - lin_b[1]),
            "error_vel_yaw": abs(cmd[2] - ang_b[2]),
        }
        info = {"reward_terms": np.array(terms, dtype=np.float64), "metrics": metrics}
        # After a push the observation shows the pushed velocity (Isaac Lab writes it into the state it observes);
        # else it shows the state the step already read and rotated into the base frame.
        obs = self._observe() if pushed else self._observation(lin_b, ang_b, grav_b, q - self._default_q, qd)
        return obs, reward, terminated, False, info

    def _terminated(self, forces: list[float], grav_b: tuple[float, float, float]) -> bool:
        t = self.cfg.terminations
        if t.base_contact and forces[robot.TRUNK + 1] > self.cfg.rewards.contact_threshold:
            return True
        # The tilt is acos(-g_z) (Isaac Lab's mdp.bad_orientation).
        return t.bad_orientation and math.acos(min(max(-grav_b[2], -1.0), 1.0)) > t.limit_angle

    def _update_air_time(self, contact: list[bool]) -> list[bool]:
        """Isaac Lab's ``ContactSensor`` air-time bookkeeping at the policy rate; returns the step's touch-downs
        (``compute_first_contact``: in contact for less than one step)."""
        dt, air, touch, last = self.step_dt, self._air_time, self._contact_time, self._last_air_time
        first = []
        for foot, touching in enumerate(contact):
            if touching:
                if air[foot] > 0.0:  # a swing ends: its length is the last air time
                    last[foot] = air[foot] + dt
                air[foot] = 0.0
                touch[foot] += dt
            else:
                air[foot] = min(air[foot] + dt, AIR_TIME_CAP)
                touch[foot] = 0.0
            first.append(0.0 < touch[foot] < dt + 1e-8)
        return first

    def _push_if_due(self, lin: Any, ang: Any) -> bool:
        """Interval event ``push_robot``: add a random planar velocity to the base; whether it pushed."""
        ev = self.cfg.events
        self._push_time_left -= self.step_dt
        if not ev.push_interval_s.enabled or self._push_time_left > 0.0:
            return False
        self._push_time_left = float(self.np_random.uniform(*ev.push_interval_s.range))
        dx, dy = self.np_random.uniform(*ev.push_velocity, size=2)
        w = self._world
        new_lin = (lin[0] + float(dx), lin[1] + float(dy), lin[2])
        pybullet.resetBaseVelocity(w.robot, new_lin, list(ang), physicsClientId=w.client)
        return True

    def _observe(self) -> np.ndarray:
        """The policy observation (module docstring) of the current state, queried from the engine."""
        query = self._world.query()
        self._last_query = query
        lin_b, ang_b, grav_b, q, qd = _read(query)
        return self._observation(lin_b, ang_b, grav_b, q - self._default_q, qd)

    def _observation(self, lin_b: Any, ang_b: Any, grav_b: Any, q_rel: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The policy observation from the base-frame velocities and gravity (3-vectors), joint positions minus the
        standing pose and joint velocities (shape (12,) each)."""
        # The twelve leading scalars as one tuple: one conversion instead of four.
        obs = np.concatenate(((*lin_b, *ang_b, *grav_b, *self._command.velocity), q_rel, qd, self._last_action))
        if self.cfg.obs_noise:
            obs += _NOISE_LOW + _NOISE_SPAN * self.np_random.random(48)
        return obs.astype(np.float32)

    # ------------------------------------------------------------------ rendering
    def render(self) -> np.ndarray | None:
        """Render from 1.5 m behind and above the trunk (software renderer, works headless).

        Returns:
            With ``render_mode="rgb_array"``, an image of shape (render_height, render_width, 3), uint8; else None.
        """
        if self.render_mode != "rgb_array":
            return None
        return self._world.camera_image(self.render_width, self.render_height)


def _read(query: StateQuery) -> tuple[Any, Any, Any, np.ndarray, np.ndarray]:
    """A query's base linear and angular velocity and gravity direction in the base frame (3-vectors), and its joint
    positions and velocities (arrays of 12)."""
    _, orn, lin, ang, states = query
    return (*base_frame(orn, (lin, ang, _UP)), *joint_arrays(states))

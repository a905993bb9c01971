"""The A1's side of the safety layer's simulator protocol (``robo_safe_rl.bridge.protocol.SimulatedEnv``): state
records, the plausibility check, rebuilds and the fault injectors; mixed into :class:`~robosafe_tasks.a1.env.A1FlatEnv`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pybullet

from robosafe_tasks.a1 import commands
from robosafe_tasks.state import check_limits, validate_record

#: Keys and shapes of :meth:`A1FlatEnv.get_sim_state`.
STATE_SHAPES: dict[str, tuple[int, ...]] = {
    "base_pos": (3,), "base_orn": (4,), "base_lin_vel": (3,), "base_ang_vel": (3,), "joint_pos": (12,),
    "joint_vel": (12,), "command": (3,), "command_heading": (), "command_flags": (2,), "command_time_left": (),
    "last_action": (12,), "air_time": (4,), "contact_time": (4,), "last_air_time": (4,), "push_time_left": (),
    "elapsed_steps": (), "friction": (), "added_mass": (),
}  # fmt: skip


class SimulatorProtocol:
    """The protocol's methods over an A1 env's world and episode state (attributes set by ``A1FlatEnv``)."""

    _world: Any
    cfg: Any
    action_names: list[str]
    limits: Any
    #: Keys and shapes of :meth:`get_sim_state` (a task that keeps more state adds its keys).
    state_shapes: dict[str, tuple[int, ...]] = STATE_SHAPES

    def rebuild_simulation(self) -> None:
        """Throw the physics world away and build it again (the recovery after a NaN reached PyBullet); then reset.

        Raises:
            gymnasium.error.ClosedEnvironmentError: After :meth:`close`.
        """
        self._world.check_open(type(self).__name__, "rebuild_simulation")
        self._world.build()
        self._last_query = None
        self._state_finite = True

    def get_sim_state(self) -> dict[str, np.ndarray]:
        """Everything needed to continue this moment in another env of the task: keys and shapes of
        :data:`STATE_SHAPES`, float64 (robot state, command, last action, air times, timers, drawn friction and mass).

        Raises:
            pybullet.error: If the physics client is gone.
        """
        pos, orn, lin, ang, states = self._world.query()
        c = self._command
        values = {
            "base_pos": pos, "base_orn": orn, "base_lin_vel": lin, "base_ang_vel": ang,
            "joint_pos": [s[0] for s in states], "joint_vel": [s[1] for s in states], "command": c.velocity,
            "command_heading": c.heading, "command_flags": (c.heading_env, c.standing_env),
            "command_time_left": c.time_left, "last_action": self._last_action, "air_time": self._air_time,
            "contact_time": self._contact_time, "last_air_time": self._last_air_time,
            "push_time_left": min(self._push_time_left, 1e9), "elapsed_steps": self._elapsed_steps,
            "friction": self._friction, "added_mass": self._added_mass,
        }  # fmt: skip
        return {key: np.array(value, dtype=np.float64) for key, value in values.items()}

    def set_sim_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """Restore a state from :meth:`get_sim_state` (after :meth:`reset`) and return its observation.

        Raises:
            ValueError: If a key is missing, a shape is wrong, or a value is not finite.
            pybullet.error: If the physics client is gone.
        """
        v = validate_record(state, self.state_shapes)
        w = self._world
        w.reset_pose(v["base_pos"], v["base_orn"], v["base_lin_vel"], v["base_ang_vel"], v["joint_pos"], v["joint_vel"])
        flags = v["command_flags"]
        self._command = commands.Command(
            v["command"].tolist(), float(v["command_heading"]), bool(flags[0]), bool(flags[1]),
            float(v["command_time_left"]),
        )  # fmt: skip
        self._last_action = v["last_action"].copy()
        self._air_time, self._contact_time = v["air_time"].tolist(), v["contact_time"].tolist()
        self._last_air_time = v["last_air_time"].tolist()
        self._push_time_left = float(v["push_time_left"]) if self.cfg.events.push_interval_s.enabled else math.inf
        self._elapsed_steps = int(v["elapsed_steps"])
        self._friction, self._added_mass = float(v["friction"]), float(v["added_mass"])
        w.set_friction(self._friction)
        w.set_added_mass(self._added_mass)
        return self._observe()

    def check_state(self) -> str | None:
        """``None`` if the last observed state is finite and within the env's ``limits`` (the flat task's
        :data:`~robosafe_tasks.a1.limits.A1_LIMITS`), else a one-line reason naming the quantity, its value and the
        limit."""
        query = self._last_query if self._last_query is not None else self._world.query()
        return check_limits(query, self.limits, self.action_names)

    def break_simulation(self) -> None:
        """Fault injection: disconnect the physics client behind the env's back (the next call raises)."""
        self._world.break_client()

    def perturb_state(self, scale: float) -> None:
        """Fault injection: throw the base at ``scale`` times the speed limits, along (1, 1, 1) / sqrt(3)."""
        unit = scale / math.sqrt(3.0)
        lin = [unit * self.limits.base_speed] * 3
        ang = [unit * self.limits.base_angular_speed] * 3
        pybullet.resetBaseVelocity(self._world.robot, lin, ang, physicsClientId=self._world.client)
        self._last_query = None

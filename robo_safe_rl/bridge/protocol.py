"""What a simulated env offers the safety layer, beyond the gymnasium API.

The library never imports ``envs/``: a task opts in by implementing these methods on its *unwrapped* env (duck
typing, checked with :func:`is_simulated`). A plain gymnasium env without them still works under
:class:`~robo_safe_rl.bridge.safe_step.SafeStep`; it only loses rebuilds, state checks and state records.

Optional attributes any task may declare on its unwrapped env, with or without the protocol:

- ``physics_error_types``: the exceptions its engine raises. Only these (and
  :class:`~robo_safe_rl.errors.PhysicsError`, and ``safety.step.physics_errors``) are physics errors to SafeStep;
  whatever else the env raises is a bug and propagates.
- ``reward_bound``: a bound on ``|reward|`` of one step; a finite reward beyond it is an ``implausible_reward``
  incident (:mod:`~robo_safe_rl.bridge.env_traits`).
- ``memory_per_env``: the resident memory one env costs, in bytes; the training entry checks ``task.num_envs``
  against the memory available before it builds anything.
- ``observation_mirror`` and ``action_mirror``: the task's left-right mirror as signed permutations
  (:mod:`~robo_safe_rl.bridge.mirror`), which ``algorithm.symmetry_cfg`` needs.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class SimulatedEnv(Protocol):
    """The optional simulator interface of a task env (implemented by ``envs.base.LocomotionEnv``)."""

    #: Exception types the physics engine raises (``(pybullet.error,)`` for PyBullet).
    physics_error_types: tuple[type[BaseException], ...]

    #: One name per action component, in order (joint names for torque-controlled robots).
    action_names: list[str]

    def rebuild_simulation(self) -> None:
        """Throw the physics world away and build a fresh one (new client, robot reloaded).

        After this the env must be ``reset()`` before stepping. This is the recovery that works after a NaN
        reached the engine: in-place resets and state restores leave a poisoned world behind.
        """

    def get_sim_state(self) -> dict[str, np.ndarray]:
        """Return the simulator state needed to restore this exact moment in a fresh env of the same task.

        Keys and shapes are task-defined (for a floating-base robot: ``base_pos`` (3,), ``base_orn`` (4,),
        ``base_lin_vel`` (3,), ``base_ang_vel`` (3,), ``joint_pos`` (n,), ``joint_vel`` (n,), plus whatever the
        reward needs to continue). All values are finite float64 arrays when the state is legal.
        """

    def set_sim_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """Restore a state from :meth:`get_sim_state` (after ``reset()``) and return the matching observation."""

    def check_state(self) -> str | None:
        """Return ``None`` if the current state is plausible, else a one-line reason naming the quantity, its
        value and the task's limit (e.g. ``"base speed 412.0 m/s exceeds the limit 50.0 m/s"``)."""

    def break_simulation(self) -> None:
        """Fault injection: kill the physics client behind the env's back, as a crashed engine would."""

    def perturb_state(self, scale: float) -> None:
        """Fault injection: throw the base at ``scale`` times its plausible velocity limit (a state blow-up)."""


def is_simulated(env: object) -> bool:
    """Whether ``env`` (an unwrapped gymnasium env) implements :class:`SimulatedEnv`."""
    return isinstance(env, SimulatedEnv)

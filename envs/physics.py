"""PyBullet world building shared by the locomotion tasks: DIRECT clients, the stadium scene, MJCF robots.

Everything here works on raw client ids (``physicsClientId=...``) rather than ``pybullet_utils.BulletClient``: the
wrapper builds a ``functools.partial`` on every attribute access, which costs about a microsecond per call in the
step hot path. Clients are always created with ``pybullet.connect(pybullet.DIRECT)``; the default connection mode
first tries shared memory and can hang.

PyBullet reuses the lowest free client slot: after a client is disconnected behind an env's back (a crashed engine,
or :meth:`envs.base.LocomotionEnv.break_simulation`), the next ``connect`` anywhere in the process may get the same
id, and the env still holding it would silently step someone else's world instead of raising ``pybullet.error``.
:func:`claim_client` keeps a registry of which env owns which id so that such an env is told its client is gone.
It only knows the clients of this package: a ``pybullet.connect`` elsewhere in the process can still be handed a
freed id unnoticed.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pybullet
import pybullet_data

logger = logging.getLogger(__name__)

#: Client id meaning "no client": every pybullet call with it raises ``pybullet.error: Not connected to physics
#: server.``, which is exactly what a lost client should do.
NO_CLIENT = -1

# client id -> callback telling the env that owned it that its client is gone (weak: envs are not kept alive).
_owners: dict[int, weakref.WeakMethod[Callable[[int], None]]] = {}


@dataclass(frozen=True)
class PhysicsSettings:
    """Engine settings of the pybullet_envs stadium scene (``WalkerBaseBulletEnv.create_single_player_scene``).

    Attributes:
        gravity: Gravity magnitude in m/s^2, pointing down -z. Default 9.8.
        timestep: Length of one engine substep in s. Default 0.0165 / 4.
        frame_skip: Substeps per env step; one ``stepSimulation`` runs them all (``numSubSteps``) so that a
            TORQUE_CONTROL command, which lasts one ``stepSimulation``, holds for the whole env step. Default 4.
        solver_iterations: Constraint solver iterations per substep. Default 5.
        contact_erp: Default contact error reduction parameter. Default 0.9.
        ground_lateral_friction: Lateral friction of the stadium floor. Default 0.8.
        ground_restitution: Restitution of the stadium floor. Default 0.5.
    """

    gravity: float = 9.8
    timestep: float = 0.0165 / 4
    frame_skip: int = 4
    solver_iterations: int = 5
    contact_erp: float = 0.9
    ground_lateral_friction: float = 0.8
    ground_restitution: float = 0.5

    @property
    def dt(self) -> float:
        """Simulated time of one env step in s (0.0165 for the defaults)."""
        return self.timestep * self.frame_skip


@dataclass(frozen=True)
class MotorJoints:
    """The actuated joints of a loaded robot, in action order.

    Attributes:
        indices: PyBullet joint indices. Shape: (num_motors,).
        names: Joint names, as in the MJCF file.
        lower: Lower joint limits in rad. Shape: (num_motors,).
        upper: Upper joint limits in rad. Shape: (num_motors,).
    """

    indices: list[int]
    names: list[str]
    lower: np.ndarray
    upper: np.ndarray


def connect_direct() -> int:
    """Open a new headless (DIRECT) physics client and return its id.

    Returns:
        The client id, >= 0.

    Raises:
        pybullet.error: If PyBullet could not create the client.
    """
    client = pybullet.connect(pybullet.DIRECT)
    if client < 0:
        raise pybullet.error(f"pybullet.connect(DIRECT) failed (returned {client})")
    return client


def claim_client(client: int, on_lost: Callable[[int], None]) -> None:
    """Record that the owner of the bound method ``on_lost`` owns ``client``.

    If another owner is still recorded for this id, its client must have been disconnected behind its back (PyBullet
    only hands out freed slots), so that owner's ``on_lost(client)`` is called to make it forget the id.

    Args:
        client: A client id just returned by :func:`connect_direct`.
        on_lost: Bound method of the new owner, called with the id if a later connect is handed it again. It must
            only forget the id if it still holds it.
    """
    previous = _owners.get(client)
    callback = previous() if previous is not None else None
    if callback is not None and callback != on_lost:
        logger.warning("physics client %d was disconnected behind its owner's back and reused; detaching it", client)
        callback(client)
    _owners[client] = weakref.WeakMethod(on_lost)


def release_client(client: int, on_lost: Callable[[int], None]) -> None:
    """Forget the ownership recorded by :func:`claim_client`, if ``on_lost``'s owner is still recorded for it."""
    previous = _owners.get(client)
    if previous is not None and previous() == on_lost:
        del _owners[client]


def is_connected(client: int) -> bool:
    """Whether ``client`` is a live physics client."""
    return client >= 0 and bool(pybullet.isConnected(physicsClientId=client))


def empty_world(client: int, on_lost: Callable[[int], None]) -> tuple[int, bool]:
    """Make ``client``'s world empty for a rebuild, or connect a new client (claimed for ``on_lost``) when it is gone.

    resetSimulation deletes and recreates the dynamics world (broadphase included), which clears a NaN as a new client
    does (tested: the next episode is bitwise that of a fresh env), and costs nothing beyond reloading, where
    connect(DIRECT) costs 0.6 to 14 ms here depending on the allocator's state.

    Returns:
        The client to build in, and whether it is a new one (which may carry the old id: a new client has no renderer
        plugin yet, whatever its id).
    """
    if is_connected(client):
        pybullet.resetSimulation(physicsClientId=client)
        return client, False
    release_client(client, on_lost)
    client = connect_direct()
    claim_client(client, on_lost)
    return client, True


def configure_engine(client: int, settings: PhysicsSettings) -> None:
    """Apply the engine settings of the stadium scene to an empty world.

    Args:
        client: Physics client id.
        settings: Engine settings.
    """
    # Sorted overlapping pairs make the contact order, and so the trajectory, independent of insertion history.
    pybullet.setPhysicsEngineParameter(deterministicOverlappingPairs=1, physicsClientId=client)
    pybullet.setGravity(0.0, 0.0, -settings.gravity, physicsClientId=client)
    pybullet.setDefaultContactERP(settings.contact_erp, physicsClientId=client)
    # fixedTimeStep is the whole env step; the engine splits it into numSubSteps substeps of `timestep`.
    pybullet.setPhysicsEngineParameter(
        fixedTimeStep=settings.dt,
        numSolverIterations=settings.solver_iterations,
        numSubSteps=settings.frame_skip,
        physicsClientId=client,
    )


def load_stadium(client: int, settings: PhysicsSettings) -> int:
    """Load the stadium floor (pybullet_data ``plane_stadium.sdf``) as ``scene_stadium.StadiumScene`` does.

    Args:
        client: Physics client id.
        settings: Engine settings (floor friction and restitution).

    Returns:
        The body id of the floor.
    """
    (ground,) = pybullet.loadSDF(os.path.join(pybullet_data.getDataPath(), "plane_stadium.sdf"), physicsClientId=client)
    pybullet.changeDynamics(
        ground,
        -1,
        lateralFriction=settings.ground_lateral_friction,
        restitution=settings.ground_restitution,
        physicsClientId=client,
    )
    pybullet.changeVisualShape(ground, -1, rgbaColor=[1.0, 1.0, 1.0, 0.8], physicsClientId=client)
    return ground


def load_mjcf_robot(client: int, mjcf_file: str) -> int:
    """Load a robot from pybullet_data's ``mjcf/`` folder with the flags of ``robot_bases.MJCFBasedRobot``.

    Args:
        client: Physics client id.
        mjcf_file: File name under ``pybullet_data/mjcf`` (e.g. ``"ant.xml"``).

    Returns:
        The body id of the robot.

    Raises:
        ValueError: If the file holds more or fewer than one body.
    """
    flags = (
        pybullet.URDF_USE_SELF_COLLISION
        | pybullet.URDF_USE_SELF_COLLISION_EXCLUDE_ALL_PARENTS
        | pybullet.URDF_GOOGLEY_UNDEFINED_COLORS
    )
    path = os.path.join(pybullet_data.getDataPath(), "mjcf", mjcf_file)
    bodies = pybullet.loadMJCF(path, flags=flags, physicsClientId=client)
    if len(bodies) != 1:
        raise ValueError(f"expected one body in {path}, got {len(bodies)}; this loader handles single-robot files")
    return bodies[0]


def find_motor_joints(client: int, robot: int) -> MotorJoints:
    """List the actuated joints of a robot, the way ``robot_bases.XmlBasedRobot.addToScene`` orders them.

    Every joint is a motor except fixed joints, which the MJCF loader names ``jointfix*``, and joints named
    ``ignore*``. The joints' default velocity motors are disabled (VELOCITY_CONTROL with force 0) so that only the
    torques sent each step act. So are those of the ``ignore*`` joints, which stay free and unactuated, as in the
    reference's ``addToScene``: they are the planar robots' root joints (x slide, z slide, pitch hinge), and
    PyBullet's default motors would otherwise hold the torso in the air (measured: the Hopper's torso stays at
    1.25 m).

    Args:
        client: Physics client id.
        robot: Body id of the robot.

    Returns:
        The motor joints in action order.
    """
    indices: list[int] = []
    names: list[str] = []
    lower: list[float] = []
    upper: list[float] = []
    free: list[int] = []
    for j in range(pybullet.getNumJoints(robot, physicsClientId=client)):
        info = pybullet.getJointInfo(robot, j, physicsClientId=client)
        name = info[1].decode("utf8")
        if name.startswith("ignore") and info[2] != pybullet.JOINT_FIXED:
            free.append(j)
        if name.startswith(("jointfix", "ignore")) or info[2] == pybullet.JOINT_FIXED:
            continue
        indices.append(j)
        names.append(name)
        lower.append(info[8])
        upper.append(info[9])
    pybullet.setJointMotorControlArray(
        robot, indices, pybullet.VELOCITY_CONTROL, forces=[0.0] * len(indices), physicsClientId=client
    )
    if free:
        pybullet.setJointMotorControlArray(
            robot, free, pybullet.VELOCITY_CONTROL, forces=[0.0] * len(free), physicsClientId=client
        )
    return MotorJoints(indices, names, np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64))


def find_links(client: int, robot: int, names: tuple[str, ...]) -> list[int]:
    """Return the link indices of the links called ``names``, in that order.

    Args:
        client: Physics client id.
        robot: Body id of the robot.
        names: Link names, as in the MJCF file.

    Returns:
        One link index per name.

    Raises:
        ValueError: If a name is not a link of the robot; the message lists the valid names.
    """
    return _find_by_name(client, robot, names, _LINK_NAME, "link")


def find_joints(client: int, robot: int, names: tuple[str, ...]) -> list[int]:
    """Return the joint indices of the joints called ``names``, in that order.

    Args:
        client: Physics client id.
        robot: Body id of the robot.
        names: Joint names, as in the MJCF file.

    Returns:
        One joint index per name.

    Raises:
        ValueError: If a name is not a joint of the robot; the message lists the valid names.
    """
    return _find_by_name(client, robot, names, _JOINT_NAME, "joint")


# Fields of getJointInfo's tuple: a joint's name, and the name of the link it moves (a link's index is its joint's).
_JOINT_NAME = 1
_LINK_NAME = 12


def _find_by_name(client: int, robot: int, names: tuple[str, ...], field: int, what: str) -> list[int]:
    """The indices of the joints whose getJointInfo ``field`` is one of ``names``, in that order."""
    by_name = {
        pybullet.getJointInfo(robot, j, physicsClientId=client)[field].decode("utf8"): j
        for j in range(pybullet.getNumJoints(robot, physicsClientId=client))
    }
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"{what}s {missing} not found in the robot; valid {what} names: {sorted(by_name)}")
    return [by_name[n] for n in names]

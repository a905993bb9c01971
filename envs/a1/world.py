"""The A1's physics world and its life cycle: one DIRECT client per env, claimed, rebuilt, closed, pickled.

The same client handling as :class:`robosafe_tasks.base.LocomotionEnv` (``physics.claim_client`` /
``release_client``, a rebuild that empties a live client with ``resetSimulation`` or makes a new one for a dead
client), for a URDF robot on a plane.
"""

from __future__ import annotations

import contextlib
import math
from operator import itemgetter
from typing import Any

import gymnasium
import numpy as np
import pybullet

from robosafe_tasks import physics, render
from robosafe_tasks.a1 import robot, terrain
from robosafe_tasks.a1.config import HEIGHT_BOUND, A1Config, TerrainConfig
from robosafe_tasks.state import StateQuery

# A joint state's position and velocity (getJointStates returns one tuple per joint).
_POSITION = itemgetter(0)
_VELOCITY = itemgetter(1)


class A1World:
    """Owns one PyBullet client holding a plane and an A1; the env's physics half.

    Args:
        cfg: The task settings (``control`` is used here).
        renders: Whether frames will be rendered: the renderer (:mod:`robosafe_tasks.render`) is attached to each new
            client before the bodies load, as the EGL plugin only draws what loads after it.
    """

    def __init__(self, cfg: A1Config, renders: bool = False, terrain: TerrainConfig | None = None) -> None:
        self.cfg = cfg
        self.renders = renders
        self.renderer: str | None = None  # "egl" or "tiny" once attached to the current client
        self.client = physics.NO_CLIENT
        self.closed = False
        #: The rough task's ground (a height field holding one tile at a time); ``None``: a plane.
        self.heightfield = HeightfieldGround(terrain) if terrain is not None else None
        self.build()

    def build(self) -> None:
        """Empty the world (or make a new client if ours is gone) and load plane and robot."""
        self.client, new_client = physics.empty_world(self.client, self._forget_client)
        if new_client:
            self.renderer = None
        c = self.client
        if self.renders and self.renderer is None:
            self.renderer = render.attach(c)
        loader = self.heightfield.load if self.heightfield is not None else robot.load_plane
        self.ground, self.robot = robot.load_world(c, self.cfg.control, loader)
        joints = physics.find_motor_joints(c, self.robot)
        if tuple(joints.names) != robot.JOINT_NAMES:
            raise ValueError(f"{robot.URDF_FILE} has the motor joints {joints.names}, expected {robot.JOINT_NAMES}")
        self.joint_ids: list[int] = joints.indices
        self.joint_low, self.joint_high = joints.lower, joints.upper
        self.num_links = pybullet.getNumJoints(self.robot, physicsClientId=c)
        self.foot_ids = physics.find_links(c, self.robot, robot.FOOT_LINKS)
        self.thigh_ids = physics.find_links(c, self.robot, robot.THIGH_LINKS)
        # Pick the feet's and the thighs' forces out of robot.link_contact_forces' list (slot link + 1: the trunk is
        # slot 0), each as a tuple of 4.
        self.foot_forces = itemgetter(*(link + 1 for link in self.foot_ids))
        self.thigh_forces = itemgetter(*(link + 1 for link in self.thigh_ids))
        self.trunk_mass = pybullet.getDynamicsInfo(self.robot, robot.TRUNK, physicsClientId=c)[0]
        self.links = list(range(-1, self.num_links))
        self.initial_state = pybullet.saveState(physicsClientId=c)

    def _forget_client(self, client: int) -> None:
        """Called when another env was handed the (dead) client id ``client``: never touch that world."""
        if self.client == client:
            self.client = physics.NO_CLIENT

    def close(self) -> None:
        """Disconnect and free the client; safe to call more than once."""
        self.closed = True
        client, self.client = self.client, physics.NO_CLIENT
        physics.release_client(client, self._forget_client)
        if physics.is_connected(client):
            pybullet.disconnect(physicsClientId=client)

    def __del__(self) -> None:
        # Interpreter shutdown may have torn pybullet down already.
        with contextlib.suppress(Exception):
            self.close()

    def check_open(self, owner: str, method: str) -> None:
        """Raise ``ClosedEnvironmentError`` after :meth:`close`."""
        if self.closed:
            raise gymnasium.error.ClosedEnvironmentError(f"{owner}.{method}() after close(); make a new env")

    # ------------------------------------------------------------------ engine access
    def query(self) -> StateQuery:
        """Base pose, base velocity and the motor joints' states, as :func:`robosafe_tasks.state.check_limits`
        takes them."""
        c, r = self.client, self.robot
        pos, orn = pybullet.getBasePositionAndOrientation(r, physicsClientId=c)
        lin, ang = pybullet.getBaseVelocity(r, physicsClientId=c)
        states = pybullet.getJointStates(r, self.joint_ids, physicsClientId=c)
        return pos, orn, lin, ang, states

    def joint_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint positions (rad) and velocities (rad/s). Shapes: (12,)."""
        return joint_arrays(pybullet.getJointStates(self.robot, self.joint_ids, physicsClientId=self.client))

    def apply_torques(self, torques: np.ndarray) -> None:
        """Command torques for the next ``stepSimulation`` (a TORQUE_CONTROL command lasts one call)."""
        pybullet.setJointMotorControlArray(
            self.robot, self.joint_ids, pybullet.TORQUE_CONTROL, forces=torques.tolist(), physicsClientId=self.client
        )

    def reset_pose(self, pos: Any, orn: Any, lin: Any, ang: Any, q: Any, qd: Any) -> None:
        """Write base pose, base velocity and joint states."""
        c, r = self.client, self.robot
        pybullet.resetBasePositionAndOrientation(r, list(pos), list(orn), physicsClientId=c)
        pybullet.resetBaseVelocity(r, list(lin), list(ang), physicsClientId=c)
        for joint, qj, qdj in zip(self.joint_ids, q, qd, strict=True):
            pybullet.resetJointState(r, joint, float(qj), float(qdj), physicsClientId=c)

    def set_friction(self, friction: float) -> None:
        """Lateral friction of every robot link."""
        for link in self.links:
            pybullet.changeDynamics(self.robot, link, lateralFriction=friction, physicsClientId=self.client)

    def set_added_mass(self, added: float) -> None:
        """Trunk mass = the URDF's + ``added`` kg."""
        pybullet.changeDynamics(self.robot, robot.TRUNK, mass=self.trunk_mass + added, physicsClientId=self.client)

    def camera_image(self, width: int, height: int) -> np.ndarray:
        """An RGB image from 1.5 m behind and above the trunk (EGL or the software renderer: no display needed).

        Returns:
            Shape (height, width, 3), uint8.
        """
        c = self.client
        trunk, _ = pybullet.getBasePositionAndOrientation(self.robot, physicsClientId=c)
        view = pybullet.computeViewMatrixFromYawPitchRoll(trunk, 1.5, 30.0, -25.0, 0.0, 2, physicsClientId=c)
        proj = pybullet.computeProjectionMatrixFOV(60.0, width / height, 0.05, 50.0, physicsClientId=c)
        # The EGL plugin, once loaded, renders whatever the flag says, and may print on the way.
        with render.quiet() if self.renderer == "egl" else contextlib.nullcontext():
            _, _, rgba, _, _ = pybullet.getCameraImage(
                width, height, viewMatrix=view, projectionMatrix=proj, renderer=pybullet.ER_TINY_RENDERER,
                physicsClientId=c,
            )  # fmt: skip
        return np.ascontiguousarray(np.asarray(rgba, dtype=np.uint8).reshape(height, width, 4)[:, :, :3])

    def break_client(self) -> None:
        """Fault injection: disconnect the client behind the env's back, as a crashed engine would."""
        pybullet.disconnect(physicsClientId=self.client)


class HeightfieldGround:
    """The rough task's ground in one client: a ``GEOM_HEIGHTFIELD`` of one tile centred on the origin, and four
    boxes whose tops continue it flat at height 0 for 100 m around (links of the same body, so that the ground is
    one body for the contact queries).

    The height field is made once per client with the range +-:data:`~robosafe_tasks.a1.config.HEIGHT_BOUND`
    and each tile is written into it in place (``replaceHeightfieldIndex``, 2 ms for 81 x 81 samples): PyBullet
    centres a height field on the middle of the range it was made with and keeps that range when its data are
    replaced.

    Args:
        cfg: The terrain settings (tile size and spacing).
    """

    def __init__(self, cfg: TerrainConfig) -> None:
        self.cfg = cfg
        self.samples = terrain.samples_per_side(cfg)
        self.client = physics.NO_CLIENT
        self.shape = -1
        #: The heights the client's height field holds now (``None``: flat, as made).
        self.shown: np.ndarray | None = None

    def load(self, client: int) -> int:
        """Make the ground in ``client`` (flat) and return its body id."""
        n, h, bound = self.samples, self.cfg.horizontal_scale, HEIGHT_BOUND
        ranged = np.zeros((n, n))
        ranged[0, 0], ranged[-1, -1] = -bound, bound  # fixes the range (and the placement) for every tile
        self.client, self.shown = client, None
        self.shape = pybullet.createCollisionShape(
            pybullet.GEOM_HEIGHTFIELD, meshScale=[h, h, 1.0], heightfieldData=ranged.T.ravel().tolist(),
            numHeightfieldRows=n, numHeightfieldColumns=n, physicsClientId=client,
        )  # fmt: skip
        self._write(np.zeros((n, n)))
        half, far = self.cfg.tile_size / 2, 100.0
        # The four boxes, 1 m thick with their tops at 0: +x, -x (the full depth), +y, -y (the tile's width).
        mid, depth = (half + far) / 2, (far - half) / 2  # a box's centre and half-depth away from the tile
        sides = [(mid, 0.0, depth, half + far), (-mid, 0.0, depth, half + far), (0.0, mid, half, depth),
                 (0.0, -mid, half, depth)]  # fmt: skip
        boxes = [
            pybullet.createCollisionShape(pybullet.GEOM_BOX, halfExtents=[hx, hy, 0.5], physicsClientId=client)
            for _, _, hx, hy in sides
        ]
        return pybullet.createMultiBody(
            baseMass=0.0, baseCollisionShapeIndex=self.shape, linkMasses=[0.0] * 4, linkCollisionShapeIndices=boxes,
            linkVisualShapeIndices=[-1] * 4, linkPositions=[[x, y, -0.5] for x, y, _, _ in sides],
            linkOrientations=[[0.0, 0.0, 0.0, 1.0]] * 4, linkInertialFramePositions=[[0.0, 0.0, 0.0]] * 4,
            linkInertialFrameOrientations=[[0.0, 0.0, 0.0, 1.0]] * 4, linkParentIndices=[0] * 4,
            linkJointTypes=[pybullet.JOINT_FIXED] * 4, linkJointAxis=[[0.0, 0.0, 1.0]] * 4, physicsClientId=client,
        )  # fmt: skip

    def show(self, heights: np.ndarray) -> None:
        """Make ``heights`` (a tile, shape (n, n)) the ground, unless it already is."""
        if self.shown is not heights:
            self._write(heights)
            self.shown = heights

    def _write(self, heights: np.ndarray) -> None:
        n = self.samples
        pybullet.createCollisionShape(
            pybullet.GEOM_HEIGHTFIELD, meshScale=[self.cfg.horizontal_scale] * 2 + [1.0],
            heightfieldData=heights.T.ravel().tolist(), numHeightfieldRows=n, numHeightfieldColumns=n,
            replaceHeightfieldIndex=self.shape, physicsClientId=self.client,
        )  # fmt: skip


def joint_arrays(states: Any) -> tuple[np.ndarray, np.ndarray]:
    """Positions (rad) and velocities (rad/s) of ``getJointStates``' answer, as float64 arrays."""
    n = len(states)
    return np.fromiter(map(_POSITION, states), np.float64, n), np.fromiter(map(_VELOCITY, states), np.float64, n)


def base_frame(orn: Any, vectors: Any) -> list[tuple[float, float, float]]:
    """Rotate world-frame vectors into the base frame (``quat_rotate_inverse``).

    In Python floats: for three 3-vectors, 1.6 us against 3.6 for numpy's matrix products (measured).

    Args:
        orn: Base orientation, quaternion xyzw.
        vectors: World-frame 3-vectors.

    Returns:
        The vectors in the base frame.
    """
    # Row-major base-to-world matrix R; R^T v takes its columns.
    m0, m1, m2, m3, m4, m5, m6, m7, m8 = pybullet.getMatrixFromQuaternion(orn)
    return [(m0 * x + m3 * y + m6 * z, m1 * x + m4 * y + m7 * z, m2 * x + m5 * y + m8 * z) for x, y, z in vectors]


def yaw_of(orn: Any) -> float:
    """Heading of a quaternion xyzw in rad."""
    x, y, z, w = orn
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))

"""pybullet_envs' locomotion envs, the reference the tasks are equivalent to, loaded as they ship with PyBullet.

pybullet_envs 3.2.7 (installed with pybullet) is written for gym, which is not installed here: its package
``__init__`` imports gym to register some 50 envs, and its modules use ``gym.Env``, ``gym.spaces.Box``,
``gym.utils.seeding.np_random`` and ``pkg_resources.parse_version``. :func:`reference_envs` loads the locomotion
modules unchanged (their physics, observation, reward and termination code is what runs) with those names taken from
gymnasium and ``packaging``, which have them with the same meaning, and without running the package ``__init__``.
The seeding is gymnasium's (a ``numpy.random.Generator``), as in the tasks, so the same seed gives both the same
initial state.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import gymnasium
import gymnasium.spaces
import gymnasium.utils
import gymnasium.utils.seeding
import numpy as np
import packaging.version

#: Task id -> class name in ``pybullet_envs.gym_locomotion_envs``.
REFERENCE_CLASSES = {
    "RoboSafe/Ant-v0": "AntBulletEnv",
    "RoboSafe/HalfCheetah-v0": "HalfCheetahBulletEnv",
    "RoboSafe/Hopper-v0": "HopperBulletEnv",
    "RoboSafe/Walker2D-v0": "Walker2DBulletEnv",
}

_FRAMEWORK = ("gym", "gym.spaces", "gym.utils", "gym.utils.seeding", "pkg_resources")


def reference_envs() -> types.ModuleType:
    """Import ``pybullet_envs.gym_locomotion_envs`` (once per process) and return it.

    The fake ``gym`` and ``pkg_resources`` modules are only in ``sys.modules`` while the reference is imported; the
    ``pybullet_envs`` package stays registered without its ``__init__`` (its modules import each other through it).
    """
    loaded = sys.modules.get("pybullet_envs.gym_locomotion_envs")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("pybullet_envs")
    if spec is None or spec.origin is None:
        raise ImportError("pybullet_envs is not installed (it ships with pybullet)")
    gym = types.ModuleType("gym")
    gym.Env = gymnasium.Env  # type: ignore[attr-defined]  # the names the reference uses
    gym.spaces = gymnasium.spaces  # type: ignore[attr-defined]
    gym.utils = gymnasium.utils  # type: ignore[attr-defined]
    gym.__version__ = "0.21.0"  # type: ignore[attr-defined]  # past env_bases' check for gym < 0.9.6
    resources = types.ModuleType("pkg_resources")
    resources.parse_version = packaging.version.parse  # type: ignore[attr-defined]
    package = types.ModuleType("pybullet_envs")
    package.__path__ = [str(Path(spec.origin).parent)]
    saved = {name: sys.modules.get(name) for name in _FRAMEWORK}
    sys.modules.update(
        {
            "gym": gym,
            "gym.spaces": gymnasium.spaces,
            "gym.utils": gymnasium.utils,
            "gym.utils.seeding": gymnasium.utils.seeding,
            "pkg_resources": resources,
            "pybullet_envs": package,
        }
    )
    try:
        return importlib.import_module("pybullet_envs.gym_locomotion_envs")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def make_reference(task_id: str, seed: int) -> tuple[object, np.ndarray]:
    """The reference env of ``task_id``, reset with ``seed`` as the task's ``reset(seed=seed)``; and its observation.

    The reference's first reset differs from every later one (its floor joins the body-centre parts only after the
    first reset's potential is computed, and its first observation is built before), so a first reset is done and
    thrown away, as every episode after a training run's first is.
    """
    env = getattr(reference_envs(), REFERENCE_CLASSES[task_id])()
    env.seed(seed)
    env.reset()
    env.seed(seed)
    return env, env.reset()

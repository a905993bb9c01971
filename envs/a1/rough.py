"""``RoboSafe/A1Rough-v0``: Isaac Lab's rough velocity-tracking task for the Unitree A1
(``Isaac-Velocity-Rough-Unitree-A1-v0``), on PyBullet height fields.

The flat task (:mod:`robosafe_tasks.a1.env`: the same robot, actions, commands, events, terminations and step) on
Isaac Lab's rough terrain (:mod:`robosafe_tasks.a1.terrain`): at each reset the env's robot is placed on the tile of
its column at its level, within +-0.5 m of the tile's centre and above its highest point near there; a seeded reset
draws the column (and so the sub-terrain, by the proportions) and a starting level (0 .. ``max_init_level``), and
every other reset moves the level by the curriculum (Isaac Lab's ``terrain_levels_vel``) from where the last episode
left the robot. So an evaluation or a replay, whose resets are seeded, sees levels 0 .. ``max_init_level`` only
(set it to ``num_levels - 1`` to spread one over every level), and a restarted env worker's envs start again from
their drawn levels.

Observation (235,), float32: the flat task's 48, then Isaac Lab's ``height_scan`` (187): trunk height - ground
height - 0.5 m at 17 x 11 points 0.1 m apart around the trunk (1.6 m along its heading, 1.0 m across), turned with
its yaw, clipped to +-1 m; with ``obs_noise``, uniform noise of +-0.1 m before the clip. The ground height is the
height field's own surface, computed from the tile (what PyBullet's ``rayTest`` finds, to 1e-7 m), so the scan never
sees the robot's legs, as Isaac Lab's ray caster sees only the terrain.

Rewards: the flat task's terms with the rough task's weights (no flat-orientation penalty, feet air time 0.01).
``info["metrics"]`` adds ``terrain_level``: the episode's level (logged as ``Metrics/terrain_level``, Isaac Lab's
``Curriculum/terrain_levels``).

Deliberate differences from Isaac Lab: one tile per world, flat ground around it (Isaac Lab: the neighbouring tiles);
columns drawn at seeded resets (Isaac Lab: by env index); the stairs and boxes are height fields, so a step's face is
a ramp one sample (0.1 m) wide, and every square of samples is split along the other diagonal than Isaac Lab's
height-field meshes (PyBullet's); SafeStep's bound on the trunk height follows the tile's lowest and highest ground.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from robosafe_tasks.a1 import robot
from robosafe_tasks.a1.config import A1RoughConfig, TerrainConfig
from robosafe_tasks.a1.env import A1FlatEnv
from robosafe_tasks.a1.limits import A1_LIMITS
from robosafe_tasks.a1.sim_state import STATE_SHAPES
from robosafe_tasks.a1.terrain import NUM_SCAN, SCAN_X, SCAN_Y, Tile, column_kind, next_level, tile
from robosafe_tasks.a1.world import yaw_of
from robosafe_tasks.state import validate_record

#: Half-width of the uniform noise on the height scan in m (``PolicyCfg.height_scan``'s ``Unoise(-0.1, 0.1)``).
SCAN_NOISE = 0.1
#: Spawn points are drawn within +-SPAWN_SPREAD m of the tile's centre in x and y (``reset_base``'s pose_range).
SPAWN_SPREAD = 0.5


def _scan_mirror() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The scan in the A1's mirror image (y -> -y): the point at (x, y) reads what was at (x, -y); heights keep
    their sign."""
    nx, ny = len(SCAN_X), len(SCAN_Y)
    return tuple((ny - 1 - p // nx) * nx + p % nx for p in range(nx * ny)), (1,) * (nx * ny)


_SCAN_MIRROR = _scan_mirror()


class A1RoughEnv(A1FlatEnv):
    """The A1 tracking commanded base velocities over Isaac Lab's rough terrain (module docstring). Arguments as
    :class:`~robosafe_tasks.a1.env.A1FlatEnv`'s, ``**cfg`` the sections of
    :class:`~robosafe_tasks.a1.config.A1RoughConfig`."""

    config_class: ClassVar[type[A1RoughConfig]] = A1RoughConfig
    num_obs: ClassVar[int] = 48 + NUM_SCAN
    #: Resident memory of one env in bytes. Measured with PyBullet 3.2.7: 64 MiB per env against the flat task's 52
    #: (RSS growth over 8 envs, each reset, stepped and reset again): the height field of one tile of 81 x 81
    #: samples; rounded up.
    memory_per_env: ClassVar[int] = 72 * 2**20
    metric_names: tuple[str, ...] = (*A1FlatEnv.metric_names, "terrain_level")
    observation_mirror = (
        (*A1FlatEnv.observation_mirror[0], *(48 + i for i in _SCAN_MIRROR[0])),
        (*A1FlatEnv.observation_mirror[1], *_SCAN_MIRROR[1]),
    )
    #: The flat task's state and the tile: (column, level).
    state_shapes: ClassVar[dict[str, tuple[int, ...]]] = {**STATE_SHAPES, "terrain": (2,)}

    cfg: A1RoughConfig

    def __init__(
        self, render_mode: str | None = None, render_width: int = 320, render_height: int = 240, **cfg: Any
    ) -> None:
        #: The column and level of the env's tile; drawn at the first reset.
        self._column: int | None = None
        self._level = 0
        self._tile: Tile | None = None
        #: The world was rebuilt since the episode began: where the episode ended is lost, so the level stays.
        self._episode_lost = False
        super().__init__(render_mode=render_mode, render_width=render_width, render_height=render_height, **cfg)

    @property
    def terrain_level(self) -> int:
        """The level of the tile the robot is on."""
        return self._level

    @property
    def terrain_column(self) -> int | None:
        """The column of the env's tile; ``None`` before the first reset."""
        return self._column

    @property
    def terrain_kind(self) -> int | None:
        """The sub-terrain of the env's tile (index into ``SUB_TERRAINS``); ``None`` before the first reset."""
        return None if self._column is None else column_kind(self.cfg.terrain, self._column)

    def _terrain(self) -> TerrainConfig:
        return self.cfg.terrain

    def _begin_episode(self, seeded: bool) -> tuple[float, float, float]:
        """Move the level by the curriculum (or draw column and level at a seeded reset), show the tile, and spawn
        above it (module docstring)."""
        t, rng = self.cfg.terrain, self.np_random
        if self._column is None or seeded:
            self._column = int(rng.integers(0, t.num_cols))
            self._level = int(rng.integers(0, t.max_init_level + 1))
        elif t.curriculum and self._state_finite and not self._episode_lost and self._elapsed_steps > 0:
            # The world still holds the state the episode ended in, and the command it ended with.
            pos = self._world.query()[0]
            command = self._command.velocity
            self._level = next_level(
                self._level, math.hypot(pos[0], pos[1]), math.hypot(command[0], command[1]), t.episode_s, t,
                float(rng.uniform()),
            )  # fmt: skip
        if not self._state_finite:
            self.rebuild_simulation()
        self._episode_lost = False
        self._show_tile()
        dx, dy = rng.uniform(-SPAWN_SPREAD, SPAWN_SPREAD, size=2)
        return (float(dx), float(dy), self._tile.origin + robot.SPAWN_HEIGHT)

    def _show_tile(self) -> None:
        """Put the tile of the env's column and level into the world, with the trunk-height bound it implies: the flat
        task's, from the tile's lowest to 3 m above its highest ground (the ground around is at 0)."""
        self._tile = tile(self.cfg.terrain, self._column, self._level)
        self._world.heightfield.show(self._tile.heights)
        low, high = A1_LIMITS.base_height
        heights = self._tile.heights
        base_height = (min(float(heights.min()), 0.0) + low, max(float(heights.max()), 0.0) + high)
        if base_height != self.limits.base_height:
            self.limits = dataclasses.replace(A1_LIMITS, base_height=base_height)

    def rebuild_simulation(self) -> None:
        """The flat task's rebuild. The new world is flat until the next reset or :meth:`set_sim_state` shows the
        tile again, and that reset keeps the level: the state the episode ended in went with the old world
        (SafeStep rebuilds after a physics error or an implausible state, then resets)."""
        super().rebuild_simulation()
        self._episode_lost = True

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The flat task's step over the terrain; ``info["metrics"]["terrain_level"]`` is the episode's level.

        Returns:
            Observation (235,) and the rest as :meth:`A1FlatEnv.step`.
        """
        obs, reward, terminated, truncated, info = super().step(action)
        info["metrics"]["terrain_level"] = float(self._level)
        return obs, reward, terminated, truncated, info

    def _observation(self, lin_b: Any, ang_b: Any, grav_b: Any, q_rel: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The flat task's observation and the height scan of the last queried state."""
        flat = super()._observation(lin_b, ang_b, grav_b, q_rel, qd)
        if self._tile is None:  # before the first reset (never observed)
            return np.concatenate((flat, np.zeros(NUM_SCAN, np.float32)))
        pos, orn = self._last_query[0], self._last_query[1]
        noise = self.np_random.uniform(-SCAN_NOISE, SCAN_NOISE, NUM_SCAN) if self.cfg.obs_noise else None
        scan = self._tile.scan(pos, yaw_of(orn), noise)
        return np.concatenate((flat, scan.astype(np.float32)))

    def get_sim_state(self) -> dict[str, np.ndarray]:
        """The flat task's state record and ``terrain``: (column, level) of the tile."""
        state = super().get_sim_state()
        state["terrain"] = np.array([-1 if self._column is None else self._column, self._level], dtype=np.float64)
        return state

    def set_sim_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """Show the record's tile, then restore the flat task's state (:meth:`A1FlatEnv.set_sim_state`); a record
        that is refused changes nothing.

        Raises:
            ValueError: If ``terrain`` is not (column, level) of this task, or as the flat task's.
        """
        t = self.cfg.terrain
        column, level = validate_record(state, self.state_shapes)["terrain"]
        if not (column.is_integer() and 0 <= column < t.num_cols and level.is_integer() and 0 <= level < t.num_levels):
            raise ValueError(
                f"state['terrain'] must be (column in [0, {t.num_cols}), level in [0, {t.num_levels})), "
                f"got {state['terrain']!r}"
            )
        self._column, self._level = int(column), int(level)
        self._show_tile()
        return super().set_sim_state(state)

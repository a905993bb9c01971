"""The rough task's terrain as numbers: Isaac Lab's sub-terrain tiles as height fields, the level curriculum's rule,
the surface height under any point, and the height scan around the base (pure numpy; PyBullet lives in
:mod:`robosafe_tasks.a1.world`).

A tile is a square array ``heights[i, j]`` in m, ``i`` along x and ``j`` along y, sample ``(i, j)`` at
``((i - c) * h, (j - c) * h)`` from the tile's centre (``c = (n - 1) / 2``, ``h`` the horizontal scale). Between
samples the surface is what PyBullet's ``GEOM_HEIGHTFIELD`` collides with: each square of four samples split into two
triangles along its diagonal from ``(i + 1, j)`` to ``(i, j + 1)`` (measured against ``rayTest``:
``tests/envs/test_a1_terrain.py``). Outside the tile the ground is flat at height 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from robosafe_tasks.a1.config import SUB_TERRAINS, TerrainConfig

#: The height scan's grid around the base (Isaac Lab's ``GridPatternCfg(resolution=0.1, size=[1.6, 1.0])`` on the
#: trunk, turned with its yaw only): 17 points along x by 11 along y, y-major (row by row in y, x fastest), as Isaac
#: Lab's ``grid_pattern`` orders them.
SCAN_X = np.round(np.arange(-0.8, 0.8 + 1e-9, 0.1), 10)
SCAN_Y = np.round(np.arange(-0.5, 0.5 + 1e-9, 0.1), 10)
SCAN_POINTS = np.stack(np.meshgrid(SCAN_X, SCAN_Y, indexing="xy"), axis=-1).reshape(-1, 2)
NUM_SCAN = len(SCAN_POINTS)
#: The grid as rows (x, y, 1): one matrix product turns, scales and shifts all its points (:meth:`Tile.scan`).
_SCAN_XY1 = np.vstack((SCAN_POINTS.T, np.ones(NUM_SCAN)))
#: Isaac Lab's ``height_scan`` observation: trunk height - surface height - 0.5 m, clipped to +-1 m.
SCAN_OFFSET = 0.5
SCAN_CLIP = 1.0


def samples_per_side(cfg: TerrainConfig) -> int:
    """Samples along a tile's side: ``tile_size / horizontal_scale + 1`` (81 for Isaac Lab's 8 m at 0.1 m)."""
    return round(cfg.tile_size / cfg.horizontal_scale) + 1


def column_kind(cfg: TerrainConfig, column: int) -> int:
    """The sub-terrain (index into :data:`SUB_TERRAINS`) of ``column``: Isaac Lab's ``TerrainGenerator`` gives the
    columns to the sub-terrains in order by their proportions (of 20: columns 0-3 stairs, 4-7 inverted stairs, 8-11
    boxes, 12-15 random rough, 16-17 slopes, 18-19 inverted slopes)."""
    shares = np.array(list(cfg.proportions().values()))
    edges = np.cumsum(shares) / shares.sum()
    return int(np.min(np.nonzero(column / cfg.num_cols + 0.001 < edges)[0], initial=len(edges) - 1))


@functools.lru_cache(maxsize=256)
def tile(cfg: TerrainConfig, column: int, level: int) -> Tile:
    """The tile of ``column`` at ``level`` (the same object for every env of ``cfg`` in a process; the 200 tiles of
    Isaac Lab's grid take 75 MB with their triangle planes).

    Its sub-terrain is :func:`column_kind`'s, its difficulty ``(level + u) / num_levels`` with ``u`` uniform in
    [0, 1) (Isaac Lab's curriculum layout), and ``u`` and the tile's random heights are drawn from a generator seeded
    by ``(cfg.seed, column, level)``.
    """
    rng = np.random.default_rng((cfg.seed, column, level))
    kind = column_kind(cfg, column)
    difficulty = (level + rng.uniform()) / cfg.num_levels
    n = samples_per_side(cfg)
    # Integer offsets of each sample from the centre sample, along x (rows) and y (columns).
    di = np.abs(np.arange(n) - (n - 1) // 2)
    name = SUB_TERRAINS[kind]
    if name.startswith("pyramid_stairs"):
        heights = _stairs(cfg, di, difficulty)
    elif name == "boxes":
        heights = _boxes(cfg, n, difficulty, rng)
    elif name == "random_rough":
        heights = _random_rough(cfg, n, rng)
    else:
        heights = _slope(cfg, n, difficulty)
    if name.endswith("_inv"):
        heights = -heights
    heights = np.round(heights / cfg.vertical_scale) * cfg.vertical_scale
    return Tile.of(heights, cfg.horizontal_scale)


def _pixels(length: float, cfg: TerrainConfig) -> int:
    return round(length / cfg.horizontal_scale)


def _stairs(cfg: TerrainConfig, di: np.ndarray, difficulty: float) -> np.ndarray:
    s = cfg.stairs
    step = s.step_height[0] + difficulty * (s.step_height[1] - s.step_height[0])
    half = (len(di) - 1) // 2
    # Chebyshev distance from the centre in samples; rings count inwards from the border's inner edge.
    d = np.maximum(di[:, None], di[None, :])
    inner = half - _pixels(s.border_width, cfg)
    width = max(_pixels(s.step_width, cfg), 1)
    # Isaac Lab's count (mesh_terrains.pyramid_stairs_terrain): (8 - 2 - 3) // 0.6 + 1 = 6 rings, and a platform of
    # 6 - 2 x 6 x 0.3 = 2.4 m one step above the last ring (its origin, 7 steps up).
    num_steps = int((cfg.tile_size - 2 * s.border_width - s.platform_width) // (2 * s.step_width) + 1)
    # Ring k (k = 1 outermost) holds the samples inner - k * width <= d < inner - (k - 1) * width at k steps.
    rings = np.minimum((inner - 1 - d) // width + 1, num_steps + 1)
    return np.where(d < inner, rings, 0) * step


def _hf_border(width: float, cfg: TerrainConfig) -> int:
    """Samples of a height-field sub-terrain's flat border on each side: Isaac Lab's ``height_field_to_mesh`` takes
    ``int(border_width / horizontal_scale) + 1`` (3 for 0.25 m at 0.1 m)."""
    return int(width / cfg.horizontal_scale + 1e-9) + 1


def _slope(cfg: TerrainConfig, n: int, difficulty: float) -> np.ndarray:
    s = cfg.slope
    slope = s.slope[0] + difficulty * (s.slope[1] - s.slope[0])
    b = _hf_border(s.border_width, cfg)
    m = n - 2 * b  # the sub-terrain inside the border: 75 samples, 7.5 m
    heights = np.zeros((n, n))
    if m < 3:
        return heights
    # Isaac Lab's pyramid_sloped_terrain over the inner samples: slope x half its size at the centre, times two tents
    # that fall to 0 at its edges, cut flat at their value at the platform's corner.
    c = m // 2
    tent = (c - np.abs(c - np.arange(m))) / c
    top = slope * m * cfg.horizontal_scale / 2
    corner = tent[c - int(s.platform_width / cfg.horizontal_scale / 2 + 1e-9)]
    heights[b : n - b, b : n - b] = np.minimum(top * tent[:, None] * tent[None, :], top * corner * corner)
    return heights


def _random_rough(cfg: TerrainConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    r = cfg.rough
    levels = np.arange(r.noise[0], r.noise[1] + 0.5 * r.noise_step, r.noise_step)
    b = _hf_border(r.border_width, cfg)
    heights = np.zeros((n, n))
    heights[b : n - b, b : n - b] = rng.choice(levels, size=(n - 2 * b, n - 2 * b))
    return heights


def _boxes(cfg: TerrainConfig, n: int, difficulty: float, rng: np.random.Generator) -> np.ndarray:
    b = cfg.boxes
    height = b.grid_height[0] + difficulty * (b.grid_height[1] - b.grid_height[0])
    cells = int(cfg.tile_size / b.grid_width + 1e-9)
    # The cells fill the tile but for a flat border of what is left over (Isaac Lab: 8 - 17 x 0.45 = 0.35 m).
    start = -cells * b.grid_width / 2
    coords = (np.arange(n) - (n - 1) / 2) * cfg.horizontal_scale
    cell = np.floor((coords - start) / b.grid_width + 1e-9).astype(int)
    inside = (cell >= 0) & (cell < cells)
    tops = rng.uniform(-height, height, size=(cells, cells))
    index = np.clip(cell, 0, cells - 1)
    heights = np.where(inside[:, None] & inside[None, :], tops[np.ix_(index, index)], 0.0)
    platform = np.abs(coords) <= b.platform_width / 2 + 1e-9
    heights[np.ix_(platform, platform)] = height
    return heights


class Tile:
    """One tile: its heights and what the task reads from them.

    Attributes:
        heights: Shape (n, n), m, read-only (module docstring).
        spacing: Sample spacing in m.
        origin: Height of the spawn point: the highest sample within 1 m of the centre (Isaac Lab's height-field
            tiles' origin; its stairs and boxes put it on their platform, which is that height).
    """

    def __init__(self, heights: np.ndarray, spacing: float) -> None:
        self.heights = heights
        self.spacing = spacing
        n = len(heights)
        c, r = (n - 1) // 2, round(1.0 / spacing)
        self.origin = float(heights[max(c - r, 0) : c + r + 1, max(c - r, 0) : c + r + 1].max())
        # Each square's two triangles as planes z = a + b fu + c fv over its local coordinates (fu, fv) in [0, 1),
        # on a grid of (n + 1) x (n + 1) squares: square (p, q) covers samples [p - 1, p) x [q - 1, q), so the
        # tile's squares are p, q in 1 .. n - 1 and the ring around them is the flat ground at 0, which far points
        # are clamped into. Row (p (n + 1) + q) holds the triangle below the diagonal (fu + fv <= 1), the same row
        # + (n + 1)^2 the one above: one gather per point replaces four corner reads, both triangles' formulas and
        # an off-tile mask.
        h00, h10, h01, h11 = heights[:-1, :-1], heights[1:, :-1], heights[:-1, 1:], heights[1:, 1:]
        planes = np.zeros((2, n + 1, n + 1, 3))
        planes[0, 1:n, 1:n] = np.stack([h00, h10 - h00, h01 - h00], axis=-1)
        planes[1, 1:n, 1:n] = np.stack([h01 + h10 - h11, h11 - h01, h11 - h10], axis=-1)
        self._planes = planes.reshape(-1, 3)

    @classmethod
    def of(cls, heights: np.ndarray, spacing: float) -> Tile:
        """A tile of ``heights`` (made read-only)."""
        heights = np.array(heights, dtype=np.float64)
        heights.setflags(write=False)
        return cls(heights, spacing)

    def surface(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The ground's height under the points ``(x, y)`` (m, from the tile's centre): on the tile, the height field's
        triangle (module docstring), linear in it; off the tile, 0. Shapes (k,) -> (k,)."""
        shift, inv = (len(self.heights) - 1) / 2 + 1.0, 1.0 / self.spacing
        return self._surface(np.vstack((np.asarray(x) * inv + shift, np.asarray(y) * inv + shift)))

    def _surface(self, uv: np.ndarray) -> np.ndarray:
        """:meth:`surface` at the points ``uv`` (shape (2, k), overwritten) in the planes' grid coordinates: in
        samples from sample (0, 0), plus one square. Far points are clamped into the grid's outer ring."""
        m = len(self.heights) + 1
        # Every step works on both coordinates at once: the cost is numpy's per call, not its arithmetic, and inside
        # the env's step (the caches cold after stepSimulation) a call costs more than in a tight loop (the scan: 87
        # against 39 us, measured once beside two trainings).
        # (minimum/maximum rather than np.clip, whose wrapper costs three times as much at this size.)
        uv = np.minimum(np.maximum(uv, 0.5, out=uv), m - 0.5, out=uv)
        pq = uv.astype(np.intp)
        fu, fv = uv - pq
        row = pq[0] * m + pq[1]
        row += (fu + fv > 1.0) * (m * m)
        plane = self._planes[row]
        return plane[:, 0] + plane[:, 1] * fu + plane[:, 2] * fv

    def scan(self, base_pos: Sequence[float], yaw: float, noise: np.ndarray | None = None) -> np.ndarray:
        """Isaac Lab's ``height_scan`` of the ground under :data:`SCAN_POINTS` around the base (turned by its yaw):
        trunk height - ground height - :data:`SCAN_OFFSET`, plus ``noise`` if given, clipped to +-:data:`SCAN_CLIP`
        (Isaac Lab's observation manager adds the noise before the clip).

        Returns:
            Shape (NUM_SCAN,), float64.
        """
        shift, inv = (len(self.heights) - 1) / 2 + 1.0, 1.0 / self.spacing
        c, s = math.cos(yaw) * inv, math.sin(yaw) * inv
        uv = np.array(((c, -s, base_pos[0] * inv + shift), (s, c, base_pos[1] * inv + shift))) @ _SCAN_XY1
        scan = (base_pos[2] - SCAN_OFFSET) - self._surface(uv)
        if noise is not None:
            scan += noise
        # minimum/maximum rather than np.clip: a third of its cost at this size.
        return np.minimum(np.maximum(scan, -SCAN_CLIP, out=scan), SCAN_CLIP, out=scan)


def next_level(level: int, distance: float, commanded: float, episode_s: float, cfg: TerrainConfig, u: float) -> int:
    """Isaac Lab's ``terrain_levels_vel`` for one env whose episode ended: up a level when the robot ended farther
    than half a tile from the tile's centre (its env origin), down when nearer than half what its command (speed
    ``commanded`` m/s) would carry it over the episode's time limit; past the top level, a random level (``u``
    uniform in [0, 1) picks it).

    Args:
        level: The episode's level.
        distance: Planar distance in m from the tile's centre at the episode's end.
        commanded: Planar speed of the command at the episode's end in m/s.
        episode_s: The episode's time limit in s (Isaac Lab's ``max_episode_length_s``: 20).
        cfg: The terrain settings.
        u: A uniform draw in [0, 1).
    """
    up = distance > cfg.tile_size / 2
    down = not up and distance < commanded * episode_s * 0.5
    level += int(up) - int(down)
    if level >= cfg.num_levels:
        return min(int(u * cfg.num_levels), cfg.num_levels - 1)
    return max(level, 0)

"""The rough task's terrain: each sub-terrain's tile against worked examples, the curriculum's rule, the surface and
the height scan against PyBullet's ray tests of the height field the task builds."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pybullet
import pytest

from robosafe_tasks.a1 import terrain
from robosafe_tasks.a1.config import SUB_TERRAINS, A1Config, TerrainConfig, build
from robosafe_tasks.a1.world import A1World

STAIRS, STAIRS_INV, BOXES, ROUGH, SLOPE, SLOPE_INV = range(6)


def config(**sections: dict) -> TerrainConfig:
    return build(TerrainConfig, sections, "env_kwargs.terrain")


def test_stairs_rise_a_step_every_30_cm_from_a_1_m_border_to_a_3_m_platform() -> None:
    # Steps of 0.1 m whatever the difficulty: a border of 10 samples at 0, five rings of 3 samples at 0.1 .. 0.5 m,
    # the platform (3 m, plus the samples on its edge) one step above the last ring.
    cfg = config(stairs={"step_height": [0.1, 0.1]})
    stairs = terrain.tile(cfg, STAIRS, 4)
    heights = stairs.heights
    assert heights.shape == (81, 81)
    along_x = heights[40:, 40]  # from the centre to the +x edge, one sample per 0.1 m
    expected = [0.6] * 15 + [0.5] * 3 + [0.4] * 3 + [0.3] * 3 + [0.2] * 3 + [0.1] * 3 + [0.0] * 11
    np.testing.assert_allclose(along_x, expected, atol=1e-12)
    np.testing.assert_array_equal(heights, heights.T)  # rings: the same along y
    pit = terrain.tile(cfg, STAIRS_INV, 4)
    np.testing.assert_allclose(pit.heights, -heights, atol=1e-12)
    assert stairs.origin == pytest.approx(0.6) and pit.origin == pytest.approx(-0.6)


def test_step_height_grows_with_the_level_between_its_range() -> None:
    cfg = TerrainConfig()
    platforms = [terrain.tile(cfg, STAIRS, level).heights.max() for level in range(cfg.num_levels)]
    assert platforms == sorted(platforms)
    # Level L has difficulty in [L/10, (L+1)/10): six steps of 0.05 + difficulty x 0.18 m, to the 5 mm grid.
    assert 6 * 0.05 - 0.003 <= platforms[0] <= 6 * (0.05 + 0.1 * 0.18) + 0.003
    assert 6 * (0.05 + 0.9 * 0.18) - 0.003 <= platforms[9] <= 6 * 0.23 + 0.003


def test_slope_is_isaac_labs_pyramid_cut_flat_at_the_platform() -> None:
    # Slope 0.4 and a border of 2 samples: 38 samples (3.8 m) from the border to the centre. Isaac Lab's surface is
    # slope x 3.8 m x (1 - |i|/38)(1 - |j|/38), cut at its value at the platform's corner (10 samples from the
    # centre): 1.52 x (28/38)^2 = 0.8252 -> 0.825 on the 5 mm grid.
    cfg = config(slope={"slope": [0.4, 0.4]})
    heights = terrain.tile(cfg, SLOPE, 0).heights
    assert heights[40, 40] == pytest.approx(0.825)
    assert heights[60, 40] == pytest.approx(1.52 * (1 - 20 / 38))  # 0.72, below the cut
    assert heights[30, 30] == pytest.approx(0.825)  # on the platform
    assert heights[79, 40] == 0.0 and heights[40, 2] == 0.0  # the border
    np.testing.assert_allclose(terrain.tile(cfg, SLOPE_INV, 0).heights, -heights, atol=1e-12)


def test_random_rough_draws_centimetres_inside_its_border() -> None:
    cfg = TerrainConfig()
    rough = terrain.tile(cfg, ROUGH, 3)
    heights = rough.heights
    inner = heights[3:-3, 3:-3]  # a border of 0.25 m: the two outer samples of each side and the sample on its edge
    assert set(np.round(inner.ravel(), 6)) == {0.01, 0.02, 0.03, 0.04, 0.05, 0.06}
    assert not heights[:2].any() and not heights[:, -2:].any()
    # The same tile for every env of the configuration; another seed draws other heights.
    assert terrain.tile(cfg, ROUGH, 3) is rough
    assert not np.array_equal(terrain.tile(config(seed=1), ROUGH, 3).heights, heights)


def test_boxes_are_cells_of_45_cm_around_a_platform_at_the_grid_height() -> None:
    cfg = config(boxes={"grid_height": [0.05, 0.05]})
    heights = terrain.tile(cfg, BOXES, 0).heights
    # 17 cells of 0.45 m span 7.65 m: the samples at |x| = 3.9 and 4.0 m are the flat border.
    assert not heights[:2].any() and not heights[-2:].any()
    np.testing.assert_allclose(heights[30:51, 30:51], 0.05)  # the 2 m platform
    cells = heights[2:30, 2:30]
    assert cells.min() >= -0.05 and cells.max() <= 0.05 and len(np.unique(cells)) > 10
    # Samples at x = -3.8 .. -3.4 m lie in the first cell (from -3.825 m): one height.
    assert len(np.unique(heights[2:7, 2])) == 1


def test_sub_terrains_are_drawn_by_their_proportions() -> None:
    cfg = TerrainConfig()
    draws = [terrain.tile_kind(cfg, u) for u in (np.arange(1000) + 0.5) / 1000]
    counts = np.bincount(draws, minlength=6) / 1000
    np.testing.assert_allclose(counts, [0.2, 0.2, 0.2, 0.2, 0.1, 0.1])
    only_slopes = config(stairs={"proportion": 0, "inverted_proportion": 0}, boxes={"proportion": 0},
                         rough={"proportion": 0})  # fmt: skip
    assert {terrain.tile_kind(only_slopes, u) for u in np.linspace(0, 0.999, 50)} == {SLOPE, SLOPE_INV}


@pytest.mark.parametrize(
    ("level", "distance", "commanded", "u", "expected"),
    [
        (3, 4.1, 1.0, 0.5, 4),  # farther than half the 8 m tile: up
        (3, 4.0, 0.3, 0.5, 3),  # exactly half a tile is not farther; 4 m of the 6 m asked: stays
        (3, 3.0, 0.25, 0.5, 3),  # 3 m of the 5 m that 0.25 m/s asks in 20 s: more than half, stays
        (3, 2.0, 0.25, 0.5, 2),  # 2 m of those 5 m: less than half, down
        (0, 0.0, 1.0, 0.5, 0),  # not below level 0
        (3, 0.0, 0.0, 0.5, 3),  # standing still as commanded: stays
        (9, 4.5, 1.0, 0.25, 2),  # past the top level: a random level, int(0.25 x 10)
    ],
)
def test_curriculum_moves_levels_as_isaac_labs_terrain_levels_vel(
    level: int, distance: float, commanded: float, u: float, expected: int
) -> None:
    assert terrain.next_level(level, distance, commanded, TerrainConfig(), u) == expected


@pytest.fixture(scope="module")
def ground() -> Iterator[A1World]:
    world = A1World(A1Config(), terrain=TerrainConfig())
    yield world
    world.close()


@pytest.mark.parametrize("kind", range(len(SUB_TERRAINS)), ids=SUB_TERRAINS)
def test_surface_is_what_pybullet_collides_with(ground: A1World, kind: int) -> None:
    tile = terrain.tile(TerrainConfig(), kind, 7)
    ground.heightfield.show(tile.heights)
    # Points over the tile and the flat ground around it, away from the robot standing at the origin.
    rng = np.random.default_rng(kind)
    points = rng.uniform(-4.6, 4.6, size=(400, 2))
    points = points[np.hypot(points[:, 0], points[:, 1]) > 0.6]
    hits = pybullet.rayTestBatch(
        [[x, y, 5.0] for x, y in points], [[x, y, -5.0] for x, y in points], physicsClientId=ground.client
    )
    assert all(hit[0] == ground.ground for hit in hits)
    found = np.array([hit[3][2] for hit in hits])
    np.testing.assert_allclose(tile.surface(points[:, 0], points[:, 1]), found, atol=1e-6)


def test_a_deeper_tile_written_after_a_shallow_one_stays_in_place(ground: A1World) -> None:
    # PyBullet keeps a height field's first range when its data are replaced: the task's is made with +-3 m, so a
    # 1.3 m stair pit written after flat ground lies where its heights say.
    ground.heightfield.show(terrain.tile(TerrainConfig(), STAIRS, 0).heights)
    pit = terrain.tile(TerrainConfig(), STAIRS_INV, 9).heights
    ground.heightfield.show(pit)
    hit = pybullet.rayTest([1.0, 1.0, 5.0], [1.0, 1.0, -5.0], physicsClientId=ground.client)[0]
    assert hit[3][2] == pytest.approx(pit.min(), abs=1e-6) and pit.min() < -1.2


def test_height_scan_turns_with_the_yaw() -> None:
    # A ramp rising 0.1 m per m along x: at yaw 0 the scan point (px, py) is over x = px, at yaw 90 deg over
    # x = -py; the trunk at 0.8 m reads 0.8 - ground - 0.5.
    coords = (np.arange(81) - 40) * 0.1
    ramp = terrain.Tile.of(np.repeat(0.1 * coords[:, None], 81, axis=1), 0.1)
    px, py = terrain.SCAN_POINTS[:, 0], terrain.SCAN_POINTS[:, 1]
    np.testing.assert_allclose(ramp.scan((0.0, 0.0, 0.8), 0.0), 0.3 - 0.1 * px, atol=1e-12)
    turned = ramp.scan((0.0, 0.0, 0.8), math.pi / 2)
    np.testing.assert_allclose(turned, 0.3 + 0.1 * py, atol=1e-12)
    # 17 points along x by 11 along y, y-major; the scan is clipped to +-1 m, the noise added before the clip.
    assert terrain.NUM_SCAN == 187 and tuple(terrain.SCAN_POINTS[17]) == (-0.8, -0.4)
    high = ramp.scan((0.0, 0.0, 3.0), 0.0, noise=np.full(187, -0.1))
    np.testing.assert_allclose(high, 1.0)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"max_init_level": 10}, r"max_init_level must be in \[0, num_levels - 1 = 9\], got 10"),
        ({"rough": {"proportion": -0.1}}, "proportions must be >= 0"),
        (
            {
                "stairs": {"proportion": 0, "inverted_proportion": 0},
                "boxes": {"proportion": 0},
                "rough": {"proportion": 0},
                "slope": {"proportion": 0, "inverted_proportion": 0},
            },
            "not all 0",
        ),
        ({"horizontal_scale": 0.0}, r"terrain.horizontal_scale must be > 0"),
        ({"boxes": {"grid_hieght": [0, 1]}}, r"env_kwargs.terrain.boxes: unknown keys \['grid_hieght'\]"),
    ],
)
def test_bad_terrain_settings_name_their_key(sections: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**sections)


def test_a_tile_beyond_the_height_bound_is_refused_by_name() -> None:
    cfg = config(stairs={"step_height": [0.6, 0.6]})  # six steps of 0.6 m: a 3.6 m platform
    with pytest.raises(ValueError, match=r"the pyramid_stairs tile of level 0 reaches 3.60 m, beyond the \+-3 m"):
        terrain.tile(cfg, STAIRS, 0)
    with pytest.raises(ValueError, match=r"tile_size 8\.05 must be a multiple"):
        terrain.samples_per_side(config(tile_size=8.05))

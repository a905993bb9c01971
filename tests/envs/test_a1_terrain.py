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
#: A column of each sub-terrain in Isaac Lab's layout of 20 columns (0-3 stairs, 4-7 inverted stairs, 8-11 boxes,
#: 12-15 random rough, 16-17 slopes, 18-19 inverted slopes).
COLUMN = {STAIRS: 0, STAIRS_INV: 4, BOXES: 8, ROUGH: 12, SLOPE: 16, SLOPE_INV: 18}


def config(**sections: dict) -> TerrainConfig:
    return build(TerrainConfig, sections, "env_kwargs.terrain")


def test_columns_go_to_the_sub_terrains_by_their_proportions() -> None:
    cfg = TerrainConfig()
    kinds = [terrain.column_kind(cfg, column) for column in range(20)]
    assert kinds == [STAIRS] * 4 + [STAIRS_INV] * 4 + [BOXES] * 4 + [ROUGH] * 4 + [SLOPE] * 2 + [SLOPE_INV] * 2
    only_slopes = config(stairs={"proportion": 0, "inverted_proportion": 0}, boxes={"proportion": 0},
                         rough={"proportion": 0}, num_cols=4)  # fmt: skip
    assert [terrain.column_kind(only_slopes, column) for column in range(4)] == [SLOPE, SLOPE, SLOPE_INV, SLOPE_INV]


def test_stairs_rise_as_isaac_labs_six_rings_to_a_platform() -> None:
    # Steps of 0.1 m whatever the difficulty. Isaac Lab: (8 - 2 x 1 - 3) // (2 x 0.3) + 1 = 6 rings of 0.3 m inside
    # the 1 m border, and a platform of 6 - 2 x 6 x 0.3 = 2.4 m one step above the last ring (7 steps up). From the
    # centre to the +x edge, one sample per 0.1 m: the platform's 12 samples (0 .. 1.1 m), six rings of 3 samples at
    # 0.6 .. 0.1 m, then the border's 11 samples (3.0 .. 4.0 m) at 0.
    cfg = config(stairs={"step_height": [0.1, 0.1]})
    stairs = terrain.tile(cfg, COLUMN[STAIRS], 4)
    heights = stairs.heights
    assert heights.shape == (81, 81)
    expected = [0.7] * 12 + [0.6] * 3 + [0.5] * 3 + [0.4] * 3 + [0.3] * 3 + [0.2] * 3 + [0.1] * 3 + [0.0] * 11
    np.testing.assert_allclose(heights[40:, 40], expected, atol=1e-12)
    np.testing.assert_array_equal(heights, heights.T)  # rings: the same along y
    np.testing.assert_array_equal(heights, heights[::-1, ::-1])
    pit = terrain.tile(cfg, COLUMN[STAIRS_INV], 4)
    np.testing.assert_allclose(pit.heights, -heights, atol=1e-12)
    assert stairs.origin == pytest.approx(0.7) and pit.origin == pytest.approx(-0.7)


def test_step_height_grows_with_the_level_between_its_range() -> None:
    cfg = TerrainConfig()
    platforms = [terrain.tile(cfg, COLUMN[STAIRS], level).heights.max() for level in range(cfg.num_levels)]
    assert platforms == sorted(platforms)
    # Level L has difficulty in [L/10, (L+1)/10): seven steps of 0.05 + difficulty x 0.18 m, to the 5 mm grid.
    assert 7 * 0.05 - 0.003 <= platforms[0] <= 7 * (0.05 + 0.1 * 0.18) + 0.003
    assert 7 * (0.05 + 0.9 * 0.18) - 0.003 <= platforms[9] <= 7 * 0.23 + 0.003


def test_slope_is_isaac_labs_pyramid_cut_flat_at_the_platform() -> None:
    # Isaac Lab's height-field border: int(0.25 / 0.1) + 1 = 3 samples, leaving 75 samples (7.5 m). Its pyramid:
    # 0.4 x 7.5 / 2 = 1.5 m times the tents (37 - |37 - k|) / 37 over those samples (the centre at sample 40), cut at
    # their value at the platform's corner, 10 samples from the centre: 1.5 x (27/37)^2 = 0.7988 -> 0.8 on the 5 mm
    # grid. Sample 60 (20 from the centre, 2 m): 1.5 x 17/37 = 0.689 -> 0.69, below the cut.
    cfg = config(slope={"slope": [0.4, 0.4]})
    heights = terrain.tile(cfg, COLUMN[SLOPE], 0).heights
    assert heights[40, 40] == pytest.approx(0.8) and heights[30, 30] == pytest.approx(0.8)
    assert heights[60, 40] == pytest.approx(0.69)
    assert heights[4, 40] == pytest.approx(1.5 * 1 / 37 * 1.0, abs=0.003)  # the first sample inside the border
    assert not heights[:4].any() and not heights[77:].any() and not heights[:, :4].any() and not heights[:, 77:].any()
    np.testing.assert_allclose(terrain.tile(cfg, COLUMN[SLOPE_INV], 0).heights, -heights, atol=1e-12)


def test_random_rough_draws_centimetres_inside_its_border() -> None:
    cfg = TerrainConfig()
    rough = terrain.tile(cfg, COLUMN[ROUGH], 3)
    heights = rough.heights
    # Isaac Lab's border of int(0.25 / 0.1) + 1 = 3 samples on each side.
    assert set(np.round(heights[3:-3, 3:-3].ravel(), 6)) == {0.01, 0.02, 0.03, 0.04, 0.05, 0.06}
    assert not heights[:3].any() and not heights[-3:].any() and not heights[:, :3].any() and not heights[:, -3:].any()
    # The same tile for every env of the configuration; another column or seed draws other heights.
    assert terrain.tile(cfg, COLUMN[ROUGH], 3) is rough
    assert not np.array_equal(terrain.tile(cfg, COLUMN[ROUGH] + 1, 3).heights, heights)
    assert not np.array_equal(terrain.tile(config(seed=1), COLUMN[ROUGH], 3).heights, heights)


def test_boxes_are_cells_of_45_cm_around_a_platform_at_the_grid_height() -> None:
    cfg = config(boxes={"grid_height": [0.05, 0.05]})
    heights = terrain.tile(cfg, COLUMN[BOXES], 0).heights
    # 17 cells of 0.45 m span 7.65 m: the samples at |x| = 3.9 and 4.0 m are the flat border.
    assert not heights[:2].any() and not heights[-2:].any()
    np.testing.assert_allclose(heights[30:51, 30:51], 0.05)  # the 2 m platform
    cells = heights[2:30, 2:30]
    assert cells.min() >= -0.05 and cells.max() <= 0.05 and len(np.unique(cells)) > 10
    # Samples at x = -3.8 .. -3.4 m lie in the first cell (from -3.825 m): one height; -3.3 m in the next.
    assert len(np.unique(heights[2:7, 2])) == 1 and heights[7, 2] != heights[6, 2]


@pytest.mark.parametrize(
    ("level", "distance", "commanded", "u", "expected"),
    [
        (3, 4.1, 1.0, 0.5, 4),  # farther than half the 8 m tile: up
        (3, 4.0, 0.3, 0.5, 3),  # exactly half a tile is not farther; 4 m of the 6 m asked in 20 s: stays
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
    assert terrain.next_level(level, distance, commanded, 20.0, TerrainConfig(), u) == expected


def test_curriculum_scales_the_asked_distance_by_the_episodes_time_limit() -> None:
    # 2 m of the 0.5 m/s x 20 s = 10 m asked: down; of 0.5 m/s x 6 s = 3 m: more than half, stays.
    assert terrain.next_level(3, 2.0, 0.5, 20.0, TerrainConfig(), 0.5) == 2
    assert terrain.next_level(3, 2.0, 0.5, 6.0, TerrainConfig(), 0.5) == 3


@pytest.fixture(scope="module")
def ground() -> Iterator[A1World]:
    world = A1World(A1Config(), terrain=TerrainConfig())
    yield world
    world.close()


@pytest.mark.parametrize("kind", range(len(SUB_TERRAINS)), ids=SUB_TERRAINS)
def test_surface_is_what_pybullet_collides_with(ground: A1World, kind: int) -> None:
    tile = terrain.tile(TerrainConfig(), COLUMN[kind], 7)
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
    # 1.5 m stair pit written after a stair pyramid lies where its heights say.
    ground.heightfield.show(terrain.tile(TerrainConfig(), COLUMN[STAIRS], 0).heights)
    pit = terrain.tile(TerrainConfig(), COLUMN[STAIRS_INV], 9).heights
    ground.heightfield.show(pit)
    hit = pybullet.rayTest([1.0, 1.0, 5.0], [1.0, 1.0, -5.0], physicsClientId=ground.client)[0]
    assert hit[3][2] == pytest.approx(pit.min(), abs=1e-6) and pit.min() < -1.4


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
        ({"tile_size": 8.05}, r"tile_size 8\.05 must be a multiple"),
        ({"seed": -1}, r"terrain.seed must be >= 0, got -1"),
        ({"num_cols": 0}, r"terrain.num_cols must be >= 1, got 0"),
        ({"rough": {"noise_step": 0.0}}, r"terrain.rough.noise_step must be > 0, got 0.0"),
        ({"boxes": {"grid_width": 0.0}}, r"terrain.boxes.grid_width must be > 0, got 0.0"),
        ({"stairs": {"step_width": -0.3}}, r"terrain.stairs.step_width must be > 0, got -0.3"),
        ({"slope": {"slope": [-0.1, 0.4]}}, r"terrain.slope.slope must be >= 0, got -0.1"),
        ({"boxes": {"grid_hieght": [0, 1]}}, r"env_kwargs.terrain.boxes: unknown keys \['grid_hieght'\]"),
        # Seven steps of up to 0.6 m: the hardest level's platform at 4.2 m, refused before any tile is built.
        ({"stairs": {"step_height": [0.05, 0.6]}}, r"terrain.stairs.step_height: its hardest tile would reach 4.20 m"),
        ({"slope": {"slope": [0.0, 1.0]}}, r"terrain.slope.slope: its hardest tile would reach 3.75 m"),
    ],
)
def test_bad_terrain_settings_name_their_key(sections: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**sections)

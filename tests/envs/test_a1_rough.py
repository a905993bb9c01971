"""The rough A1 task: registration and spaces, the checker, seeding, rendering, the height scan in the observation,
the tile and level each reset chooses, the state record, the safety layer in front of it, and a short training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium
import numpy as np
import pybullet
import pytest
from a1_helpers import QUIET
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import robosafe_tasks
from robo_safe_rl.apps.train import main
from robo_safe_rl.bridge.protocol import is_simulated
from robo_safe_rl.bridge.safe_step import SafeStep
from robosafe_tasks.a1 import A1RoughEnv, robot, terrain
from robosafe_tasks.a1.config import SUB_TERRAINS, A1RoughConfig, build
from robosafe_tasks.a1.world import yaw_of

ROUGH_ID = "RoboSafe/A1Rough-v0"
STAIRS, STAIRS_INV = SUB_TERRAINS.index("pyramid_stairs"), SUB_TERRAINS.index("pyramid_stairs_inv")
#: A column of stairs and one of inverted stairs in Isaac Lab's layout of 20 columns.
STAIRS_COLUMN, PIT_COLUMN = 0, 4
UNBOUNDED_BOX_WARNING = "ignore:.*Box observation space (minimum|maximum) value is.*infinity"


def quiet_rough(**overrides: object) -> A1RoughEnv:
    """A rough A1 without randomisation or noise (the flat tests' settings)."""
    return A1RoughEnv(**{**QUIET, **overrides})


def on_tile(
    env: A1RoughEnv, column: int, level: int, base_pos: tuple[float, float, float], command: list[float]
) -> None:
    """Put the env's robot, at rest in its state, on the tile (column, level) at ``base_pos`` with ``command``."""
    state = env.get_sim_state()
    state["terrain"] = np.array([column, level], dtype=np.float64)
    state["base_pos"] = np.array(base_pos)
    state["command"] = np.array(command)
    state["command_flags"] = np.zeros(2)  # no heading control: the command stays as set
    env.set_sim_state(state)


def test_registered_with_the_flat_tasks_time_limit_and_a_height_scan() -> None:
    assert robosafe_tasks.TASKS[ROUGH_ID] == "robosafe_tasks.a1:A1RoughEnv"
    assert gymnasium.spec(ROUGH_ID).max_episode_steps == 1000
    env = quiet_rough()
    assert env.observation_space.shape == (235,) and env.action_space.shape == (12,)
    assert env.metric_names == ("error_vel_xy", "error_vel_yaw", "terrain_level")
    # The rough task's weights (Isaac Lab's LocomotionVelocityRoughEnvCfg) over the flat task's.
    assert env.cfg.rewards.feet_air_time == 0.01 and env.cfg.rewards.flat_orientation_l2 == 0.0
    assert "flat_orientation_l2" not in env.reward_terms
    env.close()


def test_the_task_yaml_spells_out_the_defaults() -> None:
    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "task" / "a1_rough.yaml")
    config = build(A1RoughConfig, cfg.env_kwargs, "env_kwargs")
    assert config == A1RoughConfig() and config.terrain.stairs.step_height == (0.05, 0.23)


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
def test_check_env_with_every_randomisation_on() -> None:
    env = A1RoughEnv()
    check_env(env, skip_render_check=True)
    env.close()


def test_a_reset_spawns_on_its_tile_and_the_observation_scans_it() -> None:
    env = quiet_rough()
    obs, _ = env.reset(seed=5)
    column, level = env.terrain_column, env.terrain_level
    assert column is not None and 0 <= level <= 5 and env.terrain_kind == terrain.column_kind(env.cfg.terrain, column)
    ground = terrain.tile(env.cfg.terrain, column, level)
    state = env.get_sim_state()
    pos = state["base_pos"]
    assert np.abs(pos[:2]).max() <= 0.5
    assert pos[2] == pytest.approx(ground.origin + robot.SPAWN_HEIGHT)
    scan = ground.scan(pos, yaw_of(state["base_orn"]))
    np.testing.assert_allclose(obs[48:], scan.astype(np.float32))
    np.testing.assert_array_equal(state["terrain"], [column, level])
    obs, *_, info = env.step(np.zeros(12, np.float32))
    assert info["metrics"]["terrain_level"] == level
    env.close()


def test_same_seed_same_trajectory_different_seed_differs() -> None:
    def rollout(seed: int) -> np.ndarray:
        env = A1RoughEnv()
        out = [env.reset(seed=seed)[0]]
        rng = np.random.default_rng(0)
        for _ in range(20):
            out.append(env.step(rng.uniform(-1, 1, 12).astype(np.float32))[0])
        env.close()
        return np.concatenate(out)

    first = rollout(3)
    np.testing.assert_array_equal(first, rollout(3))
    assert not np.array_equal(first, rollout(4))


@pytest.mark.parametrize(
    ("end", "command", "change"),
    [
        ((4.5, 0.0), [0.5, 0.0, 0.0], +1),  # farther than half the 8 m tile
        ((0.5, 0.5), [1.0, 0.0, 0.0], -1),  # 0.7 m of the 20 m asked
        ((1.0, 2.0), [0.2, 0.0, 0.0], 0),  # 2.2 m of the 4 m asked: more than half
    ],
)
def test_each_reset_moves_the_level_by_how_far_the_episode_went(
    end: tuple[float, float], command: list[float], change: int
) -> None:
    env = quiet_rough()
    env.reset(seed=0)
    on_tile(env, STAIRS_COLUMN, 4, (0.0, 0.0, 1.2), command)
    env.step(np.zeros(12, np.float32))  # an episode that took a step
    on_tile(env, STAIRS_COLUMN, 4, (*end, 1.2), command)  # ... and ended here
    env.reset()
    assert (env.terrain_column, env.terrain_level) == (STAIRS_COLUMN, 4 + change)
    env.close()
    # With the curriculum off, the level stays.
    still = quiet_rough(terrain={"curriculum": False})
    still.reset(seed=0)
    on_tile(still, STAIRS_COLUMN, 4, (0.0, 0.0, 1.2), command)
    still.step(np.zeros(12, np.float32))
    on_tile(still, STAIRS_COLUMN, 4, (*end, 1.2), command)
    still.reset()
    assert still.terrain_level == 4
    still.close()


def test_only_an_episode_that_took_steps_moves_the_level_and_a_seeded_reset_draws_afresh() -> None:
    env = quiet_rough()
    env.reset(seed=0)
    on_tile(env, STAIRS_COLUMN, 4, (0.0, 0.0, 1.2), [1.0, 0.0, 0.0])
    env.reset()  # no step since the reset: the robot went nowhere because it was never asked to go
    assert (env.terrain_column, env.terrain_level) == (STAIRS_COLUMN, 4)
    drawn = set()
    for seed in range(12):
        on_tile(env, STAIRS_COLUMN, 9, (0.0, 0.0, 1.2), [1.0, 0.0, 0.0])
        env.reset(seed=seed)
        drawn.add((env.terrain_column, env.terrain_level))
        assert env.terrain_level <= 5  # max_init_level
    assert len(drawn) > 6


def test_the_curriculum_scales_the_asked_distance_by_the_episode_time() -> None:
    # 2 m covered at 0.5 m/s: less than half of the 10 m asked over 20 s (down), more than half of the 3 m asked over
    # 6 s (a run whose episodes are 300 steps).
    levels = []
    for episode_s in (20.0, 6.0):
        env = quiet_rough(terrain={"episode_s": episode_s})
        env.reset(seed=0)
        on_tile(env, STAIRS_COLUMN, 4, (0.0, 0.0, 1.2), [0.5, 0.0, 0.0])
        env.step(np.zeros(12, np.float32))
        on_tile(env, STAIRS_COLUMN, 4, (2.0, 0.0, 1.2), [0.5, 0.0, 0.0])
        env.reset()
        levels.append(env.terrain_level)
        env.close()
    assert levels == [3, 4]


def test_past_the_top_level_a_robot_goes_to_a_random_level() -> None:
    env = quiet_rough()
    env.reset(seed=0)
    levels = []
    for _ in range(8):
        on_tile(env, STAIRS_COLUMN, 9, (0.0, 0.0, 2.0), [0.5, 0.0, 0.0])
        env.step(np.zeros(12, np.float32))
        on_tile(env, STAIRS_COLUMN, 9, (6.0, 0.0, 0.5), [0.5, 0.0, 0.0])
        env.reset()
        levels.append(env.terrain_level)
    # Not "up" (there is no level 10): random levels, below the top one (int(u x 10) of uniform draws).
    assert len(set(levels)) > 2 and all(0 <= level <= 9 for level in levels) and levels != [9] * 8


def test_state_record_carries_the_tile() -> None:
    env = quiet_rough()
    assert is_simulated(env)
    env.reset(seed=1)
    on_tile(env, PIT_COLUMN, 8, (0.3, -0.2, -0.7), [0.5, 0.0, 0.0])
    state = env.get_sim_state()
    assert set(state) == set(env.state_shapes) and state["terrain"].shape == (2,)
    other = quiet_rough()
    other.reset(seed=7)  # another column or level
    obs = other.set_sim_state(state)
    assert (other.terrain_column, other.terrain_level, other.terrain_kind) == (PIT_COLUMN, 8, STAIRS_INV)
    np.testing.assert_allclose(obs, env.set_sim_state(state), atol=1e-6)
    # A refused record changes nothing: the env stays on its tile, with its bound.
    on_tile(other, STAIRS_COLUMN, 2, (0.0, 0.0, 0.9), [0.5, 0.0, 0.0])
    before = (other.terrain_column, other.terrain_level, other.limits)
    for bad in (np.array([20.0, 0.0]), np.array([0.0, 10.0]), np.array([0.5, 1.0])):
        with pytest.raises(ValueError, match=r"state\['terrain'\] must be \(column in \[0, 20\), level in \[0, 10\)\)"):
            other.set_sim_state({**state, "terrain": bad})
    with pytest.raises(ValueError, match="'terrain' has shape"):
        other.set_sim_state({**state, "terrain": np.zeros(3)})
    with pytest.raises(ValueError, match="'base_pos' is not finite"):
        other.set_sim_state({**state, "base_pos": np.array([np.nan, 0.0, 0.0])})
    assert (other.terrain_column, other.terrain_level, other.limits) == before
    env.close()
    other.close()


def test_trunk_height_bound_follows_the_tile() -> None:
    env = quiet_rough()
    env.reset(seed=1)
    # At the bottom of the deepest stair pit (about 1.5 m) the trunk is 1.1 m below the flat ground: plausible here,
    # where the flat task's bound starts at its floor.
    on_tile(env, PIT_COLUMN, 9, (0.0, 0.0, -1.1), [0.0, 0.0, 0.0])
    pit = terrain.tile(env.cfg.terrain, PIT_COLUMN, 9).heights
    assert env.limits.base_height == (pit.min(), 3.0)
    assert env.check_state() is None
    on_tile(env, PIT_COLUMN, 9, (0.0, 0.0, pit.min() - 0.1), [0.0, 0.0, 0.0])
    assert env.check_state().startswith("base height")
    env.close()


def test_safe_step_keeps_a_nan_target_from_the_engine_and_a_rebuild_shows_the_tile() -> None:
    env = SafeStep(quiet_rough())
    obs, _ = env.reset(seed=2)
    action = np.zeros(12, np.float32)
    action[4] = math.nan
    obs, reward, terminated, _, _ = env.step(action)
    assert np.isfinite(obs).all() and math.isfinite(reward) and not terminated
    assert env.counters["nonfinite_actions"] == 1
    inner = env.unwrapped
    on_tile(inner, STAIRS_COLUMN, 4, (0.0, 0.0, 1.2), [1.0, 0.0, 0.0])  # level 4, commanded 1 m/s
    env.step(np.zeros(12, np.float32))
    before = inner.get_sim_state()
    inner.break_simulation()
    obs, _, terminated, _, info = env.step(np.zeros(12, np.float32))
    assert terminated and info["safe_step"]["rebuilt"]
    # Where the crashed episode ended went with the old world: the level stays (a robot at the new world's origin
    # would have walked 0 of the 20 m asked, and gone down).
    assert (inner.terrain_column, inner.terrain_level) == (STAIRS_COLUMN, 4)
    # The rebuilt world holds the same tile (PyBullet's ray finds its ground), and restoring the state before the
    # crash scans it as before.
    ground = terrain.tile(inner.cfg.terrain, STAIRS_COLUMN, 4)
    hit = pybullet.rayTest([2.55, -1.45, 5.0], [2.55, -1.45, -5.0], physicsClientId=inner.client_id)[0]
    assert hit[3][2] == pytest.approx(ground.surface(np.array([2.55]), np.array([-1.45]))[0])
    obs = inner.set_sim_state(before)
    scan = ground.scan(before["base_pos"], yaw_of(before["base_orn"]))
    np.testing.assert_allclose(obs[48:], scan.astype(np.float32), atol=1e-6)
    env.close()


def test_scan_mirror_is_the_scan_of_the_mirrored_pose() -> None:
    # On a tile symmetric in y (pyramid stairs), the trunk at (x, y) with yaw psi and at (x, -y) with yaw -psi scan
    # mirror images of each other.
    stairs = terrain.tile(quiet_rough().cfg.terrain, STAIRS_COLUMN, 6)
    index = np.array(A1RoughEnv.observation_mirror[0][48:]) - 48
    a = stairs.scan((2.6, 1.3, 1.2), 0.4)
    b = stairs.scan((2.6, -1.3, 1.2), -0.4)
    np.testing.assert_allclose(b, a[index], atol=1e-9)
    assert not np.allclose(b, a, atol=1e-3)
    assert sorted(index) == list(range(187)) and all(A1RoughEnv.observation_mirror[1][48:])


def test_render_headless_shows_the_robot_on_its_tile() -> None:
    env = quiet_rough(render_mode="rgb_array", render_width=64, render_height=48)
    env.reset(seed=0)
    images = []
    for column, level, z in ((STAIRS_COLUMN, 0, 0.9), (PIT_COLUMN, 9, -1.1)):
        on_tile(env, column, level, (0.0, 0.0, z), [0.0, 0.0, 0.0])
        images.append(env.render())
    assert images[0].shape == (48, 64, 3) and images[0].dtype == np.uint8 and images[0].std() > 5.0
    # The camera follows the trunk: on a low pyramid and at the bottom of a deep pit it sees other ground.
    assert np.abs(images[0].astype(float) - images[1].astype(float)).mean() > 10.0
    env.close()


@pytest.mark.slow
def test_trains_through_the_gauntlet_and_logs_the_terrain_level(tmp_path: Path) -> None:
    run_dir = tmp_path / "drill"
    args = ["+drill=gauntlet", "task=a1_rough", "task.num_envs=4", "task.num_workers=0", "runner.max_iterations=4"]
    args += ["task.max_episode_steps=30", "task.env_kwargs.terrain.episode_s=0.6"]
    assert main([*args, f"run_dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    injected, safety = summary["faults_injected"], summary["safety"]
    assert summary["status"] == "completed" and summary["iterations"] == 4
    assert injected.get("action_nonfinite", 0) > 0
    assert safety["nonfinite_actions"] == injected["action_nonfinite"]
    assert safety["env_rebuilds"] >= safety["physics_errors"] + safety["implausible_states"]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    levels = [e.value for e in events.Scalars("Metrics/terrain_level")]
    assert levels and all(0.0 <= level <= 9.0 for level in levels)

"""The memory check of ``task.num_envs`` (training/env_builder.py): worked examples, and the per-env cost the
PyBullet tasks declare measured against a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from omegaconf import OmegaConf

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.training.env_builder import available_memory, check_memory, rollout_bytes_per_env
from robosafe_tasks.base import LocomotionEnv

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


def config(num_envs: int, steps: int = 24) -> TrainConfig:
    node = OmegaConf.structured(TrainConfig)
    node.task.name, node.task.env_id, node.run_dir = "ant", "RoboSafe/Ant-v0", "unused"
    node.task.num_envs, node.runner.num_steps_per_env = num_envs, steps
    return OmegaConf.to_object(node)


@pytest.fixture(scope="module")
def ant() -> Iterator[gym.Env]:
    env = gym.make("RoboSafe/Ant-v0")
    yield env
    env.close()


def test_rollout_storage_per_env_worked_example() -> None:
    # Ant: 28 observations, 8 actions, 24 steps: 2 copies x 4 bytes x 24 x (28 + 3 x 8 + 6) = 11,136 bytes.
    assert rollout_bytes_per_env(28, 8, 24) == 11_136


def test_too_many_envs_for_the_memory_name_the_key_and_what_fits(ant: gym.Env) -> None:
    # Per Ant env: 32 MiB declared + 11,136 bytes of rollout = 33,565,568 bytes. With 1 GiB available, 90% of it
    # (966,367,641 bytes) holds 28 envs; 100 need 3,356,556,800 bytes = 3.1 GiB.
    check_memory(config(28), ant, available=GIB)
    with pytest.raises(ConfigError) as caught:
        check_memory(config(100), ant, available=GIB)
    assert str(caught.value) == (
        "invalid config value task.num_envs=100: 100 envs of RoboSafe/Ant-v0 need about 3.1 GiB of memory "
        "(32.0 MiB per env), but 1.0 GiB is available here; at most 28 envs fit"
    )


def test_every_local_rank_builds_its_own_envs(ant: gym.Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun: 4 ranks on this machine, 7 envs each = 28 envs
    check_memory(config(7), ant, available=GIB)
    with pytest.raises(ConfigError, match=r"\(32\.0 MiB per env x 4 ranks on this machine\).*at most 7 envs fit"):
        check_memory(config(8), ant, available=GIB)


def test_an_env_without_a_declared_cost_counts_its_rollout_storage() -> None:
    env = gym.make("Pendulum-v1")  # 3 observations, 1 action: 2 x 4 x 24 x (3 + 3 + 6) = 2,304 bytes per env
    check_memory(config(1000), env, available=3 * 1000 * 2304)
    with pytest.raises(ConfigError, match=r"\(2\.2 KiB per env\)"):
        check_memory(config(10**9), env, available=GIB)


def test_available_memory_is_read_here() -> None:
    available = available_memory()
    assert available is not None and 0 < available < 2**60


def test_the_declared_cost_per_env_matches_a_measurement() -> None:
    # A fresh process (no memory freed earlier for the allocator to reuse) builds 8 Ant envs, resets and steps each,
    # and reports its resident-memory growth per env. Measured here: 29.3 MiB, of which 28.0 is the DIRECT client.
    script = """
import json, gymnasium as gym, numpy as np, robosafe_tasks
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
first = gym.make("RoboSafe/Ant-v0"); first.reset(seed=0); first.step(np.zeros(8, np.float32))
before = rss(); envs = []
for i in range(8):
    env = gym.make("RoboSafe/Ant-v0"); env.reset(seed=i)
    for _ in range(20):
        env.step(env.action_space.sample())
    envs.append(env)
print(json.dumps((rss() - before) / 8))
"""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the resident memory")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0.75 * LocomotionEnv.memory_per_env <= measured <= LocomotionEnv.memory_per_env

"""What the gradient guard costs per whole training iteration (rollout and update), guard on vs off, one process.

Two runners are built from the same config and seed, one with ``safety.grad_guard.mode=skip`` (SafePPO) and one
with ``off`` (rsl-rl's PPO), each over its own envs. Blocks of ``iterations`` iterations alternate between them
(A B B A ...), so drift on a shared machine falls on both; the medians of the seconds per iteration and their ratio
are reported, by wall clock and by process CPU time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

import torch

from robo_safe_rl.config.grad_guard import GradGuardCfg
from robo_safe_rl.config.schema import RunnerConfig, SafetyConfig, TaskConfig, TrainConfig
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.env_builder import build_vec_env
from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg
from robo_safe_rl.training.runner import SafeRunner


def _runner(mode: str, env_id: str, num_envs: int, steps_per_env: int, run_dir: str) -> SafeRunner:
    cfg = TrainConfig(
        task=TaskConfig(name="bench", env_id=env_id, num_envs=num_envs),
        runner=RunnerConfig(num_steps_per_env=steps_per_env, experiment_name="bench"),
        safety=SafetyConfig(grad_guard=GradGuardCfg(mode=mode)),
        run_dir=run_dir,
    )
    torch.manual_seed(cfg.seed)
    env = build_vec_env(cfg, incidents_dir=RunDir(run_dir).incidents_dir())
    return SafeRunner(env, build_rsl_rl_cfg(cfg, run_dir), None, "cpu", cfg.safety.recovery)


def bench_guard_iterations(
    env_id: str, num_envs: int = 16, steps_per_env: int = 24, iterations: int = 5, repeats: int = 5
) -> dict[str, Any]:
    """Seconds per training iteration with the guard on (``skip``) and off, and their ratio (on / off)."""
    with tempfile.TemporaryDirectory(prefix="bench_iteration_") as tmp:
        runners = {mode: _runner(mode, env_id, num_envs, steps_per_env, f"{tmp}/{mode}") for mode in ("skip", "off")}
        wall: dict[str, list[float]] = {mode: [] for mode in runners}
        cpu: dict[str, list[float]] = {mode: [] for mode in runners}
        try:
            for runner in runners.values():
                runner.learn(1)  # warm-up: first allocations, first snapshot
            order = list(runners)
            for r in range(repeats):
                for mode in order if r % 2 == 0 else order[::-1]:
                    w, c = time.perf_counter(), time.process_time()
                    runners[mode].learn(iterations)
                    wall[mode].append((time.perf_counter() - w) / iterations)
                    cpu[mode].append((time.process_time() - c) / iterations)
        finally:
            for runner in runners.values():
                runner.env.close()
    med = {f"wall_{mode}": statistics.median(wall[mode]) for mode in runners}
    med.update({f"cpu_{mode}": statistics.median(cpu[mode]) for mode in runners})
    return {
        "env_id": env_id,
        "num_envs": num_envs,
        "steps_per_env": steps_per_env,
        "iterations_per_block": iterations,
        "repeats": repeats,
        "seconds_per_iteration": med,
        "ratio_wall": med["wall_skip"] / med["wall_off"],
        "ratio_cpu": med["cpu_skip"] / med["cpu_off"],
    }

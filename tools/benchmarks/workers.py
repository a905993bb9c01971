"""Env workers against the envs in one process, gymnasium's ``AsyncVectorEnv``, and the limits of free stepping.

Env-steps/s of ``num_envs`` Ant envs, each built as training builds it (SafeStep around the task), driven with the
same pre-drawn actions in [-1, 1]:

- ``in_process``: the vector adapter over the envs in this process (``task.num_workers=0``);
- ``workers_<W>``: the adapter over :class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch` with W workers, placed as
  training places them (worker k pinned to the k-th core when the W workers take every core, ``task.pin_workers``);
  ``workers_2_unpinned``: 2 workers left to the scheduler (``task.pin_workers=false``);
- ``trainer_block_<W>``: W workers beside a block the trainer steps itself (``task.trainer_block``), W + 1 blocks in
  all, placed as training places them (pinned when the W + 1 processes take every core);
- ``..._blocking``: the same as ``workers_2`` and ``trainer_block_<W>`` with every process blocking at once
  (``WorkerEnvBatch(spin=False)``) instead of polling where it has a core to itself: what the polling gives;
- ``async_vector_env``: ``gymnasium.vector.AsyncVectorEnv`` over the same envs (one process per env, its defaults);
- ``free_env_<P>``: P processes stepping ``num_envs / P`` of the same envs each, round-robin, with no
  synchronisation at all: the ceiling of any design that steps these envs in P processes;
- ``free_raw_<P>``: the same with the task's ``raw_step`` (apply the torques, step the simulation: no observation,
  no reward, no SafeStep): PyBullet's own limit in P processes.

The cases run in interleaved rounds (medians reported), each case built once and warmed up first. Then whole
training iterations (rollout + PPO update) of the Ant's tuned values, as ``task=ant`` trains, with the envs in the
trainer and in workers, in alternating blocks, and with the workers at 1 and 2 torch threads in the trainer
(``torch_threads``).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.timing import interleaved_rates
from robo_safe_rl.bridge.env_batch import LocalEnvBatch
from robo_safe_rl.bridge.env_factory import TaskEnvFactory
from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.bridge.worker_pool import pin_one_per_core, rank_cpus
from robo_safe_rl.bridge.workers import WorkerEnvBatch
from robo_safe_rl.config.safe_step import SafeStepConfig


def _factory(env_id: str) -> TaskEnvFactory:
    return TaskEnvFactory(gym.spec(env_id), step=SafeStepConfig())


def _free_runner(conn: Connection, factory: TaskEnvFactory, indices: list[int], raw: bool, actions: np.ndarray) -> None:
    """Body of a free-stepping process: build its envs, then per ``go`` step them ``len(actions)`` rounds."""
    envs = [factory(i) for i in indices]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    steppers = [env.unwrapped.raw_step if raw else env.step for env in envs]
    conn.send("ready")
    while conn.recv() == "go":
        for action in actions:
            for env, step in zip(envs, steppers, strict=True):
                if raw:
                    step(action)
                else:
                    _, _, terminated, truncated, _ = step(action)
                    if terminated or truncated:
                        env.reset()
        conn.send("done")
    for env in envs:
        env.close()


class FreeStepping:
    """P processes stepping their share of the envs without any synchronisation between steps."""

    def __init__(self, factory: TaskEnvFactory, num_envs: int, processes: int, raw: bool, actions: np.ndarray) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        self.env_steps = num_envs * len(actions)
        for p in range(processes):
            ours, theirs = ctx.Pipe()
            indices = list(range(p, num_envs, processes))
            proc = ctx.Process(target=_free_runner, args=(theirs, factory, indices, raw, actions), daemon=True)
            proc.start()
            self.conns.append(ours)
            self.procs.append(proc)
        for conn in self.conns:
            assert conn.recv() == "ready"

    def __call__(self) -> int:
        for conn in self.conns:
            conn.send("go")
        for conn in self.conns:
            conn.recv()
        return self.env_steps

    def close(self) -> None:
        for conn in self.conns:
            conn.send("stop")
        for proc in self.procs:
            proc.join(30)


def bench_env_rates(
    env_id: str,
    num_envs: int = 16,
    steps: int = 200,
    repeats: int = 5,
    workers: tuple[int, ...] = (1, 2),
    trainer_block: int | None = None,
) -> dict[str, Any]:
    """Env-steps/s of each case of the module docstring (medians of ``repeats`` interleaved rounds).

    Args:
        env_id: A registered task id whose unwrapped env has ``raw_step(action)``.
        num_envs: Envs in every case.
        steps: Vector steps per measurement (``steps * num_envs`` env steps).
        repeats: Interleaved rounds.
        workers: Worker counts to measure; the free-stepping cases use the same process counts.
        trainer_block: Workers beside the trainer's own block to measure (``None``: none).
    """
    factory = _factory(env_id)
    num_actions = factory.make_task().action_space.shape[0]
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.0, 1.0, size=(steps, num_envs, num_actions)).astype(np.float32)
    vec_actions = torch.from_numpy(actions)
    cases: dict[str, Any] = {}
    closers = []

    def adapter_case(vec: GymVecEnv) -> Any:
        closers.append(vec.close)

        def run() -> int:
            for a in vec_actions:
                vec.step(a)
            return steps * num_envs

        return run

    try:
        cases["in_process"] = adapter_case(GymVecEnv(LocalEnvBatch([factory(i) for i in range(num_envs)]), seed=0))
        cpus = rank_cpus()[0]

        def workers_case(w: int, block: bool = False, spin: bool = True) -> Any:
            """W workers (beside the trainer's block), placed as training places them."""
            pin = pin_one_per_core(True, w, len(cpus), block)
            batch = WorkerEnvBatch(
                factory, list(range(num_envs)), w, cpus=cpus if pin else None, pin=pin, trainer_block=block, spin=spin
            )
            return adapter_case(GymVecEnv(batch, seed=0))

        for w in workers:
            cases[f"workers_{w}"] = workers_case(w)
        if 2 in workers:
            cases["workers_2_blocking"] = workers_case(2, spin=False)
            cases["workers_2_unpinned"] = adapter_case(
                GymVecEnv(WorkerEnvBatch(factory, list(range(num_envs)), 2), seed=0)
            )
        if trainer_block is not None:
            cases[f"trainer_block_{trainer_block}"] = workers_case(trainer_block, block=True)
            cases[f"trainer_block_{trainer_block}_blocking"] = workers_case(trainer_block, block=True, spin=False)
        async_env = gym.vector.AsyncVectorEnv([functools.partial(factory, i) for i in range(num_envs)], context="spawn")
        closers.append(async_env.close)
        async_env.reset(seed=0)

        def async_case() -> int:
            for a in actions:
                async_env.step(a)
            return steps * num_envs

        cases["async_vector_env"] = async_case
        for p in workers:
            for raw in (False, True):
                free = FreeStepping(factory, num_envs, p, raw, actions[:, 0])
                closers.append(free.close)
                cases[f"free_{'raw' if raw else 'env'}_{p}"] = free
        for case in cases.values():  # warm-up: first steps, allocations, caches
            case()
        rates = interleaved_rates(cases, repeats)
    finally:
        for close in reversed(closers):
            close()
    base = rates["in_process"]
    return {
        "env_id": env_id,
        "num_envs": num_envs,
        "steps": steps,
        "repeats": repeats,
        "workers": list(workers),
        "rates": rates,
        "vs_in_process": {name: rate / base for name, rate in rates.items()},
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def bench_iterations(
    task: str = "ant", iterations: int = 3, repeats: int = 5, workers: int = 2, overrides: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Seconds per training iteration of ``task`` with its tuned values (``configs/agent/<task>.yaml``, composed as
    ``tools/train.py task=<task>`` composes them, with ``overrides``): envs in the trainer (1 torch thread), in
    ``workers`` workers with 1 and with 2 torch threads, and in ``workers - 1`` workers beside the trainer's own block
    (1 torch thread); alternating blocks of ``iterations`` iterations, medians of ``repeats``."""
    from robo_safe_rl.apps.train import seed_everything, to_train_config
    from robo_safe_rl.config.compose import compose
    from robo_safe_rl.training.env_builder import build_vec_env
    from robo_safe_rl.training.rsl_cfg import build_rsl_rl_cfg
    from robo_safe_rl.training.runner import SafeRunner

    variants = {
        "in_process": (0, 1, False),
        f"workers_{workers}": (workers, 1, False),
        f"workers_{workers}_2_threads": (workers, 2, False),
        f"trainer_block_{workers - 1}": (workers - 1, 1, True),
    }
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="bench_workers_") as tmp:
        runners = {}
        for name, (w, _, block) in variants.items():
            args = [f"task={task}", f"task.num_workers={w}", f"task.trainer_block={block}", f"run_dir={tmp}/{name}"]
            args += overrides
            cfg = to_train_config(compose(args))
            seed_everything(cfg.seed)
            env = build_vec_env(cfg, incidents_dir=None)
            runners[name] = SafeRunner(env, build_rsl_rl_cfg(cfg, cfg.run_dir), None, "cpu", cfg.safety.recovery)
        wall: dict[str, list[float]] = {name: [] for name in variants}
        try:
            for name, runner in runners.items():
                torch.set_num_threads(variants[name][1])
                runner.learn(1)  # warm-up
            order = list(variants)
            for r in range(repeats):
                for name in order if r % 2 == 0 else order[::-1]:
                    torch.set_num_threads(variants[name][1])
                    start = time.perf_counter()
                    runners[name].learn(iterations)
                    wall[name].append((time.perf_counter() - start) / iterations)
        finally:
            torch.set_num_threads(threads)
            for runner in runners.values():
                runner.env.close()
    seconds = {name: statistics.median(values) for name, values in wall.items()}
    return {
        "task": task,
        "num_envs": cfg.task.num_envs,
        "steps_per_env": cfg.runner.num_steps_per_env,
        "iterations_per_block": iterations,
        "repeats": repeats,
        "seconds_per_iteration": seconds,
        "speedup": {name: seconds["in_process"] / s for name, s in seconds.items()},
    }

"""Env workers: the same numbers as in one process, and crashes, hangs and bugs in a worker handled as promised.

Real worker processes, real PyBullet, real signals. Timeouts are seconds, not milliseconds: the test machine is
shared and slow at times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from worker_helpers import PointMass, alive, spec

from robo_safe_rl.bridge.env_factory import TaskEnvFactory
from robo_safe_rl.bridge.incidents import load_incident_arrays, read_incidents
from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.bridge.worker_loop import Caps
from robo_safe_rl.bridge.worker_pool import (
    WorkerTraceback,
    current_cpu,
    pin_one_per_core,
    rank_cpus,
    resolve_num_workers,
    split_rows,
)
from robo_safe_rl.bridge.workers import SPIN_S, WorkerEnvBatch
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig
from robo_safe_rl.config.schema import SafetyConfig, TaskConfig, TrainConfig
from robo_safe_rl.errors import ConfigError, WorkerCrashError
from robo_safe_rl.training.env_builder import build_vec_env

REPO = Path(__file__).resolve().parents[2]
PENALTY = SafeStepConfig().penalty
#: Every env-side injector at drill rates: SafeStep ends episodes, rebuilds worlds and records incidents.
DRILL = EnvFaultConfig(
    action_nonfinite=0.02, obs_nonfinite=0.01, reward_nonfinite=0.01, physics_error=0.01, state_blowup=0.01, seed=5
)


def ant_config(
    run_dir: Path,
    env_id: str,
    workers: int,
    num_envs: int = 5,
    faults: EnvFaultConfig | None = None,
    trainer_block: bool = False,
):
    task = TaskConfig(name="ant", env_id=env_id, num_envs=num_envs, num_workers=workers, max_episode_steps=40)
    task.trainer_block = trainer_block
    cfg = TrainConfig(
        task=task,
        safety=SafetyConfig(step=SafeStepConfig()),
        run_dir=str(run_dir),
        seed=11,
    )
    if faults is not None:
        cfg.faults.env = faults
    return cfg


def rollout(vec: GymVecEnv, steps: int) -> dict[str, torch.Tensor]:
    """Seeded random actions, partly outside the bounds; every output the runner sees, stacked."""
    gen = torch.Generator().manual_seed(3)
    out: dict[str, list[torch.Tensor]] = {"obs": [vec.get_observations()["policy"].clone()]}
    for key in ("rewards", "dones", "time_outs", "returns", "lengths"):
        out[key] = []
    for t in range(steps):
        if t % 100 == 0:
            vec.set_iteration(t // 100)
        obs, rewards, dones, extras = vec.step(1.5 * torch.randn(vec.num_envs, vec.num_actions, generator=gen))
        out["obs"].append(obs["policy"].clone())
        out["rewards"].append(rewards)
        out["dones"].append(dones)
        out["time_outs"].append(extras["time_outs"])
        out["returns"].append(extras["log"].get("Episode/return", torch.zeros(0)))
        out["lengths"].append(extras["log"].get("Episode/length", torch.zeros(0)))
    return {
        key: torch.cat(values) if key in ("returns", "lengths") else torch.stack(values) for key, values in out.items()
    }


def all_incidents(run_dir: Path) -> list[tuple[dict, dict[str, np.ndarray]]]:
    """Every record of every incidents folder of the run, with its arrays, in step then env order."""
    found = []
    for folder in sorted(run_dir.glob("incidents*")):
        if (folder / "incidents.jsonl").exists():
            found += [(r, load_incident_arrays(folder, r)) for r in read_incidents(folder)]
    return sorted(found, key=lambda item: (item[0]["global_step"], item[0]["env_index"], item[0]["kind"]))


def test_same_trajectories_and_records_whatever_the_worker_count(
    tmp_path: Path, ant_env_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    results = {}
    # "1+": one worker beside the trainer's own block (task.trainer_block): envs 0-2 in the trainer, 3-4 in the worker.
    for name, workers, trainer_block in (("0", 0, False), ("1", 1, False), ("2", 2, False), ("1+", 1, True)):
        run_dir = tmp_path / f"w{name}"
        cfg = ant_config(run_dir, ant_env_id, workers, faults=DRILL, trainer_block=trainer_block)
        vec = build_vec_env(cfg, incidents_dir=run_dir / "incidents")
        try:
            assert type(vec.batch).__name__ == ("LocalEnvBatch" if workers == 0 else "WorkerEnvBatch")
            results[name] = (rollout(vec, 300), vec.safety_counters(), vec.faults_injected())
        finally:
            vec.close()
        results[name] += (all_incidents(run_dir),)
    outputs, counters, injected, incidents = results["0"]
    # The drill fired every kind, episodes ended both ways, and SafeStep recorded them.
    assert set(injected) == {"action_nonfinite", "obs_nonfinite", "reward_nonfinite", "physics_error", "state_blowup"}
    assert min(injected.values()) > 0 and counters["recoveries"] > 0
    assert outputs["time_outs"].any() and (outputs["dones"].bool() & ~outputs["time_outs"]).any()
    assert len(incidents) == counters["nonfinite_actions"] + counters["recoveries"] > 0
    for name in ("1", "2", "1+"):
        other_outputs, other_counters, other_injected, other_incidents = results[name]
        for key, value in outputs.items():
            assert torch.equal(value, other_outputs[key]), (name, key)
        assert other_counters == counters and other_injected == injected
        assert len(other_incidents) == len(incidents)
        for (record, arrays), (other, other_arrays) in zip(incidents, other_incidents, strict=True):
            same = {k: v for k, v in record.items() if k not in ("id", "time", "time_iso", "arrays")}
            assert same == {k: v for k, v in other.items() if k not in ("id", "time", "time_iso", "arrays")}
            assert arrays.keys() == other_arrays.keys()
            for key in arrays:
                np.testing.assert_array_equal(arrays[key], other_arrays[key])
    # The workers' warnings reach the trainer's loggers, named after their worker.
    relayed = [r.getMessage() for r in caplog.records if r.name == "robo_safe_rl.bridge.safe_step"]
    assert any(m.startswith("[env worker 1] env 4 (RoboSafe/Ant-v0): ") for m in relayed)
    # With workers, each writes its own part beside the rank's folder, which holds only worker crashes.
    assert sorted(p.name for p in (tmp_path / "w2").glob("incidents*")) == [
        "incidents",
        "incidents_worker0",
        "incidents_worker1",
    ]
    assert not (tmp_path / "w2" / "incidents" / "incidents.jsonl").exists()
    # The trainer's own block records into the rank's folder, beside its worker's part.
    trainer_part = {r["env_index"] for r in read_incidents(tmp_path / "w1+" / "incidents")}
    worker_part = {r["env_index"] for r in read_incidents(tmp_path / "w1+" / "incidents_worker0")}
    assert trainer_part <= {0, 1, 2} and worker_part <= {3, 4} and trainer_part and worker_part


def ant_workers(run_dir: Path, env_id: str, timeout_s: float = 60.0) -> GymVecEnv:
    cfg = ant_config(run_dir, env_id, workers=2, num_envs=4)
    cfg.task.worker_timeout_s = timeout_s
    return build_vec_env(cfg, incidents_dir=run_dir / "incidents")


def test_killed_worker_is_replaced_and_its_transitions_end(run_dir: Path, ant_env_id: str) -> None:
    vec = ant_workers(run_dir, ant_env_id)
    try:
        for _ in range(3):
            vec.step(torch.zeros(4, vec.num_actions))
        cores = sorted(os.sched_getaffinity(0))
        # Worker k on the k-th core (task.pin_workers) when the 2 workers take every core; else left to the scheduler.
        pinned = [{cores[k % len(cores)]} for k in range(2)] if len(cores) <= 2 else [set(cores)] * 2
        assert [os.sched_getaffinity(pid) for pid in vec.batch.pids] == pinned
        victim = vec.batch.pids[1]
        os.kill(victim, signal.SIGKILL)
        actions = torch.full((4, vec.num_actions), 0.25)
        obs, rewards, dones, extras = vec.step(actions)
        # Worker 1 hosted envs 2 and 3: their transitions end as terminated (not time-outs) with the penalty.
        assert dones.tolist() == [0, 0, 1, 1] and extras["time_outs"].tolist() == [False] * 4
        assert rewards[2:].tolist() == [PENALTY, PENALTY]
        assert extras["log"]["Episode/length"].tolist() == [4.0, 4.0]  # their episodes were 4 steps old
        assert torch.isfinite(obs["policy"]).all() and not alive(victim)
        assert vec.batch.pids[1] != victim
        assert [os.sched_getaffinity(pid) for pid in vec.batch.pids] == pinned  # the new worker takes its core
        counters = vec.safety_counters()
        assert counters["worker_crashes"] == 1 and counters["worker_restarts"] == 1
        records = read_incidents(run_dir / "incidents")
        assert [(r["kind"], r["env_index"]) for r in records] == [("worker_crash", 2), ("worker_crash", 3)]
        for record in records:
            assert record["extra"]["signal"] == "SIGKILL" and record["extra"]["pid"] == victim
            assert record["terminated"] and record["penalty"] == PENALTY and record["global_step"] == 3 * 4
            assert record["raw_action"] == [0.25] * vec.num_actions and record["episode_step"] == 4
            assert "was killed by signal 9 (SIGKILL)" in record["reason"]
        # Training goes on: the new worker steps its fresh episodes.
        _, _, dones, _ = vec.step(actions)
        assert dones.tolist() == [0, 0, 0, 0]
    finally:
        vec.close()


def test_stopped_worker_is_found_hung_killed_and_replaced(run_dir: Path, ant_env_id: str) -> None:
    vec = ant_workers(run_dir, ant_env_id, timeout_s=2.0)
    try:
        vec.step(torch.zeros(4, vec.num_actions))
        victim = vec.batch.pids[0]
        os.kill(victim, signal.SIGSTOP)  # alive, holding its pipe, never answering
        start = time.monotonic()
        _, rewards, dones, _ = vec.step(torch.zeros(4, vec.num_actions))
        assert 2.0 <= time.monotonic() - start < 60.0
        assert dones.tolist() == [1, 1, 0, 0] and rewards[:2].tolist() == [PENALTY, PENALTY]
        assert not alive(victim)
        (record, _) = read_incidents(run_dir / "incidents")
        assert record["reason"].startswith(f"env worker 0 (pid {victim}) did not answer within 2 s and was killed")
        assert record["extra"]["hung_s"] == 2.0
    finally:
        vec.close()


def test_a_killed_worker_beside_the_trainers_block_is_replaced(run_dir: Path, ant_env_id: str) -> None:
    cfg = ant_config(run_dir, ant_env_id, workers=1, num_envs=4, trainer_block=True)
    vec = build_vec_env(cfg, incidents_dir=run_dir / "incidents")
    try:
        cores = sorted(os.sched_getaffinity(0))
        # On 2 cores: the worker pinned to the second, the first left to the trainer, and both spin while waiting.
        if len(cores) == 2:
            assert [os.sched_getaffinity(pid) for pid in vec.batch.pids] == [{cores[1]}]
            assert vec.batch.spin_s == SPIN_S
        vec.step(torch.zeros(4, vec.num_actions))
        (victim,) = vec.batch.pids
        os.kill(victim, signal.SIGKILL)
        _, rewards, dones, _ = vec.step(torch.zeros(4, vec.num_actions))
        # The worker hosted envs 2 and 3; the trainer's envs 0 and 1 step on.
        assert dones.tolist() == [0, 0, 1, 1] and rewards[2:].tolist() == [PENALTY, PENALTY]
        assert not alive(victim) and vec.batch.pids != [victim]
        counters = vec.safety_counters()
        assert counters["worker_crashes"] == 1 and counters["worker_restarts"] == 1
        assert [(r["kind"], r["env_index"]) for r in read_incidents(run_dir / "incidents")] == [
            ("worker_crash", 2),
            ("worker_crash", 3),
        ]
        _, _, dones, _ = vec.step(torch.zeros(4, vec.num_actions))
        assert dones.tolist() == [0, 0, 0, 0]
    finally:
        vec.close()


def factory_batch(
    run_dir: Path,
    name: str,
    *,
    timeout_s: float = 60.0,
    max_crashes: int = 3,
    trainer_block: bool = False,
    **kwargs,
) -> GymVecEnv:
    """Two blocks of one env each (two workers, or the trainer and one worker), of a helper env
    (``worker_helpers``), in SafeStep, under the vector adapter."""
    factory = TaskEnvFactory(spec(name, **kwargs), step=SafeStepConfig())
    caps = Caps(run_dir / "incidents", 100, 2**20)
    batch = WorkerEnvBatch(
        factory,
        [0, 1],
        1 if trainer_block else 2,
        caps=caps,
        penalty=PENALTY,
        timeout_s=timeout_s,
        max_crashes=max_crashes,
        trainer_block=trainer_block,
    )
    return GymVecEnv(batch, seed=0)


def test_a_restarted_worker_goes_on_with_the_runs_step_clock(run_dir: Path) -> None:
    # A task's curriculum reads its step clock: a worker started again after 3 steps of the run builds envs whose
    # clock says 3 steps more than the factory's start (a resumed run's 100), not 0.
    factory = TaskEnvFactory(spec("ClockedEnv"), step=SafeStepConfig(), start_step=100)
    vec = GymVecEnv(WorkerEnvBatch(factory, [0, 1], 2, penalty=PENALTY), seed=0)
    try:
        obs = vec.get_observations()["policy"]
        assert obs[:, 0].tolist() == [100.0, 100.0]
        for _ in range(3):
            vec.step(torch.zeros(2, 2))
        os.kill(vec.batch.pids[1], signal.SIGKILL)
        obs, _, dones, _ = vec.step(torch.zeros(2, 2))
        # Env 1's worker died in the 4th step: its new env starts a fresh episode with the clock at 104, as env 0's.
        assert dones.tolist() == [0, 1] and obs["policy"][:, 0].tolist() == [104.0, 104.0]
        obs, _, _, _ = vec.step(torch.zeros(2, 2))
        assert obs["policy"][:, 0].tolist() == [105.0, 105.0]
    finally:
        vec.close()


def test_metrics_cross_the_workers_and_a_crashed_step_reports_none(run_dir: Path) -> None:
    # MeteredEnv reports its step number in the episode, here from worker processes. After 3 steps env 1's worker is
    # killed; its episode ends in the 4th step, which it never took: the mean is that of steps 1-3 (2.0; a crashed
    # step counted as 0 would give 1.5), over 4 steps of length. Env 0's episode goes on to step 50: mean 25.5.
    factory = TaskEnvFactory(spec("MeteredEnv"), step=SafeStepConfig())
    vec = GymVecEnv(WorkerEnvBatch(factory, [0, 1], 2, penalty=PENALTY), seed=0)
    try:
        for _ in range(3):
            vec.step(torch.zeros(2, 2))
        os.kill(vec.batch.pids[1], signal.SIGKILL)
        _, _, dones, extras = vec.step(torch.zeros(2, 2))
        assert dones.tolist() == [0, 1]
        assert extras["log"]["Episode/length"].tolist() == [4.0]
        assert extras["log"]["Metrics/episode_step"].tolist() == [2.0]
        for _ in range(46):
            _, _, dones, extras = vec.step(torch.zeros(2, 2))
        assert dones.tolist() == [1, 0] and extras["log"]["Metrics/episode_step"].tolist() == [25.5]
    finally:
        vec.close()


def test_a_fault_that_sleeps_is_a_hang(run_dir: Path) -> None:
    vec = factory_batch(run_dir, "HangingEnv", timeout_s=2.0, fault_at=2)
    try:
        vec.step(torch.zeros(2, 2))
        _, _, dones, _ = vec.step(torch.zeros(2, 2))  # both envs sleep in their 2nd step
        assert dones.tolist() == [1, 1] and vec.safety_counters()["worker_crashes"] == 2
        assert [r["kind"] for r in read_incidents(run_dir / "incidents")] == ["worker_crash"] * 2
    finally:
        vec.close()


def test_crashes_in_a_row_stop_with_the_signal_named(run_dir: Path) -> None:
    # Every env aborts in its first step: a worker dies, comes back, dies again in the next step.
    vec = factory_batch(run_dir, "AbortingEnv", max_crashes=2, fault_at=1)
    try:
        vec.step(torch.zeros(2, 2))
        assert vec.safety_counters()["worker_crashes"] == 2  # both workers, once each
        pids = vec.batch.pids
        with pytest.raises(WorkerCrashError, match=r"killed by signal 6 \(SIGABRT\) during a step: 2 crashes in a row"):
            vec.step(torch.zeros(2, 2))
    finally:
        vec.close()
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


def test_an_exception_in_a_worker_is_raised_in_the_trainer(run_dir: Path) -> None:
    vec = factory_batch(run_dir, "BuggyEnv", fault_at=2)
    pids = vec.batch.pids
    try:
        vec.step(torch.zeros(2, 2))
        with pytest.raises(KeyError, match="a bug in the task") as caught:
            vec.step(torch.zeros(2, 2))
        assert isinstance(caught.value.__cause__, WorkerTraceback)
        assert "in fault" in str(caught.value.__cause__)  # the worker's traceback, down to the task's line
        assert vec.safety_counters()["worker_crashes"] == 0  # a bug is not a crash: nothing restarted
    finally:
        vec.close()
    assert not any(alive(pid) for pid in pids)
    vec.close()  # twice is fine


def test_an_exception_in_the_trainers_block_is_raised_once_the_worker_answered(run_dir: Path) -> None:
    vec = factory_batch(run_dir, "BuggyEnv", fault_at=2, trainer_block=True)
    (pid,) = vec.batch.pids
    try:
        vec.step(torch.zeros(2, 2))
        with pytest.raises(KeyError, match="a bug in the task") as caught:
            vec.step(torch.zeros(2, 2))
        assert not isinstance(caught.value.__cause__, WorkerTraceback)  # the trainer's env's own error
        # The worker's answer to that step (its own KeyError) was read then: the next step reads the next answer.
        _, _, dones, _ = vec.step(torch.zeros(2, 2))
        assert dones.tolist() == [0, 0] and vec.safety_counters()["worker_crashes"] == 0
    finally:
        vec.close()
    assert not alive(pid)


def test_worker_counts() -> None:
    assert resolve_num_workers(None, num_envs=16, cores=2) == 2
    assert resolve_num_workers(None, num_envs=16, cores=64) == 4  # 4 envs per worker at least
    assert resolve_num_workers(None, num_envs=1024, cores=64) == 64
    assert resolve_num_workers(None, num_envs=16, cores=1) == 0  # one core: the envs stay in the trainer
    assert resolve_num_workers(None, num_envs=4, cores=8) == 0  # one worker would only add a hand-over
    assert resolve_num_workers(0, num_envs=16, cores=8) == 0
    assert resolve_num_workers(4, num_envs=3, cores=1) == 3
    # The trainer's own block takes one block and one core from the workers.
    assert resolve_num_workers(None, num_envs=16, cores=2, trainer_block=True) == 1
    assert resolve_num_workers(None, num_envs=16, cores=64, trainer_block=True) == 3
    assert resolve_num_workers(None, num_envs=4, cores=8, trainer_block=True) == 0
    assert resolve_num_workers(4, num_envs=3, cores=1, trainer_block=True) == 2
    assert split_rows(5, 2) == [range(0, 3), range(3, 5)]
    assert pin_one_per_core(True, workers=2, cores=2) and pin_one_per_core(True, workers=3, cores=2)
    assert not pin_one_per_core(True, workers=2, cores=16)  # other runs' workers would land on the same cores
    assert not pin_one_per_core(False, workers=2, cores=2)
    # The trainer's own block counts as one of the processes that take the cores.
    assert pin_one_per_core(True, workers=1, cores=2, trainer_block=True) and not pin_one_per_core(True, 1, 2)
    # Worked example: 1000 records over a trainer part and 2 worker parts: 334 + 333 + 333.
    caps = Caps(Path("incidents"), 1000, 3 * 2**20)
    assert [caps.part(p, 3)[0] for p in range(3)] == [334, 333, 333]
    assert caps.worker_part(1, 2) == type(caps.worker_part(1, 2))("incidents_worker1", 333, 2**20)


def test_each_torchrun_rank_gets_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(8)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_cpus() == ([4, 5, 6, 7], True)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_RANK", "9")
    assert rank_cpus() == ([1], True)  # more ranks than cores: they share
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert rank_cpus() == (list(range(8)), False)


def test_a_step_wakes_the_worker_on_the_trainers_core_last() -> None:
    cores = sorted(os.sched_getaffinity(0))
    gym.register("WorkerTest/Point-v0", entry_point="worker_helpers:PointMass", max_episode_steps=50)
    batch = WorkerEnvBatch(TaskEnvFactory(gym.spec("WorkerTest/Point-v0")), [0, 1, 2], 3, cpus=cores, pin=True)
    try:
        batch.reset(seed=0)
        for here in cores:
            os.sched_setaffinity(0, {here})
            assert current_cpu() == here
            # Worker k runs on cores[k % len(cores)]: those on this core go last, the others keep their order.
            on_here = [k for k in range(3) if cores[k % len(cores)] == here]
            assert batch.wake_order() == [k for k in range(3) if k not in on_here] + on_here
            batch.step(np.zeros((3, 2), np.float32))
    finally:
        os.sched_setaffinity(0, cores)
        batch.close()
        del gym.registry["WorkerTest/Point-v0"]


def test_workers_are_pinned_only_when_they_take_every_core() -> None:
    gym.register("WorkerTest/Point-v0", entry_point="worker_helpers:PointMass", max_episode_steps=50)
    cores = sorted(os.sched_getaffinity(0))
    try:
        for workers, pin, pinned in ((len(cores), False, False), (len(cores), True, True), (1, True, len(cores) == 1)):
            task = TaskConfig(name="p", env_id="WorkerTest/Point-v0", num_envs=len(cores) + 1, num_workers=workers)
            cfg = TrainConfig(task=task)
            cfg.task.pin_workers = pin
            vec = build_vec_env(cfg, incidents_dir=None)
            try:
                expected = [{cores[k]} if pinned else set(cores) for k in range(workers)]
                assert [os.sched_getaffinity(pid) for pid in vec.batch.pids] == expected, (workers, pin)
            finally:
                vec.close()
    finally:
        del gym.registry["WorkerTest/Point-v0"]


def test_only_a_process_with_a_core_to_itself_polls_instead_of_blocking() -> None:
    gym.register("WorkerTest/Point-v0", entry_point="worker_helpers:PointMass", max_episode_steps=50)
    factory = TaskEnvFactory(gym.spec("WorkerTest/Point-v0"))
    cores = [0, 1]  # as on 2 cores; the workers are pinned, not started on cores the test machine lacks
    if not set(cores) <= os.sched_getaffinity(0):
        pytest.skip("needs cores 0 and 1")
    cases = {
        # 2 pinned workers: worker 0 shares the trainer's core and blocks, worker 1 polls; the trainer blocks.
        (2, False, True, True): ([0.0, SPIN_S], 0.0),
        # Unpinned, no process knows it has a core to itself.
        (2, False, False, True): ([0.0, 0.0], 0.0),
        # 3 workers on 2 cores: two share a core.
        (3, False, True, True): ([0.0, 0.0, 0.0], 0.0),
        # The trainer's block beside 1 worker: each alone on its core, both poll.
        (1, True, True, True): ([SPIN_S], SPIN_S),
        # Asked not to.
        (1, True, True, False): ([0.0], 0.0),
        (2, False, True, False): ([0.0, 0.0], 0.0),
    }
    try:
        for (workers, block, pin, spin), (worker_spin, trainer_spin) in cases.items():
            batch = WorkerEnvBatch(factory, [0, 1, 2, 3], workers, cpus=cores, pin=pin, trainer_block=block, spin=spin)
            try:
                assert (batch.worker_spin_s, batch.spin_s) == (worker_spin, trainer_spin), (workers, block, pin, spin)
                batch.reset(seed=0)
                batch.step(np.zeros((4, 2), np.float32))
            finally:
                batch.close()
    finally:
        del gym.registry["WorkerTest/Point-v0"]


def test_a_task_defined_in_the_main_script_is_refused_with_workers(tmp_path: Path) -> None:
    # As a script that defines its env class and registers the class itself would: workers cannot import it.
    script_env = type("ScriptEnv", (PointMass,), {"__module__": "__main__"})
    gym.register("WorkerTest/Script-v0", entry_point=script_env, max_episode_steps=50)
    try:
        cfg = TrainConfig(
            task=TaskConfig(name="s", env_id="WorkerTest/Script-v0", num_workers=2), run_dir=str(tmp_path)
        )
        with pytest.raises(ConfigError, match=r"task.num_workers=2: 2 env workers cannot build WorkerTest/Script-v0"):
            build_vec_env(cfg, incidents_dir=None)
        cfg.task.num_workers = 0
        build_vec_env(cfg, incidents_dir=None).close()
    finally:
        del gym.registry["WorkerTest/Script-v0"]


def test_arguments_a_worker_cannot_unpickle_are_an_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # The class pickles here, where the main script defines it, and not in a worker, which does not run that script.
    script_env = type("ScriptEnv", (PointMass,), {"__module__": "__main__", "__qualname__": "ScriptEnv"})
    monkeypatch.setattr(sys.modules["__main__"], "ScriptEnv", script_env, raising=False)
    factory = TaskEnvFactory(gym.envs.registration.EnvSpec("WorkerTest/Script-v0", entry_point=script_env))
    with pytest.raises(AttributeError, match="ScriptEnv") as caught:
        WorkerEnvBatch(factory, [0, 1], 2, max_crashes=1)
    assert isinstance(caught.value.__cause__, WorkerTraceback)


def test_a_worker_imports_neither_torch_nor_rsl_rl() -> None:
    # What a worker imports before its envs exist: torch alone would cost each worker (and each restart) about 1 s
    # and 190 MiB, measured.
    code = (
        "import sys; import robo_safe_rl.bridge.worker_loop, robo_safe_rl.bridge.env_factory, robosafe_tasks.ant; "
        "print(sorted(m for m in ('torch', 'rsl_rl', 'hydra', 'tensordict') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

"""Typed schemas of the training configuration, registered with Hydra's ConfigStore.

The YAML files in ``configs/`` only choose and set values; every key and its default is defined and documented here
and in the modules it imports. The root mirrors rsl-rl's train dict (``runner``, ``algorithm``, ``actor``, ``critic``:
:mod:`robo_safe_rl.config.agent`) beside the project's own nodes (``task``, ``safety``, ``faults``). A key the schema
does not know fails before anything is built, whatever its Hydra prefix (:mod:`robo_safe_rl.config.keys`); a value out
of range fails in ``__post_init__`` when the config is converted with ``OmegaConf.to_object``, naming the full key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from robo_safe_rl.config.agent import ActorConfig, AlgorithmConfig, CriticConfig, RunnerConfig
from robo_safe_rl.config.checks import float_in, int_in, require
from robo_safe_rl.config.display import DisplayMode
from robo_safe_rl.config.grad_guard import GradFaultCfg, GradGuardCfg
from robo_safe_rl.config.recovery import PolicyFaultConfig, RecoveryConfig
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig
from robo_safe_rl.config.video import VideoConfig


@dataclass
class TaskConfig:
    """Which environment to train on and how many copies of it."""

    name: str = MISSING
    """Short task name, used for the experiment folder (``ant``)."""
    env_id: str = MISSING
    """Gymnasium id of the task (``RoboSafe/Ant-v0``); ``tools/train.py`` imports ``robosafe_tasks``, which
    registers it."""
    num_envs: int = 16
    """Environments stepped in lock-step. Each is one PyBullet client."""
    num_workers: int | None = None
    """Worker processes that host the envs and step them in parallel, a block of envs each; ``0`` steps every env in
    the training process. ``None`` (the default): one per CPU core available to this rank (its share of
    ``os.sched_getaffinity`` under torchrun), with 4 envs each at least, and ``0`` when that makes fewer than 2
    (16 envs on 2 cores: 2 workers; 4 envs: none). In [0, 1024]."""
    worker_timeout_s: float = 60.0
    """Seconds a worker may take to answer a step before it is treated as dead and killed (starting a worker, which
    builds its envs, may take 120 s or this, whichever is longer). In [1, 86400]."""
    pin_workers: bool = True
    """Pin worker ``k`` to the ``k``-th core of the rank's (round-robin when there are more workers than cores), when
    the workers take every core of the rank (one per core at least, the default count); with fewer workers than cores
    they are left to the scheduler, so that several runs on one machine do not all pin theirs to its first cores.
    Linux only (elsewhere the workers are never pinned). Measured on 2 cores (BENCHMARKS.md, env workers; medians of
    two sets of 3 runs): 2 pinned workers stepped the Ant at 1.69-1.73x the envs in the trainer, 2 the scheduler
    places at 1.59-1.68x (it often wakes a worker on the trainer's own core, and the two take turns). ``false`` lets
    the scheduler place them within the rank's cores (a machine shared with other jobs that are pinned themselves)."""
    trainer_block: bool = False
    """The training process steps one block of envs itself while the workers step theirs, and takes one block and
    one core from the workers' automatic count (2 cores: 1 worker). Pinned, each process then has a core to itself,
    and the trainer and the workers poll for each other instead of blocking. Measured on a 2-core AMD EPYC
    (BENCHMARKS.md, env workers; three runs): the Ant's 16 envs at 1.65-1.67x the envs in the trainer, against
    1.56-1.71x for 2 workers: steadier, not faster there. The price: the trainer's envs are not isolated, so a
    physics engine that aborts its process (PyBullet on some bad render requests) ends the run there, as with
    ``num_workers=0``; the workers' envs keep surviving crashes. Ignored without workers."""
    max_worker_crashes: int = 3
    """Crashes in a row of one worker (no step completed in between) that stop the run with exit 1; a single crash
    is survived: the worker is started again and its envs' transitions end as terminated. In [1, 1000]."""
    max_episode_steps: int | None = None
    """Time limit in env steps; ``None`` keeps the task's registered limit (1000 for Ant)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gymnasium.make``."""

    def __post_init__(self) -> None:
        int_in("task.num_envs", self.num_envs, 1)
        if self.num_workers is not None:
            int_in("task.num_workers", self.num_workers, 0, 1024)
        float_in("task.worker_timeout_s", self.worker_timeout_s, 1.0, 86400.0)
        int_in("task.max_worker_crashes", self.max_worker_crashes, 1, 1000)
        if self.max_episode_steps is not None:
            int_in("task.max_episode_steps", self.max_episode_steps, 1)


@dataclass
class SafetyConfig:
    """Where each fault is caught (see DESIGN.md's safety model)."""

    grad_guard: GradGuardCfg = field(default_factory=GradGuardCfg)
    step: SafeStepConfig = field(default_factory=SafeStepConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)


@dataclass
class FaultsConfig:
    """Fire-drill fault injection, off by default, grouped by where the fault enters."""

    grad: GradFaultCfg = field(default_factory=GradFaultCfg)
    env: EnvFaultConfig = field(default_factory=EnvFaultConfig)
    policy: PolicyFaultConfig = field(default_factory=PolicyFaultConfig)


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")

SEED_MAX = 2**32 - 1
"""The largest ``seed`` a run takes: numpy's global seed is 32-bit (``np.random.seed`` raises past it, deep inside
the run)."""


@dataclass
class TrainConfig:
    """The root of ``configs/train.yaml``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    video: VideoConfig = field(default_factory=VideoConfig)
    seed: int = 1
    """Seeds torch, numpy and the env resets (env i of rank r gets seed + 1000 r + i). In [0, SEED_MAX]."""
    torch_threads: int = 1
    """torch's intra-op CPU threads in the training process (``torch.set_num_threads``); ``0`` keeps torch's default
    (one per core). 1 by measurement: the networks are small, and on CPU more threads fight the envs for the cores
    (2 threads on 2 cores made an iteration 15-20% slower on a quiet machine, 3-10x under load). In [0, 1024]."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; under torchrun, CUDA ranks use
    ``cuda:LOCAL_RANK`` and CPU ranks use gloo."""
    run_dir: str = MISSING
    """Where this run writes everything (checkpoints, events, config.yaml, incidents/, summary.json)."""
    resume: str | None = None
    """Continue from a checkpoint: a ``model_<iter>.pt`` file, a run directory (its newest clean checkpoint), an
    experiment folder such as ``logs/ant`` (its newest run) or ``latest`` (the newest run of
    ``logs/<runner.experiment_name>``). Model, optimizer state, normalisers and the iteration counter are restored, and
    the saved run's task, algorithm and model settings are taken unless overridden; the run goes on for
    ``runner.max_iterations`` more iterations in ``run_dir``."""
    display: DisplayMode = DisplayMode.compact
    """What each iteration shows on stdout: ``compact`` (a live progress bar with return, episode length, learning
    rate, losses and the safety counters, on a terminal; where stdout is not a terminal, a file or a pipe, the
    ``plain`` lines instead), ``rsl`` (rsl-rl's block of about 20 lines per iteration) or ``plain``. Rank 0 only."""
    display_interval: int = 10
    """``plain``: one line every this many iterations, plus the first, the last and every iteration in which a safety
    counter changed. In [1, 1000000]."""

    def __post_init__(self) -> None:
        int_in("seed", self.seed, 0, SEED_MAX)
        require(bool(_DEVICE.match(self.device)), "device", self.device, "one of auto, cpu, cuda, cuda:N")
        int_in("torch_threads", self.torch_threads, 0, 1024)
        int_in("display_interval", self.display_interval, 1, 1_000_000)
        require(bool(self.run_dir), "run_dir", self.run_dir, "a directory path")
        # rsl-rl splits num_envs x num_steps_per_env transitions into num_mini_batches; an empty mini-batch trains on
        # nothing and logs NaN losses without any error.
        batch = self.task.num_envs * self.runner.num_steps_per_env
        require(
            batch >= self.algorithm.num_mini_batches,
            "algorithm.num_mini_batches",
            self.algorithm.num_mini_batches,
            f"at most task.num_envs x runner.num_steps_per_env = {batch} (one transition per mini-batch at least)",
        )


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (``train.yaml`` starts from ``train_schema``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)

"""Build the vectorised, guarded envs of a run from its config.

Each env is built by :class:`~robo_safe_rl.bridge.env_factory.TaskEnvFactory` (the task in SafeStep, and in the
fault injectors of a drill), and the :class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv` presents them to rsl-rl.
The envs live in this process or, with ``task.num_workers`` (default: one per core of the rank), in worker
processes (:class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch`) that build their block with the same factory.
The library only knows the gymnasium id: ``tools/train.py`` imports ``envs``, which registers the tasks; a worker
gets the registered spec itself.

Before anything is built, :func:`check_task` makes one env and checks that ``task.num_envs`` of them fit in the memory
this machine has left (:func:`check_memory`): an absurd ``num_envs`` would otherwise build envs until the allocator
gives up (``std::bad_alloc``, or a segfault inside Bullet) with no message.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import gymnasium as gym

from robo_safe_rl.bridge.env_batch import EnvBatch, EnvInfo, LocalEnvBatch
from robo_safe_rl.bridge.env_factory import TaskEnvFactory
from robo_safe_rl.bridge.incidents import IncidentRecorder
from robo_safe_rl.bridge.vec_adapter import GymVecEnv
from robo_safe_rl.bridge.worker_loop import Caps
from robo_safe_rl.bridge.worker_pool import pin_one_per_core, rank_cpus, resolve_num_workers
from robo_safe_rl.bridge.workers import WorkerEnvBatch
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.training.symmetry import check_symmetry


def check_task_registered(cfg: TrainConfig) -> None:
    """Fail before anything is built or written if ``task.env_id`` is not a registered gymnasium id.

    Raises:
        ConfigError: Naming ``task.env_id`` and the registered RoboSafe ids.
    """
    try:
        gym.spec(cfg.task.env_id)
    except gym.error.Error as err:
        ours = sorted(k for k in gym.registry if k.startswith("RoboSafe/"))
        raise ConfigError(
            f"invalid config value task.env_id={cfg.task.env_id!r}: {err} Registered RoboSafe tasks: {ours} "
            "(tasks are registered by `import robosafe_tasks`, which tools/train.py does)"
        ) from err


def task_env_factory(cfg: TrainConfig, start_step: int = 0) -> TaskEnvFactory:
    """The factory of the run's envs (the task id must be registered); ``start_step``: the policy steps each env took
    before this run (a resumed run's, where a task's step clock starts)."""
    return TaskEnvFactory.from_config(gym.spec(cfg.task.env_id), cfg.task, cfg.safety.step, cfg.faults.env, start_step)


def make_task_env(cfg: TrainConfig) -> gym.Env:
    """``gymnasium.make`` the task, with the configured time limit (the id must be registered)."""
    return task_env_factory(cfg).make_task()


def check_task(cfg: TrainConfig) -> None:
    """Fail before anything is written if the task id is unknown, the env cannot be made with ``task.env_kwargs``,
    ``task.num_envs`` envs do not fit in memory, or ``algorithm.symmetry_cfg`` asks for a mirror the task lacks.

    Raises:
        ConfigError: Naming ``task.env_id``, ``task.env_kwargs``, ``task.num_envs`` or the symmetry option and the
            reason.
    """
    check_task_registered(cfg)
    try:
        env = make_task_env(cfg)
    except (TypeError, ValueError, gym.error.Error) as err:
        raise ConfigError(
            f"invalid config value task.env_kwargs={dict(cfg.task.env_kwargs)!r}: expected keyword arguments that "
            f"{cfg.task.env_id} accepts ({type(err).__name__}: {err})"
        ) from err
    try:
        check_memory(cfg, env)
        check_symmetry(cfg.algorithm.symmetry_cfg, EnvInfo.of(env).mirror, f"{cfg.task.name} ({cfg.task.env_id})")
    finally:
        env.close()


#: Share of the available memory that the envs and their rollout storage may take: the rest is for torch, the
#: networks and the process itself (about 0.4 GiB for a CPU run of the Ant).
MEMORY_SHARE = 0.9


def rollout_bytes_per_env(num_obs: int, num_actions: int, steps: int) -> int:
    """Bytes of rsl-rl's PPO rollout storage per env: per step, float32 observations, actions, the distribution's
    mean and std, and six scalars (reward, done, value, log-probability, return, advantage); doubled for the copies
    the mini-batch generator makes."""
    return 2 * 4 * steps * (num_obs + 3 * num_actions + 6)


def check_memory(cfg: TrainConfig, env: gym.Env, available: int | None = None) -> None:
    """Check that ``task.num_envs`` envs like ``env`` fit in the memory available (all local ranks together).

    An env costs what its task declares (``memory_per_env`` on the unwrapped env: 32 MiB for the PyBullet tasks,
    measured) plus its rollout storage. Skipped where the available memory cannot be read.

    Args:
        cfg: The run's config.
        env: One env of the task (made with the run's settings).
        available: Bytes available; :func:`available_memory` when ``None``.

    Raises:
        ConfigError: Naming ``task.num_envs``, the memory needed and available, and how many envs fit.
    """
    available = available_memory() if available is None else available
    if available is None:
        return
    declared = getattr(env.unwrapped, "memory_per_env", 0)
    per_env = (declared if isinstance(declared, int) and declared > 0 else 0) + rollout_bytes_per_env(
        _flat_size(env.observation_space), _flat_size(env.action_space), cfg.runner.num_steps_per_env
    )
    ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)  # torchrun's ranks on this machine
    needed = cfg.task.num_envs * per_env * ranks
    if needed <= MEMORY_SHARE * available:
        return
    on_ranks = f" x {ranks} ranks on this machine" if ranks > 1 else ""
    fit = int(MEMORY_SHARE * available) // (per_env * ranks)
    raise ConfigError(
        f"invalid config value task.num_envs={cfg.task.num_envs}: {cfg.task.num_envs} envs of {cfg.task.env_id} need "
        f"about {_size(needed)} of memory ({_size(per_env)} per env{on_ranks}), but {_size(available)} is "
        f"available here; at most {fit} envs fit"
    )


def available_memory() -> int | None:
    """Bytes of memory this process can still get, or ``None`` when unknown.

    ``MemAvailable`` of ``/proc/meminfo`` (free pages from ``sysconf`` elsewhere), capped by the room left under the
    memory limit of the process's cgroup (a container's limit; v2 ``memory.max``, v1 ``memory.limit_in_bytes``).
    """
    candidates = [_meminfo_available(), _cgroup_room()]
    known = [c for c in candidates if c is not None]
    return min(known) if known else None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> int | None:
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit_text = Path(limit_file).read_text().strip()
            # "max" (v2) or a value near 2^63 (v1) means no limit.
            limit = 2**63 if limit_text == "max" else int(limit_text)
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        return None if limit >= 2**62 else max(limit - usage, 0)
    return None


def _flat_size(space: gym.Space) -> int:
    return math.prod(getattr(space, "shape", None) or (1,))


def _size(n: float) -> str:
    """``"29.3 MiB"``: bytes in binary units."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.1f} {units[i]}"


def build_vec_env(
    cfg: TrainConfig, *, incidents_dir: str | Path | None, rank: int = 0, device: str = "cpu", start_step: int = 0
) -> GymVecEnv:
    """Build ``task.num_envs`` guarded envs and their rsl-rl adapter (env i of rank r reset with seed + 1000 r + i).

    Incidents are recorded into ``incidents_dir`` (this rank's folder of the run directory); ``None`` records none.
    With env workers, each worker writes its own part beside it (``<incidents_dir>_worker<k>``) and the trainer its
    workers' crashes into it. ``device``: where the adapter puts observations, rewards and dones. ``start_step``:
    the policy steps each env took before this run (a resumed run's), where a task's step clock starts.
    """
    check_task_registered(cfg)
    factory = task_env_factory(cfg, start_step)
    indices = [1000 * rank + i for i in range(cfg.task.num_envs)]
    recording = cfg.safety.step.enabled and incidents_dir is not None
    cpus, share = rank_cpus()
    workers = resolve_num_workers(cfg.task.num_workers, cfg.task.num_envs, len(cpus), cfg.task.trainer_block)
    batch: EnvBatch
    entry = factory.spec.entry_point
    if workers and not isinstance(entry, str) and getattr(entry, "__module__", None) == "__main__":
        raise ConfigError(
            f"invalid config value task.num_workers={cfg.task.num_workers!r}: {workers} env workers cannot build "
            f"{cfg.task.env_id}, whose entry point {getattr(entry, '__qualname__', entry)} is defined in the main "
            "script (workers do not run it); register the task from an importable module, or set task.num_workers=0"
        )
    if workers:
        pin = pin_one_per_core(cfg.task.pin_workers, workers, len(cpus), cfg.task.trainer_block)
        step = cfg.safety.step
        caps = Caps(Path(incidents_dir), step.max_incidents, int(step.max_incident_mb * 2**20)) if recording else None
        batch = WorkerEnvBatch(
            factory,
            indices,
            workers,
            caps=caps,
            penalty=step.penalty,
            timeout_s=cfg.task.worker_timeout_s,
            max_crashes=cfg.task.max_worker_crashes,
            cpus=cpus if pin or share else None,  # a worker sets its affinity where the system can (Linux)
            pin=pin,
            trainer_block=cfg.task.trainer_block,
        )
    else:
        recorder = IncidentRecorder.from_config(Path(incidents_dir), cfg.safety.step) if recording else None
        envs: list[gym.Env] = []
        try:
            for i in indices:
                envs.append(factory(i, recorder))
        except BaseException:
            for env in envs:  # free the physics clients of the envs already made
                env.close()
            raise
        batch = LocalEnvBatch(envs, recorder)
    try:
        return GymVecEnv(batch, seed=cfg.seed + 1000 * rank, device=device, cfg={"task": cfg.task.name})
    except BaseException:
        batch.close()
        raise

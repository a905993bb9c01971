"""Env workers: the envs of a rank stepped in parallel processes, and a worker that dies is a physics crash.

:class:`WorkerEnvBatch` splits the envs into contiguous blocks, one per worker process
(:func:`~robo_safe_rl.bridge.worker_loop.worker_main`). Each worker builds its block from a picklable factory (every
env in SafeStep, as in one process), and per step the trainer writes the actions into shared memory, sends each
worker one byte and waits for one byte back: one synchronisation per worker per step, nothing pickled. The results
are those of :class:`~robo_safe_rl.bridge.env_batch.LocalEnvBatch` bit for bit: the same envs, built the same way,
with the same seeds, fed the same float32 actions.

Why processes: PyBullet's ``stepSimulation`` holds the GIL, so threads step no faster than one. Why blocks and not
one process per env (gymnasium's ``AsyncVectorEnv``): one process per core is the most that can step at once; more
only add context switches, a pickled observation per env per step, and about 28 MiB per PyBullet client.

With ``trainer_block`` the trainer steps the first block itself between sending the byte and waiting for the
answers: on 2 cores, 8 envs in the trainer and 8 in one worker, each process alone on its core and polling for the
other instead of blocking (BENCHMARKS.md, env workers). Those envs are in the trainer's process, as with no workers.

A worker that dies (a signal: segfault, OOM kill, PyBullet's abort) is seen in the step where it happens: its pipe
reads EOF. One that does not answer a step within ``timeout_s`` is killed and treated the same. It is started again,
its envs reset (with seeds derived from the run's), and their transitions end as ``terminated`` with the SafeStep
penalty. One ``worker_crash`` incident is recorded per env, with the exit signal or code; ``worker_crashes`` and
``worker_restarts`` count. A worker that crashes ``max_crashes`` times in a row (no step completed in between)
stops the run with :class:`~robo_safe_rl.errors.WorkerCrashError`. An exception raised inside a worker (SafeStep's
RecoveryError, a bug in a task) is raised in the trainer as in one process, with the worker's traceback as cause.

Workers are daemon processes, closed with the batch (and by a finaliser at exit), and leave on their own when the
trainer dies (:mod:`~robo_safe_rl.bridge.worker_loop`): no worker outlives its trainer.
"""

from __future__ import annotations

import logging
import pickle
import weakref
from collections.abc import Callable

import numpy as np

from robo_safe_rl.bridge.env_batch import WORKER_COUNTER_NAMES, BatchStep, EnvInfo
from robo_safe_rl.bridge.incidents import Incident, IncidentRecorder
from robo_safe_rl.bridge.safe_step import COUNTER_NAMES
from robo_safe_rl.bridge.worker_loop import DONE, STEP, Caps, EnvBlock, EnvFactory, relay_logs
from robo_safe_rl.bridge.worker_pool import Death, WorkerPool, WorkerTraceback, current_cpu, split_rows
from robo_safe_rl.bridge.worker_shared import FAULT_KINDS, HEADER_GLOBAL_STEP, HEADER_ITERATION, Layout, SharedArrays
from robo_safe_rl.errors import WorkerCrashError
from robo_safe_rl.safety.incident_kinds import IncidentKind

logger = logging.getLogger(__name__)

#: Seconds the trainer and each worker poll for the other's byte before blocking, where it has a core to itself (a
#: process that shares its core must block, or it holds the core from the one it waits for). Longer than the
#: trainer's serial work between two steps (the policy, the copies: about 1 ms for the Ant on 2 cores) and the spread
#: of two blocks' step times, so a worker rarely blocks within a rollout; short enough that waiting through an update
#: costs a worker 2 ms of its core. BENCHMARKS.md (env workers) measures the workers with and without it.
SPIN_S = 0.002


class WorkerEnvBatch:
    """Envs hosted by worker processes, stepped in parallel (module docstring); an
    :class:`~robo_safe_rl.bridge.env_batch.EnvBatch` for :class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv`.

    Args:
        factory: Builds env ``index`` with a worker's incident recorder (``factory(index, recorder)``); must pickle.
        env_indices: The index of each env (as SafeStep records it), one per row.
        num_workers: Worker processes (at most one per env).
        caps: Incident folder and caps of the rank; ``None`` records no incident.
        penalty: Reward of a transition ended by a worker crash (SafeStep's penalty).
        timeout_s: Seconds a worker may take to answer a step before it is treated as dead (its start, attach and
            reset get at least :data:`~robo_safe_rl.bridge.worker_pool.START_TIMEOUT_S`).
        max_crashes: Crashes in a row of one worker that stop the run.
        cpus: Cores the workers run on (the rank's share under torchrun); ``None`` leaves the affinity alone.
        pin: Pin worker ``k`` to core ``cpus[k % len(cpus)]`` alone (``cpus[(k + 1) % len(cpus)]`` with a trainer
            block, leaving the first core to the trainer), instead of letting it run on any of ``cpus``.
        trainer_block: The trainer steps the first block of envs itself, while the workers step theirs
            (``task.trainer_block``): one worker fewer for the same blocks, and no wait for the trainer's own core
            to be woken. An env of the trainer's block is as exposed as in one process: a physics engine that aborts
            there ends the run.
        spin: Let the processes that have a core to themselves poll for their byte for :data:`SPIN_S` before
            blocking: each pinned worker alone on a core other than the first of ``cpus`` (the trainer's, shared
            with worker 0 when there is no trainer block), and the trainer when it has a block and no worker shares
            its core. ``False`` blocks at once everywhere.

    Raises:
        WorkerCrashError: If a worker cannot be started ``max_crashes`` times in a row.
    """

    def __init__(
        self,
        factory: EnvFactory,
        env_indices: list[int],
        num_workers: int,
        *,
        caps: Caps | None = None,
        penalty: float = 0.0,
        timeout_s: float = 60.0,
        max_crashes: int = 3,
        cpus: list[int] | None = None,
        pin: bool = False,
        trainer_block: bool = False,
        spin: bool = True,
    ) -> None:
        self.factory = factory
        self.env_indices = list(env_indices)
        self.num_envs = len(self.env_indices)
        self.caps = caps
        self.penalty = float(penalty)
        self.max_crashes = int(max_crashes)
        self.cpus = cpus
        self.counters = dict.fromkeys(WORKER_COUNTER_NAMES, 0)
        own = int(trainer_block)
        blocks = split_rows(self.num_envs, min(num_workers + own, self.num_envs))
        #: Rows the trainer steps itself (empty without a trainer block), and each worker's.
        self._local_rows, self._blocks = (blocks[0], blocks[1:]) if trainer_block else (range(0), blocks)
        #: The core each pinned worker runs on.
        self._cores = {k: cpus[(k + own) % len(cpus)] for k in range(len(self._blocks))} if pin and cpus else {}
        # Each process that steps envs has a core to itself (one per core): those not on the trainer's may spin.
        alone = spin and bool(self._cores) and len(self._blocks) + own <= len(cpus)
        #: Seconds each worker polls before blocking (:func:`~robo_safe_rl.bridge.worker_loop.wait_readable`).
        self.worker_spin_s = [SPIN_S if alone and self._cores[k] != cpus[0] else 0.0 for k in range(len(self._blocks))]
        #: Seconds the trainer polls for each worker's answer before blocking.
        self.spin_s = SPIN_S if alone and trainer_block else 0.0
        self._crash_records_dropped = 0
        self.recorder: IncidentRecorder | None = None
        if caps is not None:
            self.recorder = IncidentRecorder(caps.directory, *caps.part(0, len(self._blocks) + 1))
            self.recorder.set_context(iteration=0, global_step=0)
        self._pool = WorkerPool(float(timeout_s), spin_s=self.spin_s)
        self._local = EnvBlock([])
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._local)
        self._seed = 0
        self._steps = 0
        self._episode_steps = np.zeros(self.num_envs, dtype=np.int64)
        try:
            self.infos: list[EnvInfo] = self._start()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------- the EnvBatch
    def reset(self, seed: int) -> np.ndarray:
        """Reset env ``i`` with ``seed + i``. Shape of the result: (num_envs, num_obs), float32."""
        self._seed = seed
        self._exchange(
            lambda k: ("reset", [seed + i for i in self._blocks[k]]),
            ended=None,
            local=lambda: self._local.reset([seed + i for i in self._local_rows]),
        )
        self._episode_steps[:] = 0
        return np.array(self._arrays.obs)

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step every env with its row of ``actions`` (shape: (num_envs, num_actions)) in its worker.

        Raises:
            WorkerCrashError: When a worker crashed ``max_crashes`` times in a row.
            Whatever an env raised in its worker (as in one process).
        """
        a = self._arrays
        a.actions[:] = actions
        self._steps += 1
        self._episode_steps += 1
        self._exchange(None, ended=actions, local=self._local.step)
        out = BatchStep(
            np.array(a.obs), a.rewards.copy(), a.terminated.copy(), a.truncated.copy(), a.terms.copy(), a.metrics.copy()
        )
        self._episode_steps[out.terminated | out.truncated] = 0
        a.header[HEADER_GLOBAL_STEP] += self.num_envs
        if self.recorder is not None:
            self.recorder.advance(self.num_envs)
        return out

    def set_iteration(self, iteration: int) -> None:
        """Training iteration written into later incident records (the workers read it from shared memory)."""
        self._arrays.header[HEADER_ITERATION] = iteration
        if self.recorder is not None:
            self.recorder.set_context(iteration=iteration)

    def safety_counters(self) -> dict[str, int]:
        """SafeStep's counters summed over all envs (across restarts), and ``worker_crashes`` / ``worker_restarts``."""
        totals = dict(zip(COUNTER_NAMES, self._arrays.counters.sum(axis=0).tolist(), strict=True))
        totals["incidents_dropped"] += self._crash_records_dropped  # the trainer's block counts its own
        return {**totals, **self.counters}

    def faults_injected(self) -> dict[str, int]:
        """Injected faults per kind armed in some env, summed over all envs (across restarts)."""
        a = self._arrays
        totals, armed = a.injected.sum(axis=0).tolist(), a.armed.any(axis=0).tolist()
        return {kind: n for kind, n, on in zip(FAULT_KINDS, totals, armed, strict=True) if on}

    def close(self) -> None:
        """Stop the workers (they close their envs) and free the shared memory; safe to call twice."""
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers, in worker order."""
        return [h.process.pid for _, h in sorted(self._pool.handles.items()) if h.process.pid is not None]

    @property
    def _arrays(self) -> SharedArrays:
        arrays = self._pool.arrays
        if arrays is None:
            raise RuntimeError("the env workers are closed")
        return arrays

    # ------------------------------------------------------------------------------------------- start-up
    def _start(self) -> list[EnvInfo]:
        """Start every worker (and build the trainer's block while they start), learn the envs' spaces, share the
        arrays with them."""
        infos: dict[int, list[EnvInfo]] = {}
        pending = list(range(len(self._blocks)))
        for k in pending:
            self._launch(k)
        for i in self._local_rows:
            self._local.add(self.factory(self.env_indices[i], self.recorder))
        while pending:
            replies, dead = self._pool.collect(pending, starting=True)
            infos.update({k: self._ready(reply) for k, reply in replies.items()})
            for k, death in dead.items():
                self._crashed(k, death, "while starting")
                self._launch(k)
            pending = sorted(dead)
        flat = [EnvInfo.of(env) for env in self._local.envs]
        flat += [info for k in range(len(self._blocks)) for info in infos[k]]
        obs_shape, act_shape = flat[0].observation_space.shape, flat[0].action_space.shape
        num_terms, num_metrics = len(flat[0].reward_terms), len(flat[0].metric_names)
        sizes = (int(np.prod(obs_shape)), int(np.prod(act_shape)), num_terms, num_metrics)
        self._layout = Layout(self.num_envs, *sizes)
        arrays = self._pool.map(self._layout)
        self._local.attach(arrays, 0)
        self._exchange(lambda k: ("attach", self._layout, self._blocks[k].start), ended=None)
        return flat

    def _launch(self, k: int) -> None:
        rows = self._blocks[k]
        part = self.caps.worker_part(k, len(self._blocks)) if self.caps is not None else None
        indices = [self.env_indices[i] for i in rows]
        level = logging.getLogger().getEffectiveLevel()
        cpus = [self._cores[k]] if k in self._cores else self.cpus
        factory = self.factory
        after = getattr(factory, "after", None)
        if self._steps and after is not None:
            # A restarted worker's envs go on with the run's step clock (a task's curriculum), not from its start.
            factory = after(self._steps)
        self._pool.launch(k, rows, (factory, indices, part, cpus, f"env worker {k}", level, self.worker_spin_s[k]))

    def _ready(self, reply: bytes) -> list[EnvInfo]:
        message = _unpack(reply)
        if message[0] != "ready":
            raise RuntimeError(f"an env worker answered {message[0]!r} where 'ready' was expected")
        return message[1]

    # ------------------------------------------------------------------------------------------- exchange
    def _exchange(self, command: object, ended: np.ndarray | None, local: Callable[[], None] | None = None) -> None:
        """Send a step (``command=None``) or ``command(k)`` to every worker, run ``local`` (the trainer's block)
        meanwhile, wait for all, replace the dead.

        ``ended``: the step's actions, when the transitions of a dead worker's envs must be ended. What ``local``
        raises is raised once every worker has answered (the next exchange must not read this one's replies).
        """
        for k in self.wake_order() if command is None else list(self._pool.handles):
            self._pool.send(k, STEP if command is None else pickle.dumps(command(k)))
        try:
            if local is not None:
                local()
        finally:
            replies, dead = self._pool.collect(sorted(self._pool.handles), starting=command is not None)
        for reply in replies.values():
            if reply != DONE:
                _unpack(reply)
        if command is None:
            for k in replies:
                self._pool.handles[k].crashes_in_a_row = 0
        for k, death in sorted(dead.items()):
            self._replace(k, death, ended)

    def wake_order(self) -> list[int]:
        """The workers in the order a step wakes them: the one pinned to the core the trainer runs on last. Woken
        earlier, it would take that core from the trainer before the trainer has woken the others (on 2 cores the
        median of 2 pinned workers went from 1.67x to 1.69x the envs in the trainer; BENCHMARKS.md, env workers)."""
        here = current_cpu() if self._cores else None
        if here is None:
            return list(self._pool.handles)
        return sorted(self._pool.handles, key=lambda k: self._cores.get(k) == here)  # stable: else in order

    # ------------------------------------------------------------------------------------------- crashes
    def _crashed(self, k: int, death: Death, when: str) -> None:
        """Count a crash of worker ``k``; stop the run when it is one too many in a row."""
        handle = self._pool.handles[k]
        handle.crashes_in_a_row += 1
        self.counters["worker_crashes"] += 1
        first, last = self.env_indices[handle.rows[0]], self.env_indices[handle.rows[-1]]
        where = f"env worker {k} (pid {death.pid}, envs {first}-{last})"
        if handle.crashes_in_a_row >= self.max_crashes:
            raise WorkerCrashError(
                f"{where} {death.what} {when}: {handle.crashes_in_a_row} crashes in a row "
                f"(task.max_worker_crashes={self.max_crashes}), the envs cannot be kept running; look for the cause "
                "in the log above and in the run's last incidents (tools/diagnose.py RUN_DIR)"
            )
        logger.warning("%s %s %s; starting it again (%d in a row)", where, death.what, when, handle.crashes_in_a_row)

    def _replace(self, k: int, death: Death, ended: np.ndarray | None) -> None:
        """Record and count the crash of worker ``k``, start it again and bring its envs to a fresh episode."""
        if ended is not None:
            self._record_crash(k, death, ended)
        when = "during a step" if ended is not None else "between steps"
        while True:
            self._crashed(k, death, when)
            self._launch(k)
            again = self._bring_up(k)
            if again is None:
                break
            death, when = again, "while starting again"
        handle = self._pool.handles[k]
        handle.restarts += 1
        self.counters["worker_restarts"] += 1
        if ended is not None:
            a, rows = self._arrays, slice(handle.rows.start, handle.rows.stop)
            a.rewards[rows], a.terminated[rows], a.truncated[rows] = self.penalty, True, False
            a.terms[rows], a.metrics[rows] = 0.0, np.nan

    def _bring_up(self, k: int) -> Death | None:
        """Take a new worker ``k`` through ready, attach and reset; how it died if it did."""
        handle = self._pool.handles[k]
        seeds = [self._respawn_seed(i, handle.restarts + 1) for i in handle.rows]
        attach = ("attach", self._layout, handle.rows.start)
        for command in (None, attach, ("reset", seeds)):
            if command is not None:
                self._pool.send(k, pickle.dumps(command))
            replies, dead = self._pool.collect([k], starting=True)
            if k in dead:
                return dead[k]
            if command is None:
                self._ready(replies[k])
            elif replies[k] != DONE:
                _unpack(replies[k])
        return None

    def _respawn_seed(self, row: int, restart: int) -> int:
        """A seed for the env of ``row`` after its worker's ``restart``-th restart, derived from the run's seed."""
        return int(np.random.SeedSequence([self._seed, self.env_indices[row], restart]).generate_state(1)[0])

    def _record_crash(self, k: int, death: Death, actions: np.ndarray) -> None:
        """One ``worker_crash`` incident per env of worker ``k`` (the action it was given; its state is lost)."""
        if self.recorder is None:
            return
        header = self._arrays.header
        self.recorder.set_context(iteration=int(header[HEADER_ITERATION]), global_step=int(header[HEADER_GLOBAL_STEP]))
        extra = {"worker": k, "pid": death.pid, "exitcode": death.exitcode, "signal": death.signal}
        extra["hung_s"] = death.hung_s
        for row in self._pool.handles[k].rows:
            info = self.infos[row]
            self._crash_records_dropped += not self.recorder.record(
                Incident(
                    kind=IncidentKind.worker_crash,
                    source="env_worker",
                    env_index=self.env_indices[row],
                    reason=f"env worker {k} (pid {death.pid}) {death.what}; its envs were started again",
                    env_id=info.env_id,
                    env_step=self._steps,
                    episode_step=int(self._episode_steps[row]),
                    terminated=True,
                    rebuilt=True,
                    penalty=self.penalty,
                    simulated=info.simulated,
                    action_names=info.action_names,
                    action_low=np.asarray(info.action_space.low),
                    action_high=np.asarray(info.action_space.high),
                    raw_action=np.array(actions[row], copy=True),
                    extra=extra,
                )
            )


def _shutdown(pool: WorkerPool, local: EnvBlock) -> None:
    """Close the trainer's block and stop the workers (the batch's finaliser: it must not hold the batch)."""
    try:
        local.close()
    finally:
        pool.shutdown()


def _unpack(reply: bytes) -> tuple:
    """A pickled reply of a worker; an error reply is raised here, with the worker's traceback as its cause, and the
    log records of the others are logged here."""
    message = pickle.loads(reply)
    if message[0] == "error":
        raise message[1] from WorkerTraceback(message[2])
    relay_logs(message[2])
    return message

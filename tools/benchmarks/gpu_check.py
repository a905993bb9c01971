"""``tools/gpu_check.py``: the CUDA path, checked in one command on a machine with a GPU (under 5 minutes on one).

1. The device: torch's build, its CUDA version, the GPUs.
2. A short CUDA training of the Ant with the gradient guard on (``tools/train.py`` in a subprocess), then its
   ``summary.json`` (completed, every iteration, on CUDA, no fault) and every checkpoint (finite, loadable with
   ``weights_only=True``), read through :class:`~robo_safe_rl.rundir.RunDir` and the checkpoint inspector; then the
   same with the envs in worker processes (``task.num_workers``), whose steps reach the GPU through the adapter's
   pinned staging buffer, a path no CPU run takes.
3. With two GPUs or more: the same under ``torchrun`` with 2 processes (NCCL), checked the same way.
4. The guard's cost on CUDA: time per PPO update, guard on vs off (``torch.cuda.synchronize`` around each block).
5. Host-device synchronisations of an update (``torch.cuda.set_sync_debug_mode("warn")``) for a small and a large
   network, each counted at the source line that caused it and split into per mini-batch and per update. The check:
   the gradient guard's own (its module's lines) are one per mini-batch and one per update, whatever the network.
   The rest are shown: torch's argument validation of the action distribution, and with rsl-rl's adaptive
   learning-rate schedule its KL comparisons (``if kl_mean > ...``: one to three per mini-batch, as many as the branch
   taken reads).

Exit codes: 0 every check passed; 1 a check failed (each failure is printed); 3 no CUDA device here (nothing checked).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.guard import build_ppo, fill_rollout
from robo_safe_rl.checkpoint.report import Status, inspect_file
from robo_safe_rl.errors import RoboSafeRLError
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.safety import grad_guard
from robo_safe_rl.training.ppo import SafePPO

EXIT_NO_CUDA = 3
NETS = ((64, 64), (1024, 1024, 512))  # the guard's syncs must not depend on the parameter count
SCHEDULES = ("fixed", "adaptive")
GUARD_FILE = Path(grad_guard.__file__).resolve()
OBS_DIM, NUM_ACTIONS = 28, 8  # pybullet Ant's observation and action sizes


def main(argv: list[str] | None = None, *, train_script: Path) -> int:
    """Run the checks and print what was measured; returns the exit code (module docstring).

    Args:
        argv: Command-line arguments (``--help``).
        train_script: ``tools/train.py``, run in subprocesses (directly, and under torchrun).
    """
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10, help="training iterations of each run (default 10)")
    parser.add_argument("--num-envs", type=int, default=32, help="Ant envs of each run (default 32)")
    parser.add_argument("--workers", type=int, default=2, help="env worker processes of the second run (default 2)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device here (torch {torch.__version__}, built with CUDA {torch.version.cuda}); "
            "nothing checked",
            file=sys.stderr,
        )
        return EXIT_NO_CUDA
    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {gpus} GPU(s)")
    for i in range(gpus):
        props = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i}: {props.name}, {props.total_memory / 2**30:.0f} GiB")
    started = time.monotonic()
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as scratch:
        out = args.out if args.out is not None else Path(scratch)
        train = [
            "task=ant",
            f"task.num_envs={args.num_envs}",
            f"runner.max_iterations={args.iterations}",
            "runner.save_interval=5",
            "safety.grad_guard.mode=skip",
            "display=plain",
        ]
        failures += _check_training(
            "training on cuda",
            [sys.executable, str(train_script), *train, "device=cuda"],
            out / "single",
            args.iterations,
            world=1,
        )
        failures += _check_training(
            f"training on cuda, {args.workers} env workers",
            [sys.executable, str(train_script), *train, "device=cuda", f"task.num_workers={args.workers}"],
            out / "workers",
            args.iterations,
            world=1,
        )
        if gpus >= 2:
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
            failures += _check_training(
                "torchrun, 2 processes (NCCL)",
                [*torchrun, str(train_script), *train, "device=cuda"],
                out / "torchrun",
                args.iterations,
                world=2,
            )
        else:
            print("torchrun, 2 processes (NCCL): skipped, one GPU")
        failures += _measure()
    print(f"gpu_check: {len(failures)} failure(s) in {time.monotonic() - started:.0f} s")
    for failure in failures:
        print(f"  FAILED: {failure}")
    return 1 if failures else 0


def _check_training(name: str, cmd: list[str], run_dir: Path, iterations: int, world: int) -> list[str]:
    """Run one training and check what it left; returns the failures."""
    start = time.monotonic()
    done = subprocess.run([*cmd, f"run_dir={run_dir}"], capture_output=True, text=True, timeout=180, check=False)
    wall = time.monotonic() - start
    if done.returncode != 0:
        return [f"{name}: exit code {done.returncode}: {done.stderr.strip()[-800:]}"]
    try:
        problems = check_run(RunDir(run_dir), iterations, world)
    except RoboSafeRLError as err:
        problems = [str(err)]
    summary = RunDir(run_dir).read_summary() if not problems else {}
    steps_s = summary.get("env_steps", 0) / summary["wall_s"] if summary.get("wall_s") else 0.0
    print(
        f"{name}: {'ok' if not problems else 'FAILED'} in {wall:.0f} s ({steps_s:,.0f} env steps/s, start-up included)"
    )
    counters = summary.get("safety", {})
    print(f"  safety counters: {', '.join(f'{k} {v}' for k, v in counters.items() if v) or 'all zero'}")
    return [f"{name}: {p}" for p in problems]


def check_run(run_dir: RunDir, iterations: int, world: int = 1) -> list[str]:
    """What a completed, clean training run must have left; returns the problems (empty: none).

    Args:
        run_dir: The run directory.
        iterations: Iterations the run was asked for.
        world: Processes it ran with (``env_steps`` counts every rank's).

    Raises:
        RoboSafeRLError: If ``summary.json`` cannot be read.
    """
    summary = run_dir.read_summary()
    problems: list[str] = []
    expect: dict[str, Any] = {"status": "completed", "iterations": iterations, "faults_injected": {}}
    problems += [f"summary {k} is {summary.get(k)!r}, expected {v!r}" for k, v in expect.items() if summary.get(k) != v]
    if not str(summary.get("device", "")).startswith("cuda"):
        problems.append(f"summary device is {summary.get('device')!r}, expected cuda")
    if summary.get("env_steps", 0) <= 0 or summary["env_steps"] % world:
        problems.append(f"summary env_steps is {summary.get('env_steps')!r} for {world} process(es)")
    checkpoints = run_dir.checkpoints()
    final = str(run_dir.checkpoint(iterations - 1))
    if summary.get("final_checkpoint") != final or summary.get("last_clean_checkpoint") != final:
        problems.append(f"final and last clean checkpoint should be {final}: {summary.get('final_checkpoint')!r}")
    for path in checkpoints:
        status = inspect_file(path).status
        if status is not Status.CLEAN:
            problems.append(f"{path.name} is {status.value}")
    if not checkpoints:
        problems.append("no checkpoint written")
    return problems


def _measure() -> list[str]:
    """The guard's overhead and the syncs per mini-batch on cuda:0; returns the failures."""
    failures: list[str] = []
    try:
        cost = guard_overhead("cuda:0")
        print(
            f"guard overhead on cuda:0 (4096 envs x 24 steps, 5 epochs x 4 mini-batches, {cost['hidden_dims']}): "
            f"off {cost['off_s_per_update'] * 1e3:.1f} ms, on {cost['on_s_per_update'] * 1e3:.1f} ms per update, "
            f"ratio {cost['ratio']:.3f}"
        )
        counts = [syncs_per_mini_batch("cuda:0", net, schedule=schedule) for schedule in SCHEDULES for net in NETS]
    except (RuntimeError, RoboSafeRLError) as err:
        return [f"measuring on cuda:0: {type(err).__name__}: {err}"]
    for c in counts:
        sites = ", ".join(f"{site} {mb:g} + {upd:g}" for site, (mb, upd) in c["sites"].items())
        print(
            f"host-device syncs, {c['schedule']} learning rate, {c['hidden_dims']} ({c['parameters']:,} parameters): "
            f"{c['syncs_2_mini_batches']} with 2 mini-batches, {c['syncs_4_mini_batches']} with 4; "
            f"per mini-batch + per update at each line: {sites}"
        )
        if c["guard"] != (1, 1):
            failures.append(
                f"the guard's syncs, {c['schedule']} learning rate, {c['hidden_dims']}: {c['guard'][0]:g} per "
                f"mini-batch + {c['guard'][1]:g} per update, expected 1 + 1"
            )
    return failures


# ----------------------------------------------------------------------------------------------- measurements
def _ppo(
    device: str,
    hidden_dims: Sequence[int],
    mode: str,
    *,
    num_envs: int = 4096,
    steps: int = 24,
    epochs: int = 5,
    mini_batches: int = 4,
    seed: int = 0,
    schedule: str = "adaptive",
) -> SafePPO:
    """A SafePPO on ``device`` (guard ``mode``: ``skip`` or ``off``; learning-rate ``schedule``: rsl-rl's ``adaptive``
    or ``fixed``) with a filled rollout, ready to ``update()``."""
    torch.manual_seed(seed)
    kwargs = {
        "num_learning_epochs": epochs,
        "num_mini_batches": mini_batches,
        "grad_guard": {"mode": mode},
        "schedule": schedule,
    }
    alg = build_ppo(SafePPO, OBS_DIM, NUM_ACTIONS, num_envs, steps, hidden_dims, device=device, **kwargs)
    fill_rollout(alg, OBS_DIM, seed)
    return alg


def _synchronize(device: str) -> None:
    # CUDA kernels run asynchronously: without a synchronisation the clock stops before the work is done.
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def guard_overhead(
    device: str, hidden_dims: Sequence[int] = (256, 128, 128), *, repeats: int = 8, updates: int = 3, **sizes: Any
) -> dict[str, Any]:
    """Median seconds per ``update()`` with the guard off and on (mode ``skip``), timed in alternating blocks
    (A B B A ...) so that drift falls on both; ``ratio`` is on / off (1.0: free).

    Args:
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        hidden_dims: Actor and critic hidden layers (the project's default).
        repeats: Timed blocks per variant.
        updates: ``update()`` calls per block.
        **sizes: :func:`_ppo`'s sizes (``num_envs``, ``steps``, ``epochs``, ``mini_batches``).
    """
    algs = {
        "off": _ppo(device, hidden_dims, "off", **sizes),
        "on": _ppo(device, hidden_dims, "skip", **sizes),
    }
    for alg in algs.values():
        alg.update()  # warm-up: allocations, kernels chosen, the first Adam step
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(repeats):
        for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
            _synchronize(device)
            start = time.perf_counter()
            for _ in range(updates):
                algs[name].update()
            _synchronize(device)
            runs[name].append((time.perf_counter() - start) / updates)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"hidden_dims": list(hidden_dims), "off_s_per_update": off, "on_s_per_update": on, "ratio": on / off}


def count_syncs(alg: SafePPO, device: str) -> Counter[tuple[str, int]]:
    """Host-device synchronisations of one ``alg.update()``, as ``torch.cuda.set_sync_debug_mode("warn")`` reports
    them (one warning each), counted by the source line that caused each: ``(file, line)``."""
    _synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            alg.update()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return Counter((w.filename, w.lineno) for w in caught if "synchroniz" in str(w.message))


def split_syncs(
    two: Counter[tuple[str, int]], four: Counter[tuple[str, int]]
) -> dict[tuple[str, int], tuple[float, float]]:
    """Each line's syncs in an update of 2 and of 4 mini-batches, split as ``syncs(m) = per_mini_batch * m +
    per_update``: ``{(file, line): (per_mini_batch, per_update)}``, most per mini-batch first."""
    split = {}
    for site in two.keys() | four.keys():
        per_mini_batch = (four[site] - two[site]) / 2
        split[site] = (per_mini_batch, two[site] - 2 * per_mini_batch)
    return dict(sorted(split.items(), key=lambda item: (-item[1][0], -item[1][1], item[0])))


def guard_syncs(split: dict[tuple[str, int], tuple[float, float]]) -> tuple[float, float]:
    """The gradient guard module's share of :func:`split_syncs`: ``(per_mini_batch, per_update)`` over its lines."""
    guard = [counts for (file, _), counts in split.items() if Path(file).resolve() == GUARD_FILE]
    return sum(mb for mb, _ in guard), sum(upd for _, upd in guard)


def syncs_per_mini_batch(
    device: str, hidden_dims: Sequence[int], mode: str = "skip", schedule: str = "fixed"
) -> dict[str, Any]:
    """Host-device syncs of an update with 2 and with 4 mini-batches (one epoch), split at each source line into a
    count per mini-batch and one per update (:func:`split_syncs`); ``guard`` sums the guard module's lines.

    With rsl-rl's ``adaptive`` schedule its lines' split is approximate: the KL comparisons take one to three syncs
    per mini-batch, as many as the branch taken reads.

    Args:
        device: A CUDA device (sync debug mode is CUDA's).
        hidden_dims: Actor and critic hidden layers; the guard's counts must not depend on them.
        mode: The guard's mode.
        schedule: The learning-rate schedule, ``fixed`` or ``adaptive``.
    """
    algs = {m: _ppo(device, hidden_dims, mode, epochs=1, mini_batches=m, schedule=schedule) for m in (2, 4)}
    for alg in algs.values():
        alg.update()  # warm-up: the first Adam step allocates its state
        fill_rollout(alg, OBS_DIM, seed=1)  # update() cleared the storage
    two, four = (count_syncs(algs[m], device) for m in (2, 4))
    split = split_syncs(two, four)
    parameters = sum(p.numel() for p in algs[2].actor.parameters()) + sum(
        p.numel() for p in algs[2].critic.parameters()
    )
    return {
        "hidden_dims": list(hidden_dims),
        "schedule": schedule,
        "parameters": parameters,
        "syncs_2_mini_batches": sum(two.values()),
        "syncs_4_mini_batches": sum(four.values()),
        "guard": guard_syncs(split),
        "sites": {f"{'/'.join(Path(file).parts[-2:])}:{line}": counts for (file, line), counts in split.items()},
    }

"""The presets against the task's tuned values on the learning budget, and each preset under the same fire drill.

The comparison runs are the learning bench's (:func:`benchmarks.learning.learning_run`: a ``tools/train.py``
subprocess per seed with one torch thread and the envs in the trainer, its final checkpoint judged by
``tools/evaluate.py`` on the test seeds) with ``algo=<preset>`` added, so ``ppo``'s runs are the learning section's
runs of the same seeds and budget, trajectory for trajectory. From each run's TensorBoard events this also reads what
the adaptive schedule did with the learning rate (median, and the share of iterations at rsl-rl's 1e-5 floor).

The drill runs are each preset once under ``+drill=gauntlet`` on the Ant, with its default env workers (the path the
drill's physics faults are meant for) and a shorter budget: they test the stack, not the learning.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.learning import LearningRun, learning_run, over_seeds
from benchmarks.runs import scalars, train
from robo_safe_rl.apps.evaluate import evaluate
from robo_safe_rl.progress import progress_bar

#: rsl-rl's adaptive schedule never goes below this learning rate.
LR_FLOOR = 1.0e-5
PRESETS = ("ppo", "ppo_conservative", "ppo_safe")


@dataclass
class DrillResult:
    """What one preset's training under the gauntlet drill did, and its final policy's return without faults."""

    preset: str
    status: str
    env_steps: int
    safety: dict[str, int]
    faults_injected: dict[str, int]
    final_return: float | None


def drill_run(
    repo: Path, out: Path, preset: str, overrides: list[str], eval_episodes: int, reuse: bool = False
) -> DrillResult:
    """Train ``preset`` under ``+drill=gauntlet`` (seed 1) into ``out/<preset>_drill`` and evaluate its final policy."""
    run_dir = out / f"{preset}_drill"
    drill = [f"algo={preset}", "seed=1", *overrides, "+drill=gauntlet"]
    summary = train(repo, run_dir, drill, out / f"{preset}.log", reuse)
    final = summary.get("final_checkpoint")
    return DrillResult(
        preset,
        summary["status"],
        summary["env_steps"],
        summary["safety"],
        summary["faults_injected"],
        evaluate(Path(final), eval_episodes).mean_return if final else None,
    )


def learning_rate_use(runs: list[LearningRun]) -> tuple[float, float]:
    """Median over runs of each run's median ``Loss/learning_rate``, and the mean over runs of the share of its
    iterations at rsl-rl's floor (NaN without the tag)."""
    medians, shares = [], []
    for run in runs:
        lrs = [value for _, _, value in scalars(Path(run.run_dir), "Loss/learning_rate")]
        if lrs:
            medians.append(statistics.median(lrs))
            shares.append(sum(lr <= LR_FLOOR * 1.0001 for lr in lrs) / len(lrs))
    nan = float("nan")
    return (statistics.median(medians) if medians else nan, statistics.fmean(shares) if shares else nan)


def bench_presets(
    repo: Path,
    out: Path,
    budget: dict[str, list[str]],
    drill_overrides: list[str] | None,
    presets: tuple[str, ...] = PRESETS,
    seeds: tuple[int, ...] = (1, 2, 3),
    eval_episodes: int = 16,
    lanes: int = 2,
    reuse: bool = False,
) -> dict[str, Any]:
    """Train every task x preset x seed on its budget and, with ``drill_overrides``, every preset under the drill,
    ``lanes`` at a time.

    Args:
        budget: Per task, the overrides of its comparison runs beyond ``task=`` and ``algo=`` (its iterations).
        drill_overrides: The drill runs' overrides beyond ``algo=``, the seed and the drill (their task and budget);
            ``None``: no drill runs.
        reuse: Take the runs a previous bench completed with the same commands and configurations
            (:func:`benchmarks.runs.train`).

    Returns:
        ``compare[task][preset]``: its ``runs`` (:class:`LearningRun`, in seed order), ``final_return`` (statistics
        over seeds), ``lr_median`` and ``lr_at_floor``; ``drills[preset]``: a :class:`DrillResult` (empty without
        drill runs).
    """
    jobs: list[tuple[str, str, int]] = [(t, p, s) for t in budget for p in presets for s in seeds]
    if drill_overrides is not None:
        jobs += [("drill", p, 1) for p in presets]

    def one(job: tuple[str, str, int]) -> LearningRun | DrillResult:
        task, preset, seed = job
        if task == "drill":
            return drill_run(repo, out / "drill", preset, drill_overrides, eval_episodes, reuse)
        overrides = [f"task={task}", f"algo={preset}", *budget[task]]
        return learning_run(repo, out / task / preset, overrides, seed, eval_episodes, reuse=reuse)

    if drill_overrides is not None:
        (out / "drill").mkdir(parents=True, exist_ok=True)
    for task in budget:
        for preset in presets:
            (out / task / preset).mkdir(parents=True, exist_ok=True)
    # The threads only wait on the subprocesses; the jobs go to whichever lane is free, in order.
    with progress_bar(f"bench presets: {len(jobs)} trainings", len(jobs)) as bar, ThreadPoolExecutor(lanes) as pool:
        done = {}
        for job, result in zip(jobs, pool.map(one, jobs), strict=True):
            done[job] = result
            bar.advance()
    compare: dict[str, dict[str, Any]] = {}
    for task in budget:
        compare[task] = {}
        for preset in presets:
            runs = [done[(task, preset, s)] for s in seeds]
            lr_median, lr_at_floor = learning_rate_use(runs)
            compare[task][preset] = {
                "runs": runs,
                "final_return": over_seeds(runs),
                "lr_median": lr_median,
                "lr_at_floor": lr_at_floor,
            }
    return {
        "seeds": list(seeds),
        "eval_episodes": eval_episodes,
        "compare": compare,
        "drills": {p: done[("drill", p, 1)] for p in presets if ("drill", p, 1) in done},
    }


#: The ratio interval's coverage and resamples (:func:`ratio_interval`), as the bench's table names them.
INTERVAL_LEVEL = 0.95
INTERVAL_RESAMPLES = 10_000


def paired_returns(runs: list[LearningRun], base: list[LearningRun]) -> tuple[list[float], list[float]]:
    """The final returns of the seeds that both ``runs`` and ``base`` (the same seeds, in order) evaluated, as two
    lists paired by seed (:func:`ratio_interval`'s input)."""
    both = [(r, b) for r, b in zip(runs, base, strict=True) if r.final and b.final]
    return [r.final["return"]["mean"] for r, _ in both], [b.final["return"]["mean"] for _, b in both]


def ratio_interval(
    values: list[float],
    base: list[float],
    level: float = INTERVAL_LEVEL,
    resamples: int = INTERVAL_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Paired percentile bootstrap interval of ``mean(values) / mean(base)``, where ``values[i]`` and ``base[i]`` are
    one training seed's returns under two presets: the seeds are resampled with replacement, each drawn seed bringing
    both its returns, ``resamples`` times (a fixed generator: the same returns give the same interval).

    Paired, because a seed fixes both trainings' initial weights and env starts, and a preset trains as ``ppo`` does
    until one of its bounds binds: its returns can follow ``ppo``'s seed by seed, and resampling the two sides apart
    would count that shared spread as theirs twice. With a handful of seeds this is the spread the seeds allow, not a
    guarantee. ``None`` with fewer than 2 seeds (no spread to resample) or a ``base`` value <= 0 (a resampled mean of
    it could be 0 or of the other sign: the ratio is read for positive returns only). ``ValueError`` when the two
    differ in length.
    """
    import numpy as np

    if len(values) != len(base):
        raise ValueError(f"ratio_interval pairs seeds: {len(values)} returns against {len(base)}")
    if len(values) < 2 or min(base) <= 0.0:
        return None
    rng = np.random.default_rng(seed)
    a, b = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    draws = rng.integers(0, len(a), size=(resamples, len(a)))
    means_a, means_b = a[draws].mean(axis=1), b[draws].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means_a / means_b, [tail, 100.0 - tail])
    return float(low), float(high)


def plot_curves(runs_by_preset: dict[str, list[LearningRun]], path: Path, title: str) -> None:
    """Learning curves (mean and min-max band over seeds, per preset) against env steps, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for preset, all_runs in runs_by_preset.items():
        runs = [r for r in all_runs if r.curve]
        if not runs:
            continue
        low, high = max(r.curve[0].env_steps for r in runs), min(r.curve[-1].env_steps for r in runs)
        grid = np.linspace(low, max(low, high), 60)
        ys = np.stack([np.interp(grid, [p.env_steps for p in r.curve], [p.value for p in r.curve]) for r in runs])
        (line,) = ax.plot(grid, ys.mean(axis=0), label=f"{preset} (mean of {len(runs)} seeds)")
        ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (episodes ended in the iteration)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_lines():  # a run too short for an episode to end has no curve
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

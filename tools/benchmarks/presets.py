"""The presets compared on the same budget: learning curves over seeds, and behaviour under the same fire drill.

Each run is a real ``tools/train.py`` subprocess (``workers`` at a time, one torch thread each), so the figures are
what a user gets. From every run's TensorBoard events and summary (read through its run directory) this reads: the
learning curve (``Episode/return``: the mean return of the episodes that ended in an iteration), the final return
(the mean of that curve over the last ``tail`` iterations with finished episodes), env steps, wall time, and what the
adaptive schedule actually did with the learning rate (median, and the share of iterations at rsl-rl's 1e-5 floor).
The final policy is judged by the one evaluation protocol, :func:`robo_safe_rl.apps.evaluate.evaluate` (deterministic,
full episodes, test seeds), which rebuilds it with the one policy loader.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.runs import scalars, train
from robo_safe_rl.apps.evaluate import evaluate
from robo_safe_rl.progress import progress_bar, track
from robo_safe_rl.rundir import RunDir

#: rsl-rl's adaptive schedule never goes below this learning rate.
LR_FLOOR = 1.0e-5


@dataclass
class RunResult:
    """What one training run did."""

    preset: str
    seed: int
    drill: bool
    curve: list[tuple[int, float]]  # (env steps, mean return of the episodes that ended in that iteration)
    final_return: float | None
    reward_per_step_last: float | None
    env_steps: int
    wall_s: float
    lr_median: float
    lr_at_floor: float
    safety: dict[str, int]
    faults_injected: dict[str, int]
    status: str


def run_one(repo: Path, out: Path, preset: str, seed: int, iterations: int, drill: bool, extra: list[str]) -> RunResult:
    """Train one preset/seed (optionally under ``+drill=gauntlet``) and read back its results.

    The run directory is the benchmark's own: a previous benchmark's run in it is replaced (training refuses to
    write into a directory that holds a run, and its old summary must not be read as the new one).
    """
    run_dir = out / f"{preset}_seed{seed}{'_drill' if drill else ''}"
    args = [f"algo={preset}", f"seed={seed}", f"runner.max_iterations={iterations}", *extra]
    if drill:
        args.append("+drill=gauntlet")
    summary = train(repo, run_dir, args, out / f"{run_dir.name}.log")
    steps_per_iteration = summary["env_steps"] / max(summary["iterations"], 1)
    curve = [(int((it + 1) * steps_per_iteration), value) for it, _, value in scalars(run_dir, "Episode/return")]
    lrs = [value for _, _, value in scalars(run_dir, "Loss/learning_rate")]
    return RunResult(
        preset=preset,
        seed=seed,
        drill=drill,
        curve=curve,
        final_return=None,
        reward_per_step_last=summary["reward_per_step_last"],
        env_steps=summary["env_steps"],
        wall_s=summary["wall_s"],
        lr_median=statistics.median(lrs) if lrs else float("nan"),
        lr_at_floor=sum(lr <= LR_FLOOR * 1.0001 for lr in lrs) / len(lrs) if lrs else float("nan"),
        safety=summary["safety"],
        faults_injected=summary["faults_injected"],
        status=summary["status"],
    )


def bench_presets(
    repo: Path,
    out: Path,
    presets: tuple[str, ...] = ("ppo", "ppo_conservative", "ppo_safe"),
    seeds: tuple[int, ...] = (1, 2, 3),
    iterations: int = 250,
    workers: int = 2,
    eval_episodes: int = 16,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """Train every preset x seed, plus every preset under the gauntlet drill (first seed), and summarise."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(p, s, False) for p in presets for s in seeds] + [(p, seeds[0], True) for p in presets]
    with (
        progress_bar(f"bench presets: {len(jobs)} trainings", len(jobs)) as bar,
        ThreadPoolExecutor(max_workers=workers) as pool,
    ):

        def one(job: tuple[str, int, bool]) -> RunResult:
            result = run_one(repo, out, job[0], job[1], iterations, job[2], extra or [])
            bar.advance()
            return result

        results = list(pool.map(one, jobs))
    for r in track(results, "bench presets: evaluating the final policies"):
        run_dir = out / f"{r.preset}_seed{r.seed}{'_drill' if r.drill else ''}"
        summary = RunDir(run_dir).read_summary()
        if summary["final_checkpoint"]:
            r.final_return = evaluate(Path(summary["final_checkpoint"]), eval_episodes).mean_return
    table: dict[str, Any] = {}
    for preset in presets:
        runs = [r for r in results if r.preset == preset and not r.drill]
        finals = [r.final_return for r in runs if r.final_return is not None]
        drill = next(r for r in results if r.preset == preset and r.drill)
        table[preset] = {
            "final_return_mean": statistics.fmean(finals) if finals else None,
            "final_return_min": min(finals) if finals else None,
            "final_return_max": max(finals) if finals else None,
            "final_returns": finals,
            "env_steps": runs[0].env_steps,
            "wall_s_median": statistics.median(r.wall_s for r in runs),
            "lr_median": statistics.median(r.lr_median for r in runs),
            "lr_at_floor": statistics.fmean(r.lr_at_floor for r in runs),
            "drill": {
                "status": drill.status,
                "final_return": drill.final_return,
                "reward_per_step_last": drill.reward_per_step_last,
                "rollbacks": drill.safety.get("rollbacks", 0),
                "grad_steps_skipped": drill.safety.get("grad_steps_skipped", 0),
                "physics_errors": drill.safety.get("physics_errors", 0),
                "faults_injected": sum(drill.faults_injected.values()),
            },
        }
    return {
        "iterations": iterations,
        "seeds": list(seeds),
        "eval_episodes": eval_episodes,
        "presets": table,
        "runs": results,
    }


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """Learning curves (mean and min-max band over seeds, per preset) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for preset in result["presets"]:
        runs = [r for r in result["runs"] if r.preset == preset and not r.drill and r.curve]
        if not runs:
            continue
        grid = np.linspace(max(r.curve[0][0] for r in runs), min(r.curve[-1][0] for r in runs), 60)
        ys = np.stack([np.interp(grid, [s for s, _ in r.curve], [v for _, v in r.curve]) for r in runs])
        (line,) = ax.plot(grid, ys.mean(axis=0), label=f"{preset} (mean of {len(runs)} seeds)")
        ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (episodes ended in the iteration)")
    ax.set_title("RoboSafe/Ant-v0: presets on the same budget")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

"""Learning on a task: seeds trained on one budget, judged by the one evaluation protocol.

Each run is a ``tools/train.py`` subprocess with one torch thread and the envs in the trainer
(``task.num_workers=0``: the workers give the same trajectories bit for bit, so returns per env step do not depend on
them, and one run uses one core); ``jobs`` runs go at a time, one per core. From each run: its learning curve
(``Episode/return``, the mean return of the training episodes that ended in each iteration) against env steps and wall
time, and the final checkpoint's deterministic return by ``tools/evaluate.py`` (a subprocess too) on the test seeds.
The figure draws the mean and the min-max band over seeds, with the reference score as a horizontal line.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.runs import RUN_ENV, CurvePoint, curve, train
from robo_safe_rl.progress import progress_bar

#: rl-baselines3-zoo's PPO after 2M env steps on pybullet_envs' task of which each task here is the equivalent (its
#: benchmark table): the scores to reach in half the steps.
ZOO_PPO = {"ant": 2866.0, "half_cheetah": 2925.0, "hopper": 2575.0, "walker2d": 2110.0}
ZOO_PPO_ANT = ZOO_PPO["ant"]
#: Fixed for every learning run: one core each (see the module docstring).
LEARNING_OVERRIDES = ("torch_threads=1", "task.num_workers=0")


@dataclass
class LearningRun:
    """One seed's run."""

    seed: int
    run_dir: str
    curve: list[CurvePoint]
    env_steps: int
    wall_s: float
    status: str
    final: dict[str, Any] = field(default_factory=dict)  # the evaluation's return, length and metric statistics
    steps_per_iteration: float = 0.0
    #: The checkpoint ``final`` evaluated, and with how many episodes on which split.
    final_checkpoint: str | None = None
    final_protocol: tuple[int, str] | None = None


def iterations_for(env_steps: int, num_envs: int, steps_per_env: int) -> int:
    """Iterations that reach ``env_steps`` (rounded up) with ``num_envs x steps_per_env`` per iteration."""
    return math.ceil(env_steps / (num_envs * steps_per_env))


def task_iterations(task: str, env_steps: int) -> int:
    """Iterations that reach ``env_steps`` with ``task``'s own tuned rollout (``configs/agent/<task>.yaml``, composed as
    ``tools/train.py task=<task>`` composes it): the tasks' agent files differ in envs x steps per iteration."""
    from robo_safe_rl.apps.train import to_train_config
    from robo_safe_rl.config.compose import compose

    cfg = to_train_config(compose([f"task={task}", "run_dir=unused"]))
    return iterations_for(env_steps, cfg.task.num_envs, cfg.runner.num_steps_per_env)


def evaluate_checkpoint(repo: Path, checkpoint: str, episodes: int, split: str) -> dict[str, Any]:
    """``tools/evaluate.py CHECKPOINT --json`` in its own process (one torch thread, as the trainings): ``return`` and
    ``length`` statistics."""
    cmd = [sys.executable, "tools/evaluate.py", checkpoint, "--episodes", str(episodes), "--split", split, "--json"]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env={**os.environ, **RUN_ENV}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}: {done.stderr.strip()[-500:]}")
    doc = json.loads(done.stdout)
    return {"return": doc["return"], "length": doc["length"], "metric": doc["metric"]}


@dataclass
class TrackingPoint:
    """One checkpoint of a run, by the evaluation protocol: its env steps and its tracking errors' statistics."""

    iteration: int
    env_steps: int
    error_vel_xy: dict[str, float]
    error_vel_yaw: dict[str, float]


def tracking_curve(repo: Path, run: LearningRun, episodes: int, split: str = "test") -> list[TrackingPoint]:
    """Evaluate every checkpoint ``run`` saved (``model_<iteration>.pt``, in order) and read the task's tracking
    errors (the A1's ``error_vel_xy`` and ``error_vel_yaw``, episode means). The final checkpoint's evaluation by the
    same protocol (``run.final``) is taken, not run again."""
    checkpoints = sorted(Path(run.run_dir).glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    points = []
    for checkpoint in checkpoints:
        iteration = int(checkpoint.stem.split("_")[1])
        evaluated = run.final_protocol == (episodes, split) and run.final_checkpoint == str(checkpoint)
        metric = (run.final if evaluated else evaluate_checkpoint(repo, str(checkpoint), episodes, split))["metric"]
        points.append(
            TrackingPoint(
                iteration,
                int((iteration + 1) * run.steps_per_iteration),
                metric["error_vel_xy"],
                metric["error_vel_yaw"],
            )
        )
    return points


def bench_learning(
    repo: Path,
    out: Path,
    overrides: list[str],
    seeds: tuple[int, ...] = (1, 2, 3),
    eval_episodes: int = 16,
    split: str = "test",
    jobs: int = 1,
    reuse: bool = False,
) -> dict[str, Any]:
    """Train ``overrides`` once per seed, ``jobs`` at a time, and evaluate each final checkpoint (``reuse``: see
    :func:`benchmarks.runs.train`).

    Returns:
        ``runs`` (:class:`LearningRun` per seed) and ``final_return`` (``mean``, ``std`` over seeds, ``min``,
        ``max``, ``values``: the per-seed mean evaluation returns).
    """
    out.mkdir(parents=True, exist_ok=True)
    runs: list[LearningRun] = []
    bar_text = f"bench learning: {len(seeds)} trainings"
    # The threads only wait on the subprocesses.
    with progress_bar(bar_text, len(seeds)) as bar, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for run in pool.map(lambda seed: learning_run(repo, out, overrides, seed, eval_episodes, split, reuse), seeds):
            runs.append(run)
            bar.advance()
    return {
        "overrides": list(overrides),
        "seeds": list(seeds),
        "eval_episodes": eval_episodes,
        "runs": runs,
        "final_return": over_seeds(runs),
    }


def learning_run(
    repo: Path,
    out: Path,
    overrides: list[str],
    seed: int,
    eval_episodes: int = 16,
    split: str = "test",
    reuse: bool = False,
) -> LearningRun:
    """Train ``overrides`` with ``seed`` into ``out/seed<seed>`` (one core: :data:`LEARNING_OVERRIDES`) and evaluate
    its final checkpoint."""
    run_dir = out / f"seed{seed}"
    summary = train(repo, run_dir, [*LEARNING_OVERRIDES, *overrides, f"seed={seed}"], out / f"seed{seed}.log", reuse)
    run = LearningRun(
        seed, str(run_dir), curve(run_dir, summary), summary["env_steps"], summary["wall_s"], summary["status"]
    )
    run.steps_per_iteration = summary["env_steps"] / max(summary["iterations"], 1)
    if summary.get("final_checkpoint"):
        run.final = evaluate_checkpoint(repo, summary["final_checkpoint"], eval_episodes, split)
        run.final_checkpoint, run.final_protocol = summary["final_checkpoint"], (eval_episodes, split)
    return run


def over_seeds(runs: list[LearningRun]) -> dict[str, Any]:
    """``mean``, ``std`` (population), ``min``, ``max`` and ``values`` of the runs' mean evaluation returns (the runs
    without a final evaluation left out); ``None`` statistics when no run has one."""
    finals = [r.final["return"]["mean"] for r in runs if r.final]
    return {
        "mean": statistics.fmean(finals) if finals else None,
        "std": statistics.pstdev(finals) if finals else None,
        "min": min(finals) if finals else None,
        "max": max(finals) if finals else None,
        "values": finals,
    }


def plot_learning(result: dict[str, Any], path: Path, title: str, reference: float | None = ZOO_PPO_ANT) -> None:
    """Mean and min-max band over seeds of the training return, against env steps and against wall time (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs = [r for r in result["runs"] if r.curve]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, sharey=True)
    for ax, attr, label in ((axes[0], "env_steps", "env steps"), (axes[1], "wall_s", "wall time (s)")):
        if runs:
            low = max(getattr(r.curve[0], attr) for r in runs)
            high = min(getattr(r.curve[-1], attr) for r in runs)
            grid = np.linspace(low, max(high, low), 80)
            ys = np.stack(
                [np.interp(grid, [getattr(p, attr) for p in r.curve], [p.value for p in r.curve]) for r in runs]
            )
            (line,) = ax.plot(grid, ys.mean(axis=0), label=f"mean of {len(runs)} seeds")
            ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2, label="min-max")
        if reference is not None:
            ax.axhline(reference, color="gray", linestyle="--", label=f"rl-zoo PPO at 2M steps ({reference:,.0f})")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("training episode return (episodes ended per iteration)")
    axes[0].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def plot_tracking(curves: list[list[TrackingPoint]], path: Path, title: str, target: float) -> None:
    """Mean and min-max band over seeds of the evaluated planar tracking error against env steps (PNG), with the
    target as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=110)
    by_seed = [{p.iteration: p for p in c} for c in curves if c]
    common = sorted(set.intersection(*(set(seen) for seen in by_seed))) if by_seed else []
    if common:  # the iterations every seed saved
        steps = np.array([by_seed[0][it].env_steps for it in common], dtype=float)
        ys = np.array([[seen[it].error_vel_xy["mean"] for it in common] for seen in by_seed])
        (line,) = ax.plot(steps, ys.mean(axis=0), marker="o", label=f"mean of {len(by_seed)} seeds")
        ax.fill_between(steps, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2, label="min-max")
    ax.axhline(target, color="gray", linestyle="--", label=f"target ({target:g} m/s)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("planar velocity tracking error (m/s), deterministic")
    ax.set_ylim(bottom=0.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``PYTHONPATH=tools python -m benchmarks.learning [--seeds 1,2,3] [--split validation] [--episodes 16] [--out DIR]
    [--jobs 2] [OVERRIDES...]``: one comparison run of :func:`bench_learning` (a candidate's budget and values as
    overrides), its result as JSON on stdout. ``tools/bench.py --only learning`` is the full, reported run."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=main.__doc__)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated training seeds")
    parser.add_argument("--split", default="validation", help="evaluation seeds: validation (tuning) or test")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes per run")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at a time (one core each)")
    parser.add_argument("--out", type=Path, default=Path("logs") / "bench_learning_candidates", help="run folder")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of every run (runner.max_iterations=293 ...)")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    seeds = tuple(int(s) for s in args.seeds.split(","))
    r = bench_learning(repo, repo / args.out, args.overrides, seeds, args.episodes, args.split, args.jobs)
    doc = {
        "overrides": r["overrides"],
        "split": args.split,
        "final_return": r["final_return"],
        "runs": [
            {"seed": x.seed, "env_steps": x.env_steps, "wall_s": x.wall_s, "status": x.status, **x.final}
            for x in r["runs"]
        ],
    }
    print(json.dumps(doc, indent=2))
    return 0 if all(x.status == "completed" for x in r["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

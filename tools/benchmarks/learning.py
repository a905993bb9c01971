"""Learning on a task: seeds trained one after another on one budget, judged by the one evaluation protocol.

Each run is a ``tools/train.py`` subprocess with one torch thread and the envs in the trainer
(``task.num_workers=0``: the workers give the same trajectories bit for bit, so returns per env step do not depend on
them, and one run uses one core). From each run: its learning curve (``Episode/return``, the mean return of the
training episodes that ended in each iteration) against env steps and wall time, and the final checkpoint's
deterministic return by :func:`robo_safe_rl.apps.evaluate.evaluate` on the test seeds. The figure draws the mean and
the min-max band over seeds, with a reference score as a horizontal line.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.runs import CurvePoint, curve, train
from robo_safe_rl.apps.evaluate import evaluate
from robo_safe_rl.progress import progress_bar

#: rl-baselines3-zoo's PPO on AntBulletEnv-v0 after 2M env steps (its benchmark table): the score to reach.
ZOO_PPO_ANT = 2866.0
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
    final: dict[str, Any] = field(default_factory=dict)  # the evaluation's return and length statistics


def iterations_for(env_steps: int, num_envs: int, steps_per_env: int) -> int:
    """Iterations that reach ``env_steps`` (rounded up) with ``num_envs x steps_per_env`` per iteration."""
    return math.ceil(env_steps / (num_envs * steps_per_env))


def bench_learning(
    repo: Path,
    out: Path,
    overrides: list[str],
    seeds: tuple[int, ...] = (1, 2, 3),
    eval_episodes: int = 16,
    split: str = "test",
) -> dict[str, Any]:
    """Train ``overrides`` once per seed (one at a time) and evaluate each final checkpoint.

    Returns:
        ``runs`` (:class:`LearningRun` per seed) and ``final_return`` (``mean``, ``std`` over seeds, ``min``,
        ``max``, ``values``: the per-seed mean evaluation returns).
    """
    out.mkdir(parents=True, exist_ok=True)
    runs: list[LearningRun] = []
    with progress_bar(f"bench learning: {len(seeds)} trainings", len(seeds)) as bar:
        for seed in seeds:
            run_dir = out / f"seed{seed}"
            args = [*LEARNING_OVERRIDES, *overrides, f"seed={seed}"]
            summary = train(repo, run_dir, args, out / f"seed{seed}.log")
            run = LearningRun(
                seed, str(run_dir), curve(run_dir, summary), summary["env_steps"], summary["wall_s"], summary["status"]
            )
            if summary.get("final_checkpoint"):
                result = evaluate(summary["final_checkpoint"], eval_episodes, split=split)
                run.final = {"return": result.return_stats, "length": result.length_stats}
            runs.append(run)
            bar.advance()
    finals = [r.final["return"]["mean"] for r in runs if r.final]
    return {
        "overrides": list(overrides),
        "seeds": list(seeds),
        "eval_episodes": eval_episodes,
        "runs": runs,
        "final_return": {
            "mean": statistics.fmean(finals) if finals else None,
            "std": statistics.pstdev(finals) if finals else None,
            "min": min(finals) if finals else None,
            "max": max(finals) if finals else None,
            "values": finals,
        },
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


def main(argv: list[str] | None = None) -> int:
    """``PYTHONPATH=tools python -m benchmarks.learning [--seeds 1,2,3] [--split validation] [--episodes 16] [--out DIR]
    [OVERRIDES...]``: one comparison run of :func:`bench_learning` (a candidate's budget and values as overrides),
    its result as JSON on stdout. ``tools/bench.py --only learning`` is the full, reported run."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=main.__doc__)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated training seeds")
    parser.add_argument("--split", default="validation", help="evaluation seeds: validation (tuning) or test")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes per run")
    parser.add_argument("--out", type=Path, default=Path("logs") / "bench_learning_candidates", help="run folder")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of every run (runner.max_iterations=293 ...)")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    seeds = tuple(int(s) for s in args.seeds.split(","))
    r = bench_learning(repo, repo / args.out, args.overrides, seeds, args.episodes, args.split)
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
    import sys

    import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)

    sys.exit(main())

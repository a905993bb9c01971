"""The learning bench: curves against env steps and wall time from real runs, the final policy by the evaluation
protocol, and the figure with the reference line."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.cli import main as bench_main
from benchmarks.learning import LearningRun, iterations_for, plot_learning, task_iterations
from benchmarks.runs import curve
from robo_safe_rl.apps.evaluate import evaluate
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
#: The learning section's row of the Ant's seed 1 trained with two env workers.
WORKERS_ROW = ("ant, 2 env workers, alone", "1")


def spread(mean: float, std: float, low: float, high: float) -> str:
    """The tables' ``mean +- std [min, max]``, each to 0 digits."""
    return f"{mean:,.0f} +- {std:,.0f} [{low:,.0f}, {high:,.0f}]"


TINY = [
    "task.num_envs=2",
    "runner.num_steps_per_env=8",
    "runner.max_iterations=3",
    "+task.env_kwargs.max_episode_steps=5",
]


def test_iterations_for_a_budget() -> None:
    # 1M env steps at 16 envs x 64 steps = 1,024 per iteration: 976.56 -> 977 iterations (1,000,448 steps).
    assert iterations_for(1_000_000, 16, 64) == 977
    assert iterations_for(1024, 16, 64) == 1


def test_each_task_reaches_the_budget_with_its_own_rollout() -> None:
    assert task_iterations("ant", 1_000_000) == 977  # 16 envs x 64 steps (configs/agent/bullet_locomotion.yaml)
    # 16 envs x 512 steps (configs/agent/bullet_zoo.yaml): 122 x 8,192 = 999,424 falls short of 1M, 123 reach it.
    assert task_iterations("walker2d", 1_000_000) == 123


def test_curve_and_figure_of_a_real_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert train_main([*TINY, f"run_dir={run_dir}"]) == 0
    summary = RunDir(run_dir).read_summary()
    points = curve(run_dir, summary)
    # 5-step episodes end in every iteration of 8 steps: one point per iteration, at 2 envs x 8 steps each.
    assert [p.env_steps for p in points] == [16, 32, 48]
    assert points[0].wall_s == 0.0 and all(a.wall_s <= b.wall_s for a, b in itertools.pairwise(points))
    run = LearningRun(1, str(run_dir), points, summary["env_steps"], summary["wall_s"], summary["status"])
    figure = tmp_path / "learning.png"
    plot_learning({"runs": [run, run]}, figure, "tiny")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # the learning section at quick sizes: two tasks x two tiny trainings, and the workers' run
def test_the_learning_section_reports_each_task_and_the_workers_run_repeats_seed_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Benchmarks\n\n<!-- bench:learning:hopper -->\nkept\n<!-- /bench:learning:hopper -->\n\nprose\n")
    assert bench_main(["--quick", "--only", "learning", "--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    # A block per task, after the blocks of the family already there: the task not run keeps its block.
    starts = [text.index(f"<!-- bench:learning:{task} -->") for task in ("hopper", "ant", "half_cheetah")]
    assert starts == sorted(starts) and "kept\n<!-- /bench:learning:hopper -->" in text
    assert text.index("<!-- /bench:learning:half_cheetah -->") < text.index("prose")
    ant = text[starts[1] : starts[2]]
    assert WORKERS_ROW[0] in ant and "task=ant" in ant and "task=half_cheetah" not in ant
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[-1] == "completed":
            rows[(cells[0], cells[1])] = cells[4]
    assert set(rows) == {("ant", "1"), ("ant", "2"), ("half_cheetah", "1"), ("half_cheetah", "2"), WORKERS_ROW}
    # The env workers change no trajectory: the same seed in two worker processes ends at the same policy, whose
    # evaluation is the same to the printed digit.
    assert rows[WORKERS_ROW] == rows[("ant", "1")]
    out = REPO / "logs" / "bench_learning_quick"
    for task in ("ant", "half_cheetah"):
        means = []
        for seed in (1, 2):
            # tools/evaluate.py in its own process gave what the protocol gives here: one protocol, the test seeds.
            final = RunDir(out / task / f"seed{seed}").read_summary()["final_checkpoint"]
            r = evaluate(final, 2).return_stats
            assert rows[(task, str(seed))] == spread(r["mean"], r["std"], r["min"], r["max"]), (task, seed)
            means.append(r["mean"])
        # Over seeds: mean, population std, min and max of the seeds' means.
        std = statistics.pstdev(means)
        assert f"- {task}: {spread(statistics.fmean(means), std, min(means), max(means))} over seeds" in text
    assert "rl-zoo's PPO at 2M steps: 2,925" in capsys.readouterr().out


@pytest.mark.slow  # the A1 section at quick sizes: two tiny A1 trainings, every checkpoint evaluated
def test_the_a1_section_evaluates_every_checkpoint_of_each_seed(tmp_path: Path) -> None:
    doc = tmp_path / "BENCH.md"
    assert bench_main(["--quick", "--only", "a1", "--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.endswith("| completed |")]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2"]
    # 3 iterations of 4 envs x 8 steps, saved after iterations 1, 2 and 3 (model_0, model_1, model_2): a curve row
    # per checkpoint at its env steps, an error per seed.
    curve = [line for line in text.splitlines() if line.startswith(("| 32 |", "| 64 |", "| 96 |"))]
    assert len(curve) == 3 and all(len(line.strip("|").split("|")) == 3 for line in curve)
    # The last checkpoint is the final one: its curve point is the final evaluation's mean error, seed by seed.
    finals = [row.split("|")[4].strip().split(" +- ")[0] for row in rows]
    assert [cell.strip() for cell in curve[-1].strip("|").split("|")[1:]] == finals
    assert "Final error_vel_xy over seeds: " in text and "(target <= 0.2)" in text
    assert (REPO / "logs" / "bench_a1_quick" / "tracking_a1_flat.png").read_bytes()[:4] == b"\x89PNG"

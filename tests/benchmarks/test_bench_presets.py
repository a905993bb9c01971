"""The presets section: each preset on a task's learning budget, the ratio to ``ppo`` from the seeds' evaluations
with the interval their spread allows, a block per task, and each preset once under the gauntlet drill with every
fault accounted for."""

from __future__ import annotations

from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from benchmarks.cli import main as bench_main
from benchmarks.learning import LearningRun
from benchmarks.presets import paired_returns, ratio_interval

REPO = Path(__file__).resolve().parents[2]


def _rows(text: str, cells: int) -> list[list[str]]:
    """The Markdown table rows of ``text`` with ``cells`` cells (header and rule left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [r for r in rows if len(r) == cells and not set(r[0]) <= {"-"} and r[0] not in ("task", "preset")]


def test_the_ratio_interval_is_the_paired_bootstrap_of_the_seeds_means() -> None:
    # Worked: a preset's seeds [1, 2] against ppo's [1, 1]: ppo's resampled mean is always 1, the preset's 1, 1.5 or 2
    # (a quarter, a half, a quarter of the resamples), so the 2.5th and 97.5th percentiles of the ratio are 1 and 2.
    assert ratio_interval([1.0, 2.0], [1.0, 1.0]) == (1.0, 2.0)
    # Paired: a preset that returns what ppo returns, seed by seed, is 1.0 in every resample, however far apart the
    # seeds are (resampled apart, [1, 2, 3] against [1, 2, 3] would reach 1/3 and 3).
    assert ratio_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == (1.0, 1.0)
    assert ratio_interval([3.0, 3.0, 3.0], [2.0, 2.0, 2.0]) == (1.5, 1.5)  # no spread, no interval
    # Three draws of [1, 2, 3] are all the lowest (mean 1) or all the highest (mean 3) in 1 of 27 resamples each: more
    # than the 2.5% tail, so the extremes are the interval's ends.
    assert ratio_interval([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == (0.5, 1.5)
    # ppo's side moves with the draw: seeds (2, 1) and (4, 4) give 2/1, 6/5 or 4/4, from 1 to 2.
    assert ratio_interval([2.0, 4.0], [1.0, 4.0]) == (1.0, 2.0)
    assert ratio_interval([5.0], [2.0]) is None  # one seed: no spread to resample
    assert ratio_interval([1.0, 2.0], [0.0, 1.0]) is None  # a resampled mean of ppo's returns could be 0
    with pytest.raises(ValueError, match="2 returns against 3"):
        ratio_interval([1.0, 2.0], [1.0, 2.0, 3.0])


def test_a_seed_either_preset_did_not_evaluate_leaves_the_pairs() -> None:
    def run(seed: int, final_return: float | None) -> LearningRun:
        final = {} if final_return is None else {"return": {"mean": final_return}}
        return LearningRun(seed, f"seed{seed}", [], 0, 0.0, "completed" if final else "crashed", final)

    runs = [run(1, 1.0), run(2, None), run(3, 3.0), run(4, 4.0)]
    base = [run(1, 2.0), run(2, 2.0), run(3, None), run(4, 5.0)]
    assert paired_returns(runs, base) == ([1.0, 4.0], [2.0, 5.0])


@pytest.mark.slow  # the presets section at quick sizes: three presets x two tiny Ant trainings, and three drill runs
def test_the_presets_section_compares_each_preset_with_ppo_and_drills_each(tmp_path: Path) -> None:
    doc = tmp_path / "BENCH.md"
    # Blocks measured before: the Ant's is replaced, another task's stays as it was.
    kept = "<!-- bench:presets:hopper -->\nthe hopper's rows\n<!-- /bench:presets:hopper -->"
    stale = "<!-- bench:presets:ant -->\nthe old ant rows\n<!-- /bench:presets:ant -->"
    doc.write_text(f"# Benchmarks\n\n{stale}\n\n{kept}\n", encoding="utf-8")
    assert bench_main(["--quick", "--only", "presets", "--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert kept in text and "the old ant rows" not in text and text.count("<!-- bench:presets:ant -->") == 1
    ant = text[text.index("<!-- bench:presets:ant -->") : text.index("<!-- /bench:presets:ant -->")]
    compare = _rows(ant, 9)
    assert [r[0] for r in compare] == ["`ppo`", "`ppo_conservative`", "`ppo_safe`"]
    base = None
    for row in compare:
        seeds = [float(v.replace(",", "")) for v in row[2].split(" / ")]
        assert len(seeds) == 2 and row[5] == "96"  # 3 iterations x 4 envs x 8 steps
        # The mean over seeds is that of the seeds' returns (each rounded to 0 digits in the table), and the ratio is
        # of the means, inside its bootstrap interval.
        mean = float(row[1].split(" +- ")[0].replace(",", ""))
        assert mean == pytest.approx(sum(seeds) / 2, abs=1.0)
        base = mean if base is None else base
        assert float(row[3]) == pytest.approx(mean / base, abs=0.01 + 1.0 / base)
        if row[0] != "`ppo`":  # the reference has no interval
            low, high = (float(v) for v in row[4].strip("[]").split(", "))
            assert low - 0.01 <= float(row[3]) <= high + 0.01
    assert compare[0][3] == "1.00" and compare[0][4] == "n/a"
    drill = text[text.index("<!-- bench:presets:drill -->") : text.index("<!-- /bench:presets:drill -->")]
    drills = _rows(drill, 8)
    assert [r[0] for r in drills] == ["`ppo`", "`ppo_conservative`", "`ppo_safe`"]
    for row in drills:
        # 8 iterations x 4 envs x 8 steps, completed under the drill, and every injected fault met by the stack.
        assert row[1] == "completed" and row[2] == "256" and int(row[3]) > 0 and int(row[4]) >= 1
    assert (REPO / "logs" / "bench_presets_quick" / "presets_ant.png").read_bytes()[:4] == b"\x89PNG"

"""The presets section: each preset on a task's learning budget, the ratio to ``ppo`` from the seeds' evaluations,
and each preset once under the gauntlet drill with every fault accounted for."""

from __future__ import annotations

from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from benchmarks.cli import main as bench_main

REPO = Path(__file__).resolve().parents[2]


def _rows(text: str, cells: int) -> list[list[str]]:
    """The Markdown table rows of ``text`` with ``cells`` cells (header and rule left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [r for r in rows if len(r) == cells and not set(r[0]) <= {"-"} and r[0] not in ("task", "preset")]


@pytest.mark.slow  # the presets section at quick sizes: three presets x two tiny Ant trainings, and three drill runs
def test_the_presets_section_compares_each_preset_with_ppo_and_drills_each(tmp_path: Path) -> None:
    doc = tmp_path / "BENCH.md"
    assert bench_main(["--quick", "--only", "presets", "--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    compare = _rows(text, 9)
    assert [(r[0], r[1]) for r in compare] == [("ant", "`ppo`"), ("ant", "`ppo_conservative`"), ("ant", "`ppo_safe`")]
    base = None
    for row in compare:
        seeds = [float(v.replace(",", "")) for v in row[3].split(" / ")]
        assert len(seeds) == 2 and row[5] == "96"  # 3 iterations x 4 envs x 8 steps
        # The mean over seeds is that of the seeds' returns (each rounded to 0 digits in the table), and the ratio is
        # of the means.
        mean = float(row[2].split(" +- ")[0].replace(",", ""))
        assert mean == pytest.approx(sum(seeds) / 2, abs=1.0)
        base = mean if base is None else base
        assert float(row[4]) == pytest.approx(mean / base, abs=0.01 + 1.0 / base)
    assert compare[0][4] == "1.00"
    drills = _rows(text, 8)
    assert [r[0] for r in drills] == ["`ppo`", "`ppo_conservative`", "`ppo_safe`"]
    for row in drills:
        # 8 iterations x 4 envs x 8 steps, completed under the drill, and every injected fault met by the stack.
        assert row[1] == "completed" and row[2] == "256" and int(row[3]) > 0 and int(row[4]) >= 1
    assert (REPO / "logs" / "bench_presets_quick" / "presets_ant.png").read_bytes()[:4] == b"\x89PNG"

"""tools/bench.py's wake section: one worker hand-over timed to another core, on the same core, and polling."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchmarks.cli import main
from benchmarks.wake import bench_wake

LINUX_2_CORES = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


@pytest.mark.skipif(not LINUX_2_CORES, reason="needs Linux and 2 cores")
def test_quick_wake_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    assert main(["--quick", "--only", "wake", "--write", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "Command: `python tools/bench.py --quick --only wake` · machine: " in out
    for row in ("to another core, waiting in `poll`", "on the trainer's own core", "to another core, polling"):
        cells = re.search(rf"\| {re.escape(row)}[^|]* \| ([\d,]+) \| ([\d,]+) \|", out)
        assert cells is not None, row
        median, p90 = (int(c.replace(",", "")) for c in cells.groups())
        assert 0 < median <= p90  # a byte each way cannot take no time, and the 90th percentile is not below the median
    assert doc.read_text().count("<!-- bench:wake -->") == 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning is Linux only")
def test_one_core_says_why_it_measures_nothing_and_keeps_the_affinity() -> None:
    before = os.sched_getaffinity(0)
    only = min(before)
    os.sched_setaffinity(0, {only})
    try:
        r = bench_wake(round_trips=5, rounds=1)
        assert os.sched_getaffinity(0) == {only}
    finally:
        os.sched_setaffinity(0, before)
    assert r == {"skipped": f"one core available ([{only}]): there is no other core to wake"}


@pytest.mark.skipif(not LINUX_2_CORES, reason="needs Linux and 2 cores")
def test_the_measurement_gives_the_callers_cores_back() -> None:
    before = os.sched_getaffinity(0)
    r = bench_wake(round_trips=5, rounds=1, gap_s=1e-4)
    assert os.sched_getaffinity(0) == before
    assert set(r["cases"]) == {"other_core", "same_core", "other_core_polling"}

"""tools/bench.py: sections print Markdown with command, machine and date, and --write replaces only their section."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.cli import main, write_section

REPO = Path(__file__).resolve().parents[2]


def test_write_replaces_only_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nintro\n\n<!-- bench:env -->\nold\n<!-- /bench:env -->\n\nnotes that stay\n")
    write_section(doc, "env", "<!-- bench:env -->\nnew\n<!-- /bench:env -->")
    write_section(doc, "guard", "<!-- bench:guard -->\nadded\n<!-- /bench:guard -->")
    text = doc.read_text()
    assert "old" not in text and "new" in text and "notes that stay" in text and "intro" in text
    assert text.rstrip().endswith("<!-- /bench:guard -->")


def test_a_new_block_goes_after_its_family(tmp_path: Path) -> None:
    # A task's first presets block joins the presets blocks in their section, not the file's end.
    doc = tmp_path / "BENCHMARKS.md"
    ant = "<!-- bench:presets:ant -->\nant\n<!-- /bench:presets:ant -->"
    drill = "<!-- bench:presets:drill -->\ndrill\n<!-- /bench:presets:drill -->"
    hopper = "<!-- bench:presets:hopper -->\nhopper\n<!-- /bench:presets:hopper -->"
    later = "## Later section\n\n<!-- bench:a1 -->\na1\n<!-- /bench:a1 -->\n"
    doc.write_text(f"# Benchmarks\n\n## Presets\n\n{ant}\n\n{drill}\n\nprose\n\n{later}")
    write_section(doc, "presets:hopper", hopper)
    assert doc.read_text() == f"# Benchmarks\n\n## Presets\n\n{ant}\n\n{drill}\n\n{hopper}\n\nprose\n\n{later}"
    write_section(doc, "presets:hopper", hopper.replace("\nhopper\n", "\nagain\n"))  # then replaced in place
    assert (
        doc.read_text().count("bench:presets:hopper -->") == 2
        and "again\n<!-- /bench:presets:hopper -->\n\nprose" in doc.read_text()
    )


def test_quick_section_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "B.md"
    assert main(["--quick", "--only", "safestep", "--write", str(doc)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!-- bench:safestep -->")
    assert "Command: `python tools/bench.py --quick --only safestep`" in out  # --write and its path are not shown
    assert "| SafeStep (defaults) |" in out and "date: " in out
    assert doc.read_text().count("<!-- bench:safestep -->") == 1


def test_unknown_section_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "warp"]) == 2
    assert "unknown section(s) ['warp']" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--only", "presets", "--tasks", "ant,humanoid"], "--tasks 'ant,humanoid': expected some of ['ant', "),
        (["--only", "learning", "--tasks", ","], "--tasks ',': expected some of "),
        (["--only", "presets,env", "--tasks", "ant"], "applies to ['presets', 'learning'] only, not to ['env']"),
        (["--only", "presets", "--seeds", "1,1"], "--seeds '1,1': expected distinct integers in [0, 4294967295]"),
        (["--only", "learning", "--seeds=-1,2"], "--seeds '-1,2': expected distinct integers in [0, "),
        (["--only", "learning", "--seeds", "1,two"], "--seeds '1,two': expected distinct integers in [0, "),
        (["--only", "learning", "--seeds", "1,,2"], "--seeds '1,,2': expected distinct integers in [0, "),
        (["--only", "learning", "--seeds", "1,4294967296"], "--seeds '1,4294967296': expected distinct integers in "),
        # 5,000 digits: past int()'s conversion limit, refused as any seed past the bound is (no traceback).
        (["--only", "learning", "--seeds", "1," + "9" * 5000], "expected distinct integers in [0, 4294967295]"),
        (["--only", "env", "--seeds", "4,5"], "--seeds applies to ['presets', 'learning'] only, not to ['env']"),
        (["--only", "learning,a1", "--reuse"], "--reuse applies to ['presets', 'learning'] only, not to ['a1']"),
    ],
)
def test_tasks_and_seeds_are_checked_first(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_tool_runs_as_a_subprocess() -> None:
    done = subprocess.run(
        [sys.executable, "tools/bench.py", "--quick", "--only", "safestep"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<!-- /bench:safestep -->" in done.stdout
    assert "bench:" not in done.stderr and "\x1b" not in done.stderr + done.stdout  # no bar into a pipe


def test_a_terminal_shows_which_section_runs(on_terminal: Callable[..., Any]) -> None:
    done = on_terminal([sys.executable, "tools/bench.py", "--quick", "--only", "safestep"], cwd=REPO)
    assert done.returncode == 0, done.terminal[-2000:]
    assert "bench: safestep (1/1)" in done.terminal  # before: nothing until the section's block
    assert done.stdout.startswith("<!-- bench:safestep -->") and "\x1b" not in done.stdout

"""``python tools/inspect_checkpoint.py PATH [--json] [--all] [--no-optimizer]``: find NaN/Inf in checkpoints.

Exit codes: 0 every inspected checkpoint clean; 1 non-finite values found; 2 unusable input (one line on stderr per
file that could not be read, no traceback).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from robo_safe_rl.checkpoint.report import (
    CheckpointReport,
    RunReport,
    Status,
    exit_code,
    inspect_file,
    inspect_run_dir,
    to_json,
)
from robo_safe_rl.checkpoint.stats import Part, TensorRow
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.terminal import PIPE_WIDTH, QuietConsole, printable, write_stdout

Row = tuple[list[str], str | None]
"""Cells of one table row and its rich style."""

_STATUS_STYLE = {Status.CLEAN: "green", Status.CORRUPT: "bold red", Status.UNREADABLE: "yellow"}


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="inspect_checkpoint",
        description="Find NaN/Inf tensors in a checkpoint, or the newest clean checkpoint of a run directory.",
        epilog="Exit codes: 0 all clean, 1 non-finite values found, 2 unusable input.",
    )
    parser.add_argument("path", type=Path, help="a checkpoint file (.pt, .pth, .safetensors) or a run directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--all", action="store_true", help="list every tensor, not only the non-finite ones")
    parser.add_argument("--no-optimizer", action="store_true", help="skip optimizer state (Adam moments, steps)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the inspector.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        The exit code: 0 clean, 1 non-finite values found, 2 unusable input.
    """
    args = build_parser().parse_args(argv)
    include_optimizer = not args.no_optimizer
    report: CheckpointReport | RunReport | None
    dir_error = None
    try:
        if args.path.is_dir():
            report = inspect_run_dir(args.path, include_optimizer=include_optimizer)
        else:
            report = inspect_file(args.path, include_optimizer=include_optimizer)
    except CheckpointError as err:
        if args.path.is_dir():
            report, dir_error = None, str(err).removeprefix(f"{args.path}: ")
        else:
            report = CheckpointReport.unreadable(args.path, err, include_optimizer=include_optimizer)
    code = 2 if report is None else exit_code(report)

    for failed in _unreadable(report):
        print(printable(f"inspect_checkpoint: {failed.path}: {failed.error}"), file=sys.stderr)
    if dir_error is not None:
        print(printable(f"inspect_checkpoint: {args.path}: {dir_error}"), file=sys.stderr)
    for warning in report.warnings if isinstance(report, RunReport) else []:
        print(printable(f"inspect_checkpoint: warning: {args.path}: {warning}"), file=sys.stderr)

    if args.json:
        doc = to_json(report, path=args.path, all_rows=args.all, include_optimizer=include_optimizer, error=dir_error)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif report is not None:
        _print_human(report, all_rows=args.all)
    return code


def _print_human(report: CheckpointReport | RunReport, *, all_rows: bool) -> None:
    """Tables with colour on a terminal; on a pipe, plain Markdown tables without colour, wrapping or padding."""
    if sys.stdout.isatty():
        console = QuietConsole()
        _render(console, report, box.SIMPLE_HEAD, all_rows=all_rows)
        return
    buffer = io.StringIO()
    _render(Console(file=buffer, width=PIPE_WIDTH, color_system=None), report, box.MARKDOWN, all_rows=all_rows)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    write_stdout("".join(line + "\n" for line in lines if line))


def _render(console: Console, report: CheckpointReport | RunReport, style: box.Box, *, all_rows: bool) -> None:
    if isinstance(report, RunReport):
        _print_run(console, report, style)
    elif report.status is not Status.UNREADABLE:
        _print_file(console, report, style, all_rows=all_rows)


def _unreadable(report: CheckpointReport | RunReport | None) -> list[CheckpointReport]:
    if report is None:
        return []
    checkpoints = report.checkpoints if isinstance(report, RunReport) else [report]
    return [c for c in checkpoints if c.status is Status.UNREADABLE]


def _print_table(console: Console, style: box.Box, headers: list[str], rows: list[Row], fold: int) -> None:
    """Print a table that fits the console: every column keeps its natural width except column ``fold``, which folds
    into the width left. Where even that leaves too little (a narrow terminal), print one line per row instead."""
    rows = [([printable(cell) for cell in cells], row_style) for cells, row_style in rows]
    widths = [max([len(header), *(len(cells[i]) for cells, _ in rows)]) for i, header in enumerate(headers)]
    # A column costs its width, one space of padding on either side and one of divider; the edges two more.
    left = console.width - sum(w + 3 for i, w in enumerate(widths) if i != fold) - 3
    if left < min(widths[fold], 16):
        for cells, row_style in rows:
            pairs = [f"{header} {cell}" for header, cell in zip(headers[1:], cells[1:], strict=True) if cell]
            line = f"{printable(cells[0])}: " + printable(", ".join(pairs))
            console.print(escape(line), style=row_style, highlight=False)
        return
    table = Table(box=style, padding=(0, 1))
    for i, header in enumerate(headers):
        justify = "right" if all(_is_number(cells[i]) for cells, _ in rows) else "left"
        if i == fold:
            table.add_column(header, justify=justify, overflow="fold", max_width=left)
        else:
            table.add_column(header, justify=justify, no_wrap=True, min_width=widths[i])
    for cells, row_style in rows:
        table.add_row(*map(escape, cells), style=row_style)
    console.print(table)


def _is_number(cell: str) -> bool:
    return cell == "-" or cell.lstrip("-").replace(".", "", 1).replace("e", "", 1).replace("+", "").isdigit()


def _print_file(console: Console, report: CheckpointReport, style: box.Box, *, all_rows: bool) -> None:
    rows = report.rows if all_rows else report.notable_rows
    if rows:
        headers = ["tensor", "dtype", "shape", "numel", "NaN", "+Inf", "-Inf", "min", "max", "max|x|"]
        noted = any(row.note for row in rows)
        cells = [
            (_row_cells(row) + ([row.note or ""] if noted else []), None if row.is_finite else "red") for row in rows
        ]
        if all_rows:
            console.print("every tensor:", highlight=False)
        else:
            caption = "non-finite values" if all(not r.is_finite for r in rows) else "non-finite values or notes"
            console.print(f"tensors with {caption}:", highlight=False)
        _print_table(console, style, headers + (["note"] if noted else []), cells, fold=0)
    bad, total = len(report.nonfinite_rows), len(report.rows)
    status = f"[{_STATUS_STYLE[report.status]}]{report.status.value}[/]"
    iteration = "not stored" if report.iteration is None else str(report.iteration)
    fmt = report.format.value if report.format is not None else "-"
    path = escape(printable(str(report.path)))
    console.print(f"{path}: {status}; iteration {iteration}; format {fmt}", highlight=False)
    unscanned = sum(row.scope == "none" for row in report.rows)
    whole = sum(row.scope == "storage" for row in report.rows)
    extra = (f", {unscanned} not scannable" if unscanned else "") + (
        f", {whole} counted over their whole storage" if whole else ""
    )
    console.print(f"tensors: {total} in all, {bad} with non-finite values{extra}", highlight=False)
    parts = report.part_counts()
    shown = [p for p in Part if p is not Part.OPTIMIZER or report.include_optimizer]
    by_part = ", ".join(f"{p.value} {parts[p][1]}/{parts[p][0]}" for p in shown)
    skipped = "" if report.include_optimizer else " (optimizer state skipped)"
    console.print(f"by part (non-finite/tensors): {by_part}{skipped}", highlight=False)


def _print_run(console: Console, report: RunReport, style: box.Box) -> None:
    headers = [
        "checkpoint",
        "status",
        "iteration",
        "tensors",
        "non-finite",
        "NaN",
        "+Inf",
        "-Inf",
        "parts hit / reason",
    ]
    rows = []
    for c in report.checkpoints:
        parts = c.part_counts()
        if c.status is Status.UNREADABLE:
            where, numbers = c.error or "", ["-"] * 5
        else:
            where = ", ".join(f"{p.value} {parts[p][1]}" for p in Part if parts[p][1])
            totals = [sum(getattr(r, k) for r in c.rows) for k in ("nan", "posinf", "neginf")]
            numbers = [str(n) for n in (len(c.rows), len(c.nonfinite_rows), *totals)]
        iteration = "-" if c.iteration is None else str(c.iteration)
        rows.append(([c.path.name, c.status.value, iteration, *numbers, where], _STATUS_STYLE[c.status]))
    _print_table(console, style, headers, rows, fold=len(headers) - 1)
    console.print(escape(printable(report.verdict())), highlight=False)


def _row_cells(row: TensorRow) -> list[str]:
    return [
        row.name,
        row.dtype,
        str(row.shape),
        str(row.numel),
        str(row.nan),
        str(row.posinf),
        str(row.neginf),
        *(_number(v) for v in (row.min, row.max, row.max_abs)),
    ]


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.6g}"

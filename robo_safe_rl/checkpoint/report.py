"""Inspect one checkpoint or a whole run directory for NaN/Inf tensors, and find the checkpoint to resume from."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from robo_safe_rl.checkpoint.archive import open_reader
from robo_safe_rl.checkpoint.containers import Format, detect_format, read_contents
from robo_safe_rl.checkpoint.scan import Scanner
from robo_safe_rl.checkpoint.stats import Part, TensorRow, classify_part
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.rundir import CHECKPOINT_FILES, RunDir, checkpoint_iteration

logger = logging.getLogger(__name__)

JSON_SCHEMA = "robo_safe_rl.checkpoint_report/1"
"""Value of the ``schema`` field of the JSON document; the number changes when a field changes meaning."""


class Status(str, Enum):
    """Verdict on one checkpoint file."""

    CLEAN = "clean"
    CORRUPT = "corrupt"
    UNREADABLE = "unreadable"


@dataclass
class CheckpointReport:
    """What inspecting one checkpoint file found.

    Attributes:
        path: The file.
        status: ``clean`` (every inspected tensor finite), ``corrupt`` (some non-finite element) or ``unreadable``.
        rows: One row per inspected tensor, in file order (empty when unreadable).
        iteration: Training iteration stored in the file; ``None`` when it stores none or is unreadable.
        format: Container format; ``None`` when unreadable.
        size_bytes: File size; ``None`` when it cannot be read.
        include_optimizer: Whether optimizer state was inspected.
        error: Why the file is unreadable (without the path); ``None`` otherwise.
    """

    path: Path
    status: Status
    rows: list[TensorRow] = field(default_factory=list)
    iteration: int | None = None
    format: Format | None = None
    size_bytes: int | None = None
    include_optimizer: bool = True
    error: str | None = None

    @classmethod
    def unreadable(cls, path: Path, err: CheckpointError, *, include_optimizer: bool = True) -> CheckpointReport:
        """Build the report of a file that could not be inspected, from the error that said why."""
        reason = str(err).removeprefix(f"{path}: ")
        try:
            size = path.stat().st_size if path.is_file() else None
        except OSError:  # gone or unreachable since: the reason already says what was wrong
            size = None
        return cls(
            path=path, status=Status.UNREADABLE, size_bytes=size, include_optimizer=include_optimizer, error=reason
        )

    @property
    def nonfinite_rows(self) -> list[TensorRow]:
        """Rows of the tensors that hold at least one non-finite element."""
        return [row for row in self.rows if not row.is_finite]

    @property
    def notable_rows(self) -> list[TensorRow]:
        """Rows shown without ``--all``: non-finite tensors, and tensors not counted element by element."""
        return [row for row in self.rows if not row.is_finite or row.scope != "tensor"]

    def part_counts(self) -> dict[Part, tuple[int, int]]:
        """Return ``{part: (tensors, tensors with non-finite values)}`` for every part, zeros included."""
        counts = {part: [0, 0] for part in Part}
        for row in self.rows:
            counts[row.part][0] += 1
            counts[row.part][1] += 0 if row.is_finite else 1
        return {part: (n, bad) for part, (n, bad) in counts.items()}

    def to_dict(self, *, all_rows: bool = False) -> dict[str, Any]:
        """Return the report as JSON-ready values; rows of finite tensors only with ``all_rows``."""
        return {
            "path": str(self.path),
            "iteration": self.iteration,
            "status": self.status.value,
            "error": self.error,
            "format": None if self.format is None else self.format.value,
            "size_bytes": self.size_bytes,
            "tensors": len(self.rows),
            "nonfinite_tensors": len(self.nonfinite_rows),
            "nan": sum(row.nan for row in self.rows),
            "posinf": sum(row.posinf for row in self.rows),
            "neginf": sum(row.neginf for row in self.rows),
            "parts": {
                part.value: {"tensors": n, "nonfinite_tensors": bad} for part, (n, bad) in self.part_counts().items()
            },
            "not_scanned_tensors": sum(row.scope == "none" for row in self.rows),
            "rows": [row.to_dict() for row in (self.rows if all_rows else self.notable_rows)],
        }


@dataclass
class RunReport:
    """What inspecting every ``model_<iter>.pt`` of a run directory found.

    Attributes:
        path: The run directory.
        checkpoints: One report per checkpoint, in iteration order (the stored ``iter`` where it is known, else the
            number in the file name).
        include_optimizer: Whether optimizer state was inspected.
        warnings: One sentence per checkpoint whose stored ``iter`` differs from the number in its name.
    """

    path: Path
    checkpoints: list[CheckpointReport]
    include_optimizer: bool = True
    warnings: list[str] = field(default_factory=list)

    @property
    def last_clean(self) -> CheckpointReport | None:
        """The newest clean checkpoint: the one to resume from. ``None`` when no checkpoint is clean."""
        clean = [c for c in self.checkpoints if c.status is Status.CLEAN]
        return clean[-1] if clean else None

    @property
    def first_corrupt(self) -> CheckpointReport | None:
        """The first corrupt checkpoint after :attr:`last_clean` (after none: the first of the run).

        It marks where the trouble the user would resume past begins; ``None`` when nothing newer than the resume
        point is corrupt. Corrupt files older than a clean one (a run that recovered) are not the answer here;
        they remain visible in :attr:`checkpoints`.
        """
        start = self.checkpoints.index(self.last_clean) + 1 if self.last_clean is not None else 0
        return next((c for c in self.checkpoints[start:] if c.status is Status.CORRUPT), None)

    def verdict(self) -> str:
        """One sentence for a human: where to resume and where corruption starts."""
        last, first = self.last_clean, self.first_corrupt
        if last is None and first is None:
            return "no checkpoint could be read"
        if last is None:
            return f"no clean checkpoint; corruption starts at {first.path.name}"  # type: ignore[union-attr]
        if first is None:
            return f"resume from {last.path.name}; no corrupt checkpoint after it"
        return f"resume from {last.path.name}; corruption starts at {first.path.name}"


def inspect_file(path: str | Path, *, include_optimizer: bool = True) -> CheckpointReport:
    """Inspect every tensor of one checkpoint file for NaN and Inf.

    Args:
        path: A checkpoint file (torch zip or legacy, or safetensors).
        include_optimizer: Also inspect optimizer state (Adam moments and steps).

    Returns:
        The report, status ``clean`` or ``corrupt``.

    Raises:
        CheckpointError: The file cannot be inspected (see :func:`~robo_safe_rl.checkpoint.loading.open_checkpoint`).
    """
    path = Path(path)
    skip = None if include_optimizer else _is_optimizer
    fmt = detect_format(path)
    with open_reader(path) as reader:
        try:
            scanner = Scanner(reader, read_contents(reader, fmt))
            rows, iteration = scanner.rows(skip), scanner.iteration()
        except CheckpointError:
            raise
        except (RuntimeError, ValueError, TypeError, LookupError, AttributeError, ArithmeticError, MemoryError) as err:
            # Not expected for any file: the readers check what they read. A file that still finds a gap gets the
            # contract's one-line reason and exit 2, never a traceback or exit 1, and the trace goes to the log.
            logger.debug("inspecting %s failed unexpectedly", path, exc_info=True)
            raise CheckpointError(f"{path}: cannot be inspected ({type(err).__name__}: {err})") from err
        size = reader.size
    status = Status.CLEAN if all(row.is_finite for row in rows) else Status.CORRUPT
    return CheckpointReport(
        path=path,
        status=status,
        rows=rows,
        iteration=iteration,
        format=fmt,
        size_bytes=size,
        include_optimizer=include_optimizer,
    )


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Return the ``model_<iter>.pt`` files of a run directory, sorted by iteration (numerically).

    Raises:
        CheckpointError: ``run_dir`` is not a directory or holds no checkpoint.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir}: not a directory")
    try:
        found = RunDir(run_dir).checkpoints()
    except OSError as err:
        raise CheckpointError(f"{run_dir}: cannot list it ({err.strerror or err})") from err
    if not found:
        raise CheckpointError(f"{run_dir}: no checkpoints: a run directory holds files named {CHECKPOINT_FILES}")
    return found


def inspect_run_dir(path: str | Path, *, include_optimizer: bool = True) -> RunReport:
    """Inspect every checkpoint of a run directory; files that cannot be read are reported as ``unreadable``.

    Args:
        path: A run directory holding ``model_<iter>.pt`` files.
        include_optimizer: Also inspect optimizer state.

    Returns:
        The run report; an unreadable file counts as neither clean nor corrupt.

    Raises:
        CheckpointError: ``path`` is not a directory or holds no checkpoint.
    """
    reports, warnings = [], []
    for file in list_checkpoints(path):
        try:
            reports.append(inspect_file(file, include_optimizer=include_optimizer))
        except CheckpointError as err:
            reports.append(CheckpointReport.unreadable(file, err, include_optimizer=include_optimizer))
    named = {id(r): checkpoint_iteration(r.path) or 0 for r in reports}
    for report in reports:
        if report.iteration is not None and report.iteration != named[id(report)]:
            warnings.append(
                f"{report.path.name} holds iter {report.iteration}, not {named[id(report)]}: ordered by the stored "
                "iteration (a renamed or copied checkpoint?)"
            )
    # The stored iteration is what training resumes from, so it, not the file name, decides which file is newest.
    reports.sort(key=lambda r: (named[id(r)] if r.iteration is None else r.iteration, named[id(r)]))
    return RunReport(path=Path(path), checkpoints=reports, include_optimizer=include_optimizer, warnings=warnings)


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint a user means by ``path``: the file itself, or a run directory's newest clean one.

    Raises:
        CheckpointError: The path does not exist, or the directory holds no clean ``model_<iter>.pt``.
    """
    target = Path(path)
    if target.is_file():
        return target
    if not target.is_dir():
        raise CheckpointError(f"{target}: no such checkpoint file or run directory")
    run = inspect_run_dir(target)
    for warning in run.warnings:
        logger.warning("%s: %s", target, warning)
    clean = run.last_clean
    if clean is None:
        raise CheckpointError(f"{target}: the run directory holds no clean checkpoint")
    return Path(clean.path)


def exit_code(report: CheckpointReport | RunReport) -> int:
    """0 when every checkpoint is clean, 1 when any holds non-finite values, else 2 (some file unreadable)."""
    statuses = {c.status for c in (report.checkpoints if isinstance(report, RunReport) else [report])}
    if Status.CORRUPT in statuses:
        return 1
    return 2 if Status.UNREADABLE in statuses else 0


def to_json(
    report: CheckpointReport | RunReport | None,
    *,
    path: str | Path | None = None,
    all_rows: bool = False,
    include_optimizer: bool = True,
    error: str | None = None,
) -> dict[str, Any]:
    """Return the JSON document of ``inspect_checkpoint --json`` (schema in the README).

    Args:
        report: A file or run report; ``None`` for a directory that could not be inspected at all.
        path: The path inspected, when ``report`` is ``None``.
        all_rows: List every tensor, not only those with non-finite values.
        include_optimizer: Recorded in the document when ``report`` is ``None``.
        error: Why a directory could not be inspected, when ``report`` is ``None``.
    """
    doc: dict[str, Any] = {"schema": JSON_SCHEMA}
    if isinstance(report, CheckpointReport):
        doc |= {"kind": "file", "path": str(report.path), "exit_code": exit_code(report), "error": report.error}
        doc |= {"rows": "all" if all_rows else "nonfinite", "include_optimizer": report.include_optimizer}
        doc["checkpoints"] = [report.to_dict(all_rows=all_rows)]
        return doc
    target = str(report.path if report is not None else path)
    doc |= {"kind": "run_dir", "path": target, "exit_code": 2 if report is None else exit_code(report)}
    doc |= {"error": error, "rows": "all" if all_rows else "nonfinite"}
    doc["include_optimizer"] = include_optimizer if report is None else report.include_optimizer
    checkpoints = [] if report is None else report.checkpoints
    doc["checkpoints"] = [c.to_dict(all_rows=all_rows) for c in checkpoints]
    doc["warnings"] = [] if report is None else report.warnings
    last, first = (None, None) if report is None else (report.last_clean, report.first_corrupt)
    doc["last_clean"] = None if last is None else str(last.path)
    doc["first_corrupt"] = None if first is None else str(first.path)
    return doc


def _is_optimizer(name: str) -> bool:
    return classify_part(name) is Part.OPTIMIZER

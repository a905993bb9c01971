"""Write checkpoints only when every tensor is finite, and atomically, so the newest file is always a good one.

A crash or a kill at any moment leaves either the previous file or the new one complete under the final name: the
data goes to a temporary file in the same directory, is flushed and fsync'd, and only then renamed over the target
(``os.replace`` is atomic within one file system); the directory is fsync'd so the rename itself survives a power
loss. A killed writer can leave its temporary file (``.model_10.pt.<random>.tmp``) behind; it never matches
``model_<iter>.pt``, so run-directory tools ignore it.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from robo_safe_rl.checkpoint.stats import TensorRow, all_finite_flag, tensor_stats, walk_tensors

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaveResult:
    """Outcome of :func:`save_checkpoint_if_finite`.

    Attributes:
        path: Where the checkpoint was (or would have been) written.
        written: Whether it was written.
        nonfinite: Rows of the tensors that made it refuse; empty when written.
    """

    path: Path
    written: bool
    nonfinite: list[TensorRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        """True when the checkpoint was written, so ``if save_checkpoint_if_finite(...)`` reads naturally."""
        return self.written


def find_nonfinite(obj: Any) -> list[TensorRow]:
    """Find the floating tensors of a nesting of dicts/lists/tuples that hold NaN or Inf.

    Cheap on the clean path: one finiteness flag per tensor (one min/max reduction, see
    :func:`~robo_safe_rl.checkpoint.stats.all_finite_flag`), stacked per device and copied to the host once per
    device, so a CUDA checkpoint costs one synchronisation. Full statistics are computed only for the
    tensors that failed.

    Args:
        obj: What is about to be saved, e.g. rsl-rl's ``{**alg.save(), "iter": it, "infos": infos}``.

    Returns:
        One row per tensor with a non-finite element (see :func:`~robo_safe_rl.checkpoint.stats.tensor_stats`),
        in walk order; empty when every tensor is finite.
    """
    named = [(name, t) for name, t in walk_tensors(obj) if t.is_floating_point() or t.is_complex()]
    by_device: dict[torch.device, list[int]] = defaultdict(list)
    for index, (_, t) in enumerate(named):
        by_device[t.device].append(index)
    bad: list[int] = []
    with torch.no_grad():
        for indices in by_device.values():
            flags = torch.stack([all_finite_flag(named[i][1]) for i in indices]).cpu()
            bad.extend(i for i, ok in zip(indices, flags.tolist(), strict=True) if not ok)
    return [tensor_stats(*named[i]) for i in sorted(bad)]


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a temporary file in the same directory, fsync'd, then renamed over ``path``.

    Args:
        obj: What to save.
        path: Final file name; its directory must exist.

    Raises:
        OSError: Writing, syncing or renaming failed; ``path`` is untouched and the temporary file removed.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    # os.open with mode 0o666 lets the umask decide the permissions, as torch.save's own open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def save_checkpoint_if_finite(obj: Any, path: str | Path) -> SaveResult:
    """Save a checkpoint atomically, unless a tensor in it holds NaN or Inf.

    A refused checkpoint is not written, so the previous good file stays the newest; the reason is logged as a
    warning naming the file and the first offending tensors. Counting refusals is the caller's job
    (``SaveResult.written``).

    Args:
        obj: The checkpoint dict (weights, normaliser buffers, optimizer state, ...).
        path: Final file name.

    Returns:
        Whether it was written and, if not, the offending tensors.

    Raises:
        OSError: The write itself failed (see :func:`atomic_torch_save`).
    """
    path = Path(path)
    rows = find_nonfinite(obj)
    if rows:
        shown = "; ".join(_describe(row) for row in rows[:3])
        more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        logger.warning(
            "checkpoint %s not written: %d tensor(s) hold non-finite values (%s%s); expected all finite. "
            "The previous checkpoint stays the newest.",
            path,
            len(rows),
            shown,
            more,
        )
        return SaveResult(path=path, written=False, nonfinite=rows)
    atomic_torch_save(obj, path)
    return SaveResult(path=path, written=True)


def _describe(row: TensorRow) -> str:
    counts = ", ".join(
        f"{n} {label}" for n, label in ((row.nan, "NaN"), (row.posinf, "+Inf"), (row.neginf, "-Inf")) if n
    )
    return f"{row.name}: {counts} of {row.numel}"


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable; directories cannot be opened for fsync on Windows, where this does nothing."""
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

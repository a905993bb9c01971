"""What reading a checkpoint's container yields: its format, its structure, and where each storage's bytes lie."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from robo_safe_rl.checkpoint.archive import Record, ZipCheckpoint


class Format(str, Enum):
    """Container format of a checkpoint file."""

    TORCH_ZIP = "torch_zip"
    TORCH_LEGACY = "torch_legacy"
    SAFETENSORS = "safetensors"


@dataclass(frozen=True)
class Extent:
    """Where a storage's bytes lie in the file.

    Attributes:
        offset: File offset of its first byte.
        nbytes: Bytes its storage declares (``numel * itemsize`` of its first reference).
        record: The zip member holding it (at least ``nbytes`` long; its CRC-32 covers all of it), or ``None``.
    """

    offset: int
    nbytes: int
    record: Record | None = None


@dataclass
class Contents:
    """A checkpoint's structure and the places of its storages, before any tensor data is read."""

    format: Format
    obj: Any
    extents: dict[str, Extent]
    zip: ZipCheckpoint | None = None
    byteswap: bool = False
    stored_iteration: int | None = None
    notes: list[str] = field(default_factory=list)

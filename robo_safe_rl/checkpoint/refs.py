"""Descriptions of a checkpoint's tensors and storages, made while its pickle is read; no tensor is ever built."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch


class Kind(str, Enum):
    """What a tensor of the file is made of."""

    DENSE = "dense"
    SPARSE = "sparse"
    QUANTIZED = "quantized"
    NESTED = "nested"
    NO_DATA = "no data"


@dataclass(eq=False)
class StorageRef:
    """Raw data of the file that tensors view: a storage key and what its persistent id declares.

    Attributes:
        key: The storage's key (``data/<key>`` in a zip archive; a legacy stream's key; a safetensors name).
        dtype: Element type its storage type declares.
        numel: Declared number of elements of ``dtype``.
        element_offset: Where a legacy storage view starts inside its root storage, in elements.
    """

    key: str
    dtype: torch.dtype
    numel: int
    element_offset: int = 0

    def __setstate__(self, state: Any) -> None:
        """Ignore the pickle's ``BUILD`` state: the description is fixed when it is made."""


@dataclass(eq=False)
class TensorRef:
    """A tensor of the file, described but not built.

    Attributes:
        kind: Dense, sparse, quantized, nested, or one that holds no data (meta tensors, storage-less subclasses).
        dtype: Its element type.
        shape: Its shape (a sparse tensor's dense shape; a nested tensor's buffer length).
        stride: Strides in elements (dense and quantized tensors).
        offset: Storage offset in elements.
        storage: Where its data is; ``None`` when it holds none or its data is in ``values``.
        values: The stored values of a sparse tensor, or the buffer of a nested one.
        qparams: Quantization scales and zero points, as ``(label, float or TensorRef)``.
        negative: The tensor's negative bit is set (its values are the negated stored ones).
        note: Why it is described the way it is (``"meta tensor: holds no data"``).
    """

    kind: Kind
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...] = ()
    offset: int = 0
    storage: StorageRef | None = None
    values: TensorRef | None = None
    qparams: tuple[tuple[str, Any], ...] = ()
    negative: bool = False
    note: str | None = None
    layout: str = field(default="strided")

    def __setstate__(self, state: Any) -> None:
        """Ignore ``BUILD`` state (Python attributes of a tensor subclass): it has no bearing on the data."""

    @property
    def numel(self) -> int:
        """Number of elements of its shape (a Python int: a shape of 2**40 elements costs nothing here)."""
        count = 1
        for size in self.shape:
            count *= size
        return count

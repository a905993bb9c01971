"""Scan a checkpoint's tensor data once per storage, streamed through one buffer, and give every tensor its row.

The cost is bounded by the file, not by what its tensors claim: each storage's bytes are read once (with the zip
member's CRC-32 computed on the way) and counted for every dtype its tensors view it as. A tensor then takes its
statistics from its storage when it covers the storage exactly (the usual case, whatever its strides). A view that
repeats elements with stride 0 (``expand``) is counted as its distinct elements times the repetition, so a 1 KB file
that views one element as 2**40 elements costs one element. A view of part of its storage is read apart when the bytes
it spans fit one chunk, within a budget of as many bytes again as the storages hold; any other view (one that
overlaps itself, or past the budget) is reported with the counts of its whole storage and says so.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from robo_safe_rl.checkpoint import limits
from robo_safe_rl.checkpoint.archive import FileReader
from robo_safe_rl.checkpoint.chunks import OPAQUE_DTYPES, PACKED_DTYPES, chunk_stats, scan_dtype
from robo_safe_rl.checkpoint.contents import Contents, Extent
from robo_safe_rl.checkpoint.refs import Kind, TensorRef
from robo_safe_rl.checkpoint.stats import CHUNK_ELEMENTS, Counts, TensorRow, row_from_counts
from robo_safe_rl.checkpoint.structure import walk_refs
from robo_safe_rl.errors import CheckpointError


@dataclass
class _Storage:
    extent: Extent
    dtypes: dict[torch.dtype, Counts]


class Scanner:
    """Scan the storages of one opened checkpoint and build the rows of its tensors.

    Args:
        reader: The open file.
        contents: Its structure and storage places (:func:`~robo_safe_rl.checkpoint.containers.read_contents`).
    """

    def __init__(self, reader: FileReader, contents: Contents) -> None:
        self.reader, self.contents = reader, contents
        self.path = reader.path
        self._storages: dict[str, _Storage] = {}
        self._budget = 0

    def rows(self, skip: Callable[[str], bool] | None = None) -> list[TensorRow]:
        """Scan every storage the kept tensors use (checking each zip member's CRC-32) and return one row per tensor.

        Args:
            skip: Tensor names for which it returns true are left out (their members' CRC-32 is still checked).

        Raises:
            CheckpointError: A member fails its CRC-32 check, a tensor reaches past its storage, or the file shrank.
        """
        refs = list(walk_refs(self.contents.obj))
        if not refs:
            kind = type(self.contents.obj).__name__
            raise CheckpointError(f"{self.path}: not a checkpoint: it holds no tensors (the file stores a {kind})")
        kept = [(name, ref) for name, ref in refs if skip is None or not skip(name)]
        for _, ref in kept:
            for view in _data_views(ref):
                self._want(view)
        for key, storage in sorted(self._storages.items(), key=lambda item: item[1].extent.offset):
            self._scan_storage(key, storage)
        if self.contents.zip is not None:
            self.contents.zip.verify_rest()
        self._budget = max(sum(s.extent.nbytes for s in self._storages.values()), limits.VIEW_SPAN_BYTES)
        rows: list[TensorRow] = []
        for name, ref in kept:
            rows.extend(self._rows_of(name, ref))
        return rows

    def iteration(self) -> int | None:
        """The stored ``iter``: an int, or a one-element integer tensor read from the file; else ``None``."""
        if self.contents.stored_iteration is not None:
            return self.contents.stored_iteration
        obj = self.contents.obj
        value = obj.get("iter") if isinstance(obj, dict) else None
        if type(value) is int:
            return value
        if not isinstance(value, TensorRef) or value.kind is not Kind.DENSE or value.numel != 1:
            return None
        dtype = value.dtype
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or scan_dtype(dtype) != dtype:
            return None
        extent = self.contents.extents[value.storage.key]  # type: ignore[union-attr]
        start = value.offset * dtype.itemsize
        if start + dtype.itemsize > extent.nbytes:
            return None
        raw = self.reader.read(extent.offset + start, dtype.itemsize, "the stored iteration")
        return int.from_bytes(raw, self._file_byteorder(), signed=dtype.is_signed)

    def _file_byteorder(self) -> str:
        if not self.contents.byteswap:
            return sys.byteorder
        return "big" if sys.byteorder == "little" else "little"

    def _want(self, view: TensorRef) -> None:
        dtype = scan_dtype(view.dtype)
        key = view.storage.key  # type: ignore[union-attr]
        storage = self._storages.get(key)
        if storage is None:
            storage = self._storages[key] = _Storage(self.contents.extents[key], {})
        if dtype is not None:
            storage.dtypes.setdefault(dtype, Counts())

    def _scan_storage(self, key: str, storage: _Storage) -> None:
        extent, record = storage.extent, storage.extent.record
        total = record.size if record is not None else extent.nbytes
        crc, position = 0, 0
        for chunk in self.reader.chunks(extent.offset, total, f"storage {key}"):
            if record is not None:
                # CRC-32 of the bytes just read, while they are in cache: zlib's crc32 sets the scan's speed.
                crc = zlib.crc32(chunk, crc)
            inside = chunk[: max(0, min(len(chunk), extent.nbytes - position))]
            for dtype, counts in storage.dtypes.items():
                usable = len(inside) // dtype.itemsize * dtype.itemsize
                if usable:
                    values = self._swapped(torch.frombuffer(inside[:usable], dtype=torch.uint8), dtype).view(dtype)
                    for start in range(0, values.numel(), CHUNK_ELEMENTS):
                        counts.add(*chunk_stats(values[start : start + CHUNK_ELEMENTS]))
            position += len(chunk)
        if record is not None and self.contents.zip is not None:
            self.contents.zip.check_crc(record, crc)

    def _swapped(self, raw: torch.Tensor, unit: torch.dtype) -> torch.Tensor:
        """Bytes with each ``unit``-sized value swapped when the file's byte order is not this machine's (a copy of
        at most one chunk); the bytes themselves otherwise."""
        if self.contents.byteswap and unit.itemsize > 1:
            return raw.view(-1, unit.itemsize).flip(1).reshape(-1)
        return raw

    def _rows_of(self, name: str, ref: TensorRef) -> list[TensorRow]:
        dtype = str(ref.dtype).removeprefix("torch.")
        if ref.kind is Kind.NO_DATA:
            return [row_from_counts(name, None, dtype, ref.shape, ref.numel, Counts(), scope="none", note=ref.note)]
        if ref.kind in (Kind.SPARSE, Kind.NESTED):
            values = ref.values
            if values is None or values.kind is not Kind.DENSE:
                note = f"a {ref.layout} tensor whose values are not a plain tensor: not scanned"
                return [row_from_counts(name, None, dtype, ref.shape, ref.numel, Counts(), scope="none", note=note)]
            counts, scope, note = self._counts(name, values)
            what = "stored values" if ref.kind is Kind.SPARSE else "buffer"
            noun = f"{ref.layout}: counts of its {values.numel} {what}"
            return [row_from_counts(name, None, dtype, ref.shape, ref.numel, counts, scope=scope, note=note or noun)]
        counts, scope, note = self._counts(name, ref)
        note = note or ref.note
        if ref.kind is Kind.QUANTIZED:
            note = note or "quantized: range of its stored integers"
        rows = [row_from_counts(name, None, dtype, ref.shape, ref.numel, counts, scope=scope, note=note)]
        for label, value in ref.qparams:
            rows.extend(self._qparam_rows(f"{name}/{label}", value))
        return rows

    def _qparam_rows(self, name: str, value: object) -> list[TensorRow]:
        if isinstance(value, TensorRef) and value.kind is Kind.DENSE:
            counts, scope, note = self._counts(name, value)
            dtype = str(value.dtype).removeprefix("torch.")
            return [row_from_counts(name, None, dtype, value.shape, value.numel, counts, scope=scope, note=note)]
        if isinstance(value, float):
            counts = Counts()
            counts.add(*chunk_stats(torch.tensor([value], dtype=torch.float64)))
            return [row_from_counts(name, None, "float64", (), 1, counts, note="quantization scale")]
        return []

    def _counts(self, name: str, view: TensorRef) -> tuple[Counts, str, str | None]:
        """Counts of a dense view's elements, and their scope (``tensor`` or ``storage``) with a note."""
        if view.dtype in OPAQUE_DTYPES:
            return Counts(), "none", f"{view.dtype}: raw bits, no numeric values to scan"
        if view.kind not in (Kind.DENSE, Kind.QUANTIZED) or view.storage is None:
            return Counts(), "none", f"a {view.kind.value} tensor inside another: not scanned"
        if view.dtype in PACKED_DTYPES:
            return Counts(), "tensor", f"{view.dtype}: packed values, finite by construction"
        key = view.storage.key
        storage = self._storages[key]
        itemsize = view.dtype.itemsize
        n = storage.extent.nbytes // itemsize
        if view.numel == 0:
            return Counts(), "tensor", None
        last = view.offset + sum((size - 1) * stride for size, stride in zip(view.shape, view.stride, strict=True))
        if last >= n:
            raise CheckpointError(
                f"{self.path}: corrupt: tensor {name} reaches element {last} of storage {key}, which holds {n}"
            )
        whole = storage.dtypes[scan_dtype(view.dtype)]  # type: ignore[index]
        repeat, dims = 1, []
        for size, stride in zip(view.shape, view.stride, strict=True):
            if size > 1 and stride == 0:
                repeat *= size
            elif size > 1:
                dims.append((stride, size))
        dims.sort()
        distinct = view.numel // repeat
        if not _non_overlapping(dims):
            return whole, "storage", "an overlapping view: counts of its whole storage"
        if view.offset == 0 and distinct == n:
            return whole.scaled(repeat, negative=view.negative), "tensor", None
        span = (last - view.offset + 1) * itemsize
        if span > limits.VIEW_SPAN_BYTES or span > self._budget:
            return whole, "storage", "a view of part of a large storage: counts of its whole storage"
        self._budget -= span
        return self._read_view(key, view, dims).scaled(repeat, negative=view.negative), "tensor", None

    def _read_view(self, key: str, view: TensorRef, dims: list[tuple[int, int]]) -> Counts:
        """Read the bytes a view spans and count its distinct elements exactly (stride-0 dims left out)."""
        extent, itemsize = self.contents.extents[key], view.dtype.itemsize
        last = view.offset + sum(stride * (size - 1) for stride, size in dims)
        raw = torch.frombuffer(
            self.reader.read_mutable(extent.offset + view.offset * itemsize, (last - view.offset + 1) * itemsize, key),
            dtype=torch.uint8,
        )
        unit = scan_dtype(view.dtype)  # complex: swap each component; quantized: its integers
        element = view.dtype if view.dtype.is_complex else unit
        base = self._swapped(raw, unit).view(element)  # type: ignore[arg-type]
        sizes = [size for _, size in reversed(dims)] or [1]
        strides = [stride for stride, _ in reversed(dims)] or [1]
        picked = base.as_strided(sizes, strides, 0)
        flat = (torch.view_as_real(picked) if picked.is_complex() else picked).reshape(-1)
        counts = Counts()
        for start in range(0, flat.numel(), CHUNK_ELEMENTS):
            counts.add(*chunk_stats(flat[start : start + CHUNK_ELEMENTS]))
        return counts


def _data_views(ref: TensorRef) -> list[TensorRef]:
    """The dense views whose storages hold a tensor's data (its values, buffer, scales...)."""
    if ref.kind is Kind.NO_DATA:
        return []
    if ref.kind in (Kind.SPARSE, Kind.NESTED):
        values = ref.values
        return [values] if values is not None and values.kind is Kind.DENSE and values.storage is not None else []
    views = [ref] if ref.storage is not None else []
    views += [value for _, value in ref.qparams if isinstance(value, TensorRef) and value.kind is Kind.DENSE]
    return views


def _non_overlapping(dims: list[tuple[int, int]]) -> bool:
    """Whether ``(stride, size)`` dims sorted by stride address each element at most once (a sufficient test)."""
    reach = 0
    for stride, size in dims:
        if stride <= reach:
            return False
        reach = stride * (size - 1) + reach
    return True

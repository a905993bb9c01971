"""Read a safetensors file's header: every tensor's dtype, shape and byte range, checked against the file.

The format is an 8-byte little-endian header length, a JSON header, then the data. The header is read whole (at most
:data:`~robo_safe_rl.checkpoint.limits.MAX_HEADER_BYTES`) and every entry checked: a known dtype, a shape of
non-negative integers, a byte range inside the data that fits the shape. ``__metadata__`` must map names to strings,
as the safetensors library itself requires.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from robo_safe_rl.checkpoint import limits
from robo_safe_rl.checkpoint.archive import FileReader
from robo_safe_rl.checkpoint.contents import Contents, Extent, Format
from robo_safe_rl.checkpoint.refs import Kind, StorageRef, TensorRef
from robo_safe_rl.errors import CheckpointError

_SAFETENSORS_DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "U16": torch.uint16,
    "I16": torch.int16,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "U32": torch.uint32,
    "I32": torch.int32,
    "F32": torch.float32,
    "U64": torch.uint64,
    "I64": torch.int64,
    "F64": torch.float64,
    "C64": torch.complex64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E8M0": torch.float8_e8m0fnu,
}
_ITERATION = re.compile(r"[+-]?[0-9]+")


def read_safetensors(reader: FileReader) -> Contents:
    """The structure (name -> tensor description) and storage places of a safetensors file.

    Raises:
        CheckpointError: The header is over the limit, not JSON, or describes tensors that do not fit the file.
    """
    path = reader.path
    length = int.from_bytes(reader.read(0, 8, "the header length"), "little")
    if length > limits.MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{path}: refused: the safetensors header declares {length} bytes; the inspector reads at most "
            f"{limits.MAX_HEADER_BYTES} (limits.MAX_HEADER_BYTES)"
        )
    if 8 + length > reader.size:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file (the header ends past the file)")
    try:
        header = json.loads(reader.read(8, length, "the header"))
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file (its header is not JSON)") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors file (its header is not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{path}: corrupt safetensors file (__metadata__ must map names to strings)")
    data_start, data_length = 8 + length, reader.size - 8 - length
    obj, extents = {}, {}
    for name in sorted(header):
        entry = header[name]
        dtype, shape, span = _safetensors_entry(path, name, entry)
        numel = 1
        for size in shape:
            numel *= size
        begin, end = span
        if not 0 <= begin <= end <= data_length or end - begin != numel * dtype.itemsize:
            raise CheckpointError(
                f"{path}: truncated or corrupt safetensors file (tensor {name}'s data_offsets do not fit its "
                f"shape or the file)"
            )
        storage = StorageRef(name, dtype, numel)
        strides = tuple(_contiguous_strides(shape))
        obj[name] = TensorRef(Kind.DENSE, dtype, shape, strides, 0, storage)
        extents[name] = Extent(data_start + begin, end - begin)
    if not obj:
        raise CheckpointError(f"{path}: not a checkpoint: the safetensors file holds no tensors")
    raw = metadata.get("iter", metadata.get("iteration"))
    iteration = int(raw) if raw is not None and _ITERATION.fullmatch(raw.strip()) else None
    return Contents(Format.SAFETENSORS, obj, extents, stored_iteration=iteration)


def _safetensors_entry(path: Path, name: str, entry: Any) -> tuple[torch.dtype, tuple[int, ...], tuple[int, int]]:
    bad = f"{path}: corrupt safetensors file (tensor {name}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{bad} is not described by an object)")
    dtype = _SAFETENSORS_DTYPES.get(entry.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise CheckpointError(f"{bad} has dtype {str(entry.get('dtype'))[:20]!r}, which torch does not read)")
    shape, span = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise CheckpointError(f"{bad}'s shape is not a list of non-negative integers)")
    if not isinstance(span, list) or len(span) != 2 or not all(type(s) is int for s in span):
        raise CheckpointError(f"{bad}'s data_offsets are not two integers)")
    return dtype, tuple(shape), (span[0], span[1])


def _contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]

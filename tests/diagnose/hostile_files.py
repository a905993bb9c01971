"""Crafted incident files, made the way an attacker or a damaged disk would: edited JSON lines, rewritten npz files,
an npz whose deflated member inflates to a gigabyte, a zip directory of many entries.

Everything starts from real records (``drive_ant`` in ``diagnose_factory``) and changes one thing.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

JSONL = "incidents.jsonl"


def records(directory: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``directory/incidents.jsonl``."""
    return [json.loads(line) for line in (directory / JSONL).read_text().splitlines() if line.strip()]


def write_records(directory: Path, rows: list[dict[str, Any]]) -> Path:
    """Rewrite ``incidents.jsonl`` with ``rows`` (non-strict JSON allowed, to write NaN literals)."""
    path = directory / JSONL
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def edit_record(directory: Path, change: Callable[[dict[str, Any]], None], index: int = 0) -> Path:
    """Apply ``change`` to record ``index`` in place; return the jsonl path."""
    rows = records(directory)
    change(rows[index])
    return write_records(directory, rows)


def edit_arrays(directory: Path, change: Callable[[dict[str, np.ndarray]], None], index: int = 0) -> Path:
    """Rewrite record ``index``'s npz with ``np.savez`` after ``change`` edits its arrays; return the npz path."""
    path = directory / records(directory)[index]["arrays"]
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    change(arrays)
    with path.open("wb") as f:
        np.savez(f, **arrays)  # object arrays are pickled by savez: a crafted file may hold one
    return path


def npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    """An npy format 1.0 header (magic, length, dict padded to 64 bytes) declaring ``shape`` of ``dtype``."""
    text = repr({"descr": dtype, "fortran_order": False, "shape": shape})
    pad = 64 - (10 + len(text) + 1) % 64
    body = (text + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def deflated_zeros(size: int, chunk: int = 1 << 20) -> bytes:
    """Raw deflate blocks (not final) of ``size`` zero bytes, made without deflating ``size`` bytes.

    A full flush empties the compressor's window and aligns to a byte, so the compressed form of one chunk of zeros
    is the same bytes every time and refers to nothing before it: the stream is that block repeated.
    """
    if size % chunk:
        raise ValueError(f"size must be a multiple of {chunk}")
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return (compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)) * (size // chunk)


def write_zip(path: Path, members: list[tuple[str, bytes, int, int, int]]) -> None:
    """Write a zip by hand: members ``(name, stored bytes, uncompressed size, crc, method)`` (8 deflated, 0 stored).

    ``zipfile`` would compress the data itself; a crafted file carries whatever the attacker deflated.
    """
    local, central = bytearray(), bytearray()
    for name, data, size, crc, method in members:
        encoded = name.encode()
        fields = struct.pack("<HHHHHLLLHH", 20, 0, method, 0, 0, crc, len(data), size, len(encoded), 0)
        central += b"PK\x01\x02" + struct.pack("<H", 20) + fields + struct.pack("<HHHLL", 0, 0, 0, 0, len(local))
        central += encoded
        local += b"PK\x03\x04" + fields + encoded + data
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    path.write_bytes(bytes(local) + bytes(central) + end)


def stored_members(path: Path) -> list[tuple[str, bytes, int, int, int]]:
    """The members of an existing npz as :func:`write_zip` takes them (stored, CRC computed)."""
    members = []
    with np.load(path) as data:
        for key in data.files:
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, data[key])
            raw = buffer.getvalue()
            members.append((f"{key}.npy", raw, len(raw), zlib.crc32(raw), zipfile.ZIP_STORED))
    return members


def npz_bomb(path: Path, key: str, shape: tuple[int, ...], dtype: str = "<f8") -> int:
    """Rewrite the npz at ``path`` with its member ``key`` replaced by a deflated one declaring ``shape`` zeros of
    ``dtype`` (a valid file: sizes and CRC are right, ``np.load`` reads it); return the file's size."""
    header = npy_header(shape, dtype)
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(header) + compressor.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)  # an empty final block
    crc, chunk = zlib.crc32(header), bytes(1 << 20)
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    bomb = (f"{key}.npy", head + deflated_zeros(size) + final, len(header) + size, crc, zipfile.ZIP_DEFLATED)
    members = [m for m in stored_members(path) if m[0] != bomb[0]] if path.exists() else []
    write_zip(path, [*members, bomb])
    return path.stat().st_size

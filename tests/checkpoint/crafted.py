"""Crafted checkpoint files, built byte by byte the way an attacker or a damaged disk would make them.

Torch never checks what a zip member declares (its sizes, its CRC-32) against its bytes, so these files load or
half-load in torch exactly as described; the zip writer here can therefore state whatever an attack needs.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "inspect_checkpoint.py"


@dataclass
class Member:
    """One zip member: its bytes as stored, and what its headers declare."""

    name: str
    stored: bytes
    size: int
    crc: int
    method: int = zipfile.ZIP_STORED


def stored(name: str, data: bytes) -> Member:
    """An honest uncompressed member."""
    return Member(name, data, len(data), zlib.crc32(data))


def write_zip(path: Path, members: list[Member]) -> Path:
    """Write a zip archive whose headers say exactly what ``members`` declare (zip64 fields where a size needs them)."""
    out, central = bytearray(), bytearray()
    for m in members:
        name = m.name.encode()
        offset = len(out)
        sizes, extra = (len(m.stored), m.size), b""
        if max(sizes) >= 0xFFFFFFFF:  # zip64: the sizes move to an extra field, the headers say 0xFFFFFFFF
            sizes, extra = (0xFFFFFFFF, 0xFFFFFFFF), struct.pack("<2H2Q", 1, 16, m.size, len(m.stored))
        header = (m.method, 0, 0x21, m.crc, *sizes, len(name), len(extra))
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, 0, *header) + name + extra + m.stored
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, 0, *header, 0, 0, 0, 0, offset) + name + extra
    count, end = len(members), b""
    if count >= 0xFFFF:  # zip64 end record and locator; the classic end record then says 0xFFFF
        at = len(out) + len(central)
        end = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(central), len(out))
        end += struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
        count = 0xFFFF
    end += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(central), len(out), 0)
    path.write_bytes(bytes(out + central + end))
    return path


def torch_members(obj: Any) -> list[Member]:
    """The members ``torch.save(obj)`` writes, read back from a real save (names under ``archive/``)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return [stored("archive/" + i.filename.split("/", 1)[1], archive.read(i)) for i in archive.infolist()]


def replace(members: list[Member], name: str, member: Member) -> list[Member]:
    """``members`` with the one named ``archive/<name>`` replaced."""
    return [member if m.name == f"archive/{name}" else m for m in members]


def deflate_bomb(head: bytes, inflated_bytes: int) -> bytes:
    """A raw deflate stream of ``head`` followed by zeros up to ``inflated_bytes``, built in milliseconds.

    After a full flush deflate forgets its history, so compressing the same 16 MiB of zeros again gives the same
    bytes: one block is compressed and repeated (about 16 KiB per 16 MiB of output).
    """
    block_size = 16 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(block_size)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert again == block  # the repetition is exact, so the stream below inflates to what it says
    repeats = (inflated_bytes - len(head)) // block_size
    return stream + block * repeats + compressor.flush()


def nest_value(pickle_bytes: bytes, key: str, depth: int) -> bytes:
    """Rewrite a protocol-2 pickle of a one-key dict so that its value sits inside ``depth`` nested lists.

    ``EMPTY_LIST`` is pushed ``depth`` times after the key, and ``APPEND`` applied ``depth`` times before the
    ``SETITEM`` that stores the value: ``{key: [[[...[value]...]]]}``.
    """
    ops = list(pickletools.genops(pickle_bytes))
    after_key = next(i for i, (op, arg, _) in enumerate(ops) if op.name == "BINUNICODE" and arg == key) + 1
    if ops[after_key][0].name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
        after_key += 1
    start = ops[after_key][2]
    end = [pos for op, _, pos in ops if op.name == "SETITEM"][-1]
    return pickle_bytes[:start] + b"]" * depth + pickle_bytes[start:end] + b"a" * depth + pickle_bytes[end:]


def record_data_offset(path: Path, name: str) -> int:
    """Offset in ``path`` of the first data byte of zip member ``name``."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    with path.open("rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_length, extra_length = struct.unpack("<2H", header[26:30])
    return info.header_offset + 30 + name_length + extra_length


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    """Flip one bit of the file in place, as a failing disk or a stray write would."""
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))


def safetensors_file(path: Path, header: dict[str, Any] | str, data: bytes = b"") -> Path:
    """A safetensors file with the given header (a dict, or raw JSON text) and data."""
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)
    return path


def run_measured(args: list[str], timeout: float = 120) -> tuple[int, str, str, int]:
    """Run ``tools/inspect_checkpoint.py ARGS`` as a real process; return its exit code, stdout, stderr, and its
    peak resident memory in bytes.

    A fresh interpreter runs it as its only child and reads ``ru_maxrss`` of its children, so the figure is the
    inspector's own peak, not that of an earlier subprocess of the test session.
    """
    probe = (
        "import json, resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps([done.returncode, done.stdout, done.stderr, peak]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=True,
    )
    code, out, err, peak = json.loads(done.stdout)
    return code, out, err, peak


def plain_pickle_of(obj: Any) -> bytes:
    """A protocol-2 pickle, as torch.save writes its data.pkl."""
    return pickle.dumps(obj, protocol=2)

"""Read a checkpoint file through ordinary reads, and the members of a torch zip archive with their CRC-32 checked.

Nothing here memory-maps the file: a file that another process truncates while it is read would then kill the
process with SIGBUS, which no Python code can turn into a message. A read that comes back short is reported instead.
Torch itself never checks a member's CRC-32, so a checkpoint whose bytes changed after it was written (a flipped bit
on disk, a partial overwrite) loads as if it were good; here every member read is checked.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from robo_safe_rl.checkpoint import limits
from robo_safe_rl.errors import CheckpointError

_STORED, _DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")


@contextlib.contextmanager
def open_reader(path: Path) -> Iterator[FileReader]:
    """Open ``path`` for :class:`FileReader` (unbuffered: every read is one we asked for).

    Raises:
        CheckpointError: It cannot be opened.
    """
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below, after the caller is done
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read it ({err.strerror or err})") from err
    with f:
        yield FileReader(path, f)


class FileReader:
    """Byte ranges of one open file, read into a buffer of :data:`~robo_safe_rl.checkpoint.limits.CHUNK_BYTES`.

    Args:
        path: The file (for messages).
        f: The file, opened unbuffered for reading.
    """

    def __init__(self, path: Path, f: BinaryIO) -> None:
        self.path = path
        self.file = f
        self.size = os.fstat(f.fileno()).st_size
        self._buffer: bytearray | None = None

    def read(self, offset: int, n: int, what: str) -> bytes:
        """Return exactly ``n`` bytes at ``offset`` (a small read: metadata, headers, pickles)."""
        return bytes(self.read_mutable(offset, n, what))

    def read_mutable(self, offset: int, n: int, what: str) -> bytearray:
        """Like :meth:`read`, into a new bytearray (which torch can view without a copy)."""
        data = bytearray(n)
        self._read_into(memoryview(data), offset, what)
        return data

    def chunks(self, offset: int, n: int, what: str) -> Iterator[memoryview]:
        """Yield ``n`` bytes from ``offset`` in chunks; each chunk is valid only until the next one is read."""
        if self._buffer is None:
            self._buffer = bytearray(limits.CHUNK_BYTES)
        view = memoryview(self._buffer)
        end = offset + n
        while offset < end:
            step = min(len(view), end - offset)
            self._read_into(view[:step], offset, what)
            yield view[:step]
            offset += step

    def _read_into(self, target: memoryview, offset: int, what: str) -> None:
        done = 0
        try:
            self.file.seek(offset)
            while done < len(target):
                got = self.file.readinto(target[done:])
                if not got:
                    break
                done += got
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot read {what} ({err.strerror or err})") from err
        if done < len(target):
            now = os.fstat(self.file.fileno()).st_size
            if now < self.size:
                raise CheckpointError(
                    f"{self.path}: the file shrank from {self.size} to {now} bytes while it was being read "
                    f"(at {what}): it was truncated or rewritten during inspection"
                )
            raise CheckpointError(f"{self.path}: truncated: {what} ends past the end of the file")


@dataclass(frozen=True)
class Record:
    """One member of a zip archive, as its central directory declares it."""

    name: str
    data_offset: int
    compressed_size: int
    size: int
    method: int
    crc: int


class ZipCheckpoint:
    """The members of a torch zip checkpoint, with their declared sizes checked against the file and the limits.

    Args:
        reader: The open file.

    Raises:
        CheckpointError: Not a zip archive written by ``torch.save``, truncated, or over a limit.
    """

    def __init__(self, reader: FileReader) -> None:
        self.reader = reader
        path = reader.path
        entries = _declared_entries(reader)
        if entries > limits.MAX_RECORDS:
            raise CheckpointError(
                f"{path}: refused: the zip archive lists {entries} members; the inspector reads at most "
                f"{limits.MAX_RECORDS} (a checkpoint has one per tensor storage)"
            )
        try:
            with zipfile.ZipFile(reader.file) as archive:
                infos = archive.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
            raise CheckpointError(f"{path}: truncated or corrupt: an unreadable zip archive ({err})") from err
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):
            # Readers disagree on which copy of a name counts: torch could load one copy while this inspects another.
            seen: set[str] = set()
            twice = next(name for name in names if name in seen or seen.add(name))  # type: ignore[func-returns-value]
            raise CheckpointError(f"{path}: corrupt: the zip archive holds {twice} twice")
        if any(name.endswith("/constants.pkl") for name in names):
            raise CheckpointError(
                f"{path}: not a checkpoint: a TorchScript module (an exported policy); inspect the training checkpoint"
            )
        # torch's reader takes the archive's folder from its first member; data.pkl must sit in that folder.
        self.prefix = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
        if not self.prefix or self.prefix + "data.pkl" not in names:
            raise CheckpointError(
                f"{path}: not a checkpoint: a zip archive without data.pkl, not written by torch.save"
            )
        self.records = {info.filename: self._record(info) for info in infos}
        self._verified: set[str] = set()

    def record(self, name: str) -> Record | None:
        """The member ``<archive>/<name>``, or ``None`` when the archive has none."""
        return self.records.get(self.prefix + name)

    def read_member(self, record: Record, limit: int, limit_name: str) -> bytes:
        """Read a whole member into memory, inflating it if compressed, its size and CRC-32 checked.

        Raises:
            CheckpointError: It declares more than ``limit`` bytes, inflates to other than it declares, or fails
                its CRC-32 check.
        """
        if record.size > limit:
            raise CheckpointError(
                f"{self.reader.path}: refused: {record.name} declares {record.size} bytes; the inspector reads at "
                f"most {limit} ({limit_name})"
            )
        out = bytearray()
        inflate = zlib.decompressobj(-zlib.MAX_WBITS) if record.method == _DEFLATED else None
        for chunk in self.reader.chunks(record.data_offset, record.compressed_size, f"record {record.name}"):
            if inflate is None:
                out += chunk
                continue
            try:
                # max_length keeps one step's output at most one byte past the declared size: a member that lies
                # about its size is stopped there, never inflated to the end.
                out += inflate.decompress(chunk, record.size + 1 - len(out))
            except zlib.error as err:
                raise CheckpointError(f"{self.reader.path}: corrupt: {record.name} does not inflate ({err})") from err
            if len(out) > record.size:
                raise CheckpointError(
                    f"{self.reader.path}: refused: {record.name} inflates past the {record.size} bytes it declares"
                )
        if len(out) != record.size:
            raise CheckpointError(
                f"{self.reader.path}: corrupt: {record.name} holds {len(out)} bytes, not the {record.size} it declares"
            )
        self.check_crc(record, zlib.crc32(out))
        return bytes(out)

    def check_crc(self, record: Record, crc: int) -> None:
        """Compare a member's CRC-32, computed over all its bytes, with the one its central directory declares.

        Raises:
            CheckpointError: They differ.
        """
        if crc != record.crc:
            raise CheckpointError(
                f"{self.reader.path}: corrupt: {record.name} fails its CRC-32 check (declared {record.crc:08x}, "
                f"computed {crc:08x}): its bytes changed after it was written"
            )
        self._verified.add(record.name)

    def verify_rest(self) -> None:
        """Check the CRC-32 of every member not checked yet (metadata and members no tensor refers to)."""
        for name, record in self.records.items():
            if name in self._verified:
                continue
            if record.method == _DEFLATED:
                self.read_member(record, limits.MAX_SMALL_RECORD_BYTES, "limits.MAX_SMALL_RECORD_BYTES")
                continue
            crc = 0
            for chunk in self.reader.chunks(record.data_offset, record.size, f"record {name}"):
                crc = zlib.crc32(chunk, crc)
            self.check_crc(record, crc)

    def _record(self, info: zipfile.ZipInfo) -> Record:
        path, name = self.reader.path, info.filename
        if info.flag_bits & 0x1:
            raise CheckpointError(f"{path}: not a checkpoint: {name} is encrypted")
        if info.compress_type not in (_STORED, _DEFLATED):
            raise CheckpointError(
                f"{path}: not a checkpoint: {name} uses zip compression method {info.compress_type}, "
                "which torch does not read (torch.save stores members uncompressed)"
            )
        if info.compress_type == _STORED and info.compress_size != info.file_size:
            raise CheckpointError(f"{path}: corrupt: {name} is stored uncompressed but declares two sizes")
        if info.header_offset + _LOCAL_HEADER.size > self.reader.size:
            raise CheckpointError(f"{path}: truncated: record {name} ends past the end of the file")
        header = self.reader.read(info.header_offset, _LOCAL_HEADER.size, f"the local header of {name}")
        signature, *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        if signature != b"PK\x03\x04":
            raise CheckpointError(f"{path}: corrupt: the central directory points {name} at no local header")
        data_offset = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if data_offset + info.compress_size > self.reader.size:
            raise CheckpointError(f"{path}: truncated: record {name} ends past the end of the file")
        return Record(name, data_offset, info.compress_size, info.file_size, info.compress_type, info.CRC)


def _declared_entries(reader: FileReader) -> int:
    """How many members the end record declares, read before the central directory itself is parsed."""
    tail_length = min(reader.size, _EOCD.size + 0xFFFF)
    tail = reader.read(reader.size - tail_length, tail_length, "the zip end record")
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise CheckpointError(
            f"{reader.path}: truncated or corrupt: a zip archive without its end record, as an interrupted write leaves"
        )
    entries = _EOCD.unpack_from(tail, at)[4]
    locator_at = reader.size - tail_length + at - _ZIP64_LOCATOR.size
    if entries == 0xFFFF and locator_at >= 0:
        signature, _, eocd64_offset, _ = _ZIP64_LOCATOR.unpack(
            reader.read(locator_at, _ZIP64_LOCATOR.size, "the zip64 locator")
        )
        if signature == b"PK\x06\x07" and eocd64_offset + _ZIP64_EOCD.size <= reader.size:
            record = _ZIP64_EOCD.unpack(reader.read(eocd64_offset, _ZIP64_EOCD.size, "the zip64 end record"))
            entries = record[7] if record[0] == b"PK\x06\x06" else entries
    return entries

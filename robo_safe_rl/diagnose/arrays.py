"""Read a record's ``.npz`` within :class:`~robo_safe_rl.diagnose.limits.Limits`, checking before reading.

``np.load`` trusts the file: an npy header may declare a 4 GB array whose deflated data is 2 MB of zeros, and numpy
allocates it and inflates into it. Here, in order:

1. the file's size (``stat``), and its zip directory's size from the end record, before ``zipfile`` parses it
   (a directory of a million tiny entries would cost a gigabyte of ``ZipInfo`` objects);
2. every member's npy header (format 1.0 or 2.0, at most 10,000 bytes, as numpy allows), with the zip entry's
   declared size, which must be exactly the header plus the data the header declares: the zip reader inflates no
   more than that, so the shapes bound what reading can allocate;
3. the declared shapes and dtypes against the record (a check function from
   :mod:`~robo_safe_rl.diagnose.schema`), and their bytes against the per-record and the whole-diagnosis budget;
4. only then the data, streamed in chunks into arrays of the declared size (the zip reader checks the CRC at the end).

Anything wrong raises :class:`~robo_safe_rl.errors.IncidentError` naming the file and what was expected.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from robo_safe_rl.diagnose.limits import Limits, mib, open_regular
from robo_safe_rl.errors import IncidentError

#: What numpy's own loader accepts as the length of an npy header.
MAX_HEADER_BYTES = 10_000
#: Bytes read from a member per call.
_CHUNK = 1024 * 1024
#: A zip directory entry is 46 bytes plus its name and extra fields; npz member names are short.
_DIRECTORY_BYTES_PER_MEMBER = 1024
_END_RECORD = struct.Struct("<4s4H2LH")
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_COMPRESSIONS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}

Headers = dict[str, tuple[tuple[int, ...], np.dtype]]


class ArrayBudget:
    """Bytes of arrays a whole diagnosis may still read (:attr:`Limits.total_array_bytes`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int, where: str) -> None:
        """Count ``size`` bytes, or refuse them when the budget would be exceeded.

        Raises:
            IncidentError: Naming ``where`` and the budget.
        """
        if self.used + size > self.limit:
            raise IncidentError(
                f"{where}: its arrays ({mib(size)}) would take the records read together past {mib(self.limit)}; "
                "diagnose fewer records at a time (PATH#<id>)"
            )
        self.used += size


def read_npz(
    path: Path, check: Callable[[Headers], None], limits: Limits, budget: ArrayBudget, where: str | None = None
) -> dict[str, np.ndarray]:
    """Read the arrays of an npz file (module docstring).

    Args:
        path: The file; it must be a regular file.
        check: Raises :class:`~robo_safe_rl.errors.IncidentError` when the declared arrays do not fit the record.
        limits: File, member and byte limits.
        budget: The diagnosis's remaining bytes; this file's arrays are taken from it.
        where: How messages name the file (``"<path>: record 3"``); the path when ``None``.

    Returns:
        The arrays by member name without ``.npy``, in native byte order.

    Raises:
        IncidentError: If the file is not a regular file, too big, not an npz, declares arrays the record does not
            have or beyond the limits, or its data is truncated or damaged.
    """
    where = where if where is not None else str(path)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.npz_file_bytes:
                raise IncidentError(f"{where}: {mib(size)}, more than the {mib(limits.npz_file_bytes)} allowed")
            _check_directory_size(f, size, limits, where)
            with zipfile.ZipFile(f) as zf:
                members = _members(zf, limits, where)
                headers = {key: _header(zf, member, where)[:2] for key, member in members.items()}
                check(headers)
                declared = sum(_nbytes(shape, dtype) for shape, dtype in headers.values())
                if declared > limits.record_array_bytes:
                    raise IncidentError(
                        f"{where}: its arrays declare {mib(declared)}, more than the {mib(limits.record_array_bytes)} "
                        "a record may hold"
                    )
                budget.take(declared, where)
                return {key: _read(zf, member, where) for key, member in members.items()}
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as err:
        raise IncidentError(f"{where}: not a readable incident .npz ({type(err).__name__}: {err})") from err


def _check_directory_size(f: IO[bytes], size: int, limits: Limits, where: str) -> None:
    """Refuse a zip directory bigger than ``npz_members`` entries need, before ``zipfile`` parses it all."""
    tail_size = min(size, _END_RECORD.size + 0xFFFF)  # the end record, then a comment of up to 64 KiB
    f.seek(size - tail_size)
    tail = f.read(tail_size)
    at = tail.rfind(_END_SIGNATURE)
    if at < 0 or at + _END_RECORD.size > len(tail):
        raise IncidentError(f"{where}: not an .npz file (no zip end record)")
    if tail[max(at - 20, 0) : at].startswith(_ZIP64_LOCATOR):
        # A zip64 directory is only written past 65,535 members or 4 GiB, far beyond any record.
        raise IncidentError(f"{where}: a zip64 archive, beyond what an incident record holds")
    directory_size = _END_RECORD.unpack_from(tail, at)[5]
    if directory_size > limits.npz_members * _DIRECTORY_BYTES_PER_MEMBER:
        raise IncidentError(
            f"{where}: its zip directory is {mib(directory_size)}, more than {limits.npz_members} arrays need"
        )
    f.seek(0)


def _members(zf: zipfile.ZipFile, limits: Limits, where: str) -> dict[str, zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > limits.npz_members:
        raise IncidentError(f"{where}: {len(infos)} arrays, more than the {limits.npz_members} allowed")
    members: dict[str, zipfile.ZipInfo] = {}
    for member in infos:
        key = member.filename.removesuffix(".npy")
        if key == member.filename or key in members:
            what = "a duplicate" if key in members else "not an .npy"
            raise IncidentError(f"{where}: member {member.filename!r:.80} is {what} array")
        if member.compress_type not in _COMPRESSIONS:
            raise IncidentError(
                f"{where}: member {member.filename!r:.80} uses zip compression {member.compress_type}; expected stored "
                "or deflated (what numpy writes)"
            )
        members[key] = member
    return members


def _header(zf: zipfile.ZipFile, member: zipfile.ZipInfo, where: str) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Shape, dtype, Fortran order and header length of one member, read from its first bytes only."""
    where = f"{where}: array {member.filename.removesuffix('.npy')!r:.80}"
    with zf.open(member) as fp:
        try:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=MAX_HEADER_BYTES)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=MAX_HEADER_BYTES)
            else:
                raise IncidentError(f"{where}: npy format {version}, expected 1.0 or 2.0")
        except (ValueError, TypeError, SyntaxError) as err:
            raise IncidentError(f"{where}: not an npy array ({err})") from err
        header_size = fp.tell()
    if any(n < 0 for n in shape):
        raise IncidentError(f"{where}: negative size in its shape {shape}")
    if dtype.hasobject:
        # Its data is a pickle: never loaded (allow_pickle=False), and never part of an incident record.
        raise IncidentError(f"{where}: dtype {dtype.str} holds Python objects (pickled data), not numbers")
    declared = header_size + _nbytes(shape, dtype)
    if member.file_size != declared:
        raise IncidentError(
            f"{where}: its header declares {declared} bytes (shape {shape}, dtype {dtype.str}), its zip entry "
            f"{member.file_size}"
        )
    return shape, dtype, fortran, header_size


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _read(zf: zipfile.ZipFile, member: zipfile.ZipInfo, where: str) -> np.ndarray:
    shape, dtype, fortran, header_size = _header(zf, member, where)
    size = _nbytes(shape, dtype)
    data = np.empty(size, dtype=np.uint8)
    view = memoryview(data)
    with zf.open(member) as fp:
        fp.read(header_size)
        done = 0
        while done < size:
            got = fp.readinto(view[done : done + _CHUNK])
            if not got:
                raise IncidentError(f"{where}: array {member.filename!r:.80} is truncated ({done} of {size} bytes)")
            done += got
        fp.read(1)  # reaching the end makes the zip reader check the CRC
    array = data.view(dtype)
    array = array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=False)

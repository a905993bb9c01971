"""How much an incidents folder may make a diagnosis read and allocate.

Incident files are data from disk, possibly crafted: a 2 MB npz whose deflated member declares a 4 GB array, or a
sparse ``incidents.jsonl`` of 4 GB of zero bytes, would otherwise be read into memory whole. Every size below is
checked *before* the bytes are read (file sizes by ``stat``, array sizes from the npy header of each member), and a
file past a limit is refused as unusable input (exit 2) with the limit in the message.

The defaults leave a wide margin over what the recorder writes: an Ant record is a JSON line of about 1.5 KB and an
npz of about 10 KB with a history of 31 steps (measured); the largest history SafeStep keeps (4096 steps) of a
1,000-element float32 observation is 16 MiB.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from robo_safe_rl.errors import IncidentError

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds on what a diagnosis reads from an incidents folder.

    Attributes:
        jsonl_bytes: Size of one ``incidents.jsonl``.
        line_bytes: Length of one of its lines (one record).
        records: Records (lines) of one ``incidents.jsonl``.
        action_dim: Components of an action.
        npz_file_bytes: Size on disk of one record's ``.npz``.
        npz_members: Arrays in one ``.npz``.
        record_array_bytes: Bytes of one record's arrays, as their headers declare them (uncompressed).
        total_array_bytes: Bytes of the arrays of all records read by one diagnosis together.
    """

    jsonl_bytes: int = 64 * _MIB
    line_bytes: int = 1 * _MIB
    records: int = 100_000
    action_dim: int = 4096
    npz_file_bytes: int = 80 * _MIB
    npz_members: int = 1024
    record_array_bytes: int = 64 * _MIB
    total_array_bytes: int = 512 * _MIB


#: The limits ``tools/diagnose.py`` applies.
DEFAULT_LIMITS = Limits()


def mib(size: int) -> str:
    """``"512 bytes"``, ``"1.5 MiB"``, ``"4 GiB"``: a size for a message."""
    if size < _MIB:
        return f"{size} bytes"
    if size < 1024 * _MIB:
        return f"{size / _MIB:.3g} MiB"
    return f"{size / (1024 * _MIB):.3g} GiB"


def open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading in binary, refusing anything but a regular file (following symlinks).

    Opened without blocking, so that a FIFO named like an incident file cannot hang the diagnosis; ``fstat`` of the
    open file decides, so the file cannot be swapped between the check and the read.

    Raises:
        IncidentError: If ``path`` is a FIFO, a device, a directory or a socket.
        OSError: If it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise IncidentError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")

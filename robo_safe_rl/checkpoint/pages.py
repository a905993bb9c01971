"""Drop the pages of a memory-mapped checkpoint once they have been read, so inspection memory stays bounded.

``torch.load(..., mmap=True)`` maps the whole file privately. Pages of such a mapping that were only read are clean
copies of the file: the kernel could reclaim them, yet they count in the process's resident memory until then, so
inspecting a 1 GiB file would show 1 GiB resident. ``madvise(MADV_DONTNEED)`` on a range that was never written
simply unmaps those pages; touching them again reads them back from the file. Only ranges that lie inside a mapping
of the checkpoint file itself (found in ``/proc/self/maps`` by device and inode) are ever released, never anonymous
memory, whose contents ``MADV_DONTNEED`` would zero. Where any of this is unavailable (not Linux, no libc), release
does nothing and only the memory figure changes.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

_MADV_DONTNEED = 4
"""Linux value of ``MADV_DONTNEED`` (``mmap.MADV_DONTNEED`` is the same number where Python exposes it)."""


class MappedFile:
    """The mappings of one file in this process, and a way to drop pages of them that were read.

    Args:
        path: The memory-mapped file. Build this after the file was mapped.
    """

    def __init__(self, path: Path) -> None:
        self._ranges = _mappings_of(path) if sys.platform.startswith("linux") else []
        self._madvise = _libc_madvise() if self._ranges else None
        self._page = mmap.PAGESIZE

    def release(self, chunk: torch.Tensor) -> None:
        """Drop the whole pages under ``chunk`` if they belong to this file's mapping; otherwise do nothing.

        Args:
            chunk: A CPU tensor that was only read, never written.
        """
        if self._madvise is None or chunk.device.type != "cpu" or chunk.numel() == 0:
            return
        begin = chunk.data_ptr()
        end = begin + chunk.numel() * chunk.element_size()
        # Whole pages inside the chunk only: a page shared with the neighbouring data is left resident.
        first = -(-begin // self._page) * self._page
        last = end // self._page * self._page
        if last <= first or not any(lo <= first and last <= hi for lo, hi in self._ranges):
            return
        if self._madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED) != 0:
            logger.debug("madvise failed (errno %d); pages stay resident", ctypes.get_errno())
            self._madvise = None


def _mappings_of(path: Path) -> list[tuple[int, int]]:
    """Address ranges where ``path`` is mapped in this process, from ``/proc/self/maps``."""
    try:
        st = os.stat(path)
        device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
        ranges = []
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) >= 5 and fields[4] == str(st.st_ino) and fields[3] == device:
                    lo, hi = fields[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
        return ranges
    except (OSError, ValueError):
        return []


def _libc_madvise() -> ctypes._CFuncPtr | None:
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise

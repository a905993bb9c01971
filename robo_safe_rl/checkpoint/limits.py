"""What any input may make the inspector read or allocate, whatever the file claims about itself.

Each limit is checked against the size a file *declares* before anything of that size is read or allocated, and
again against what is actually read (a zip member that inflates past its declared size is stopped there). A file
over a limit is refused as unusable input with a reason naming the member or tensor and the limit. The tensor data
itself has no size limit: it is streamed through one buffer of :data:`CHUNK_BYTES`, so memory does not grow with it.
"""

from __future__ import annotations

CHUNK_BYTES = 16 << 20
"""Bytes read from the file at a time; the one buffer every tensor's data streams through."""

MAX_PICKLE_BYTES = 4 << 20
"""Largest pickle the inspector unpickles (``data.pkl`` of a zip checkpoint, the pickles of a legacy file). An
rsl-rl checkpoint's ``data.pkl`` is about 10 KiB and each tensor adds about 100 bytes, so this admits some 40,000
tensors. The bound matters because the objects a pickle describes can take far more memory than the pickle: one byte
(``EMPTY_SET``) makes a 216-byte set, so the worst case is just under 1 GiB of Python objects for a pickle of this
size (measured: 0.93 GiB above the inspector's own footprint for 4 MiB of ``EMPTY_SET``)."""

MAX_HEADER_BYTES = 16 << 20
"""Largest safetensors JSON header read (the format itself allows 100 MB)."""

MAX_RECORDS = 100_000
"""Most members a zip checkpoint may list in its central directory (torch writes one per storage plus six)."""

MAX_SMALL_RECORD_BYTES = 1 << 16
"""Largest metadata member (``byteorder``, ``version``, ``.storage_alignment``) read into memory."""

VIEW_SPAN_BYTES = CHUNK_BYTES
"""A tensor that views only part of its storage is scanned element by element when the bytes it spans fit one
chunk; a larger one is reported with the statistics of its whole storage."""

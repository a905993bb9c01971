"""The history ring: the last (observation, action) pairs an incident record carries.

SafeStep keeps one env's rows in numpy arrays, the tensor guard all envs' rows in tensors on their device; both are
indexed alike (``buffer[i] = row`` copies, ``buffer[list]`` gathers a copy), so one ring serves both.
"""

from __future__ import annotations

from typing import Any


class HistoryRing:
    """The last ``capacity`` rows pushed into aligned, preallocated buffers, read back oldest first.

    Args:
        capacity: Rows kept; 0 keeps none (``push`` does nothing, ``read`` gives empty buffers).
        buffers: One array or tensor per series, each of shape (capacity, *row); may be set later (when the row
            shapes are known only at the first push).
    """

    def __init__(self, capacity: int, buffers: list[Any] | None = None) -> None:
        self.capacity = int(capacity)
        self.buffers = buffers
        self.count = 0
        """Rows pushed since the last :meth:`clear` (may exceed the capacity)."""
        self._next = 0

    def clear(self) -> None:
        """Forget every row (the buffers are kept)."""
        self.count = self._next = 0

    def push(self, *rows: Any) -> None:
        """Copy one row into each buffer, in the buffers' order, over the oldest row when full."""
        if not self.capacity or self.buffers is None:
            return
        p = self._next
        for buffer, row in zip(self.buffers, rows, strict=True):
            buffer[p] = row
        self._next = p + 1 if p + 1 < self.capacity else 0
        self.count += 1

    def read(self) -> list[Any]:
        """Copies of the kept rows of every buffer, oldest first. Shape of each: (min(count, capacity), *row)."""
        if self.buffers is None:
            return []
        n = min(self.count, self.capacity)
        order = [(self._next - n + i) % self.capacity for i in range(n)]
        return [buffer[order] for buffer in self.buffers]

"""The history ring: the last (observation, action) pairs, which an incident record carries to replay a fault.

SafeStep keeps one env's pairs in numpy arrays, the tensor guard all envs' pairs on their device (observations as a
TensorDict, actions as a tensor). All three are indexed alike (``buffer[i] = row`` copies a row in, ``buffer[list]``
gathers a copy), so one ring serves both.
"""

from __future__ import annotations

from typing import Any


class HistoryRing:
    """The last ``capacity`` (observation, action) pairs pushed, read back oldest first.

    Args:
        capacity: Pairs kept; 0 keeps none (``push`` does nothing, ``read`` gives empty buffers).
        obs: Observation buffer of shape (capacity, *obs row); may be set later, before the first push (when the
            row shape is known only then).
        actions: Action buffer of shape (capacity, *action row); likewise.
    """

    def __init__(self, capacity: int, obs: Any = None, actions: Any = None) -> None:
        self.capacity = int(capacity)
        self.obs = obs
        self.actions = actions
        self.count = 0
        """Pairs pushed since the last :meth:`clear` (may exceed the capacity)."""
        self._next = 0 if self.capacity else -1  # -1: keeps nothing

    def clear(self) -> None:
        """Forget every pair (the buffers are kept)."""
        self.count = 0
        self._next = 0 if self.capacity else -1

    def push(self, obs: Any, action: Any) -> None:
        """Copy one pair in, over the oldest when full. On SafeStep's clean path once per step, so kept minimal."""
        p = self._next
        if p < 0:
            return
        self.obs[p] = obs
        self.actions[p] = action
        self._next = p + 1 if p + 1 < self.capacity else 0
        self.count += 1

    def read(self) -> tuple[Any, Any]:
        """Copies of the kept observations and actions, oldest first; ``(None, None)`` before the buffers exist.

        Shapes: (min(count, capacity), *row) each.
        """
        if self.obs is None or self.actions is None:
            return None, None
        n = min(self.count, self.capacity)
        order = [(self._next - n + i) % self.capacity for i in range(n)]
        return self.obs[order], self.actions[order]

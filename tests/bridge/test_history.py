"""The history ring: the last rows, oldest first, on numpy arrays and on torch tensors alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robo_safe_rl.bridge.history import HistoryRing


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_keeps_the_last_rows_oldest_first(backend: str) -> None:
    zeros = np.zeros if backend == "numpy" else torch.zeros
    ring = HistoryRing(3, [zeros((3, 2)), zeros((3,))])
    ring.push(zeros(2) + 1, 10)
    ring.push(zeros(2) + 2, 20)
    obs, act = ring.read()
    assert obs.tolist() == [[1, 1], [2, 2]] and act.tolist() == [10, 20]  # not yet full: 2 rows
    for k in (3, 4, 5):
        ring.push(zeros(2) + k, 10 * k)
    # Five pushes into three rows: rows 3, 4, 5 remain, oldest first.
    obs, act = ring.read()
    assert obs.tolist() == [[3, 3], [4, 4], [5, 5]] and act.tolist() == [30, 40, 50]
    obs[0] = -1  # a copy: the ring is untouched
    assert ring.read()[0].tolist() == [[3, 3], [4, 4], [5, 5]]
    ring.clear()
    assert [b.shape[0] for b in ring.read()] == [0, 0]


def test_capacity_zero_keeps_nothing() -> None:
    ring = HistoryRing(0, [np.zeros((0, 2))])
    ring.push(np.ones(2))
    assert ring.read()[0].shape == (0, 2)
    assert HistoryRing(4).read() == []  # buffers not allocated yet

"""The history ring: the last (observation, action) pairs, oldest first, on numpy, torch and TensorDict alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from robo_safe_rl.bridge.history import HistoryRing


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_keeps_the_last_pairs_oldest_first(backend: str) -> None:
    zeros = np.zeros if backend == "numpy" else torch.zeros
    ring = HistoryRing(3, zeros((3, 2)), zeros((3,)))
    ring.push(zeros(2) + 1, 10)
    ring.push(zeros(2) + 2, 20)
    obs, act = ring.read()
    assert obs.tolist() == [[1, 1], [2, 2]] and act.tolist() == [10, 20]  # not yet full: 2 pairs
    for k in (3, 4, 5):
        ring.push(zeros(2) + k, 10 * k)
    # Five pushes into three slots: pairs 3, 4, 5 remain, oldest first.
    obs, act = ring.read()
    assert obs.tolist() == [[3, 3], [4, 4], [5, 5]] and act.tolist() == [30, 40, 50]
    obs[0] = -1  # a copy: the ring is untouched
    assert ring.read()[0].tolist() == [[3, 3], [4, 4], [5, 5]]
    ring.clear()
    assert [len(b) for b in ring.read()] == [0, 0]


def test_tensordict_observations_of_all_envs() -> None:
    # Two envs, observation groups "policy" (2,) and "critic" (1,); the ring keeps 2 vector steps.
    def obs(step: float) -> TensorDict:
        return TensorDict({"policy": torch.full((2, 2), step), "critic": torch.full((2, 1), -step)}, batch_size=[2])

    ring = HistoryRing(2, obs(0).unsqueeze(0).expand(2, 2).clone(), torch.zeros(2, 2, 1))
    for step in (1.0, 2.0, 3.0):
        ring.push(obs(step), torch.full((2, 1), 10 * step))
    history, actions = ring.read()
    assert history[:, 1]["policy"].tolist() == [[2, 2], [3, 3]] and history[:, 1]["critic"].tolist() == [[-2], [-3]]
    assert actions[:, 0, 0].tolist() == [20, 30]


def test_capacity_zero_keeps_nothing() -> None:
    ring = HistoryRing(0, np.zeros((0, 2)), np.zeros((0, 1)))
    ring.push(np.ones(2), np.ones(1))
    assert [b.shape for b in ring.read()] == [(0, 2), (0, 1)]
    assert HistoryRing(4).read() == (None, None)  # buffers not allocated yet

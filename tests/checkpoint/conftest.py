"""Fixtures of the checkpoint tests: a real rsl-rl 5.5 checkpoint dict and a helper to save one."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_factory import train_rsl_checkpoint


@pytest.fixture(scope="session")
def _trained() -> dict[str, Any]:
    return train_rsl_checkpoint()


@pytest.fixture
def rsl_checkpoint(_trained: dict[str, Any]) -> dict[str, Any]:
    """A fresh deep copy of a real rsl-rl 5.5 checkpoint dict (iteration 2), free to corrupt."""
    return copy.deepcopy(_trained)


@pytest.fixture
def save_as(tmp_path: Path) -> Callable[..., Path]:
    """Save a checkpoint dict with ``torch.save`` under ``tmp_path`` and return the path."""

    def save(obj: Any, name: str = "model_2.pt", **kwargs: Any) -> Path:
        path = tmp_path / name
        torch.save(obj, path, **kwargs)
        return path

    return save

"""Releasing pages of a memory-mapped checkpoint never changes what is read, and never touches other memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from robo_safe_rl.checkpoint import open_checkpoint, stats, tensor_stats
from robo_safe_rl.checkpoint.pages import MappedFile

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mappings are read from /proc/self/maps")


@LINUX
def test_released_pages_read_back_from_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 1 << 12)  # 16 KiB chunks: four pages each, many releases
    original = {"w": torch.arange(1 << 18, dtype=torch.float32), "b": torch.linspace(-1.0, 1.0, 4097)}
    path = tmp_path / "model_1.pt"
    torch.save(original, path)
    with open_checkpoint(path) as loaded:
        assert loaded.release is not None
        tensors = dict(loaded.tensors())
        rows = [tensor_stats(name, t, on_chunk_done=loaded.release) for name, t in tensors.items()]
        # The pages were dropped; reading the mapped tensors again brings the same bytes back from the file.
        assert all(torch.equal(tensors[name], original[name]) for name in original)
    assert [(r.name, r.min, r.max) for r in rows] == [("w", 0.0, float((1 << 18) - 1)), ("b", -1.0, 1.0)]


@LINUX
def test_release_ignores_memory_outside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "model_1.pt"
    torch.save({"w": torch.ones(1 << 16)}, path)
    with open_checkpoint(path) as loaded:
        mapped = MappedFile(path)
        assert mapped._ranges  # the file is mapped while it is open
        anonymous = torch.full((1 << 20,), 3.0)  # MADV_DONTNEED here would zero it
        mapped.release(anonymous)
        assert bool((anonymous == 3.0).all())
        assert next(loaded.tensors())[1].sum().item() == float(1 << 16)


def test_unmapped_formats_release_nothing(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(4)}, path, _use_new_zipfile_serialization=False)
    with open_checkpoint(path) as loaded:
        assert loaded.release is None

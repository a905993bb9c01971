"""Every kind of unusable input exits with 2 and one line on stderr; pickles that would run code are refused."""

from __future__ import annotations

import io
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from robo_safe_rl.checkpoint.cli import main


def _full(tmp: Path, ckpt: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    return buffer.getvalue()


def _write(name: str, data: Callable[[Path, dict[str, Any]], bytes]) -> Callable[[Path, dict[str, Any]], Path]:
    def make(tmp: Path, ckpt: dict[str, Any]) -> Path:
        path = tmp / name
        path.write_bytes(data(tmp, ckpt))
        return path

    return make


def _legacy(tmp: Path, ckpt: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(ckpt, buffer, _use_new_zipfile_serialization=False)
    return buffer.getvalue()


def _zip_without_pickle(tmp: Path, ckpt: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "not a model")
    return buffer.getvalue()


def _torchscript(tmp: Path, ckpt: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated, but exported policies exist
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 1)), buffer)
    return buffer.getvalue()


def _safetensors(tmp: Path, ckpt: dict[str, Any]) -> bytes:
    save_file({"w": torch.ones(64)}, tmp / "whole.safetensors")
    return (tmp / "whole.safetensors").read_bytes()[:-40]


def _a_directory(tmp: Path, ckpt: dict[str, Any]) -> Path:
    (tmp / "weights").mkdir()
    return tmp / "weights" / "model_3.pt"


UNUSABLE = {
    "missing": (lambda tmp, ckpt: tmp / "model_9.pt", r"not found"),
    "empty": (_write("model_1.pt", lambda t, c: b""), r"empty file \(0 bytes\)"),
    "truncated_half": (_write("model_1.pt", lambda t, c: _full(t, c)[: len(_full(t, c)) // 2]), r"truncated"),
    "truncated_head": (_write("model_1.pt", lambda t, c: _full(t, c)[:200]), r"truncated"),
    "truncated_legacy": (_write("model_1.pt", lambda t, c: _legacy(t, c)[: len(_legacy(t, c)) // 2]), r"truncated"),
    "text_file": (_write("model_1.pt", lambda t, c: b"checkpoint: model_1.pt\n"), r"not a checkpoint.*b'checkpoi'"),
    "plain_pickle": (
        _write("model_1.pt", lambda t, c: pickle.dumps({"w": [1.0]})),
        r"not a checkpoint: a plain pickle",
    ),
    "no_tensors": (_write("model_1.pt", lambda t, c: _full(t, {"iter": 3})), r"not a checkpoint: it holds no tensors"),
    "zip_not_torch": (_write("model_1.pt", _zip_without_pickle), r"not a checkpoint: a zip archive without data\.pkl"),
    "torchscript": (_write("policy.pt", _torchscript), r"not a checkpoint: a TorchScript module"),
    "truncated_safetensors": (_write("m.safetensors", _safetensors), r"truncated or corrupt safetensors"),
    "not_a_regular_file": (_a_directory, r"not a regular file|no checkpoints"),
}


@pytest.mark.parametrize("kind", list(UNUSABLE))
def test_unusable_input_exits_2_with_one_line(
    kind: str, tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    make, reason = UNUSABLE[kind]
    path = make(tmp_path, rsl_checkpoint)
    if kind == "not_a_regular_file":
        path.mkdir()
    assert main([str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"inspect_checkpoint: {path}: ")
    assert re.search(reason, lines[0]), lines[0]
    assert "Traceback" not in err and out == ""


def test_directory_without_checkpoints_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert err == f"inspect_checkpoint: {tmp_path}: no checkpoints: a run directory holds files named model_<iter>.pt\n"
    assert '"error": "no checkpoints' in out


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model_1.pt"
    torch.save(rsl_checkpoint, path)
    path.chmod(0)
    assert main([str(path)]) == 2
    assert "cannot read it (Permission denied)" in capsys.readouterr().err


class _CreatesFile:
    """Unpickling this calls ``open(path, "w")``: a file appears if, and only if, code from the pickle runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _torch_zip(obj: Any, path: Path) -> None:
    torch.save({"actor_state_dict": {"w": torch.ones(2)}, "payload": obj}, path)


def _torch_legacy(obj: Any, path: Path) -> None:
    torch.save({"w": torch.ones(2), "payload": obj}, path, _use_new_zipfile_serialization=False)


def _plain_pickle(obj: Any, path: Path) -> None:
    path.write_bytes(pickle.dumps({"w": torch.ones(2), "payload": obj}))


@pytest.mark.parametrize("writer", [_torch_zip, _torch_legacy, _plain_pickle], ids=["zip", "legacy", "plain"])
def test_pickle_that_would_run_code_is_refused(
    writer: Callable[[Any, Path], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Control: the payload does work. A plain unpickle creates its marker file.
    control = tmp_path / "control_marker"
    pickle.loads(pickle.dumps(_CreatesFile(control))).close()
    assert control.exists()

    marker = tmp_path / "marker"
    path = tmp_path / "model_66.pt"
    writer(_CreatesFile(marker), path)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    if writer is _plain_pickle:
        # Unpickling a plain pickle calls every global in it, torch's tensor rebuilders included.
        assert err.startswith(f"inspect_checkpoint: {path}: refused: a plain pickle, not written by torch.save, ")
        assert "io.open" in err and err.count("\n") == 1
    else:
        # builtins.open pickles under its module's name: io.open up to Python 3.11, _io.open from 3.12.
        assert err == (
            f"inspect_checkpoint: {path}: refused: loading it would run code that the weights-only loader "
            f"does not allow ({open.__module__}.open); nothing from the file was executed\n"
        )
    assert not marker.exists()
    # Inside a run directory, the refused file is reported as unreadable and the marker still does not appear.
    assert main([str(tmp_path), "--json"]) == 2
    assert "refused: " in capsys.readouterr().out
    assert not marker.exists()

"""Every tensor kind torch can save is scanned or reported as not scannable; odd files are exit 2, never a traceback.

Exit 1 means only "non-finite values found": a file the inspector cannot make sense of is exit 2 with one line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from crafted import REPO, TOOL, nest_value, replace, safetensors_file, stored, torch_members, write_zip

from robo_safe_rl.checkpoint import inspect_file
from robo_safe_rl.checkpoint.cli import main
from robo_safe_rl.checkpoint.loading import open_checkpoint
from robo_safe_rl.errors import CheckpointError, RoboSafeRLError

NAN, INF = float("nan"), float("inf")
# torch warns when the odd kinds below are created (quantized: deprecated; nested: prototype; sparse: beta).
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*(quantized tensor creation|nested tensors is in prototype|Sparse invariant|Sparse CSC):UserWarning"
)


def _save(path: Path, obj: dict[str, Any]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR is "beta", nested tensors are "prototype"
        torch.save(obj, path)
    return path


def _rows(capsys: pytest.CaptureFixture[str], path: Path, code: int) -> dict[str, dict[str, Any]]:
    assert main([str(path), "--json", "--all"]) == code
    (checkpoint,) = json.loads(capsys.readouterr().out)["checkpoints"]
    return {row["name"]: row for row in checkpoint["rows"]}


def test_unsigned_integer_dtypes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # torch has no CPU min/max for uint16/32/64. uint64 holds 2**64 - 5 (the bits of int64 -5): read as unsigned.
    obj = {
        "u16": torch.tensor([3, 65535]).to(torch.uint16),
        "u32": torch.tensor([0, 2**32 - 1]).to(torch.uint32),
        "u64": torch.tensor([-5, 7]).view(torch.uint64),
        "iter": torch.tensor(9).to(torch.uint64),
    }
    path = _save(tmp_path / "model_9.pt", obj)
    rows = _rows(capsys, path, 0)
    assert {name: (r["min"], r["max"], r["nan"]) for name, r in rows.items()} == {
        "u16": (3, 65535, 0),
        "u32": (0, 2**32 - 1, 0),
        "u64": (7, 2**64 - 5, 0),
        "iter": (9, 9, 0),
    }
    assert inspect_file(path).iteration == 9


def test_quantized_tensors_and_their_scales(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Per tensor: 1.0 and 2.0 at scale 0.1 are the integers 10 and 20. Per channel: a NaN scale makes channel 1
    # dequantize to NaN; that scale is what the inspector reports, as a row of its own.
    per_tensor = torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.1, 0, torch.qint8)
    scales = torch.tensor([0.5, NAN], dtype=torch.float64)
    per_channel = torch.quantize_per_channel(
        torch.ones(2, 2), scales, torch.zeros(2, dtype=torch.int64), 0, torch.quint8
    )
    path = _save(tmp_path / "q.pt", {"q": per_tensor, "qc": per_channel})
    rows = _rows(capsys, path, 1)
    assert (rows["q"]["dtype"], rows["q"]["min"], rows["q"]["max"], rows["q"]["nan"]) == ("qint8", 10, 20, 0)
    assert (rows["q/q_scale"]["min"], rows["q/q_scale"]["nan"]) == (0.1, 0)
    assert (rows["qc/q_scale"]["nan"], rows["qc/q_scale"]["min"], rows["qc/q_zero_point"]["max"]) == (1, 0.5, 0)
    assert rows["qc"]["note"] == "quantized: range of its stored integers"


def test_meta_nested_sparse_complex_float8_and_raw_bits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = {
        "meta": torch.empty(3, 4, device="meta"),
        # Buffer of the nested tensor: 1, 1, NaN, 2, 3.
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.tensor([NAN, 2.0, 3.0])]),
        "coo": torch.sparse_coo_tensor(torch.tensor([[0, 999]]), torch.tensor([INF, -1.0]), (1000,)),
        "csc": torch.eye(3).to_sparse_csc(),
        "bsr": torch.eye(4).to_sparse_bsr((2, 2)),
        # Components 1, -2 and 3, NaN: one NaN, range [-2, 3].
        "complex": torch.tensor([complex(1, -2), complex(3, NAN)]),
        "f8": torch.tensor([0.5, -2.0, NAN]).to(torch.float8_e4m3fn),
        "bits": torch.zeros(4, dtype=torch.uint8).view(torch.bits8),
        "fp4": torch.zeros(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
    }
    rows = _rows(capsys, _save(tmp_path / "kinds.pt", obj), 1)
    got = {n: (r["nan"], r["posinf"], r["min"], r["max"], r["scope"]) for n, r in rows.items()}
    assert got == {
        "meta": (0, 0, None, None, "none"),
        "nested": (1, 0, 1.0, 3.0, "tensor"),
        "coo": (0, 1, -1.0, -1.0, "tensor"),
        "csc": (0, 0, 1.0, 1.0, "tensor"),
        "bsr": (0, 0, 0.0, 1.0, "tensor"),
        "complex": (1, 0, -2.0, 3.0, "tensor"),
        "f8": (1, 0, -2.0, 0.5, "tensor"),
        "bits": (0, 0, None, None, "none"),
        "fp4": (0, 0, None, None, "tensor"),
    }
    assert rows["meta"]["note"] == "a meta tensor: it holds no data"
    assert (rows["coo"]["numel"], rows["coo"]["note"]) == (1000, "sparse_coo: counts of its 2 stored values")
    assert rows["fp4"]["note"] == "torch.float4_e2m1fn_x2: packed values, finite by construction"
    assert main([str(tmp_path / "kinds.pt")]) == 1
    assert "2 not scannable" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("make", "iteration"),
    [
        (lambda: torch.tensor(5, dtype=torch.uint16), 5),
        (lambda: torch.tensor(-3).view(torch.uint64), 2**64 - 3),  # the bits of int64 -3, read unsigned
        (lambda: torch.empty((), dtype=torch.int64, device="meta"), None),
        (lambda: torch.quantize_per_tensor(torch.tensor(3.0), 1.0, 0, torch.qint8), None),
        (lambda: torch.tensor(4.0), None),
    ],
    ids=["uint16", "uint64", "meta", "quantized", "float"],
)
def test_iter_stored_as_an_odd_tensor(tmp_path: Path, make: Callable[[], torch.Tensor], iteration: int | None) -> None:
    value = make()
    path = _save(tmp_path / "model_5.pt", {"w": torch.ones(2), "iter": value})
    report = inspect_file(path)
    assert (report.status.value, report.iteration) == ("clean", iteration)
    assert main([str(path)]) == 0
    with open_checkpoint(path) as loaded:  # diagnose's loader, after the same checks, agrees or says None
        assert loaded.iteration in (iteration, None)


def test_pickle_nested_a_hundred_thousand_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # data.pkl rewritten so that {"w": [[[...[tensor]...]]]} is 100,000 lists deep: 200 KB of pickle. Walking it
    # recursively raised RecursionError (a traceback and exit 1). The path has 1 + 100,000 parts; the name keeps 24
    # at each end ("w" and 23 zeros, then 24 zeros) and says how many it leaves out: 100,001 - 48 = 99,953.
    members = torch_members({"w": torch.tensor([1.0, NAN])})
    deep = nest_value(next(m.stored for m in members if m.name == "archive/data.pkl"), "w", 100_000)
    path = write_zip(tmp_path / "deep.pt", replace(members, "data.pkl", stored("archive/data.pkl", deep)))
    (row,) = _rows(capsys, path, 1).values()
    assert row["name"] == "/".join(["w", *["0"] * 23, "[99953 levels]", *["0"] * 24])
    assert row["nan"] == 1
    done = subprocess.run(
        [sys.executable, str(TOOL), str(path)], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize(
    ("metadata", "code", "reason"),
    [
        ('{"iter": 5}', 2, r"corrupt safetensors file \(__metadata__ must map names to strings\)"),
        ('{"iter": ["7"]}', 2, r"corrupt safetensors file \(__metadata__ must map names to strings\)"),
        ('{"iter": "\\u00b2"}', 0, None),  # "²".isdigit() is true, and int("²") raised ValueError
        ('{"iter": "99999999999999999999999"}', 0, None),
    ],
    ids=["int", "list", "superscript_two", "huge"],
)
def test_malformed_safetensors_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], metadata: str, code: int, reason: str | None
) -> None:
    tensors = '"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
    path = safetensors_file(tmp_path / "m.safetensors", f'{{"__metadata__": {metadata}, {tensors}}}', bytes(8))
    assert main([str(path)]) == code
    err = capsys.readouterr().err
    if reason is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and re.search(reason, err), err


@pytest.mark.parametrize(
    "header",
    [
        "[" * 100_000 + "]" * 100_000,  # the JSON parser recurses: RecursionError
        '{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4096]}}',  # data past the end of the file
        '{"w": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}',
        '{"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}',
    ],
    ids=["deep_json", "offsets_past_file", "unknown_dtype", "negative_shape"],
)
def test_malformed_safetensors_header(tmp_path: Path, header: str) -> None:
    path = safetensors_file(tmp_path / "m.safetensors", header, bytes(8))
    with pytest.raises(CheckpointError, match=r"corrupt safetensors file"):
        inspect_file(path)
    assert main([str(path)]) == 2


def test_resume_turns_a_crafted_file_into_a_config_error(tmp_path: Path) -> None:
    # train.py's resume= goes through the same inspection: a file it cannot read (here a 50,000-level pickle cut
    # short) is a ConfigError, which train.py turns into exit 2, never a traceback or exit 1 ("safety stop").
    from robo_safe_rl.apps.train import resolve_resume

    members = torch_members({"w": torch.ones(2)})
    deep = nest_value(next(m.stored for m in members if m.name == "archive/data.pkl"), "w", 50_000)
    deep_file = write_zip(tmp_path / "model_1.pt", replace(members, "data.pkl", stored("archive/data.pkl", deep[:-9])))
    with pytest.raises(RoboSafeRLError, match=r"invalid config value resume=.*model_1\.pt.*not a loadable checkpoint"):
        resolve_resume(str(deep_file))

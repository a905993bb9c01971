"""Small crafted files cannot make the inspector run long or allocate much: views, inflation, sparse, declared sizes.

Each file is built the way the attack was: a stride-0 view saved by ``torch.save``, a zip whose ``data.pkl`` is a
deflate stream inflating to 4.8 GB, a sparse CSR tensor whose dense form is 2.25 GB. Memory is measured as the peak
resident size of a real inspector process, against the same process inspecting a tiny clean file.
"""

from __future__ import annotations

import json
import re
import time
import zipfile
import zlib
from pathlib import Path

import pytest
import torch
from crafted import Member, deflate_bomb, replace, run_measured, safetensors_file, stored, torch_members, write_zip

from robo_safe_rl.checkpoint import inspect_file, limits
from robo_safe_rl.checkpoint.cli import main
from robo_safe_rl.errors import CheckpointError

NAN = float("nan")
MIB = 1 << 20
pytestmark = pytest.mark.filterwarnings("ignore:.*(Sparse invariant|Sparse CSR tensor support):UserWarning")
# Peak resident memory a crafted file may add to that of inspecting a tiny clean file: the 16 MiB read buffer and
# the small objects its pickle describes, with room for the allocator. The attacks below would take GBs.
EXTRA_PEAK_BYTES = 96 * MIB


@pytest.fixture(scope="module")
def baseline_peak(tmp_path_factory: pytest.TempPathFactory) -> int:
    """Peak resident memory of the inspector process on a tiny clean checkpoint (torch's import dominates it)."""
    path = tmp_path_factory.mktemp("baseline") / "model_1.pt"
    torch.save({"w": torch.ones(4), "iter": 1}, path)
    code, _, err, peak = run_measured([str(path)])
    assert (code, err) == (0, "")
    return peak


def _json(capsys: pytest.CaptureFixture[str], path: Path, expected_code: int) -> dict:
    assert main([str(path), "--json", "--all"]) == expected_code
    return json.loads(capsys.readouterr().out)["checkpoints"][0]


def test_stride_zero_view_of_two_to_the_40_elements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], baseline_peak: int
) -> None:
    # One NaN stored once, viewed as 2**40 elements (torch.save keeps the view's size and zero stride): a 1.6 KB file.
    # Counting element by element took hours; the storage holds one element, and the view repeats it 2**40 times.
    path = tmp_path / "model_3.pt"
    torch.save({"w": torch.tensor([NAN]).expand(2**40), "iter": 3}, path)
    assert path.stat().st_size < 2000
    start = time.perf_counter()
    (row,) = _json(capsys, path, 1)["rows"]
    assert time.perf_counter() - start < 10
    assert (row["shape"], row["numel"], row["nan"], row["scope"]) == ([2**40], 2**40, 2**40, "tensor")
    code, out, err, peak = run_measured([str(path)])
    assert (code, err) == (1, "")
    assert "| w " in out and "1099511627776" in out
    assert peak < baseline_peak + EXTRA_PEAK_BYTES


def test_clean_stride_zero_view_and_partial_views_are_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.arange(10.0)
    x[3] = NAN
    views = {
        # 1.0 broadcast to 2**20 x 2**20: clean, range [1, 1].
        "ones": torch.tensor([1.0]).expand(2**20, 2**20),
        # x[0:4] repeated 2**20 times (stride 0 on the outer dim): one NaN per repetition, finite range [0, 2].
        "rows": x.as_strided((2**20, 4), (0, 1)),
        # x[4:10:2] = 4, 6, 8: a partial view read apart, clean although its storage holds a NaN.
        "every_other": x[4::2],
        # Sliding windows overlap (element k appears in up to 4 windows): counted over the whole storage, and said so.
        "windows": x.as_strided((7, 4), (1, 1)),
    }
    path = tmp_path / "views.pt"
    torch.save(views, path)
    rows = {r["name"]: r for r in _json(capsys, path, 1)["rows"]}
    got = {name: (r["numel"], r["nan"], r["min"], r["max"], r["scope"]) for name, r in rows.items()}
    assert got == {
        "ones": (2**40, 0, 1.0, 1.0, "tensor"),
        "rows": (2**22, 2**20, 0.0, 2.0, "tensor"),
        "every_other": (3, 0, 4.0, 8.0, "tensor"),
        "windows": (28, 1, 0.0, 9.0, "storage"),
    }
    assert rows["windows"]["note"] == "an overlapping view: counts of its whole storage"


def test_many_views_of_one_storage_cost_at_most_twice_the_file(tmp_path: Path) -> None:
    # 3,000 views x[k:] of one 8 MiB storage: scanning each apart would read 24 GB. The budget for views read apart is
    # the storages' own size, so once it is spent the remaining views take their storage's counts.
    x = torch.zeros(2 * MIB)
    path = tmp_path / "views.pt"
    torch.save({f"v{k}": x[k:] for k in range(3000)}, path)
    start = time.perf_counter()
    report = inspect_file(path)
    assert time.perf_counter() - start < 30
    scopes = [row.scope for row in report.rows]
    assert scopes[0] == "tensor" and scopes.count("storage") >= 2990
    assert report.rows[-1].note == "a view of part of a large storage: counts of its whole storage"


def _bomb(tmp_path: Path, declared: int) -> Path:
    members = torch_members({"w": torch.ones(4), "iter": 1})
    pickle_bytes = next(m for m in members if m.name == "archive/data.pkl").stored
    # data.pkl: the real pickle, then zeros up to 4.8 GB after its STOP opcode; torch inflates a member whole before
    # unpickling, so torch.load of this file takes 4.8 GB. The CRC is left 0: torch never checks it.
    member = Member("archive/data.pkl", deflate_bomb(pickle_bytes, 4_800_000_000), declared, 0, zipfile.ZIP_DEFLATED)
    return write_zip(tmp_path / "model_1.pt", replace(members, "data.pkl", member))


@pytest.mark.parametrize(
    ("declared", "reason"),
    [
        (4_800_000_000, r"refused: archive/data\.pkl declares 4800000000 bytes; the inspector reads at most 4194304 "),
        (3000, r"refused: archive/data\.pkl inflates past the 3000 bytes it declares"),
    ],
    ids=["declares_4.8GB", "declares_3KB"],
)
def test_deflated_data_pkl_that_inflates_to_gigabytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], baseline_peak: int, declared: int, reason: str
) -> None:
    path = _bomb(tmp_path, declared)
    assert path.stat().st_size < 5 * MIB
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"inspect_checkpoint: {path}: ") and err.count("\n") == 1
    assert re.search(reason, err), err
    code, _, err, peak = run_measured([str(path)])
    assert code == 2 and "refused: archive/data.pkl" in err
    assert peak < baseline_peak + EXTRA_PEAK_BYTES


def test_sparse_csr_is_counted_without_densifying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], baseline_peak: int
) -> None:
    # A 24576 x 24576 CSR matrix (2.25 GiB dense) with 1,000 stored values, 7 of them NaN: a file of about 200 KB.
    n, stored_values = 24576, 1000
    crow = torch.arange(n + 1).clamp(max=stored_values)
    values = torch.ones(stored_values)
    values[:7] = NAN
    path = tmp_path / "model_1.pt"
    torch.save(
        {"w": torch.sparse_csr_tensor(crow, torch.zeros(stored_values, dtype=torch.int64), values, (n, n))}, path
    )
    (row,) = _json(capsys, path, 1)["rows"]
    assert (row["shape"], row["numel"], row["nan"], row["min"], row["max"]) == ([n, n], n * n, 7, 1.0, 1.0)
    assert row["note"] == "sparse_csr: counts of its 1000 stored values"
    code, _, err, peak = run_measured([str(path)])
    assert (code, err) == (1, "")
    assert peak < baseline_peak + EXTRA_PEAK_BYTES


def test_declared_sizes_are_checked_before_reading(tmp_path: Path) -> None:
    members = torch_members({"w": torch.ones(4)})
    # A storage record deflated: torch.save never writes one, and the inspector does not inflate tensor data.
    data = next(m for m in members if m.name == "archive/data/0").stored
    raw_deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed_data = raw_deflate.compress(data) + raw_deflate.flush()
    packed = Member("archive/data/0", packed_data, len(data), zlib.crc32(data), zipfile.ZIP_DEFLATED)
    path = write_zip(tmp_path / "deflated.pt", replace(members, "data/0", packed))
    with pytest.raises(CheckpointError, match=r"refused: archive/data/0 holds tensor data compressed"):
        inspect_file(path)
    # A storage whose persistent id declares more elements than its record holds.
    path = tmp_path / "short.pt"
    path = write_zip(path, replace(members, "data/0", stored("archive/data/0", data[:8])))
    with pytest.raises(CheckpointError, match=r"corrupt: storage data/0 declares 16 bytes but its record holds 8"):
        inspect_file(path)
    # More members than any checkpoint has.
    many = members + [stored(f"archive/extra/{k}", b"") for k in range(limits.MAX_RECORDS)]
    path = write_zip(tmp_path / "many.pt", many)
    with pytest.raises(CheckpointError, match=rf"lists {len(many)} members; the inspector reads at most 100000"):
        inspect_file(path)
    # A safetensors header of 2 GB declared in a 100-byte file.
    path = safetensors_file(tmp_path / "m.safetensors", "{}")
    path.write_bytes((2_000_000_000).to_bytes(8, "little") + b"{" + b" " * 91)
    with pytest.raises(CheckpointError, match=r"header declares 2000000000 bytes; the inspector reads at most"):
        inspect_file(path)


def test_legacy_storage_larger_than_the_file(tmp_path: Path) -> None:
    # A legacy torch stream reads storages in file order, each after its 8-byte element count.
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(4)}, path, _use_new_zipfile_serialization=False)
    raw = bytearray(path.read_bytes())
    count_at = len(raw) - 16 - 8
    assert int.from_bytes(raw[count_at : count_at + 8], "little") == 4
    raw[count_at : count_at + 8] = (2**40).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    # (A legacy storage's key is the address it had in the saving process.)
    with pytest.raises(
        CheckpointError, match=r"corrupt: storage \d+ holds 1099511627776 elements, its tensors declare 4"
    ):
        inspect_file(path)


def test_a_member_named_twice_is_corrupt(tmp_path: Path) -> None:
    # Two copies of one storage: a NaN one first, a clean one after. Readers differ on which copy counts, so a clean
    # verdict on one copy would say nothing about what torch loads.
    members = torch_members({"w": torch.ones(4)})
    bad = stored("archive/data/0", torch.full((4,), NAN).numpy().tobytes())
    path = write_zip(tmp_path / "twice.pt", [bad, *members])
    with pytest.raises(CheckpointError, match=r"corrupt: the zip archive holds archive/data/0 twice"):
        inspect_file(path)

"""What an incidents folder can make ``tools/diagnose.py`` allocate: bounded, whatever its files declare.

Crafted files built as an attacker would (hostile_files.py): an npz whose deflated member declares gigabytes of
zeros, a sparse ``incidents.jsonl`` of gigabytes of zero bytes, a zip directory of tens of thousands of entries.
The memory tests run the real tool in a subprocess and read its peak resident size (VmHWM) as it exits.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hostile_files import JSONL, npy_header, npz_bomb, records, stored_members, write_zip

from robo_safe_rl.diagnose.cli import main
from robo_safe_rl.diagnose.inputs import resolve
from robo_safe_rl.diagnose.limits import Limits
from robo_safe_rl.errors import IncidentError

ROOT = Path(__file__).resolve().parents[2]
_GIB = 1 << 30


#: Runs the tool as ``python tools/diagnose.py`` would, then writes the process's VmHWM (its peak resident size since
#: exec) to a file. Not ``ru_maxrss`` from ``wait4``: Linux counts into it the memory the parent had when it forked
#: (or vforked) the child, and a long pytest process holds hundreds of MiB.
_MEASURE = """
import runpy, sys
tool, report = sys.argv[1], sys.argv[2]
sys.argv = [tool, *sys.argv[3:]]
try:
    runpy.run_path(tool, run_name="__main__")
finally:
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")))
"""


def _peak_rss_run(argv: list[str], tmp_path: Path) -> tuple[int, str, float]:
    """Run ``tools/diagnose.py argv`` in a subprocess: exit code, stderr and peak resident size in MiB."""
    report = tmp_path / "vmhwm.txt"
    tool = [sys.executable, "-c", _MEASURE, str(ROOT / "tools" / "diagnose.py"), str(report), *argv]
    result = subprocess.run(tool, capture_output=True, text=True, cwd=ROOT, timeout=300)
    kib = int(report.read_text().split()[1])  # "VmHWM:   397112 kB"
    return result.returncode, result.stderr, kib / 1024


def _npz_bomb(incidents: Path) -> Path:
    # history_obs of record 0 declared as (H, 2^25) float64: 6 rows of 256 MiB = 1.5 GiB of zeros, deflated to 1.5 MB.
    rows = records(incidents)[0]["history_len"]
    path = incidents / records(incidents)[0]["arrays"]
    npz_bomb(path, "history_obs", (rows, 1 << 25))
    return path


def _sparse_jsonl(incidents: Path) -> Path:
    # 4 GiB of zero bytes that take no disk: read whole, as before, it would be 4 GiB of bytes and 4 GiB of text.
    path = incidents / JSONL
    with path.open("r+b") as f:
        f.truncate(4 * _GIB)
    return path


@pytest.mark.parametrize(
    ("craft", "why"),
    [
        (_npz_bomb, "its arrays declare 1.5 GiB, more than the 64 MiB a record may hold"),
        (_sparse_jsonl, f"{JSONL}: 4 GiB, more than the 64 MiB an incident file may hold"),
    ],
    ids=["npz_bomb", "sparse_jsonl"],
)
def test_crafted_files_are_refused_before_they_are_read(
    bad_actions_run: Path, copy_run: Callable, tmp_path: Path, craft: Callable, why: str
) -> None:
    run = copy_run(bad_actions_run)
    culprit = craft(run / "incidents")
    assert culprit.stat().st_blocks * 512 < 8 << 20  # a few MB on disk at most
    code, err, peak_mib = _peak_rss_run([str(run), "--replay", "none"], tmp_path)
    assert code == 2 and err.startswith(f"diagnose: {culprit}") and why in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    # Importing torch, PyBullet and the tool is about 340 MiB here; reading the file would add 1.5 GiB at least.
    print(f"peak resident size {peak_mib:.0f} MiB")
    assert peak_mib < 700, f"peak resident size {peak_mib:.0f} MiB"


def test_a_long_line_and_a_nested_one_are_refused(bad_actions_run: Path, copy_run: Callable, capsys) -> None:
    run = copy_run(bad_actions_run)
    jsonl = run / "incidents" / JSONL
    lines = jsonl.read_text().splitlines(keepends=True)
    jsonl.write_text(lines[0] + '{"schema": 1, "reason": "' + "x" * (2 << 20) + '"}\n')
    assert main([str(run), "--replay", "none"]) == 2
    assert f"{jsonl}:2: a line longer than 1 MiB" in capsys.readouterr().err
    # Nesting that recursion cannot parse (RecursionError in the json module, not a JSON error).
    jsonl.write_text(lines[0] + "[" * 200_000 + "\n")
    assert main([str(run), "--replay", "none"]) == 2
    assert f"{jsonl}:2: JSON nested too deeply" in capsys.readouterr().err


def test_record_count_and_array_budgets(bad_actions_run: Path) -> None:
    incidents = bad_actions_run / "incidents"
    with pytest.raises(IncidentError, match=r"incidents.jsonl:3: more than the 2 records an incident file may hold"):
        resolve(str(incidents), Limits(records=2))
    # Worked example: a record holds 4 actions (8 float32: 32 bytes each), its history (H rows of 28 + 8 float32;
    # H = 6 for the NaN of step 5) and 12 state arrays (3+4+3+3+8+8+1+1+2+4+4+1 = 42 float64: 336 bytes).
    sizes = []
    for record in records(incidents):
        with np.load(incidents / record["arrays"]) as data:
            sizes.append(sum(data[k].nbytes for k in data.files))
    assert sizes[0] == 4 * 32 + 6 * (28 + 8) * 4 + 336
    budget = sizes[0] + sizes[1]
    resolve(str(incidents), Limits(total_array_bytes=budget + sizes[2]))
    with pytest.raises(IncidentError, match="would take the records read together past"):
        resolve(str(incidents), Limits(total_array_bytes=budget + sizes[2] - 1))
    with pytest.raises(IncidentError, match=f"its arrays declare {sizes[0]} bytes, more than the 1000 bytes"):
        resolve(str(incidents), Limits(record_array_bytes=1000))


def _many_members(path: Path) -> str:
    empty = npy_header((0,))
    write_zip(path, [(f"m{i}.npy", empty, len(empty), zlib.crc32(empty), 0) for i in range(30_000)])
    return "MiB, more than 1024 arrays need"  # 30,000 entries of 46 bytes plus a name: 1.59 MiB


def _zip64(path: Path) -> str:
    data = path.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    path.write_bytes(data[:end] + b"PK\x06\x07" + bytes(16) + data[end:])
    return "a zip64 archive"


def _entry_longer_than_header(path: Path) -> str:
    raw = npy_header((8,), "<f4") + bytes(32 + 100)
    members = [m for m in stored_members(path) if m[0] != "raw_action.npy"]
    write_zip(path, [*members, ("raw_action.npy", raw, len(raw), zlib.crc32(raw), 0)])
    return "array 'raw_action': its header declares 160 bytes (shape (8,), dtype <f4), its zip entry 260"


def _bzip2(path: Path) -> str:
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_BZIP2) as zf:
        for key, value in arrays.items():
            with zf.open(f"{key}.npy", "w") as f:
                np.lib.format.write_array(f, value)
    return "uses zip compression 12; expected stored or deflated"


def _npy_version_3(path: Path) -> str:
    raw = bytearray(stored_members(path)[0][1])
    raw[6:8] = b"\x03\x00"
    members = stored_members(path)
    write_zip(path, [(members[0][0], bytes(raw), len(raw), zlib.crc32(raw), 0), *members[1:]])
    return "npy format (3, 0), expected 1.0 or 2.0"


def _sparse_npz(path: Path) -> str:
    with path.open("r+b") as f:
        f.truncate(100 << 20)
    return "100 MiB, more than the 80 MiB allowed"


NPZ_FILES = [_many_members, _zip64, _entry_longer_than_header, _bzip2, _npy_version_3, _sparse_npz]


@pytest.mark.parametrize("craft", NPZ_FILES, ids=[c.__name__.strip("_") for c in NPZ_FILES])
def test_crafted_npz_containers_exit_2(bad_actions_run: Path, copy_run: Callable, capsys, craft: Callable) -> None:
    run = copy_run(bad_actions_run)
    incidents = run / "incidents"
    npz = incidents / records(incidents)[1]["arrays"]
    why = craft(npz)
    assert main([str(run), "--replay", "none"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"diagnose: {npz}: ") and why in line, line


def _release_after(fifo: Path, seconds: float, done: threading.Event) -> None:
    """If a reader still waits on ``fifo`` after ``seconds``, open and close it for writing: the reader gets an end
    of file, and a test of a regression fails instead of hanging."""
    if not done.wait(seconds):
        with contextlib.suppress(OSError):  # ENXIO: nobody reads it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("which", ["jsonl", "npz"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    # Opening a FIFO for reading waits for a writer forever; before, an incidents.jsonl FIFO also read as "no
    # incidents" (exit 0).
    run = copy_run(bad_actions_run)
    incidents = run / "incidents"
    fifo = incidents / (JSONL if which == "jsonl" else records(incidents)[1]["arrays"])
    fifo.unlink()
    os.mkfifo(fifo)
    done = threading.Event()
    watchdog = threading.Thread(target=_release_after, args=(fifo, 30.0, done))
    watchdog.start()
    try:
        code = main([str(run), "--replay", "none"])
    finally:
        done.set()
        watchdog.join()
    assert (code, capsys.readouterr().err) == (2, f"diagnose: {fifo}: not a regular file\n")

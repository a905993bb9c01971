"""``reserved_stdout``: a ``--json`` document alone on stdout, whatever C code, child processes or stray prints write
there meanwhile. Real PyBullet: a URDF whose mesh names a texture that is not there makes PyBullet's C code print
``b3Warning`` lines to file descriptor 1 (a trimmed ``pybullet_data`` did this to ``tools/evaluate.py --json``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pybullet_data
import pytest

from robo_safe_rl.terminal import reserved_stdout

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, os, subprocess, sys
import pybullet
from robo_safe_rl.terminal import reserved_stdout

reserve = sys.argv[2] == "reserve"
with reserved_stdout(reserve) as out:
    client = pybullet.connect(pybullet.DIRECT)
    pybullet.loadURDF(sys.argv[1], physicsClientId=client)  # C printf: b3Warning ... not found [checker_blue.png]
    print("a stray print")
    subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
    os.write(1, b"straight to descriptor 1\\n")
    print(json.dumps({"document": 1}), file=out)
print("after the document", flush=True)
"""


@pytest.fixture(scope="module")
def plane_without_texture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pybullet_data's plane, its mesh and material copied without the texture the material names."""
    folder = tmp_path_factory.mktemp("plane")
    for name in ("plane.urdf", "plane.obj", "plane100.obj", "plane.mtl"):
        shutil.copy(Path(pybullet_data.getDataPath()) / name, folder / name)
    assert "checker_blue.png" in (folder / "plane.mtl").read_text() and not (folder / "checker_blue.png").exists()
    return folder / "plane.urdf"


def run(urdf: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(urdf), mode], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_the_document_is_alone_on_stdout_and_everything_else_reaches_stderr(plane_without_texture: Path) -> None:
    done = run(plane_without_texture, "reserve")
    assert done.returncode == 0, done.stderr
    # Only the document inside the block; after it, stdout is the process's own again.
    assert done.stdout.splitlines() == ['{"document": 1}', "after the document"]
    assert json.loads(done.stdout.splitlines()[0]) == {"document": 1}
    for text in ("b3Warning", "checker_blue.png", "a stray print", "a child process", "straight to descriptor 1"):
        assert text in done.stderr, text


def test_without_it_pybullets_c_output_lands_on_stdout(plane_without_texture: Path) -> None:
    # The control: the same script, stdout not reserved, and a JSON reader of stdout fails.
    done = run(plane_without_texture, "plain")
    assert done.returncode == 0, done.stderr
    assert "b3Warning" in done.stdout and '{"document": 1}' in done.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)


def test_not_reserved_or_captured_it_writes_to_sys_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with reserved_stdout(False) as out:
        assert out is sys.stdout
    # Under a capture (sys.stdout is not descriptor 1) the document goes to sys.stdout, where the caller reads it.
    with reserved_stdout() as out:
        print("document", file=out)
    assert capsys.readouterr().out == "document\n"

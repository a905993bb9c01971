"""Reproduction scripts from hostile incidents: what comes from the folder's name or a record's fields reaches the
script as data only, never as code, and the script still reproduces the fault.

The attack: an incidents folder named ``incidents_x\"\"\"<newline>open("MARKER", "w").close()<newline>\"\"\"`` closed
the script's docstring when its name was pasted there, and running the reproduction created MARKER.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_files import edit_record

from robo_safe_rl.diagnose.cli import main
from robo_safe_rl.diagnose.inputs import LoadedIncident
from robo_safe_rl.diagnose.repro import literal, script_path
from robo_safe_rl.terminal import printable

PAYLOAD = 'open("MARKER", "w").close()'
HOSTILE_NAMES = [
    f'incidents_x"""\n{PAYLOAD}\n"""',
    f"incidents_x'''\n{PAYLOAD}\n'''",
    f"incidents_x\\\n{PAYLOAD}  #",
    'incidents_x\\"; {ref} \r\x1b[31m',
]
HOSTILE_TEXT = [f'"""\n{PAYLOAD}\n"""', f"'\n{PAYLOAD}\n#", "back\\slash\\", "x\r\ny", "\u2028 {kind}", "\udcff"]


def _shape(source: str) -> str:
    """The script's syntax tree with every constant blanked: equal shapes differ only in data."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            node.value = None
    return ast.dump(tree)


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=["triple_double", "triple_single", "backslash", "escapes"])
def test_a_hostile_folder_name_and_record_fields_stay_data(
    bad_actions_run: Path, tmp_path: Path, copy_run: Callable, name: str
) -> None:
    plain = copy_run(bad_actions_run)
    assert main([f"{plain}#0", "--steps", "2", "--json"]) == 1
    reference = (plain / "repro" / "incident_0.py").read_text()

    run = tmp_path / "hostile" / "run"
    folder = run / name
    shutil.copytree(bad_actions_run / "incidents", folder)
    reason = f'action """\n{PAYLOAD}\n""" \\ end'
    edit_record(folder, lambda r: r.update(reason=reason, action_names=[*HOSTILE_TEXT, "a", "b"]))
    assert main([str(folder), "--steps", "2", "--json"]) == 1
    (script,) = (run / "repro").iterdir()
    assert re.fullmatch(r"incident_[A-Za-z0-9_-]+_[0-9a-f]{8}_0\.py", script.name), script.name
    source = script.read_text(encoding="utf-8")
    assert _shape(source) == _shape(reference)  # the same program: only constants differ

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    repro = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert not (cwd / "MARKER").exists() and not (script.parent / "MARKER").exists()
    assert repro.returncode == 1, repro.stderr
    assert "FAULT REPRODUCED: non-finite state in base_pos" in repro.stdout
    # Printed with control characters escaped (no terminal escape reaches the screen).
    assert printable(reason) in repro.stdout and "\x1b" not in repro.stdout
    assert f"{printable(HOSTILE_TEXT[5])}=" in repro.stdout


def test_two_hostile_folders_do_not_share_a_script_name(tmp_path: Path) -> None:
    def path_of(folder: str) -> Path:
        return script_path(LoadedIncident(tmp_path / folder, {"id": 3}, {}), tmp_path)

    assert path_of("incidents").name == "incident_3.py"
    assert path_of("incidents_rank1").name == "incident_rank1_3.py"
    first, second = path_of("incidents_a b"), path_of("incidents_a?b")
    assert first.name.startswith("incident_a_b_") and first != second
    assert re.fullmatch(r"incident_x{64}_[0-9a-f]{8}_3\.py", path_of("incidents_" + "x" * 300).name)


@pytest.mark.parametrize("value", [*HOSTILE_TEXT, "{}", "\x00", 7, [], HOSTILE_TEXT])
def test_literal_reads_back_as_the_value_on_one_line(value: str | int | list[str]) -> None:
    text = literal(value)
    assert "\n" not in text and "\r" not in text and ast.literal_eval(text) == value


@pytest.mark.parametrize("value", [True, 1.5, None, {"a": "b"}, ["a", 1]])
def test_literal_refuses_other_types(value: object) -> None:
    with pytest.raises(ValueError, match="cannot write a"):
        literal(value)  # type: ignore[arg-type]

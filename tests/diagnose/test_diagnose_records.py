"""Broken and crafted incident records: each is refused with exit 2 and one line naming the record and the field,
never a traceback (and never exit 1, which means "incidents caused by actions"); nothing a record names is imported
or read from outside its incidents folder.

Every case starts from the real records of ``bad_actions_run`` (three NaN/Inf actions of the Ant; record 0 is the
NaN at step 5: 8 action components, a history of 6 steps) and breaks one thing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_files import JSONL, edit_arrays, edit_record, records

from robo_safe_rl.diagnose.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.update(fields)


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.pop(key)


FIELDS = {
    "string_step": (_set(env_step="7"), "field 'env_step': expected an integer >= 0, got '7'"),
    "list_env_index": (_set(env_index=[0]), "field 'env_index': expected an integer >= 0, got [0]"),
    "nan_iteration": (_set(iteration="nan"), "field 'iteration': expected an integer >= 0 or null, got 'nan'"),
    "float_episode_step": (_set(episode_step=6.5), "field 'episode_step': expected an integer >= 0, got 6.5"),
    "negative_history": (_set(history_len=-1), "field 'history_len': expected an integer >= 0, got -1"),
    "bool_as_count": (_set(nonfinite_action_elements=True), "field 'nonfinite_action_elements'"),
    "int_as_bool": (_set(terminated=1), "field 'terminated': expected true or false, got 1"),
    "missing_keys": (_drop("phase"), "lacks the field(s) phase of an incident record"),
    "unknown_kind": (_set(kind="exploded"), "field 'kind': expected an incident kind (implausible_reward, "),
    "kinds_text": (_set(kinds="nonfinite_action"), "field 'kinds': expected a non-empty list of incident kinds"),
    "kind_not_in_kinds": (_set(kinds=["physics_error"]), "['physics_error'] lacks the primary kind 'nonfinite_action'"),
    "unknown_phase": (_set(phase="later"), "field 'phase': expected one of step, reset, observe, got 'later'"),
    "reward_text": (_set(reward="lots"), 'field \'reward\': expected a number, "nan", "inf", "-inf" or null'),
    "raw_action_text": (_set(raw_action="nan"), "field 'raw_action': expected a non-empty list of numbers"),
    "raw_action_nested": (_set(raw_action=[[0.0]] * 8), "field 'raw_action': expected a non-empty list"),
    "short_json_action": (
        _set(raw_action=[0.0, 1.0]),
        "the action fields have different lengths (raw_action 2, action 8, action_low 8, action_high 8)",
    ),
    "number_names": (_set(action_names=list(range(8))), "field 'action_names': expected a list of strings or null"),
    "state_key_path": (_set(sim_state_keys=["../x"]), "field 'sim_state_keys': expected a list of names, got"),
    "extra_list": (_set(extra=[]), "field 'extra': expected an object, got []"),
    "exception_number": (_set(exception=3), "field 'exception': expected a string or null, got 3"),
    "source_unknown": (
        _set(source="me"),
        "field 'source': expected one of safe_step, tensor_guard, env_worker, got 'me'",
    ),
    "env_id_number": (_set(env_id=7), "field 'env_id': expected a string or null, got 7"),
    "env_id_module": (_set(env_id="os:system"), "field 'env_id': 'os:system' names a module to import"),
    "arrays_parent": (_set(arrays="../../x.npz"), "field 'arrays': expected the name of an .npz file in the incidents"),
    "arrays_absolute": (_set(arrays="/etc/x.npz"), "field 'arrays': expected the name of an .npz file"),
    "arrays_not_npz": (_set(arrays=JSONL), "got 'incidents.jsonl'"),
    "arrays_number": (
        _set(arrays=0),
        "field 'arrays': expected the name of an .npz file in the incidents folder, got 0",
    ),
}


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith("diagnose: ")
    return line.removeprefix("diagnose: ")


@pytest.mark.parametrize("case", list(FIELDS))
def test_a_malformed_field_exits_2_naming_the_record_and_field(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    change, why = FIELDS[case]
    run = copy_run(bad_actions_run)
    jsonl = edit_record(run / "incidents", change)
    line = _one_line_exit_2([str(run)], capsys)
    assert line.startswith(f"{jsonl}:1: record 0: ") and why in line, line


def test_a_task_not_registered_here_is_diagnosed_but_not_replayed(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    # An Isaac Lab task recorded by the tensor guard is not registered where diagnose runs: its records are still
    # explained from what they hold (the NaN action: exit 1), and the replay says why it cannot run.
    run = copy_run(bad_actions_run)
    edit_record(run / "incidents", _set(env_id="Isaac-Velocity-Flat-Anymal-C-v0"))
    assert main([str(run), "--replay", "first"]) == 1
    out = capsys.readouterr().out
    assert "'Isaac-Velocity-Flat-Anymal-C-v0' is not a registered task id" in out, out


TEXT = {
    "nan_literal": (lambda t: t.replace('"env_step": 6,', '"env_step": NaN,'), ":1: not a JSON incident record (NaN"),
    "infinity_time": (lambda t: t.replace('"time": ', '"time": Infinity, "t": ', 1), "(Infinity is not strict JSON"),
    "huge_time": (lambda t: t.replace('"time": ', '"time": 1e999, "t": ', 1), "field 'time': expected a finite number"),
    "huge_integer": (lambda t: t.replace('"env_step": 6,', f'"env_step": {"9" * 5000},'), "Exceeds the limit (4300"),
    "bool_schema": (lambda t: t.replace('"schema": 1,', '"schema": true,', 1), "unknown incident record format"),
    "bool_id": (
        lambda t: t.replace('"id": 0,', '"id": true,', 1),
        ":1: field 'id': expected an integer >= 0, got True",
    ),
    "array_line": (lambda t: "[1, 2]\n" + t, ":1: unknown incident record format (schema=None)"),
    "duplicate_id": (lambda t: t.replace('"id": 1,', '"id": 0,', 1), ":2: record id 0 repeats that of line 1"),
    "latin1": (lambda t: t.replace('"reason": "', '"reason": "\udce9', 1), ":1: not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(TEXT))
def test_lines_that_are_not_schema_records_exit_2(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    change, why = TEXT[case]
    run = copy_run(bad_actions_run)
    jsonl = run / "incidents" / JSONL
    jsonl.write_bytes(change(jsonl.read_text()).encode("utf-8", "surrogateescape"))
    line = _one_line_exit_2([str(run)], capsys)
    assert line.startswith(f"{jsonl}:") and why in line, line


def _put(**arrays: Any) -> Callable[[dict[str, np.ndarray]], None]:
    return lambda current: current.update({k: np.asarray(v) for k, v in arrays.items()})


NAN8 = np.full(8, np.nan, dtype=np.float32)
ARRAYS = {
    "short": (_put(raw_action=NAN8[:3]), "array 'raw_action': expected shape (8,) (from the record), got (3,)"),
    "zero_d": (
        _put(raw_action=np.float32(np.nan)),
        "array 'raw_action': expected shape (8,) (from the record), got ()",
    ),
    "two_d": (
        _put(raw_action=NAN8.reshape(2, 4)),
        "array 'raw_action': expected shape (8,) (from the record), got (2, 4)",
    ),
    "empty": (_put(raw_action=NAN8[:0]), "got (0,)"),
    "strings": (
        _put(raw_action=np.array(["nan"] * 8)),
        "array 'raw_action': expected floating-point of at most 8 bytes",
    ),
    "complex": (_put(raw_action=NAN8.astype(np.complex64)), "got dtype <c8"),
    "object": (
        _put(raw_action=np.array([None] * 8, dtype=object)),
        "dtype |O holds Python objects (pickled data), not numbers",
    ),
    "long_double": (_put(raw_action=NAN8.astype(np.longdouble)), "of at most 8 bytes, got dtype <f16"),
    "structured": (_put(raw_action=np.zeros(8, dtype=[("a", "<f4")])), "got dtype |V4"),
    "bytes_state": (
        _put(**{"state.base_pos": np.array([b"x"] * 3)}),
        "array 'state.base_pos': expected real numbers (float, int, uint, bool) of at most 8 bytes, got dtype |S1",
    ),
    "history_width": (
        lambda a: a.update(history_actions=a["history_actions"][:, :3]),
        "array 'history_actions': expected shape (6, 8) (from the record), got (6, 3)",
    ),
    "history_rows": (
        lambda a: a.update(history_obs=a["history_obs"][:2]),
        "array 'history_obs': expected shape (6, *observation) (history_len 6), got (2, 28)",
    ),
    "missing_state": (lambda a: a.pop("state.base_pos"), "sim_state_keys name arrays the npz lacks: state.base_pos"),
    "unknown_member": (_put(evil=np.zeros(3)), "array 'evil' is not part of an incident record"),
    "missing_raw": (
        lambda a: a.pop("raw_action"),
        "the npz lacks the array 'raw_action' but the record's 'raw_action'",
    ),
}


@pytest.mark.parametrize("case", list(ARRAYS))
def test_a_malformed_array_exits_2_naming_the_record_and_array(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    change, why = ARRAYS[case]
    run = copy_run(bad_actions_run)
    npz = edit_arrays(run / "incidents", change)
    line = _one_line_exit_2([str(run), "--replay", "all"], capsys)
    assert line.startswith(f"{npz}: record 0: ") and why in line, line


def test_arrays_are_read_only_from_inside_the_incidents_folder(
    bad_actions_run: Path, copy_run: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(bad_actions_run)
    incidents = run / "incidents"
    name = records(incidents)[0]["arrays"]
    outside = tmp_path / "outside.npz"
    shutil.move(incidents / name, outside)
    (incidents / name).symlink_to(outside)
    line = _one_line_exit_2([str(run)], capsys)
    assert line == (
        f"{incidents / JSONL}: record 0: field 'arrays': {name!r} leads outside the incidents folder (to {outside}); "
        "a record may only name a file inside it"
    )
    (incidents / name).unlink()
    (incidents / name).symlink_to(name)
    assert "cannot be resolved" in _one_line_exit_2([str(run)], capsys)  # a link to itself
    # A link that stays inside the folder is followed, and so is a link to the folder itself.
    shutil.move(outside, incidents / "moved.npz")
    (incidents / name).unlink()
    (incidents / name).symlink_to("moved.npz")
    linked = tmp_path / "linked_incidents"
    linked.symlink_to(incidents)
    assert main([str(linked), "--replay", "none"]) == 1


def test_a_real_process_neither_imports_a_records_module_nor_prints_a_traceback(
    bad_actions_run: Path, copy_run: Callable, tmp_path: Path
) -> None:
    # gymnasium.make("hostile_module:Ant-v0") imports hostile_module, whatever it does: here it leaves a marker.
    marker = tmp_path / "imported"
    (tmp_path / "hostile_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    run = copy_run(bad_actions_run)
    jsonl = edit_record(run / "incidents", _set(env_id="hostile_module:Ant-v0"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tool = [sys.executable, str(ROOT / "tools" / "diagnose.py"), str(run), "--replay", "all", "--json"]
    result = subprocess.run(tool, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert not marker.exists()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert result.stderr == f"diagnose: {error}\n"
    assert error.startswith(f"{jsonl}:1: record 0: field 'env_id': 'hostile_module:Ant-v0' names a module to import")

    # A 2-D action array (the record's JSON line is sound again).
    edit_record(run / "incidents", _set(env_id="RoboSafe/Ant-v0"))
    npz = edit_arrays(run / "incidents", _put(raw_action=NAN8.reshape(2, 4)))
    result = subprocess.run(tool, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"diagnose: {npz}: record 0: array 'raw_action': expected shape (8,) (from the record), got (2, 4)\n"
    )


def test_a_record_id_of_a_run_with_several_incident_parts_asks_for_the_folder(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each rank and each env worker numbers its records from 0: RUN#0 would be any of them.
    run = copy_run(bad_actions_run)
    shutil.copytree(run / "incidents", run / "incidents_worker1")
    line = _one_line_exit_2([f"{run}#0"], capsys)
    assert "this run has 2 (incidents, incidents_worker1)" in line and f"{run}/<folder>#0" in line, line
    assert main([f"{run}/incidents_worker1#0"]) == 1  # the NaN action of record 0, from the named part

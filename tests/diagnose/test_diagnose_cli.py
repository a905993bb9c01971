"""``tools/diagnose.py`` through ``main(argv)``: exit codes, text and JSON output, unusable input, one real
subprocess run of the tool and of a reproduction script it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from robo_safe_rl.diagnose.cli import main
from robo_safe_rl.diagnose.report import JSON_SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_text_report_of_bad_actions(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(bad_actions_run)
    assert main([str(run), "--steps", "10"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "3 incident(s) in 1 group(s)" in out
    assert "[1] nonfinite_action x3: non-finite policy output" in out
    assert "first: incidents#0 (iteration 0, env 0, env step 6;" in out
    assert "last:  incidents#2 (iteration 3, env 0, env step 31;" in out
    assert "action: 1 of 8 components non-finite: hip_2 = nan; observation going in: finite" in out
    assert "raw action       -> nonfinite_state: non-finite state in base_pos" in out and "REPRODUCED" in out
    assert "sanitised action -> sound" in out and "then 10 of 10 zero-action steps sound" in out
    assert f"reproduce: python {run / 'repro' / 'incident_0.py'}" in out
    assert out.rstrip().splitlines()[-1].startswith("- bad actions from the policy: 1 of 8 components non-finite")
    assert "\x1b[" not in out  # no colour codes on a pipe
    assert captured.err == ""


def test_json_document(bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(bad_actions_run)
    code, doc = _json(capsys, [str(run), "--replay", "all", "--steps", "5"])
    assert code == doc["exit_code"] == 1
    assert (doc["schema"], doc["mode"], doc["error"], doc["run_dir"]) == (JSON_SCHEMA, "incidents", None, str(run))
    assert [i["ref"] for i in doc["incidents"]] == ["incidents#0", "incidents#1", "incidents#2"]
    first = doc["incidents"][0]
    assert first["cause"] == "nonfinite_policy_output" and first["group"] == 0
    assert first["action"]["components"] == [
        {"index": 2, "name": "hip_2", "value": "nan", "low": -1.0, "high": 1.0, "problem": "nan", "excess": None}
    ]
    assert [i["replay"]["raw"]["outcome"] for i in doc["incidents"]] == [
        "nonfinite_state",
        "nonfinite_reward",
        "nonfinite_reward",
    ]
    assert first["replay"]["raw"]["state_after"]["base_pos"] == ["nan", "nan", "nan"]
    (group,) = doc["groups"]
    assert (group["count"], group["first"]["ref"], group["last"]["ref"]) == (3, "incidents#0", "incidents#2")
    assert doc["verdicts"] == [group["verdict"]]


def test_one_record_by_id_and_by_npz(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(bad_actions_run)
    code, doc = _json(capsys, [f"{run}/incidents/incidents.jsonl#1", "--no-script"])
    assert code == 1 and [i["ref"] for i in doc["incidents"]] == ["incidents#1"]
    assert doc["incidents"][0]["replay"]["script"] is None and not (run / "repro").exists()
    npz = run / "incidents" / doc["incidents"][0]["arrays"]
    code, doc = _json(capsys, [str(npz), "--replay", "none"])
    assert code == 1 and [i["ref"] for i in doc["incidents"]] == ["incidents#1"]


def test_policy_incidents_name_the_corrupt_checkpoint_and_the_first_gradient_event(
    policy_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(policy_run)
    code, doc = _json(capsys, [str(run), "--steps", "5"])
    assert code == 1
    (group,) = doc["groups"]
    assert (group["count"], group["checkpoints"]) == (5, ["model_10.pt"])
    assert group["verdict"] == (
        "bad actions from a corrupted policy: model_10.pt has 1 non-finite tensor (actor_state_dict/mlp.0.weight); "
        "first gradient event at iteration 9 (grad_nonfinite_steps=3, grad_steps_skipped=3); 2 up to iteration 12, "
        "latest: rollback at iteration 11: non-finite learning state; 1 checkpoint(s) refused as non-finite, first "
        "at iteration 3"
    )
    checkpoint = doc["incidents"][0]["checkpoint"]
    assert checkpoint["chosen_by"] == "newest model_<iter>.pt with iter <= 12" and checkpoint["status"] == "corrupt"
    # An 8-of-8 NaN action from a finite observation: every output of the network is NaN.
    assert doc["incidents"][0]["action"]["nonfinite"] == 8 and doc["incidents"][0]["action"]["obs_in_finite"]


def test_checkpoint_option_overrides_the_iterations_own(
    policy_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(policy_run)
    code, doc = _json(capsys, [str(run), "--checkpoint", str(run / "model_5.pt"), "--replay", "none"])
    assert code == 1
    # The actor's tensors: mlp.{0,2,4}.{weight,bias} and distribution.std_param = 7.
    assert doc["verdicts"][0].startswith(
        "non-finite policy output from a finite observation, yet model_5.pt is clean (7 tensors finite)"
    )


def _truncate_npz(run: Path) -> Path:
    npz = sorted((run / "incidents").glob("*.npz"))[1]
    npz.write_bytes(npz.read_bytes()[:200])
    return npz


def _delete_npz(run: Path) -> Path:
    npz = sorted((run / "incidents").glob("*.npz"))[0]
    npz.unlink()
    return npz


def _cut_last_line(run: Path) -> Path:
    jsonl = run / "incidents" / "incidents.jsonl"
    jsonl.write_bytes(jsonl.read_bytes()[:-40])
    return jsonl


def _garble_first_line(run: Path) -> Path:
    jsonl = run / "incidents" / "incidents.jsonl"
    lines = jsonl.read_text().splitlines(keepends=True)
    jsonl.write_text("".join(["{not json\n", *lines[1:]]))
    return jsonl


def _future_schema(run: Path) -> Path:
    jsonl = run / "incidents" / "incidents.jsonl"
    jsonl.write_text(jsonl.read_text().replace('"schema": 1,', '"schema": 2,'))
    return jsonl


UNUSABLE = [
    (_truncate_npz, "not an .npz file (no zip end record)"),
    (_delete_npz, "No such file"),
    (_cut_last_line, "truncated record (no newline at the end"),
    (_garble_first_line, ":1: not a JSON incident record"),
    (_future_schema, "unknown incident record format (schema=2)"),
]


@pytest.mark.parametrize(("damage", "why"), UNUSABLE, ids=[d.__name__.strip("_") for d, _ in UNUSABLE])
def test_unusable_incident_files_exit_2_with_one_line(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str], damage: Callable, why: str
) -> None:
    run = copy_run(bad_actions_run)
    culprit = damage(run)
    assert main([str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("diagnose: ") and str(culprit) in line and why in line
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["{tmp}/missing"], "no such file or directory"),
        (["{run}#7"], "no record with id 7"),
        (["{run}#" + "9" * 5000], "File name too long"),
        (["{run}/config.yaml"], "unknown input"),
        (["{tmp}"], "not a run directory"),
        (["{run}", "--checkpoint", "{tmp}/none.pt"], "--checkpoint not found"),
        (["{run}", "--checkpoint", "{run}/config.yaml"], "empty file"),
    ],
)
def test_unusable_paths_exit_2(
    bad_actions_run: Path,
    copy_run: Callable,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    why: str,
) -> None:
    run = copy_run(bad_actions_run)
    (run / "config.yaml").touch()
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(tmp=empty, run=run) for a in argv]
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == doc["exit_code"] == 2 and why in doc["error"]
    (line,) = captured.err.splitlines()
    assert line == f"diagnose: {doc['error']}"


def test_real_subprocess_and_reproduction_script(bad_actions_run: Path, copy_run: Callable) -> None:
    run = copy_run(bad_actions_run)
    tool = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "diagnose.py"), f"{run}#0", "--json", "--steps", "5"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert tool.returncode == 1, tool.stderr
    doc = json.loads(tool.stdout)
    script = doc["incidents"][0]["replay"]["script"]
    assert script == str(run / "repro" / "incident_0.py")
    # The script runs from anywhere (the npz path is relative to the script) and shows the fault.
    repro = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=run.parent, timeout=60)
    assert repro.returncode == 1, repro.stderr
    assert "raw action: hip_1=" in repro.stdout and "hip_2=nan" in repro.stdout
    assert "state before:" in repro.stdout and "state after:" in repro.stdout
    assert "FAULT REPRODUCED: non-finite state in base_pos" in repro.stdout
    imports = [line for line in Path(script).read_text().splitlines() if line.startswith(("import", "from"))]
    assert imports == [
        "import sys",
        "from pathlib import Path",
        "import gymnasium",
        "import numpy as np",
        "import robosafe_tasks  # noqa: F401  (importing it registers the task ids)",
    ]


def test_a_fire_drill_in_the_runs_config_is_named_in_the_verdict(
    bad_actions_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(bad_actions_run)
    (run / "config.yaml").write_text("faults:\n  env:\n    action_nonfinite: 0.02\n    obs_nonfinite: 0.0\n")
    code, doc = _json(capsys, [str(run), "--replay", "none"])
    assert code == 1
    assert doc["verdicts"] == [
        "non-finite actions from a finite observation, injected by the run's fire drill "
        "(faults.env.action_nonfinite=0.02)"
    ]
    assert doc["incidents"][0]["drill"] == "faults.env.action_nonfinite=0.02"
    assert "the run's fire drill injects faults (faults.env.action_nonfinite=0.02)" in doc["notes"]

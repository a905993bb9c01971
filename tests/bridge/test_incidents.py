"""Incident records: the file format, the caps, resuming into a directory, reading back, rate-limited warnings."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from robo_safe_rl.bridge.incidents import (
    JSONL_NAME,
    Incident,
    IncidentRecorder,
    RateLimitedLog,
    load_incident_arrays,
    read_incidents,
)
from robo_safe_rl.errors import IncidentError
from robo_safe_rl.safety.incident_kinds import IncidentKind


def make_incident(kind: IncidentKind = IncidentKind.nonfinite_action, env_index: int = 2) -> Incident:
    return Incident(
        kind=kind,
        kinds=[kind],
        env_index=env_index,
        reason="action: 1 of 3 elements non-finite: [1]=nan",
        env_id="Test-v0",
        exception=RuntimeError("boom"),
        env_step=17,
        episode_step=5,
        action_names=["a", "b", "c"],
        action_low=np.full(3, -1.0),
        action_high=np.full(3, np.inf),
        raw_action=np.array([0.5, np.nan, -np.inf]),
        action=np.array([0.5, 0.0, -1.0]),
        nonfinite_action_elements=2,
        sim_state={"base_pos": np.array([0.0, 0.0, 0.5]), "joint_vel": np.arange(3.0)},
        sim_state_age=3,
        history_obs=np.zeros((4, 5), dtype=np.float32),
        history_actions=np.ones((4, 3), dtype=np.float32),
    )


def test_a_record_is_strict_json_plus_its_arrays(recorder: IncidentRecorder, run_dir: Path) -> None:
    recorder.set_context(iteration=7, global_step=1000)
    recorder.advance(16)
    assert recorder.record(make_incident())
    directory = run_dir / "incidents"
    line = (directory / JSONL_NAME).read_text().splitlines()[0]
    record = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert record["schema"] == 1 and record["id"] == 0
    assert (record["iteration"], record["global_step"]) == (7, 1016)
    assert (record["kind"], record["kinds"], record["source"], record["phase"]) == (
        "nonfinite_action",
        ["nonfinite_action"],
        "safe_step",
        "step",
    )
    assert (record["env_index"], record["env_id"], record["env_step"], record["episode_step"]) == (2, "Test-v0", 17, 5)
    assert (record["exception_type"], record["exception"]) == ("RuntimeError", "boom")
    # Non-finite floats are written as strings.
    assert record["raw_action"] == [0.5, "nan", "-inf"]
    assert record["action_high"] == ["inf", "inf", "inf"]
    assert record["action"] == [0.5, 0.0, -1.0]
    assert record["action_names"] == ["a", "b", "c"]
    assert record["sim_state_keys"] == ["base_pos", "joint_vel"]
    assert (record["sim_state_age"], record["history_len"]) == (3, 4)
    assert record["arrays"] == "000000_env002_nonfinite_action.npz"
    assert math.isfinite(record["time"]) and record["time_iso"].endswith("+00:00")
    arrays = load_incident_arrays(directory, record)
    assert set(arrays) == {
        "raw_action",
        "action",
        "action_low",
        "action_high",
        "history_obs",
        "history_actions",
        "state.base_pos",
        "state.joint_vel",
    }
    assert np.isnan(arrays["raw_action"][1]) and arrays["history_obs"].shape == (4, 5)
    np.testing.assert_array_equal(arrays["state.joint_vel"], [0.0, 1.0, 2.0])
    assert read_incidents(directory) == [record]
    assert not list(directory.glob(".*.tmp"))


def test_record_cap_drops_and_counts(run_dir: Path) -> None:
    recorder = IncidentRecorder(run_dir / "incidents", max_records=2)
    kinds = list(IncidentKind)
    results = [recorder.record(make_incident(kind)) for kind in kinds]
    assert results == [True, True] + [False] * (len(kinds) - 2)
    assert (recorder.written, recorder.dropped) == (2, len(kinds) - 2)
    assert recorder.written_by_kind == {"nonfinite_action": 1, "physics_error": 1}
    assert recorder.dropped_by_kind == {kind.value: 1 for kind in kinds[2:]}
    assert len(read_incidents(run_dir / "incidents")) == 2


def test_byte_cap_bounds_the_directory(run_dir: Path) -> None:
    directory = run_dir / "incidents"
    recorder = IncidentRecorder(directory, max_records=1000, max_bytes=20_000)
    written = sum(recorder.record(make_incident()) for _ in range(50))
    assert 0 < written < 50 and recorder.dropped == 50 - written
    used = sum(p.stat().st_size for p in directory.iterdir())
    assert used <= 20_000


def test_resuming_continues_ids_and_counts_towards_the_cap(run_dir: Path) -> None:
    directory = run_dir / "incidents"
    first = IncidentRecorder(directory, max_records=3)
    first.record(make_incident())
    first.record(make_incident())
    second = IncidentRecorder(directory, max_records=3)
    assert second.record(make_incident(env_index=9))
    assert not second.record(make_incident())
    records = read_incidents(directory)
    assert [r["id"] for r in records] == [0, 1, 2]
    assert records[2]["arrays"] == "000002_env009_nonfinite_action.npz"


def test_zero_cap_records_nothing(run_dir: Path) -> None:
    recorder = IncidentRecorder(run_dir / "incidents", max_records=0)
    assert not recorder.record(make_incident())
    assert not (run_dir / "incidents" / JSONL_NAME).exists()


def test_reader_skips_a_truncated_last_line_but_not_a_broken_one(recorder: IncidentRecorder, run_dir: Path) -> None:
    directory = run_dir / "incidents"
    recorder.record(make_incident())
    path = directory / JSONL_NAME
    with path.open("a") as f:
        f.write('{"schema": 1, "id": 1, "kind": "nonfi')  # the writer died mid-line
    assert [r["id"] for r in read_incidents(directory)] == [0]
    path.write_text('not json\n{"schema": 1}\n')
    with pytest.raises(IncidentError, match=r"incidents\.jsonl:1: not a JSON incident record"):
        read_incidents(directory)
    path.write_text('{"schema": 99}\n')
    with pytest.raises(IncidentError, match=r"unknown incident record format \(schema=99\), expected schema 1"):
        read_incidents(directory)
    with pytest.raises(IncidentError, match="cannot read incident records"):
        read_incidents(run_dir / "nowhere")
    with pytest.raises(IncidentError, match="cannot read incident arrays"):
        load_incident_arrays(directory, {"arrays": "missing.npz"})


def test_rate_limited_log(caplog: pytest.LogCaptureFixture) -> None:
    log = RateLimitedLog(logging.getLogger("test.rate"), first=2, interval_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="test.rate"):
        for i in range(10):
            log.warning("k", "event %d", i)
        log.warning("other", "another key")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["event 0", "event 1 (further ones rate-limited to one per 3600 s)", "another key"]
    caplog.clear()
    log = RateLimitedLog(logging.getLogger("test.rate"), first=1, interval_s=0.0)
    with caplog.at_level(logging.WARNING, logger="test.rate"):
        log.warning("k", "a")
        log.warning("k", "b")
    assert [r.getMessage() for r in caplog.records][1] == "b"

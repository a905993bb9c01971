"""The run directory's layout: names, listing order, what counts as a run, and its files read back as written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from robo_safe_rl.config.compose import config_source
from robo_safe_rl.config.schema import register_configs
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import (
    EVENTS_FILE,
    HYDRA_DIR,
    SUMMARY_SCHEMA_VERSION,
    TRAIN_CFG_FILE,
    RunDir,
    checkpoint_iteration,
    incidents_tag,
)
from robo_safe_rl.rundir.layout import HYDRA_OVERRIDES_FILE
from robo_safe_rl.rundir.run_dir import TRAIN_CFG_MAX_BYTES

TRAIN_CFG = {"obs_groups": {"actor": ["policy"]}, "actor": {"class_name": "MLPModel"}}


def test_checkpoints_are_listed_by_iteration_not_by_name(tmp_path: Path) -> None:
    # By name, model_10 sorts before model_9 and model_100 before model_20.
    for name in ("model_10.pt", "model_9.pt", "model_100.pt", "model_20.pt", ".model_30.pt.1a2b.tmp", "model_x.pt"):
        (tmp_path / name).write_bytes(b"")
    run = RunDir(tmp_path)
    assert [p.name for p in run.checkpoints()] == ["model_9.pt", "model_10.pt", "model_20.pt", "model_100.pt"]
    assert run.checkpoint_at_or_before(19) == tmp_path / "model_10.pt"
    assert run.checkpoint_at_or_before(20) == tmp_path / "model_20.pt"
    assert run.checkpoint_at_or_before(8) is None
    assert RunDir(tmp_path / "missing").checkpoints() == []
    assert run.checkpoint(7) == tmp_path / "model_7.pt" and checkpoint_iteration(run.checkpoint(7)) == 7


def test_incident_folders_per_rank(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for rank in (0, 1, 12):
        run.incidents_dir(rank).mkdir()
    (tmp_path / "incidents_other").mkdir()
    assert [p.name for p in run.incident_dirs()] == ["incidents", "incidents_rank1", "incidents_rank12"]
    assert [incidents_tag(p.name) for p in run.incident_dirs()] == ["", "rank1", "rank12"]


def test_a_rejected_configuration_leaves_no_evidence_of_a_run(tmp_path: Path) -> None:
    # What Hydra and a run stopped before its runner existed leave: Hydra's record, its log, an empty incidents folder.
    (tmp_path / HYDRA_DIR).mkdir()
    (tmp_path / HYDRA_DIR / "overrides.yaml").write_text("[]\n")
    RunDir(tmp_path).train_log_path.write_text("")
    RunDir(tmp_path).incidents_dir().mkdir()
    assert RunDir(tmp_path).run_evidence() == []
    RunDir(tmp_path).check_unused()
    RunDir(tmp_path / "not_yet").check_unused()


def test_a_run_directory_no_run_started_in_is_removed_with_what_it_left(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    (run.root / HYDRA_DIR).mkdir(parents=True)
    (run.root / HYDRA_DIR / "overrides.yaml").write_text("[]\n")
    run.train_log_path.write_text("banner\n")
    run.incidents_dir().mkdir()
    assert run.remove_unstarted() and not run.root.exists()
    assert not RunDir(tmp_path / "never_made").remove_unstarted()


@pytest.mark.parametrize("kept", ["model_0.pt", "notes.txt"])
def test_a_run_directory_with_a_run_or_a_file_of_its_user_is_not_removed(tmp_path: Path, kept: str) -> None:
    run = RunDir(tmp_path)
    run.train_log_path.write_text("")
    (tmp_path / kept).write_text("x")
    assert not run.remove_unstarted()
    assert (tmp_path / kept).read_text() == "x"


@pytest.mark.parametrize(
    "made",
    [
        "model_0.pt",
        "config.yaml",
        "summary.json",
        TRAIN_CFG_FILE,
        EVENTS_FILE,
        "events.out.tfevents.1700000000.host.1.0",
        "git/",
        "incidents_rank1/incidents.jsonl",
    ],
)
def test_a_run_directory_that_holds_a_run_is_refused(tmp_path: Path, made: str) -> None:
    path = tmp_path / made.rstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir() if made.endswith("/") else path.write_text("x")
    with pytest.raises(ConfigError) as err:
        RunDir(tmp_path).check_unused()
    message = str(err.value)
    assert message.startswith(
        f"invalid config value run_dir='{tmp_path}': it already holds a run ({made.split('/')[0]}"
    )
    assert f"resume={tmp_path} run_dir={tmp_path}" in message and "choose another run_dir" in message


def test_only_a_resume_of_the_same_run_may_write_into_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "model_4.pt").write_bytes(b"")
    RunDir(run).check_unused(resume=run)
    RunDir(run).check_unused(resume=run / "model_4.pt")
    RunDir(run).check_unused(resume=str(tmp_path / "." / "run"))
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match="already holds a run"):
        RunDir(run).check_unused(resume=other)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="it is a file, expected a directory"):
        RunDir(tmp_path / "file").check_unused()


def test_summary_carries_its_schema_version(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "new")
    written = run.write_summary({"iterations": 3, "status": "completed"})
    assert (
        written
        == run.read_summary()
        == {"schema_version": SUMMARY_SCHEMA_VERSION, "iterations": 3, "status": "completed"}
    )
    assert not list(run.root.glob(".*.tmp"))
    (tmp_path / "new" / "summary.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        run.read_summary()


def test_events_are_appended_and_bad_lines_skipped_with_a_note(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.read_events() == (None, [])
    run.append_event({"iteration": 3, "kind": "rollback"})
    with open(run.events_path, "a") as f:
        f.write("{cut\n" + json.dumps({"kind": "rollback"}) + "\n\n")
    run.append_event({"iteration": 5, "kind": "grad_guard"})
    events, notes = run.read_events()
    assert [(e["iteration"], e["kind"]) for e in events] == [(3, "rollback"), (5, "grad_guard")]
    assert all(isinstance(e["time"], float) for e in events)
    assert notes == [
        f"{run.events_path}:2: not a JSON event, skipped",
        f"{run.events_path}:3: not a safety event (no iteration or kind), skipped",
    ]


def test_train_cfg_round_trips_and_a_run_without_one_reads_none(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.read_train_cfg() is None
    train_cfg = {**TRAIN_CFG, "algorithm": {"value": math.nan, "std_range": (0.05, 2.0)}}
    run.write_train_cfg(train_cfg, {"policy": (28,)}, 8)
    saved = run.read_train_cfg()
    assert saved is not None and saved.obs_shapes == {"policy": [28]} and saved.num_actions == 8
    assert saved.train_cfg["algorithm"]["std_range"] == [0.05, 2.0] and math.isnan(
        saved.train_cfg["algorithm"]["value"]
    )


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ("{not json", "cannot read it"),
        ('{"schema_version": 2}', "expected schema_version 1, got 2"),
        ("[" * 100_000, "RecursionError"),
        ({"train_cfg": {"obs_groups": {}}, "obs_shapes": {}, "num_actions": 8}, "with an actor entry"),
        ({"train_cfg": {"actor": {}}, "obs_shapes": {}, "num_actions": 8}, "must name its obs_groups"),
        ({"train_cfg": TRAIN_CFG, "obs_shapes": {"policy": [0]}, "num_actions": 8}, "list of sizes >= 1"),
        ({"train_cfg": TRAIN_CFG, "obs_shapes": {"policy": 28}, "num_actions": 8}, "list of sizes >= 1"),
        ({"train_cfg": TRAIN_CFG, "obs_shapes": {"policy": [28]}, "num_actions": True}, "num_actions must be"),
    ],
)
def test_a_malformed_train_cfg_is_refused_naming_the_file(tmp_path: Path, doc: object, why: str) -> None:
    text = doc if isinstance(doc, str) else json.dumps({"schema_version": 1, **doc})
    (tmp_path / TRAIN_CFG_FILE).write_text(text)
    with pytest.raises(ConfigError) as err:
        RunDir(tmp_path).read_train_cfg()
    assert str(err.value).startswith(f"{tmp_path / TRAIN_CFG_FILE}: ") and why in str(err.value)


def test_an_oversized_train_cfg_is_not_read(tmp_path: Path) -> None:
    with open(tmp_path / TRAIN_CFG_FILE, "wb") as f:
        f.truncate(TRAIN_CFG_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match="bytes, more than a saved train dict's"):
        RunDir(tmp_path).read_train_cfg()


def test_hydra_writes_its_record_where_the_layout_says() -> None:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=config_source(), version_base="1.3"):
        node = hydra_compose(config_name="train", return_hydra_config=True)
    assert node.hydra.output_subdir == HYDRA_DIR


def test_oversized_events_and_summary_are_not_read(tmp_path: Path) -> None:
    # Sparse files: gigabytes declared, no disk used; reading them whole would take as much memory.
    run = RunDir(tmp_path)
    for path in (run.events_path, run.summary_path):
        with open(path, "wb") as f:
            f.truncate(2**30)
    events, notes = run.read_events()
    assert events is None and "larger than the 64 MiB a run writes at most" in notes[0]
    with pytest.raises(ConfigError, match="larger than the 1 MiB a run writes at most"):
        run.read_summary()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- task=hopper\n- seed=1\n", ["task=hopper", "seed=1"]),
        ("[]\n", []),
        ("task: hopper\n", None),  # a mapping, not Hydra's list
        ("- seed=1\n- 2\n", None),  # an item that is no override string
        ("- [unclosed\n", None),  # not YAML
        ("- !!python/object/apply:os.system ['true']\n", None),  # read as data only: the tag is refused, not run
        (None, None),  # no record at all
    ],
    ids=["list", "empty", "mapping", "non-string", "broken", "python-tag", "missing"],
)
def test_hydra_overrides_are_read_as_recorded_or_not_at_all(tmp_path: Path, text: str | None, expected: object) -> None:
    if text is not None:
        (tmp_path / HYDRA_DIR).mkdir()
        (tmp_path / HYDRA_DIR / HYDRA_OVERRIDES_FILE).write_text(text, encoding="utf-8")
    assert RunDir(tmp_path).read_overrides() == expected


def test_an_oversized_overrides_record_is_not_read(tmp_path: Path) -> None:
    (tmp_path / HYDRA_DIR).mkdir()
    with open(tmp_path / HYDRA_DIR / HYDRA_OVERRIDES_FILE, "wb") as f:
        f.truncate(2**30)  # sparse: declared, no disk used
    assert RunDir(tmp_path).read_overrides() is None

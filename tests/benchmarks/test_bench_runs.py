"""The benchmarks' training runs: a real ``tools/train.py`` subprocess each, and ``--reuse`` taking a run a previous
bench completed with the same command on this machine instead of training it again."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks.runs import finished_run, machine_record, this_machine, train
from robo_safe_rl.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
TINY = ["torch_threads=1", "task.num_envs=2", "runner.num_steps_per_env=8", "+task.env_kwargs.max_episode_steps=5"]


def test_a_completed_run_of_the_same_command_is_reused_and_any_other_trained_again(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "seed1", tmp_path / "seed1.log"
    once = [*TINY, "runner.max_iterations=1", "seed=1"]
    first = train(REPO, run_dir, once, log)
    assert first["status"] == "completed" and first["iterations"] == 1
    # Hydra's record of the command is the one a bench would give again (run_dir last).
    assert finished_run(run_dir, [*once, f"run_dir={run_dir}"]) == first
    log.unlink()
    assert train(REPO, run_dir, once, log, reuse=True) == first
    assert not log.exists()  # nothing ran: the log is written by a training only
    # Another command in the same folder (here two iterations) is trained, not taken, and its machine recorded.
    twice = [*TINY, "runner.max_iterations=2", "seed=1"]
    second = train(REPO, run_dir, twice, log, reuse=True)
    assert second["iterations"] == 2
    command = [*twice, f"run_dir={run_dir}"]
    record = machine_record(run_dir)
    assert json.loads(record.read_text(encoding="utf-8")) == this_machine()
    assert finished_run(run_dir, command) == second
    # Trained again (None): a run recorded on another machine (here another CPU model), one that did not complete,
    # one trained with another configuration, one without a machine record.
    mine = record.read_text(encoding="utf-8")
    record.write_text(json.dumps({**this_machine(), "cpu": "another CPU"}), encoding="utf-8")
    assert finished_run(run_dir, command) is None
    record.write_text(mine, encoding="utf-8")
    files = RunDir(run_dir)
    files.summary_path.write_text(json.dumps({**second, "status": "stopped"}), encoding="utf-8")
    assert finished_run(run_dir, command) is None
    files.summary_path.write_text(json.dumps(second), encoding="utf-8")
    assert finished_run(run_dir, command) == second
    # ... one whose saved configuration is not what the command composes now: the same overrides over an edited agent
    # file (here the run's record has one learning epoch more than configs/ gives the task).
    config = files.config_path.read_text(encoding="utf-8")
    edited = OmegaConf.create(config)
    edited.algorithm.num_learning_epochs += 1
    files.config_path.write_text(OmegaConf.to_yaml(edited), encoding="utf-8")
    assert finished_run(run_dir, command) is None
    files.config_path.write_text(config, encoding="utf-8")
    assert finished_run(run_dir, command) == second
    record.unlink()
    assert finished_run(run_dir, command) is None

"""One run per run directory: a second run into a used ``run_dir`` is refused, a resume of that run is not, and a
rejected configuration leaves nothing that would look like a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import HYDRA_DIR, RunDir

REPO = Path(__file__).resolve().parents[2]
TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2"]


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_second_run_into_a_used_run_dir_is_refused_and_the_first_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, f"run_dir={run_dir}"]) == 0
    before = _files(run_dir)
    capsys.readouterr()
    assert main([*TINY, f"run_dir={run_dir}", "seed=2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"train: invalid config value run_dir='{run_dir}': it already holds a run (model_0.pt, ")
    assert line.endswith(f"continue that run with `resume={run_dir} run_dir={run_dir}`, or choose another run_dir")
    assert _files(run_dir) == before


def test_a_resume_may_continue_in_its_own_run_dir_but_not_in_another_runs(tmp_path: Path) -> None:
    run_dir, other = tmp_path / "run", tmp_path / "other"
    assert main([*TINY, f"run_dir={run_dir}"]) == 0
    assert main([*TINY, f"run_dir={other}"]) == 0
    assert main([*TINY, f"run_dir={other}", f"resume={run_dir}"]) == 2
    assert main([*TINY, f"run_dir={run_dir}", f"resume={run_dir / 'model_1.pt'}"]) == 0
    # Iterations 2 and 3 continue the run: rsl-rl saves the final one, model_3.pt.
    assert [p.name for p in RunDir(run_dir).checkpoints()] == ["model_0.pt", "model_1.pt", "model_3.pt"]
    assert RunDir(run_dir).read_summary()["iterations"] == 2


def test_a_refused_resume_into_its_own_run_dir_leaves_the_runs_files_as_they_were(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, f"run_dir={run_dir}"]) == 0
    before = _files(run_dir)
    # Without an observation normaliser the run's checkpoint (the Ant's tuned values normalise) does not fit.
    assert main([*TINY, f"run_dir={run_dir}", f"resume={run_dir}", "actor.obs_normalization=false"]) == 2
    assert _files(run_dir) == before  # summary.json, config.yaml and the saved train dict are still the run's own


def test_a_configuration_rejected_by_the_algorithm_leaves_the_run_dir_free(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Only SafePPO's constructor knows the parameter names: this fails after the envs were built.
    assert main([*TINY, f"run_dir={run_dir}", "faults.grad.at_updates=[1]", "faults.grad.param=actor.nope"]) == 2
    assert RunDir(run_dir).run_evidence() == []
    assert main([*TINY, f"run_dir={run_dir}"]) == 0


def test_the_tool_refuses_before_hydra_writes_into_the_used_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, f"run_dir={run_dir}"]) == 0
    (run_dir / HYDRA_DIR).mkdir()
    (run_dir / HYDRA_DIR / "overrides.yaml").write_text("- the first run's record\n")
    before = _files(run_dir)
    done = subprocess.run(
        [sys.executable, "tools/train.py", *TINY, f"run_dir={run_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"train: invalid config value run_dir='{run_dir}': it already holds a run")
    assert _files(run_dir) == before  # Hydra's record and log of the first run untouched, no log line appended


@pytest.mark.parametrize("fails", [True, False])
def test_a_timestamped_run_dir_is_one_folder_whatever_the_clock_does(tmp_path: Path, fails: bool) -> None:
    # `${now:...}` with microseconds resolves to a new name at every resolution. Before the fix, the pre-flight check
    # of Hydra's callback resolved it in its own copy of the config and made that folder, and Hydra then resolved it
    # again: a run whose clock crossed a second between the two (the default stamp has seconds) left an empty
    # timestamped folder beside its own, and a rejected one left that folder behind.
    runs = tmp_path / "runs"
    args = [*TINY, f"run_dir={runs}/${{now:%H-%M-%S-%f}}"] + (["task.env_id=Nope-v0"] if fails else [])
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "train.py"), *args], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == (2 if fails else 0), done.stderr[-2000:]
    made = sorted(runs.iterdir()) if runs.exists() else []
    assert len(made) == (0 if fails else 1), made

"""tools/train.py against bad input and a hostile world: out-of-range seeds, foreign resume files, unusable run
directories, a full disk (a real tmpfs), absurd num_envs, SIGTERM and SIGINT (real signals to a real process), envs
that fail forever and a pybullet.error from a bug (real trainings)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pybullet
import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import _write_summary, main
from robo_safe_rl.rundir import RunDir
from robosafe_tasks.ant import AntEnv

REPO = Path(__file__).resolve().parents[2]
TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", "algorithm.num_mini_batches=2"]


def restore_sigint() -> None:
    """Give the child the default SIGINT: a suite started in the background of a non-interactive shell (``make test &``)
    runs with SIGINT ignored, children inherit that, and a run keeps an inherited ignore on purpose (as under nohup);
    these tests are about a terminal's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def train_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python tools/train.py ARGS`` from the repository root, as a user runs it."""
    return subprocess.run(
        [sys.executable, "tools/train.py", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def one_line_error(stderr: str) -> str:
    """The tool's own message (its last stderr line); there must be no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return stderr.strip().splitlines()[-1]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``tmpfs(size_kib, read_only=False)``: a real small file system, unmounted after the test; skips where
    mounting is not allowed (not root, no mount in the container)."""
    mounted: list[Path] = []

    def mount(size_kib: int, *, read_only: bool = False) -> Path:
        target = tmp_path / f"tmpfs{len(mounted)}"
        target.mkdir()
        options = f"size={size_kib}k" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip() or 'mount failed'})")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], check=False)


# ------------------------------------------------------------------------------------------ bad values, exit 2
def test_seed_beyond_numpys_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    assert main([*TINY, "seed=1099511627776", f"run_dir={run_dir}"]) == 2
    assert capsys.readouterr().err == (
        "train: invalid config value seed=1099511627776: expected an integer in [0, 4294967295]\n"
    )
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("saved", "problem"),
    [
        ([torch.zeros(3)], "it holds a list, not a dict"),
        ({"actor_state_dict": [torch.zeros(3)], "iter": 3}, "it lacks critic_state_dict, optimizer_state_dict"),
        (
            {"actor_state_dict": [torch.zeros(3)], "critic_state_dict": {}, "optimizer_state_dict": {}, "iter": 3},
            "actor_state_dict holds a list, expected a dict of tensors",
        ),
        (
            {"actor_state_dict": {}, "critic_state_dict": {}, "optimizer_state_dict": {}, "iter": torch.tensor(5)},
            "iter holds Tensor 'tensor(5)', expected an integer >= 0",
        ),
    ],
    ids=["list", "missing-entries", "list-state-dict", "tensor-iter"],
)
def test_resume_from_a_file_not_laid_out_as_rsl_rl_is_refused(
    saved: Any, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign.pt"
    torch.save(saved, foreign)
    run_dir = tmp_path / "run"
    assert main([*TINY, f"resume={foreign}", f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"train: invalid config value resume='{foreign}': {foreign} is not an rsl-rl checkpoint: ")
    assert problem in err and err.count("\n") == 1
    assert not run_dir.exists()  # refused before anything was made


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("file", "it is a file, expected a directory"),
        ("under-file", "cannot write there: Not a directory"),
        ("device", "it is a file, expected a directory"),  # a device file
    ],
)
def test_an_unusable_run_dir_is_refused(
    where: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    run_dir = {"file": a_file, "under-file": a_file / "run", "device": Path("/dev/full")}[where]
    assert main([*TINY, f"run_dir={run_dir}"]) == 2
    assert capsys.readouterr().err.startswith(f"train: invalid config value run_dir='{run_dir}': {message}")
    assert a_file.read_text() == "not a directory"


def test_run_dir_on_dev_full_through_the_tool() -> None:
    # Hydra makes run_dir itself before the training starts; its callback checks the path first.
    done = train_cli(*TINY, "run_dir=/dev/full/run", timeout=120)
    assert done.returncode == 2
    assert one_line_error(done.stderr) == (
        "train: invalid config value run_dir='/dev/full/run': cannot write there: Not a directory; "
        "expected a writable directory with free space"
    )


def test_a_read_only_run_dir_is_refused(
    tmpfs: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:  # root writes through permissions: only a read-only file system stops it
        read_only = tmpfs(64, read_only=True)
    else:
        read_only = tmp_path / "read_only"
        read_only.mkdir()
        read_only.chmod(0o555)
    assert main([*TINY, f"run_dir={read_only / 'run'}"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"train: invalid config value run_dir='{read_only / 'run'}': cannot write there: ")
    assert "Read-only file system" in line or "Permission denied" in line


def test_a_full_disk_before_the_run_is_refused_and_leaves_nothing(
    tmpfs: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    disk = tmpfs(256)
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, bytes(4096))
    finally:
        os.close(fd)
    assert main([*TINY, f"run_dir={disk / 'runs' / 'run'}"]) == 2
    assert one_line_error(capsys.readouterr().err) == (
        f"train: invalid config value run_dir='{disk / 'runs' / 'run'}': cannot write there: No space left on "
        "device; expected a writable directory with free space"
    )
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_disk_that_fills_mid_run_stops_with_the_real_cause_and_a_summary(
    tmpfs: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Networks of 2 x 1024 units make a checkpoint of about 26 MB (2.2 M parameters, weights and two Adam moments,
    # float32): the run starts on the 8 MiB disk (config, events, git records) and its first checkpoint fills it.
    disk = tmpfs(8 * 1024)
    run_dir = disk / "run"
    wide = ["actor.hidden_dims=[1024,1024]", "critic.hidden_dims=[1024,1024]", "runner.save_interval=1"]
    assert main([*TINY, *wide, f"run_dir={run_dir}"]) == 1  # before: a traceback ending in "unexpected pos"
    assert one_line_error(capsys.readouterr().err) == (
        f"train: stopped: could not write checkpoint {run_dir / 'model_0.pt'}: No space left on device"
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    assert summary["error"] == (
        f"CheckpointError: could not write checkpoint {run_dir / 'model_0.pt'}: No space left on device"
    )
    assert summary["iterations"] == 1 and summary["last_clean_checkpoint"] is None
    assert not list(run_dir.glob("*.tmp")) and not list(run_dir.glob(".*.tmp"))  # the failed write cleaned up


def test_a_summary_that_cannot_be_written_does_not_hide_the_real_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.summary_path.mkdir()  # a directory where summary.json goes: renaming the written file over it fails
    cause = OSError(28, "No space left on device")
    kwargs: dict[str, Any] = {"num_envs": 2, "steps_per_env": 8, "wall_s": 1.0, "device": "cpu", "write": True}
    summary = _write_summary(run_dir, None, error=cause, **kwargs)
    assert summary["status"] == "stopped" and "No space left on device" in summary["error"]
    assert "could not write" in caplog.text and "No space left on device" in caplog.text
    with pytest.raises(OSError):  # a run that went well but cannot leave its summary fails
        _write_summary(run_dir, None, error=None, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left behind


def test_absurd_num_envs_is_refused_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    started = time.monotonic()
    assert main([*TINY, "task.num_envs=1000000000", f"run_dir={run_dir}"]) == 2  # before: std::bad_alloc, no message
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("train: invalid config value task.num_envs=1000000000: 1000000000 envs of RoboSafe/Ant-v0 ")
    assert "(32.0 MiB per env)" in line and "envs fit" in line
    assert time.monotonic() - started < 10 and not run_dir.exists()


# ------------------------------------------------------------------------------------------ signals
@pytest.mark.parametrize(
    ("sig", "code"),
    # SIGINT wrote its summary before too; its run is slow-marked to keep the fast suite short.
    [(signal.SIGTERM, 143), pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_stops_the_run_with_a_summary(sig: signal.Signals, code: int, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "tools/train.py", *TINY, "runner.max_iterations=100000", f"run_dir={run_dir}"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=restore_sigint
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "model_0.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not reach its first checkpoint"
            time.sleep(0.05)
        # The file appears at the rename, a moment before the runner records it as its last clean checkpoint: signal
        # somewhere in the iterations after it.
        time.sleep(1.0)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code
    assert one_line_error(stderr) == f"train: stopped by {sig.name}; summary.json in {run_dir} (status stopped)"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["error"] == f"RunInterrupted: stopped by {sig.name}"
    # What was learned since model_0.pt is kept: the last good snapshot (after iterations 9, 19, 29, ... and at every
    # save iteration, 0, 50, ...) is written as its iteration's checkpoint: at most 10 iterations are lost.
    last = max(int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt"))
    assert last % 10 == 9 or last % 50 == 0
    assert summary["iterations"] >= 1 and summary["iterations"] - 1 - last <= 10
    assert summary["final_checkpoint"] == summary["last_clean_checkpoint"] == str(run_dir / f"model_{last}.pt")
    assert torch.load(run_dir / f"model_{last}.pt", weights_only=True)["iter"] == last


# ------------------------------------------------------------------------------------------ broken envs
class BrokenSensorAnt(AntEnv):
    """The Ant with a dead velocity sensor: every step's observation holds a NaN (resets are fine)."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, float]]:
        obs, reward, terminated, truncated, info = super().step(action)
        obs[3] = np.nan
        return obs, reward, terminated, truncated, info


class DeadEngineAnt(AntEnv):
    """The Ant whose engine fails on every step, however often it is rebuilt."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, float]]:
        pybullet.getNumBodies(physicsClientId=987)  # raises pybullet.error, the Ant's declared engine error
        return super().step(action)


class LeftoverPyBulletPoint(gym.Env[np.ndarray, np.ndarray]):
    """A point mass that runs no PyBullet but has a bug: a leftover PyBullet call on a client nobody connected."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        pybullet.getNumBodies(physicsClientId=987)
        return np.zeros(4, dtype=np.float32), 0.0, False, False, {}


for _id, _entry in {
    "RoboSafeTest/BrokenSensorAnt-v0": BrokenSensorAnt,
    "RoboSafeTest/DeadEngineAnt-v0": DeadEngineAnt,
    "RoboSafeTest/LeftoverPyBullet-v0": LeftoverPyBulletPoint,
}.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, max_episode_steps=1000)


@pytest.mark.parametrize(
    ("env_id", "kind"),
    [("RoboSafeTest/BrokenSensorAnt-v0", "nonfinite_obs"), ("RoboSafeTest/DeadEngineAnt-v0", "physics_error")],
)
def test_an_env_that_fails_every_step_stops_the_run(
    env_id: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = [*TINY, "runner.max_iterations=50", f"task.env_id={env_id}", "safety.step.max_consecutive_failures=20"]
    assert main([*args, f"run_dir={run_dir}"]) == 1  # before: exit 0, "completed", a return of penalties only
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"train: stopped: env 0 ({env_id}) is broken: 20 steps in a row ended by SafeStep ({kind}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and f"env 0 ({env_id}) is broken" in summary["error"]
    # 20 failures of env 0 at 8 steps per iteration: the third iteration's rollout stops the run.
    assert summary["iterations"] == 2 and summary["safety"]["recoveries"] >= 20


def test_a_pybullet_error_from_a_bug_fails_the_run_loudly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(pybullet.error, match="Not connected to physics server"):
        # The point env has no mirror: the Ant's recipe (the default task's) would refuse it.
        off = "algorithm.symmetry_cfg.use_data_augmentation=false"
        main([*TINY, "task.env_id=RoboSafeTest/LeftoverPyBullet-v0", off, f"run_dir={run_dir}"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["error"] == "error: Not connected to physics server."
    assert summary["safety"]["physics_errors"] == 0

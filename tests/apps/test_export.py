"""tools/export.py: TorchScript and ONNX act as the trained policy, the observation clip included; bad input exits 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch
from rsl_rl.models import MLPModel

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.export import main as export_main
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.checkpoint.policy import LoadedPolicy, load_policy
from robo_safe_rl.rundir import EXPORT_DIR, POLICY_JIT_FILE, POLICY_ONNX_FILE, TRAIN_CFG_FILE

REPO = Path(__file__).resolve().parents[2]
#: float32 MLPs of the same weights in three runtimes: differences are rounding, so they scale with the actions. For the
#: observations scaled by 100 a policy without an observation clip outputs actions of up to ~600, where one float32
#: step is 6e-5 and ONNX Runtime's kernels (which sum in their own order) differed from torch's by 4.9e-4 on an AMD
#: EPYC: a relative 8e-7. Relative 1e-5, and 1e-5 near zero; a forgotten clip moves those actions by far more.
RTOL = ATOL = 1e-5


@pytest.fixture(scope="module", params=[pytest.param("ppo", marks=pytest.mark.slow), "ppo_conservative"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run of the preset, trained through the real training path (2 envs, 2 iterations of 8 steps)."""
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    args = [f"algo={request.param}", "task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2"]
    assert train_main([*args, "task.num_workers=0", f"run_dir={run_dir}"]) == 0
    return run_dir


def observations(policy: LoadedPolicy, steps: int = 64) -> np.ndarray:
    """What the policy sees playing the Ant (recorded), and the same scaled by 100: outside what the normaliser has
    seen, which the conservative presets' clip bounds at +-10 after normalisation. Shape: (2 steps, obs_dim)."""
    env = gym.make("RoboSafe/Ant-v0")
    obs, _ = env.reset(seed=3)
    rows = []
    for _ in range(steps):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(policy.act(obs))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    recorded = np.stack(rows).astype(np.float32)
    return np.concatenate([recorded, recorded * 100.0])


def test_exports_act_as_the_trained_policy(run: Path, tmp_path: Path) -> None:
    assert export_main([str(run), "--out", str(tmp_path)]) == 0
    policy = load_policy(run)
    obs = observations(policy)
    expected = policy.act(obs)
    scripted = torch.jit.load(tmp_path / POLICY_JIT_FILE)
    with torch.inference_mode():
        jit_actions = scripted(torch.from_numpy(obs)).numpy()
    session = onnxruntime.InferenceSession(str(tmp_path / POLICY_ONNX_FILE), providers=["CPUExecutionProvider"])
    (onnx_actions,) = session.run(["actions"], {"obs": obs})  # a batch of 128: the batch dimension is dynamic
    assert jit_actions.shape == onnx_actions.shape == (len(obs), policy.num_actions)
    np.testing.assert_allclose(jit_actions, expected, rtol=RTOL, atol=ATOL)
    # The recorded half at 1e-5. The half scaled by 100 reaches the first layer unclipped in `ppo` (normalised inputs
    # up to 1e4 after this tiny run's normaliser, measured), where float32 sums taken in another order (onnxruntime's
    # kernels) differ by up to ~3e-4 in the action (measured); the clipped presets' inputs stop at 10.
    recorded = len(obs) // 2
    np.testing.assert_allclose(onnx_actions[:recorded], expected[:recorded], rtol=RTOL, atol=ATOL)
    scaled_tol = RTOL if getattr(policy.actor, "obs_clip", None) is not None else 1e-3
    np.testing.assert_allclose(onnx_actions[recorded:], expected[recorded:], rtol=scaled_tol, atol=scaled_tol)


def test_the_outliers_reach_the_clip_so_a_forgotten_clip_is_caught(run: Path) -> None:
    policy = load_policy(run)
    if getattr(policy.actor, "obs_clip", None) is None:
        pytest.skip("this preset has no observation clip")
    obs = torch.from_numpy(observations(policy))
    # rsl-rl's own exporter of the base class, as it was before ClippedMLPModel added the clip to its exports.
    unclipped = torch.jit.script(MLPModel.as_jit(policy.actor))
    with torch.inference_mode():
        forgotten = unclipped(obs).numpy()
    expected = policy.act(obs.numpy())
    # Far outside what the export test accepts: 100 times its tolerance at some action.
    assert (np.abs(forgotten - expected) > 100 * (ATOL + RTOL * np.abs(expected))).any()


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("missing", "no such checkpoint file or run directory"),
        ("foreign", "not an rsl-rl checkpoint"),
        ("unwritable", "cannot write the exported policy there"),
    ],
)
def test_unusable_input_exits_2(
    run: Path, case: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "foreign").mkdir()
    shutil.copy(run / TRAIN_CFG_FILE, tmp_path / "foreign" / TRAIN_CFG_FILE)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign" / "model_1.pt")
    (tmp_path / "a_file").write_text("")
    argv = {
        "missing": [str(tmp_path / "no_run")],
        "foreign": [str(tmp_path / "foreign" / "model_1.pt")],
        "unwritable": [str(run), "--out", str(tmp_path / "a_file" / "exported")],  # a folder inside a file
    }[case]
    assert export_main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("export: ") and why in line
    assert not (tmp_path / "a_file" / "exported").exists()


@pytest.mark.slow
def test_tool_runs_as_a_subprocess(run: Path) -> None:
    done = subprocess.run(
        [sys.executable, "tools/export.py", str(run)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    exported = run / EXPORT_DIR  # the default: beside the checkpoint, as Isaac Lab's play exports
    assert str(exported / POLICY_ONNX_FILE) in done.stdout and (exported / POLICY_JIT_FILE).is_file()
    assert "W1" not in done.stderr and "Warning" not in done.stderr  # torch.onnx's noise stays out

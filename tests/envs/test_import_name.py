"""The task package's import name: no user project shadows it, and gymnasium's ``module:EnvId`` form reaches it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The repository root goes on the path the way pytest puts it there (pyproject's pythonpath), behind the user's
    # own project folder, which Python puts first as the script's directory (here: the working directory of -c).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False
    )


def test_a_users_own_envs_package_does_not_shadow_the_tasks(tmp_path: Path) -> None:
    # A user's project with a package of its own called envs, as many RL projects have.
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("MINE = True\n")
    code = (
        "import envs, gymnasium, robosafe_tasks\n"
        "assert envs.MINE\n"
        "env = gymnasium.make('RoboSafe/Ant-v0'); env.reset(seed=0); env.close()\n"
        "print(robosafe_tasks.TASKS)\n"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "RoboSafe/Ant-v0" in result.stdout


def test_gymnasium_make_with_the_module_prefix_needs_no_import(tmp_path: Path) -> None:
    # gymnasium imports the part before the colon, which registers the ids, then makes the env.
    code = (
        "import sys, gymnasium\n"
        "assert 'robosafe_tasks' not in sys.modules\n"
        "env = gymnasium.make('robosafe_tasks:RoboSafe/Ant-v0'); obs, _ = env.reset(seed=0); env.close()\n"
        "print(obs.shape)\n"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "(28,)" in result.stdout

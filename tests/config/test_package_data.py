"""A non-editable install carries the Hydra configs: the built wheel trains from a directory outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from robo_safe_rl.config.compose import config_groups, config_source

REPO = Path(__file__).resolve().parents[2]
#: What setuptools reads to build the wheel (pyproject's readme, packages and their package-dir mappings).
SOURCES = ("pyproject.toml", "README.md", "robo_safe_rl", "envs", "configs")

TRAIN = """
import json, sys
import robo_safe_rl, robosafe_tasks
from robo_safe_rl.apps.train import main
from robo_safe_rl.config.compose import config_source
print(json.dumps({"package": robo_safe_rl.__file__, "configs": config_source()}))
sys.exit(main(["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=1", "run_dir=run"]))
"""


def test_a_checkout_reads_its_own_configs_folder() -> None:
    assert Path(config_source()) == REPO / "configs"
    assert {"task", "algo", "safety", "drill"} <= config_groups()


@pytest.mark.slow  # builds a wheel, makes a venv and imports torch cold in it: 20-40 s
def test_the_wheel_trains_outside_the_repository(tmp_path: Path) -> None:
    # Built from a copy, so that setuptools' build/ and egg-info never land in the checkout.
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(source)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("robo_safe_rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"robo_safe_rl/configs/train.yaml", "robo_safe_rl/configs/algo/ppo_safe.yaml"} <= names

    # A venv that sees the installed dependencies through a path line in a .pth file. Such a line does not run that
    # directory's own .pth files, so the editable install of this checkout stays out; only the wheel provides
    # robo_safe_rl and robosafe_tasks.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = [python, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, env=env, timeout=300)

    work = tmp_path / "elsewhere"
    work.mkdir()
    done = subprocess.run(
        [python, "-c", TRAIN],
        cwd=work,
        capture_output=True,
        text=True,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    where = json.loads(done.stdout.splitlines()[0])
    assert Path(where["package"]).is_relative_to(venv) and Path(where["configs"]).is_relative_to(venv)
    summary = json.loads((work / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 1
    assert (work / "run" / "model_0.pt").is_file() and (work / "run" / "config.yaml").is_file()

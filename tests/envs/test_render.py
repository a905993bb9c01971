"""The renderer choice: PyBullet's EGL plugin draws the scene when it loads (probed in a subprocess first), its
printing stays off the standard output, and a bad ROBOSAFE_RENDERER is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robosafe_tasks import render

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_choice() -> Iterator[None]:
    render.chosen.cache_clear()
    yield
    render.chosen.cache_clear()


@pytest.fixture(scope="module")
def egl() -> render.Probe:
    found = render.probe()
    if found.egl_ms is None:
        pytest.skip(f"no EGL here: {found.reason}")
    return found


def test_a_bad_renderer_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(render.RENDERER_ENV, "opengl")
    with pytest.raises(ValueError, match=r"ROBOSAFE_RENDERER='opengl': expected one of auto, egl, tiny"):
        render.chosen()


def test_a_plugin_that_does_not_load_leaves_the_tiny_renderer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    render.probe.cache_clear()
    monkeypatch.setattr(render, "plugin_path", lambda: str(tmp_path / "no_plugin.so"))
    try:
        found = render.probe()
    finally:
        render.probe.cache_clear()
    assert found.egl_ms is None and found.tiny_ms is not None and "refused" in found.reason


def test_egl_frames_show_the_scene(egl: render.Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(render.RENDERER_ENV, "egl")
    env = gym.make("RoboSafe/Ant-v0", render_mode="rgb_array")
    try:
        env.reset(seed=0)
        first = env.render()
        env.unwrapped.rebuild_simulation()  # resetSimulation: the plugin stays, the bodies are loaded again
        env.reset(seed=0)
        again = env.render()
    finally:
        env.close()
    # Loaded after the bodies, the plugin drew an empty sky of one colour; the floor's checkerboard varies a lot.
    assert first.shape == again.shape == (240, 320, 3)
    assert first.std() > 10 and again.std() > 10


@pytest.mark.slow
def test_egl_prints_nothing_on_the_standard_output(egl: render.Probe) -> None:
    script = (
        "import json, gymnasium as gym, robosafe_tasks\n"
        "env = gym.make('RoboSafe/Ant-v0', render_mode='rgb_array'); env.reset(seed=0)\n"
        "frame = env.render(); env.step(env.action_space.sample()); env.render(); env.close()\n"
        "print(json.dumps({'shape': list(frame.shape)}))\n"
    )
    env = {**os.environ, render.RENDERER_ENV: "egl", "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tools")])}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"shape": [240, 320, 3]}  # the plugin's banner went to stderr
    assert "EGL" in done.stderr

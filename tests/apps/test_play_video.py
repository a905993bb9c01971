"""Videos: play --video writes the first episode (MP4 or GIF) at the task's control rate; training records clips
every video.interval iterations into the run directory without changing what it learns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import imageio.v2 as imageio_v2
import imageio.v3 as imageio
import pytest
import torch

from robo_safe_rl.apps.play import main as play_main
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.rundir import RunDir
from robosafe_tasks import render

#: The Ant's control step: 4 substeps of 0.0165 / 4 s (pybullet_envs' WalkerBase), so 1 / 0.0165 = 60.6 frames/s.
ANT_DT = 0.0165
TINY_RUN = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", "task.num_workers=0"]


@pytest.fixture(autouse=True)
def tiny_renderer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The software renderer: no EGL probe, the same frames on every machine (tests/envs/test_render.py covers EGL)."""
    monkeypatch.setenv(render.RENDERER_ENV, "tiny")
    render.chosen.cache_clear()
    yield
    render.chosen.cache_clear()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run that recorded a clip of 4 frames after each of its 2 iterations."""
    run_dir = tmp_path_factory.mktemp("video") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(render.RENDERER_ENV, "tiny")
        render.chosen.cache_clear()
        assert train_main([*TINY_RUN, "video.interval=1", "video.length=4", f"run_dir={run_dir}"]) == 0
    render.chosen.cache_clear()
    return run_dir


def test_play_writes_the_first_episode_as_mp4(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    video = tmp_path / "sub" / "out.mp4"
    assert play_main([str(run), "--episodes", "2", "--max-steps", "15", "--video", str(video), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # the video does not disturb the JSON document
    frames = imageio.imread(video, index=None)
    # The frame after the reset, then one per step of the first episode (15 steps unless the Ant fell first).
    assert frames.shape == (result["lengths"][0] + 1, 240, 320, 3)
    with imageio_v2.get_reader(video) as reader:
        assert reader.get_meta_data()["fps"] == pytest.approx(1 / ANT_DT, rel=1e-3)
    assert not [p.name for p in video.parent.iterdir() if p != video]  # no temporary file left


def test_play_writes_a_gif(run: Path, tmp_path: Path) -> None:
    video = tmp_path / "out.gif"
    assert play_main([str(run), "--episodes", "1", "--max-steps", "5", "--video", str(video)]) == 0
    assert imageio.imread(video, index=None).shape[1:] == (240, 320, 3)
    assert len(imageio.imread(video, index=None)) in range(2, 7)  # 1 + steps, 5 at most
    # 16.5 ms steps: GIF delays are whole centiseconds and browsers show under 2 cs as 10 cs, so 2 cs.
    assert imageio.immeta(video)["duration"] == 20


def test_a_video_of_another_kind_exits_2(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert play_main([str(run), "--episodes", "1", "--video", str(tmp_path / "out.avi")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("play: ") and "out.avi" in line and ".mp4 or .gif" in line


def test_training_records_a_clip_every_interval(run: Path) -> None:
    run_dir = RunDir(run)
    assert sorted(p.name for p in run_dir.videos_dir.iterdir()) == ["video_0.mp4", "video_1.mp4"]
    for iteration in (0, 1):
        assert imageio.imread(run_dir.video(iteration), index=None).shape == (4, 240, 320, 3)


@pytest.mark.parametrize(("key", "value"), [("video.interval", -1), ("video.length", 0)])
def test_video_keys_are_checked(key: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main([*TINY_RUN, f"{key}={value}", f"run_dir={tmp_path / 'run'}"]) == 2
    assert f"invalid config value {key}={value}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_recording_does_not_change_what_training_learns(run: Path, tmp_path: Path) -> None:
    # The clips' env plays deterministically in the trainer process: no torch random draw, the actor untouched.
    assert train_main([*TINY_RUN, f"run_dir={tmp_path / 'plain'}"]) == 0
    with_clips = torch.load(run / "model_1.pt", weights_only=True)["actor_state_dict"]
    plain = torch.load(tmp_path / "plain" / "model_1.pt", weights_only=True)["actor_state_dict"]
    assert with_clips.keys() == plain.keys()
    assert all(torch.equal(with_clips[k], plain[k]) for k in plain)

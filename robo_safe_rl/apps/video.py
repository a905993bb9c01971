"""Videos of a policy: an env's frames written as MP4 (imageio's ffmpeg plugin) or GIF, and clips during training.

MP4 is H.264 through the ffmpeg binary that the imageio-ffmpeg wheel ships; GIF goes through Pillow. The frame rate is
the env's control rate (``metadata["render_fps"]``, else ``1 / unwrapped.dt``), so one second of video is one second
of simulated time. A GIF stores frame delays in whole centiseconds and browsers show delays under 2 cs as 10 cs, so a
GIF's delay is ``max(2, round(100 dt))`` cs: the Ant's 16.5 ms steps play at 20 ms (0.83x real time).

:class:`TrainingClips` is what ``video.interval`` hands to the runner: the training envs may live in worker
processes, so it plays the current policy deterministically in an env of its own, in the trainer process, and writes
``videos/video_<iter>.mp4`` into the run directory (Isaac Lab's ``--video`` records the training envs themselves).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robo_safe_rl.checkpoint.policy import actor_action
from robo_safe_rl.config.safe_step import EnvFaultConfig
from robo_safe_rl.config.video import VideoConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.safety.finite import all_finite

log = logging.getLogger(__name__)

#: What a video's file name may end in.
SUFFIXES = (".mp4", ".gif")


def frame_rate(env: gym.Env) -> float:
    """Frames per second of a video of ``env``: its control rate.

    Raises:
        ConfigError: If the env declares neither ``metadata["render_fps"]`` nor a ``dt``.
    """
    fps = env.metadata.get("render_fps")
    if not fps:
        dt = getattr(env.unwrapped, "dt", None)
        fps = 1.0 / dt if dt else None
    if not fps or not np.isfinite(fps) or fps <= 0:
        raise ConfigError(f"{env.spec.id if env.spec else env}: no metadata['render_fps'] or dt to set a video's rate")
    return float(fps)


class VideoWriter:
    """Frames appended one at a time to an MP4 or GIF file, which appears under its name only once complete.

    Args:
        path: Ends in ``.mp4`` or ``.gif``; its folder is made if missing.
        fps: Frames per second.

    Raises:
        ConfigError: If the suffix is neither, or the folder cannot be made.
    """

    def __init__(self, path: str | os.PathLike[str], fps: float) -> None:
        import imageio.v2 as imageio

        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in SUFFIXES:
            raise ConfigError(f"{self.path}: a video's name must end in {' or '.join(SUFFIXES)}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"{self.path}: cannot make its folder ({err.strerror or err})") from err
        # Written under a hidden temporary name (same suffix: ffmpeg picks its container by it), renamed at the end.
        self._tmp = self.path.with_name(f".{self.path.stem}.{secrets.token_hex(4)}.tmp{suffix}")
        self.frames = 0
        if suffix == ".mp4":
            # macro_block_size 2: H.264 in yuv420p needs even sizes; imageio's default of 16 would rescale 320x240's
            # neighbours (and warn) for nothing.
            self._writer = imageio.get_writer(
                self._tmp, format="FFMPEG", fps=fps, codec="libx264", macro_block_size=2, ffmpeg_log_level="error"
            )
        else:
            delay_ms = 10.0 * max(2, round(100.0 / fps))
            self._writer = imageio.get_writer(self._tmp, mode="I", duration=delay_ms, loop=0)

    def append(self, frame: np.ndarray) -> None:
        """Add one frame. Shape: (height, width, 3), uint8; every frame the size of the first."""
        self._writer.append_data(np.asarray(frame, dtype=np.uint8))
        self.frames += 1

    def close(self, keep: bool = True) -> None:
        """Finish the file and give it its name (``keep``), or remove it."""
        try:
            self._writer.close()
            if keep and self.frames:
                os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close(keep=kind is None)


def record(env: gym.Env, act: Callable[[np.ndarray], np.ndarray], writer: VideoWriter, frames: int, seed: int) -> int:
    """Write ``frames`` frames of ``env`` driven by ``act``: the frame after the reset, then one per step; an episode
    that ends is followed by the next (reset with ``seed + 1``, ...). Stops early at a non-finite action.

    Returns:
        The number of episodes begun.
    """
    obs, _ = env.reset(seed=seed)
    writer.append(env.render())
    episodes = 1
    while writer.frames < frames:
        action = act(obs)
        if not all_finite(action):
            log.warning(
                "video %s stopped at frame %d: the policy emitted a non-finite action", writer.path, writer.frames
            )
            break
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset(seed=seed + episodes)
            episodes += 1
        writer.append(env.render())
    return episodes


class TrainingClips:
    """A runner's ``on_iteration`` callback that records a clip every ``video.interval`` iterations.

    Args:
        cfg: ``video``.
        run_dir: Where the clips go (``videos/video_<iter>.mp4``).
        make_env: Builds the env the clips are played in, with ``render_mode="rgb_array"`` (called at the first clip).
        group: The observation group the actor reads.
        seed: Every clip starts from a reset with this seed, so clips of different iterations compare.
    """

    def __init__(self, cfg: VideoConfig, run_dir: RunDir, make_env: Callable[[], gym.Env], group: str, seed: int):
        self.cfg = cfg
        self.run_dir = run_dir
        self.make_env = make_env
        self.group = group
        self.seed = seed
        self.written: list[Path] = []
        self._env: gym.Env | None = None

    def __call__(self, iteration: int, actor: torch.nn.Module) -> None:
        """Record the clip of ``iteration`` if it is due. A clip that fails is logged and training goes on: a video
        is worth less than the run."""
        if self.cfg.interval <= 0 or iteration % self.cfg.interval != 0:
            return
        path = self.run_dir.video(iteration)
        try:
            if self._env is None:
                self._env = self.make_env()
            with VideoWriter(path, frame_rate(self._env)) as writer:
                record(
                    self._env, functools.partial(actor_action, actor, self.group), writer, self.cfg.length, self.seed
                )
        except Exception as err:  # ffmpeg, a full disk, the env: the clip is lost, not the run
            log.warning("video of iteration %d not written to %s: %s: %s", iteration, path, type(err).__name__, err)
            return
        self.written.append(path)
        log.info("video of iteration %d: %s", iteration, path)

    def close(self) -> None:
        """Close the clips' env."""
        if self._env is not None:
            self._env.close()
            self._env = None


def clip_env_maker(factory: Any) -> Callable[[], gym.Env]:
    """How a run's clips get their env: the run's own env factory (task, ``env_kwargs``, time limit, SafeStep) with
    ``render_mode="rgb_array"`` and without the fire drill's faults (those are for the training envs).

    Args:
        factory: The run's :class:`~robo_safe_rl.bridge.env_factory.TaskEnvFactory`.
    """
    clip_factory = dataclasses.replace(
        factory, kwargs={**factory.kwargs, "render_mode": "rgb_array"}, faults=EnvFaultConfig()
    )
    return lambda: clip_factory(0)

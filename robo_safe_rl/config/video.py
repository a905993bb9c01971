"""Config schema of the clips recorded during training (``video``), off by default."""

from __future__ import annotations

from dataclasses import dataclass

from robo_safe_rl.config.checks import int_in


@dataclass
class VideoConfig:
    """``video``: a clip of the current policy every ``interval`` iterations, as Isaac Lab's ``--video`` records.

    Each clip is played deterministically in an env of its own in the training process (rank 0 only), rendered every
    step, and written to ``videos/video_<iter>.mp4`` in the run directory at the task's control rate.
    """

    interval: int = 0
    """Record after every iteration ``it`` with ``it % interval == 0`` (iteration 0 included); ``0`` records
    nothing. In [0, 1_000_000]."""
    length: int = 200
    """Frames per clip (the frame after the reset, then one per env step; an episode that ends is followed by the
    next). Isaac Lab's default ``video_length``. In [1, 100_000]."""

    def __post_init__(self) -> None:
        int_in("video.interval", self.interval, 0, 1_000_000)
        int_in("video.length", self.length, 1, 100_000)

"""``python tools/play.py PATH``: run a trained policy deterministically and report its returns (and frames).

PATH is a ``model_<iter>.pt`` or a run directory (its newest clean checkpoint). The policy is rebuilt by
:func:`~robo_safe_rl.checkpoint.policy.load_policy` from the train dict the run saved (as training built it, weights
loaded with ``weights_only=True``), and its mean action is applied in ``--episodes`` envs of the task, one full
episode each (envs seeded ``--seed + i``, with the run's ``task.env_kwargs`` and the task's own time limit), through
SafeStep as in training. With ``--frames DIR`` the first env is rendered every ``--every`` steps to PNG; with
``--video FILE`` (``.mp4`` or ``.gif``) it is rendered every step into a video at the task's control rate
(:mod:`robo_safe_rl.apps.video`): the frame after the reset, then one per step of its episode. ``--max-steps`` cuts
the episodes shorter than the task's time limit; ``--export DIR`` also writes the policy as TorchScript and ONNX
(:mod:`robo_safe_rl.apps.export`).

Exit codes: 0 done, 1 the policy emitted a non-finite action (the episode is stopped there; diagnose it with
``tools/diagnose.py --policy``), 2 unusable input (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from robo_safe_rl.apps.evaluate import step_episodes
from robo_safe_rl.apps.export import export_policy
from robo_safe_rl.apps.video import VideoWriter, frame_rate
from robo_safe_rl.bridge.env_factory import start_clock
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.checkpoint.policy import load_policy
from robo_safe_rl.errors import ConfigError, RoboSafeRLError
from robo_safe_rl.progress import progress_bar
from robo_safe_rl.rundir import CHECKPOINT_FILES, CONFIG_FILE, RunDir
from robo_safe_rl.terminal import reserved_stdout


@dataclass
class PlayResult:
    """Returns and lengths of the episodes a policy played."""

    checkpoint: str
    task: str
    returns: list[float]
    lengths: list[int]
    nonfinite_action_at: int | None  # first env step with a non-finite action, or None

    @property
    def mean_return(self) -> float:
        """Mean episode return."""
        return float(np.mean(self.returns)) if self.returns else float("nan")


def play(
    path: Path,
    env_id: str | None = None,
    episodes: int = 16,
    seed: int = 10_000,
    frames: Path | None = None,
    every: int = 10,
    progress: bool = False,
    video: Path | None = None,
    max_steps: int | None = None,
) -> PlayResult:
    """Play ``episodes`` full episodes with the deterministic policy of ``path`` (a checkpoint or a run directory),
    all envs stepped together; with ``progress``, a bar on a terminal counts the steps of the longest episode.

    Args:
        video: Write the first env's episode to this ``.mp4`` or ``.gif`` file (the module docstring).
        max_steps: Time limit of the episodes, in env steps; ``None`` keeps the task's.

    Raises:
        CheckpointError: If the policy cannot be rebuilt (see :func:`~robo_safe_rl.checkpoint.policy.load_policy`).
        ConfigError: If no task is given and the run's configuration does not name one.
    """
    import gymnasium as gym
    import imageio.v2 as imageio

    policy = load_policy(path)
    checkpoint = policy.checkpoint
    run = RunDir(checkpoint.parent)
    task: dict[str, Any] = (run.read_config() or {}).get("task") or {}
    env_id = policy.task(env_id)
    # The run's env_kwargs apply when it is the run's task; the time limit is the task's own (a short training limit,
    # such as make train's, is for learning, not for judging).
    kwargs = dict(task.get("env_kwargs") or {}) if env_id == task.get("env_id") else {}
    if max_steps is not None:
        kwargs["max_episode_steps"] = max_steps
    render = frames is not None or video is not None
    # SafeStep as in training: actions are clamped to the action space before the task sees them (as Stable-Baselines3
    # does too), which matters for Ant, whose electricity cost reads the unclipped action.
    envs = [
        SafeStep(gym.make(env_id, render_mode="rgb_array" if i == 0 and render else None, **kwargs))
        for i in range(episodes)
    ]
    if env_id == task.get("env_id"):  # the run's task: its step clock where the checkpoint's training envs had it
        for env in envs:
            start_clock(env, policy.clock)
    try:
        policy.check_spaces(envs[0], env_id, ": wrong --task?")
        obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
        if frames is not None:
            frames.mkdir(parents=True, exist_ok=True)
        limit = envs[0].spec.max_episode_steps if envs[0].spec is not None else None
        done = 0
        with contextlib.ExitStack() as stack:
            bar = stack.enter_context(progress_bar(f"play: 0/{episodes} episodes done", limit, enabled=progress))
            writer = stack.enter_context(VideoWriter(video, frame_rate(envs[0]))) if video is not None else None
            if writer is not None:
                writer.append(envs[0].render())

            def after_step(first_stepped: bool, running: np.ndarray, lengths: np.ndarray) -> None:
                nonlocal done
                if frames is not None and running[0] and lengths[0] % every == 0:
                    imageio.imwrite(frames / f"frame_{lengths[0]:05d}.png", envs[0].render())
                if writer is not None and first_stepped:
                    writer.append(envs[0].render())
                bar.advance()
                if episodes - int(running.sum()) != done:
                    done = episodes - int(running.sum())
                    bar.describe(f"play: {done}/{episodes} episodes done")

            returns, lengths, bad_at = step_episodes(policy, envs, obs, after_step)
    finally:
        for env in envs:
            env.close()
    return PlayResult(str(checkpoint), env_id, returns.tolist(), lengths.tolist(), bad_at)


def main(argv: list[str] | None = None) -> int:
    """Command line of ``tools/play.py``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tools/play.py", description=__doc__.splitlines()[0])
    parser.add_argument("path", help=f"a {CHECKPOINT_FILES}, or a run directory (its newest clean checkpoint)")
    parser.add_argument("--task", help=f"gymnasium id (default: task.env_id of the run's {CONFIG_FILE})")
    parser.add_argument("--episodes", type=int, default=16, help="episodes, played in parallel (default 16)")
    parser.add_argument("--seed", type=int, default=10_000, help="env i is reset with seed + i")
    parser.add_argument("--frames", type=Path, help="write PNG frames of the first episode into this folder")
    parser.add_argument("--every", type=int, default=10, help="render every this many steps (default 10)")
    parser.add_argument("--video", type=Path, help="write the first episode, every step, to this .mp4 or .gif")
    parser.add_argument("--max-steps", type=int, help="cut the episodes at this many steps (default: the task's limit)")
    parser.add_argument("--export", type=Path, metavar="DIR", help="also write the policy as TorchScript and ONNX here")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    with reserved_stdout(args.json) as out:
        return _main(args, out)


def _main(args: argparse.Namespace, out: TextIO) -> int:
    """The command, ``--json``'s document written to ``out``."""
    try:
        if args.episodes < 1 or args.every < 1 or (args.max_steps is not None and args.max_steps < 1):
            raise ConfigError(
                f"--episodes, --every and --max-steps must be >= 1, got {args.episodes}, {args.every}, {args.max_steps}"
            )
        exported = export_policy(args.path, args.export) if args.export is not None else None
        result = play(
            Path(args.path),
            args.task,
            args.episodes,
            args.seed,
            args.frames,
            args.every,
            progress=True,
            video=args.video,
            max_steps=args.max_steps,
        )
    except (RoboSafeRLError, OSError) as err:
        print(f"play: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # gymnasium's unknown-id errors and the like: unusable input, one line
        print(f"play: {args.path}: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**asdict(result), "mean_return": result.mean_return}), file=out)
    else:
        print(f"{result.checkpoint} on {result.task}: {len(result.returns)} episodes")
        print(f"return: mean {result.mean_return:.1f}, min {min(result.returns):.1f}, max {max(result.returns):.1f}")
        print(f"length: mean {np.mean(result.lengths):.0f} steps")
        if result.nonfinite_action_at is not None:
            print(f"the policy emitted a non-finite action at step {result.nonfinite_action_at}: stopped there")
        if args.video is not None:
            print(f"video: {args.video}")
        if exported is not None:
            print(f"exported: {exported.jit}, {exported.onnx}")
    return 1 if result.nonfinite_action_at is not None else 0

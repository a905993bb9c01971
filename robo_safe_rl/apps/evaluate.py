"""``python tools/evaluate.py RUN_OR_CHECKPOINT``: the one evaluation protocol of every return this project reports.

The protocol (:func:`evaluate`):

- the policy is rebuilt by :func:`~robo_safe_rl.checkpoint.policy.load_policy` (the one loader: the run's saved train
  dict, weights read with ``weights_only=True``, observation normaliser included) and acts **deterministically** (the
  mean of its action distribution);
- the task is the run's own, read from the run's saved ``config.yaml`` through
  :class:`~robo_safe_rl.rundir.RunDir` (``task.env_id`` and ``task.env_kwargs``), each env inside SafeStep with its
  defaults as in training (actions clamped to the action space before the task sees them);
- a fixed number of **full episodes** (``--episodes``, 16 by default), one per env, up to the task's registered time
  limit (1000 steps for the Ant, as AntBulletEnv-v0; a shorter ``task.max_episode_steps`` of training is for learning,
  not for judging);
- on **seeds never used in training** (:func:`evaluation_seeds`): episode ``i`` of the ``test`` split (every figure
  reported) is reset with ``EVAL_SEED_BASE + i``, of the ``validation`` split (what sweeps and tuning compare, so that
  nothing is tuned on the seeds of the reported figures) with ``VALIDATION_SEED_BASE + i``. Training seeds env ``i``
  of rank ``r`` with ``seed + 1000 r + i`` where ``seed < 2**32`` (the schema's bound), and a respawned env worker
  with a 32-bit seed drawn from the run's; the env then goes on from its own generator. ``EVAL_SEED_BASE = 2**40`` is
  above every such seed for any run of fewer than ``(2**40 - 2**32) / 1000``, about a billion, ranks and envs
  together, so the ranges cannot overlap; the validation range starts ``2**30`` seeds above the test range, more than
  the most episodes an evaluation plays;
- the result: mean, standard deviation (of the population of episodes, ``ddof=0``), min and max of the episode
  return and length, and of each metric the task reports per step in ``info["metrics"]`` (a mapping of name to
  number, averaged over the episode's steps that report it: the A1's ``error_vel_xy``, the distance of its planar
  base velocity from the commanded one in m/s. Isaac Lab logs the episode's sum of that term divided by the steps of
  one command period, 500 for the A1: twice this mean for a full 20 s episode, and near 0 for one that ends at
  once).

Exit codes: 0 done, 1 the policy emitted a non-finite action (stopped there), 2 unusable input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from robo_safe_rl.bridge.env_factory import start_clock
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.checkpoint.policy import LoadedPolicy, load_policy
from robo_safe_rl.config.schema import SEED_MAX
from robo_safe_rl.errors import ConfigError, RoboSafeRLError
from robo_safe_rl.progress import progress_bar
from robo_safe_rl.rundir import CHECKPOINT_FILES, RunDir
from robo_safe_rl.safety.finite import all_finite
from robo_safe_rl.terminal import reserved_stdout

EVAL_SEED_BASE = 2**40
"""Episode ``i`` of a ``test`` evaluation is reset with ``EVAL_SEED_BASE + i`` (above every seed training uses: module
docstring)."""
VALIDATION_SEED_BASE = EVAL_SEED_BASE + 2**30
"""Episode ``i`` of a ``validation`` evaluation (sweeps, tuning) is reset with ``VALIDATION_SEED_BASE + i``."""
SPLITS = {"test": EVAL_SEED_BASE, "validation": VALIDATION_SEED_BASE}
"""The seed ranges by name."""
DEFAULT_EPISODES = 16
"""Episodes of the protocol unless asked otherwise: one per env of the default training."""
MAX_EPISODES = 10_000
"""Bound on ``--episodes`` (each is a live simulator client while the evaluation runs)."""


def evaluation_seeds(episodes: int, split: str = "test") -> list[int]:
    """The reset seeds of an evaluation of ``episodes`` episodes on ``split`` (``test`` or ``validation``).

    Raises:
        ConfigError: On another split name.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown evaluation split {split!r}: expected one of {sorted(SPLITS)}")
    return [SPLITS[split] + i for i in range(episodes)]


def max_training_seed(num_envs: int, world_size: int = 1) -> int:
    """The largest seed training can give an env of a run of ``world_size`` ranks of ``num_envs`` envs: ``seed + 1000 r
    + i`` at the schema's largest ``seed`` (a respawned worker's 32-bit seed is below it)."""
    return SEED_MAX + 1000 * (world_size - 1) + (num_envs - 1)


def _stats(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(array.mean()),
        "std": float(array.std()),
        "min": float(array.min()),
        "max": float(array.max()),
    }


@dataclass
class Evaluation:
    """What :func:`evaluate` measured.

    Attributes:
        checkpoint: The checkpoint evaluated.
        iteration: Its training iteration, when it stores one.
        task: The gymnasium id of the task.
        seeds: The reset seed of each episode.
        returns: Each episode's return (undiscounted sum of rewards).
        lengths: Each episode's length in env steps.
        nonfinite_action_at: The first env step at which the policy emitted a non-finite action (the evaluation
            stopped there; the episodes are then unfinished), or ``None``.
        metrics: Per metric of the task's ``info["metrics"]``, each episode's mean over its steps that report it.
    """

    checkpoint: str
    iteration: int | None
    task: str
    seeds: list[int]
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    nonfinite_action_at: int | None = None
    metrics: dict[str, list[float]] = field(default_factory=dict)

    @property
    def return_stats(self) -> dict[str, float]:
        """``mean``, ``std`` (population), ``min``, ``max`` of the returns."""
        return _stats(self.returns)

    @property
    def length_stats(self) -> dict[str, float]:
        """``mean``, ``std`` (population), ``min``, ``max`` of the lengths."""
        return _stats([float(n) for n in self.lengths])

    @property
    def mean_return(self) -> float:
        """The mean return: the objective of sweeps and the figure of the benchmarks."""
        return self.return_stats["mean"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field and the summaries (``return``, ``length``, ``metric``: one per metric)."""
        metric = {name: _stats(values) for name, values in self.metrics.items()}
        return {**asdict(self), "return": self.return_stats, "length": self.length_stats, "metric": metric}


def _run_task(checkpoint: Path) -> tuple[str, dict[str, Any]]:
    """The env id and keyword arguments of the run that wrote ``checkpoint`` (its saved ``config.yaml``)."""
    run = RunDir(checkpoint.parent)
    task = (run.read_config() or {}).get("task")
    env_id = run.task_env_id()
    if not env_id or not isinstance(task, dict):
        raise ConfigError(f"{run.config_path}: missing or unreadable, or names no task.env_id; it names the task")
    kwargs = task.get("env_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{run.config_path}: task.env_kwargs must be a mapping, got {type(kwargs).__name__}")
    return env_id, dict(kwargs)


def evaluate(
    path: str | Path,
    episodes: int = DEFAULT_EPISODES,
    *,
    split: str = "test",
    policy: LoadedPolicy | None = None,
    progress: bool = False,
) -> Evaluation:
    """Evaluate a checkpoint (or a run directory's newest clean one) by the protocol of the module docstring.

    Args:
        path: A ``model_<iter>.pt`` beside its run's files, or a run directory.
        episodes: Full episodes, one per env, stepped together.
        split: ``test`` (reported figures) or ``validation`` (sweeps and tuning): which seed range.
        policy: The policy, when already loaded from ``path`` (else it is loaded).
        progress: A progress bar on a terminal (the steps of the longest episode).

    Raises:
        CheckpointError: If the policy cannot be rebuilt.
        ConfigError: If ``episodes`` is out of range or ``split`` unknown, the run's config names no task, or the
            task's spaces do not fit the policy.
    """
    import gymnasium as gym

    if not 1 <= episodes <= MAX_EPISODES:
        raise ConfigError(f"episodes must be in [1, {MAX_EPISODES}], got {episodes}")
    seeds = evaluation_seeds(episodes, split)
    policy = policy if policy is not None else load_policy(path)
    env_id, kwargs = _run_task(policy.checkpoint)
    result = Evaluation(str(policy.checkpoint), policy.iteration, env_id, seeds)
    envs: list[SafeStep] = []
    try:
        for _ in range(episodes):
            env = gym.make(env_id, **kwargs)
            # A task's step clock where the checkpoint's training envs had it: the rewards it was trained on then.
            start_clock(env, policy.clock)
            envs.append(SafeStep(env))
        policy.check_spaces(envs[0], env_id)
        _play(policy, envs, seeds, result, progress)
    finally:
        for env in envs:
            env.close()
    return result


def _play(policy: LoadedPolicy, envs: list[SafeStep], seeds: list[int], result: Evaluation, progress: bool) -> None:
    """Step every env to the end of its episode with the policy's mean action; fill ``result``."""
    obs = np.stack([env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)]).astype(np.float32)
    limit = envs[0].spec.max_episode_steps if envs[0].spec is not None else None
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    with progress_bar(f"evaluate: {len(envs)} episodes", limit, enabled=progress) as bar:
        returns, lengths, result.nonfinite_action_at = step_episodes(
            policy, envs, obs, lambda *_: bar.advance(), metric_sums=sums, metric_counts=counts
        )
    result.returns, result.lengths = returns.tolist(), lengths.tolist()
    result.metrics = {name: (total / np.maximum(counts[name], 1)).tolist() for name, total in sums.items()}


def step_episodes(
    policy: LoadedPolicy,
    envs: list[SafeStep],
    obs: np.ndarray,
    after_step: Callable[[bool, np.ndarray, np.ndarray], None] | None = None,
    metric_sums: dict[str, np.ndarray] | None = None,
    metric_counts: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Step every env to the end of its episode with the policy's mean action, all envs together (play and evaluate).

    Args:
        policy: The deterministic policy.
        envs: The envs, just reset.
        obs: Their observations after the reset, shape (len(envs), obs_dim); updated in place.
        after_step: Called after each joint step with whether env 0 stepped in it, the running flags and the
            episode lengths so far.
        metric_sums: When given, each step's ``info["metrics"]`` values are added into it, per name one array of
            shape (len(envs),).
        metric_counts: When given (with ``metric_sums``), the steps that reported each metric, per env: a step that
            SafeStep ended (a physics error, a blow-up) reports none and is not averaged in.

    Returns:
        The returns, the lengths, and the step at which the policy emitted a non-finite action for a running env
        (``None`` when it never did; the episodes stop there).
    """
    n = len(envs)
    returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
    running = np.ones(n, dtype=bool)
    while running.any():
        actions = policy.act(obs)
        if not all_finite(actions[running]):
            return returns, lengths, int(lengths.max())
        first_stepped = bool(running[0])
        for i in np.flatnonzero(running):
            obs[i], reward, terminated, truncated, info = envs[i].step(actions[i])
            if metric_sums is not None:
                for name, value in info.get("metrics", {}).items():
                    metric_sums.setdefault(name, np.zeros(n))[i] += value
                    if metric_counts is not None:
                        metric_counts.setdefault(name, np.zeros(n, dtype=np.int64))[i] += 1
            returns[i] += reward
            lengths[i] += 1
            running[i] = not (terminated or truncated)
        if after_step is not None:
            after_step(first_stepped, running, lengths)
    return returns, lengths, None


def main(argv: list[str] | None = None) -> int:
    """Command line of ``tools/evaluate.py``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tools/evaluate.py", description=__doc__.splitlines()[0])
    parser.add_argument("path", help=f"a {CHECKPOINT_FILES} beside its run's files, or a run directory")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="full episodes (default 16)")
    parser.add_argument(
        "--split",
        choices=sorted(SPLITS),
        default="test",
        help="seed range: test (reported figures, the default) or validation (tuning, sweeps)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    with reserved_stdout(args.json) as out:
        return _main(args, out)


def _main(args: argparse.Namespace, out: TextIO) -> int:
    """The command, ``--json``'s document written to ``out``."""
    try:
        result = evaluate(Path(args.path), args.episodes, split=args.split, progress=True)
    except (RoboSafeRLError, OSError) as err:
        print(f"evaluate: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # gymnasium's unknown-id errors and the like: unusable input, one line
        print(f"evaluate: {args.path}: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict()), file=out)
    else:
        r, n = result.return_stats, result.length_stats
        print(f"{result.checkpoint} on {result.task}: {len(result.returns)} episodes, deterministic policy")
        print(f"return: mean {r['mean']:.1f}, std {r['std']:.1f}, min {r['min']:.1f}, max {r['max']:.1f}")
        print(f"length: mean {n['mean']:.0f}, std {n['std']:.0f}, min {n['min']:.0f}, max {n['max']:.0f} steps")
        for name, m in result.to_dict()["metric"].items():
            print(f"{name} (episode means): mean {m['mean']:.3f}, std {m['std']:.3f}, min {m['min']:.3f}, "
                  f"max {m['max']:.3f}")  # fmt: skip
        if result.nonfinite_action_at is not None:
            print(f"the policy emitted a non-finite action at step {result.nonfinite_action_at}: stopped there")
    return 1 if result.nonfinite_action_at is not None else 0

"""Vet a policy checkpoint before deploying or resuming it: run it in its task under SafeStep and report the first
bad action it emits (``tools/diagnose.py --policy CKPT [--task TASK]``).

The actor is rebuilt as training built it (:func:`~robo_safe_rl.checkpoint.policy.load_policy`) and acts for ``steps``
env steps (deterministic mean actions by default, sampled with ``stochastic``) in ``gymnasium.make(task)`` wrapped in
SafeStep, which sanitises what it must and records incidents into the vetting folder beside the checkpoint (cleared
first; at most
:data:`VET_MAX_RECORDS` records, with the checkpoint's iteration as context, so ``tools/diagnose.py`` can explain
them). A bad action is one with a NaN/Inf component or a component outside the action space's bounds; the report
gives the first one (step, components, whether the observation going in was finite) and counts them all.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.incidents import JSONL_NAME, IncidentRecorder
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.checkpoint.policy import LoadedPolicy, load_policy
from robo_safe_rl.diagnose.action import ActionFinding, component_issues
from robo_safe_rl.diagnose.evidence import CheckpointCache, CheckpointFinding
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.progress import Bar, progress_bar
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.safety.finite import all_finite

DEFAULT_VET_STEPS = 1000
#: A NaN policy emits a bad action every step; a few records are enough to replay and explain it.
VET_MAX_RECORDS = 20
_RECORD_FILE = re.compile(r"\d{6}_env\d{3}_[a-z_]+\.npz")


@dataclass(frozen=True)
class BadAction:
    """The first bad action of a vetting run.

    Attributes:
        step: Env step (0-based) at which it was emitted.
        finding: Its components.
        obs_finite: Whether the observation it was computed from was finite.
    """

    step: int
    finding: ActionFinding
    obs_finite: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {"step": self.step, "obs_finite": self.obs_finite, "action": self.finding.to_dict()}


@dataclass
class VetReport:
    """The result of running a policy checkpoint in its task (module docstring)."""

    checkpoint: Path
    task: str
    steps: int
    stochastic: bool
    seed: int
    policy: LoadedPolicy
    inspection: CheckpointFinding
    iteration: int | None = None
    steps_run: int = 0
    episodes: int = 0
    first_bad: BadAction | None = None
    nonfinite_actions: int = 0
    out_of_range_actions: int = 0
    incidents_dir: Path | None = None
    incidents_written: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def verdict(self) -> str:
        """One line: what the policy emitted and, for a non-finite action, what the checkpoint holds."""
        bad, ckpt = self.first_bad, self.inspection
        mode = "sampled" if self.stochastic else "deterministic"
        if bad is None:
            text = f"no bad action in {self.steps_run} steps ({mode} actions); {ckpt.describe()}"
            return text + (": do not resume training from it" if ckpt.layers else "")
        where = f"at step {bad.step} from a {'finite' if bad.obs_finite else 'non-finite'} observation"
        if bad.finding.nonfinite:
            if not bad.obs_finite:
                return f"bad actions from non-finite observations: first non-finite action {where}"
            if ckpt.actor_layers:
                return f"bad actions from a corrupted policy: {ckpt.describe()}; first non-finite action {where}"
            return f"non-finite action {where}, yet {ckpt.describe()} in its actor: the network overflowed"
        return (
            f"out-of-range action {where}: {bad.finding.summary()}; {self.out_of_range_actions} of {self.steps_run} "
            "actions outside the bounds (SafeStep clamps them)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the ``vet`` entry of the document)."""
        return {
            "checkpoint": str(self.checkpoint),
            "task": self.task,
            "iteration": self.iteration,
            "steps": self.steps,
            "steps_run": self.steps_run,
            "episodes": self.episodes,
            "stochastic": self.stochastic,
            "seed": self.seed,
            "network": self.policy.to_dict(),
            "inspection": self.inspection.to_dict(),
            "first_bad": None if self.first_bad is None else self.first_bad.to_dict(),
            "nonfinite_actions": self.nonfinite_actions,
            "out_of_range_actions": self.out_of_range_actions,
            "incidents_dir": None if self.incidents_dir is None else str(self.incidents_dir),
            "incidents_written": self.incidents_written,
            "safe_step": self.counters,
            "notes": self.notes,
            "verdict": self.verdict(),
        }


def _recorder(directory: Path, notes: list[str]) -> IncidentRecorder | None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            if old.name == JSONL_NAME or _RECORD_FILE.fullmatch(old.name):
                old.unlink()
        return IncidentRecorder(directory, max_records=VET_MAX_RECORDS)
    except OSError as err:
        notes.append(f"incidents not recorded: cannot write {directory} ({err})")
        return None


def vet_policy(
    checkpoint: Path,
    task: str | None = None,
    *,
    steps: int = DEFAULT_VET_STEPS,
    stochastic: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> VetReport:
    """Run the checkpoint's actor in its task under SafeStep (module docstring).

    Args:
        checkpoint: An rsl-rl checkpoint beside its run's saved train dict, or a run directory.
        task: A registered gymnasium id; ``None`` takes the run's ``config.yaml``.
        steps: Env steps to run (episodes are reset as they end).
        stochastic: Sample actions instead of taking the mean.
        seed: Seed of the first reset.
        progress: Show a bar of the steps on a terminal (:mod:`robo_safe_rl.progress`).

    Returns:
        The report.

    Raises:
        CheckpointError: If the checkpoint cannot be read, is not rsl-rl's, or has no saved train dict beside it.
        ConfigError: If the task is unknown or its spaces do not fit the actor.
    """
    policy = load_policy(checkpoint)
    checkpoint = policy.checkpoint  # a run directory names its newest clean checkpoint
    env_id = policy.task(task)
    try:
        env = gym.make(env_id, disable_env_checker=True)
    except gym.error.Error as err:
        raise ConfigError(
            f"task {env_id}: {err} (tools/diagnose.py imports envs, which registers RoboSafe tasks)"
        ) from err
    try:
        policy.check_spaces(env, env_id, ": wrong --task?")
    except ConfigError:
        env.close()
        raise
    report = VetReport(
        checkpoint=checkpoint,
        task=env_id,
        steps=steps,
        stochastic=stochastic,
        seed=seed,
        policy=policy,
        inspection=CheckpointCache().inspect(checkpoint, "--policy"),
        iteration=policy.iteration,
    )
    report.incidents_dir = RunDir(checkpoint.parent).vet_incidents_dir
    recorder = _recorder(report.incidents_dir, report.notes)
    if recorder is None:
        report.incidents_dir = None
    else:
        recorder.set_context(iteration=policy.iteration, global_step=0)
    safe = SafeStep(env, recorder=recorder)
    try:
        with progress_bar(f"diagnose: vetting {checkpoint.name}", steps, enabled=progress) as bar:
            _run(policy, safe, report, recorder, bar)
    finally:
        with contextlib.suppress(Exception):
            safe.close()
    report.counters = {k: v for k, v in safe.counters.items() if v}
    report.incidents_written = 0 if recorder is None else recorder.written
    return report


def _run(policy: LoadedPolicy, env: SafeStep, report: VetReport, recorder: IncidentRecorder | None, bar: Bar) -> None:
    space = cast(gym.spaces.Box, env.action_space)  # SafeStep accepts Box action spaces only
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    names = env.action_names or [f"a[{i}]" for i in range(policy.num_actions)]
    obs, _ = env.reset(seed=report.seed)
    for step in range(report.steps):
        action = policy.act(obs, stochastic=report.stochastic)
        issues = component_issues(action, low, high, names)
        if issues:
            finding = ActionFinding(raw=action.astype(np.float64), names=names, low=low, high=high, issues=issues)
            if finding.nonfinite:
                report.nonfinite_actions += 1
            else:
                report.out_of_range_actions += 1
            if report.first_bad is None:
                report.first_bad = BadAction(step, finding, all_finite(obs))
        obs, _, terminated, truncated, _ = env.step(action)
        report.steps_run = step + 1
        bar.advance()
        if recorder is not None:
            recorder.advance()
        if terminated or truncated:
            report.episodes += 1
            obs, _ = env.reset()

"""``summary.json``: what a run did, written at its end -- also when it was stopped by an error.

Fields (DESIGN.md's contract): ``iterations``, ``env_steps``, ``wall_s``, ``device``, ``return_first``,
``return_last`` (mean return of the episodes that ended in the first / last iteration that had any; ``null`` when
none ended), ``reward_per_step_first`` / ``reward_per_step_last`` (mean env reward per step in the first / last
iteration: a learning signal that exists even before the first episode ends), ``final_checkpoint``,
``last_clean_checkpoint``, ``safety`` (integer counters per event kind), ``faults_injected`` (integer counters per
injected fault kind; empty without a drill), ``status`` (``completed`` or ``stopped``) and ``error`` (the reason
for a stop, else ``null``). The run directory adds ``schema_version`` when it writes the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robo_safe_rl.rundir import RunDir
    from robo_safe_rl.training.runner import SafeRunner


def build_summary(
    runner: SafeRunner | None,
    *,
    num_envs: int,
    steps_per_env: int,
    wall_s: float,
    device: str,
    error: BaseException | None,
) -> dict[str, Any]:
    """Collect the summary of a run from its runner (``None`` when the runner could not even be built)."""
    history = runner.logger.history if runner is not None else []
    with_returns = [h for h in history if h.mean_return is not None]
    world = runner.gpu_world_size if runner is not None else 1
    return {
        "status": "completed" if error is None else "stopped",
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "iterations": len(history),
        "env_steps": len(history) * num_envs * steps_per_env * world,
        "wall_s": round(wall_s, 3),
        "device": device,
        "return_first": with_returns[0].mean_return if with_returns else None,
        "return_last": with_returns[-1].mean_return if with_returns else None,
        "reward_per_step_first": history[0].mean_step_reward if history else None,
        "reward_per_step_last": history[-1].mean_step_reward if history else None,
        "final_checkpoint": runner.final_checkpoint if runner is not None else None,
        "last_clean_checkpoint": runner.last_clean_checkpoint if runner is not None else None,
        "safety": runner.safety_counters() if runner is not None else {},
        "faults_injected": runner.faults_injected() if runner is not None else {},
    }


def write_summary(run_dir: RunDir, runner: SafeRunner | None, *, write: bool = True, **kwargs: Any) -> dict:
    """Build the summary and, when ``write``, save it in the run directory; returns the summary as written."""
    summary = build_summary(runner, **kwargs)
    return run_dir.write_summary(summary) if write else summary

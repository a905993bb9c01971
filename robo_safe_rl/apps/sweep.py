"""``python tools/sweep.py --multirun +sweep=ant``: one Hydra multirun trial = one training, scored by evaluation.

The task function of ``tools/sweep.py`` is :func:`trial`: it trains exactly as ``tools/train.py`` does (the same
composition, checks and run directory contract: :func:`robo_safe_rl.apps.train.run`), then evaluates the final
checkpoint by the one evaluation protocol (:func:`robo_safe_rl.apps.evaluate.evaluate`) on the **validation** seeds,
and returns the mean deterministic return: the objective Hydra's Optuna sweeper maximises. Tuning on the validation
range keeps the test range (every reported figure) out of the choice.

A trial that cannot give a score (its configuration refused, stopped by a safety error, a policy that emits a
non-finite action) raises :class:`TrialFailed`: Hydra's Optuna sweeper records it as a failed trial, and the sweep
goes on because the sweep configs set ``max_failure_rate: 1.0`` (the sweeper's default, 0, stops the sweep at the
first failure). A NaN objective is not an option: the sweeper passes it to optuna 2.10's ``Study.tell``, which
refuses it and then refuses the retry that marks the trial failed, and the whole sweep stops.
"""

from __future__ import annotations

import json
import sys

from omegaconf import DictConfig, OmegaConf

from robo_safe_rl.apps.evaluate import DEFAULT_EPISODES, evaluate
from robo_safe_rl.apps.train import run
from robo_safe_rl.errors import RoboSafeRLError
from robo_safe_rl.rundir import RunDir

#: The seed range a trial is scored on (:data:`robo_safe_rl.apps.evaluate.SPLITS`).
SWEEP_SPLIT = "validation"
#: Written into each trial's run directory: what the sweep read as its objective.
OBJECTIVE_KEY = "sweep_objective"


class TrialFailed(RoboSafeRLError):
    """A sweep trial that gave no policy to score (the sweeper records the trial as failed)."""


def trial(node: DictConfig, overrides: list[str], episodes: int = DEFAULT_EPISODES) -> float:
    """Train the composed config ``node``, evaluate its final checkpoint, and return the objective.

    Args:
        node: The composed training config (one trial's).
        overrides: The trial's overrides (as ``tools/train.py`` passes them on).
        episodes: Evaluation episodes.

    Returns:
        The mean return of the final checkpoint on the validation seeds.

    Raises:
        TrialFailed: When the trial gave no policy to score.
    """
    code = run(node, overrides)
    run_dir = OmegaConf.select(node, "run_dir")
    if code != 0:
        raise TrialFailed(f"trial {run_dir}: training exited with {code}")
    try:
        final = RunDir(run_dir).read_summary().get("final_checkpoint")
        result = evaluate(final or run_dir, episodes, split=SWEEP_SPLIT)
    except (RoboSafeRLError, OSError) as err:
        raise TrialFailed(f"trial {run_dir}: cannot be evaluated ({err})") from err
    if result.nonfinite_action_at is not None:
        raise TrialFailed(f"trial {run_dir}: the policy emitted a non-finite action")
    objective = result.mean_return
    print(json.dumps({OBJECTIVE_KEY: objective, "run_dir": str(run_dir), "return": result.return_stats}), flush=True)
    return objective


def plugin_missing() -> str | None:
    """Why ``+sweep=...`` cannot run here (the Optuna sweeper is not installed), or ``None``."""
    import importlib.util

    try:  # find_spec imports the parent package, and raises when no Hydra plugin at all is installed
        found = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return (
            "the sweep configs need Hydra's Optuna sweeper: pip install 'robo-safe-rl[sweep]' "
            "(hydra-optuna-sweeper, which brings optuna 2.x)"
        )
    return None


def exit_if_unavailable() -> None:
    """Exit 2 with one line on stderr when the sweeper plugin is missing."""
    why = plugin_missing()
    if why is not None:
        print(f"sweep: {why}", file=sys.stderr)
        raise SystemExit(2)

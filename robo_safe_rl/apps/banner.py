"""What a training run prints first and last: where it runs and with what, and where it left its results.

The banner has the shape of rsl-rl's iteration blocks (labels right-aligned to one column), so that it reads as the
first block of the run; the final line is one line, the last of the run's output, that names the run directory, the
final and the last clean checkpoint and the exit code.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robo_safe_rl.bridge.worker_pool import rank_cpus, resolve_num_workers
from robo_safe_rl.config.agent import effective_std_range
from robo_safe_rl.config.compose import compose, config_source
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import RunDir

#: rsl-rl's block width and label column (``Logger.log``'s ``width`` and ``pad``).
WIDTH, PAD = 80, 40
#: The config group of the algorithm presets (``configs/algo/``).
PRESET_GROUP = "algo"
#: The config group of the tasks' tuned values (``agent/<task>.yaml``), which the presets change.
AGENT_GROUP = "agent"
#: The nodes and keys the banner's preset line compares.
PRESET_SCOPE = ("algorithm", "actor", "critic", "runner.reward_clip", "runner.normalize_rewards")
#: The exit codes of ``tools/train.py`` and what they mean (README, ``robo_safe_rl.apps.train``).
EXIT_MEANINGS = {
    0: "completed",
    1: "stopped before its end, summary.json says why",
    2: "invalid configuration, nothing trained",
    130: "stopped by SIGINT",
    143: "stopped by SIGTERM",
}


def banner(node: DictConfig, cfg: TrainConfig, device: str, checkpoint: Path | None = None) -> str:
    """The start banner: run directory, task, envs, device, preset, gradient-guard mode, seed, iterations.

    Args:
        node: The composed configuration (for the preset, recognised from the values it sets).
        cfg: The validated configuration.
        device: The device the policy runs on (``auto`` resolved).
        checkpoint: The checkpoint a resumed run starts from, else ``None``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    envs = f"{cfg.task.num_envs} envs" + (f" per rank x {world} ranks" if world > 1 else "")
    # The count the env builder will start (task.num_workers, or the automatic one from this rank's cores).
    task = cfg.task
    workers = resolve_num_workers(task.num_workers, task.num_envs, len(rank_cpus()[0]), task.trainer_block)
    envs += f", {workers} env worker process{'es' if workers != 1 else ''}" if workers else ", stepped in this process"
    envs += " and a block in this process" if workers and task.trainer_block else ""
    iterations = f"{cfg.runner.max_iterations}" + (f" (resumed from {checkpoint})" if checkpoint is not None else "")
    rows = [
        ("Run directory", str(cfg.run_dir)),
        ("Task", f"{cfg.task.name} ({cfg.task.env_id}), {envs}"),
        ("Device", device),
        ("Preset", preset_of(node)),
        ("Gradient guard", _text(cfg.safety.grad_guard.mode)),
        ("Seed", str(cfg.seed)),
        ("Iterations", iterations),
    ]
    lines = ["#" * WIDTH, " Training run ".center(WIDTH), ""]
    lines += [f"{label + ':':>{PAD}} {value}" for label, value in rows]
    return "\n".join(lines) + "\n"


def final_line(run_dir: RunDir, code: int | None) -> str:
    """The run's last line: exit code and meaning, run directory, final and last clean checkpoint.

    Args:
        run_dir: The run's directory (its ``summary.json`` names the checkpoints).
        code: The exit code; ``None`` when the run ended in an unexpected error (its traceback follows).
    """
    if code is None:
        status = "ended by an unexpected error (traceback below)"
    else:
        status = f"exit code {code} ({EXIT_MEANINGS.get(code, 'error')})"
    final = clean = None
    if code != 2:
        try:
            summary = run_dir.read_summary()
        except ConfigError:  # stopped before the summary was written
            summary = {}
        final, clean = summary.get("final_checkpoint"), summary.get("last_clean_checkpoint")
    return (
        f"train: {status}; run directory {run_dir.root}; final checkpoint {final or 'none'}; "
        f"last clean checkpoint {clean or 'none'}"
    )


def preset_of(node: DictConfig) -> str:
    """The preset whose values the run's algorithm, models and reward clip have, with the keys that differ from it.

    The composed configuration does not keep the name of the ``algo=`` choice, and a resumed run takes the saved
    run's values whatever the choice was: the values say which preset runs. The run is compared with each preset (over
    the task's tuned values) on the algorithm, model and reward-clip keys; the closest one is named, with its
    differences.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    task = OmegaConf.select(node, "task.name", default=None)
    try:
        presets = _presets(task if isinstance(task, str) else None)
    except (HydraException, OmegaConfBaseException, ConfigError, OSError) as err:
        return f"not recognised ({type(err).__name__})"
    if not presets:
        return "none"
    mine = _effective(_leaves(_plain(node)))
    differences = {name: [k for k, v in values.items() if mine.get(k) != v] for name, values in presets.items()}
    best = min(differences, key=lambda name: len(differences[name]))
    changed = differences[best]
    if not changed:
        return best
    shown = ", ".join(f"{k}={mine.get(k)!r}" for k in changed[:3]) + (", ..." if len(changed) > 3 else "")
    return f"{best}, changed: {shown}"


@functools.lru_cache(maxsize=4)
def _presets(task: str | None) -> dict[str, dict[str, Any]]:
    """``{preset: {key: value}}`` over the keys of :data:`PRESET_SCOPE` and every key some preset sets, each preset over
    the task's tuned values (``agent/<task>.yaml`` when the task has one) over the schema's defaults, as a run composes
    them (composing the options alone, on the schema, costs a fraction of composing a whole configuration)."""
    source = Path(config_source())
    names = sorted(p.stem for p in (source / PRESET_GROUP).glob("*.yaml"))
    options = {name: compose([], config_name=f"{PRESET_GROUP}/{name}") for name in names}
    base = OmegaConf.structured(TrainConfig)
    if task and (source / AGENT_GROUP / f"{task}.yaml").is_file():
        base = OmegaConf.merge(base, compose([], config_name=f"{AGENT_GROUP}/{task}"))
    # What a preset is about: the algorithm, the models and the reward clip (a preset that sets only some of them
    # leaves the others at the task's values, which a run may still have changed).
    scope = {key for key in _leaves(_plain(base)) if key.split(".")[0] in PRESET_SCOPE or key in PRESET_SCOPE}
    keys = sorted((scope | {key for option in options.values() for key in _leaves(_plain(option))}) - {_STD_FLOOR})
    presets = {}
    for name, option in options.items():
        values = _effective(_leaves(_plain(OmegaConf.merge(base, option))))
        presets[name] = {key: values.get(key) for key in keys}
    return presets


def _plain(node: DictConfig) -> dict[str, Any]:
    data = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
    return data if isinstance(data, dict) else {}


#: The action std's bounds as a run has them, and the floor a preset sets under them: a run is compared by the bounds
#: rsl-rl gets (a run resumed from before ``std_floor`` has its preset's floor in ``std_range`` itself).
_STD_RANGE, _STD_FLOOR = "actor.distribution_cfg.std_range", "actor.distribution_cfg.std_floor"


def _effective(leaves: dict[str, Any]) -> dict[str, Any]:
    """``leaves`` with ``std_floor`` folded into ``std_range`` (:func:`effective_std_range`) and dropped."""
    floor = leaves.pop(_STD_FLOOR, None)
    if isinstance(leaves.get(_STD_RANGE), list) and len(leaves[_STD_RANGE]) == 2:
        leaves[_STD_RANGE] = effective_std_range(leaves[_STD_RANGE], floor)
    return leaves


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"algorithm.learning_rate": 0.001, ...}`` of a nested mapping (a list is one leaf)."""
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data}
    found: dict[str, Any] = {}
    for name, value in data.items():
        found.update(_leaves(value, f"{prefix}{name}."))
    return found


def _text(value: Any) -> str:
    """An enum's value (``skip``), anything else as it prints."""
    return str(getattr(value, "value", value))

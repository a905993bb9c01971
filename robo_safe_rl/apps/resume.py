"""What ``resume=`` means, and the saved run's settings that a resumed run takes.

``resume=`` names a checkpoint file, a run directory (its newest clean checkpoint), an experiment folder such as
``logs/ant`` (its newest run: the one that saved a checkpoint last), or ``latest`` (the newest run of
``logs/<runner.experiment_name>``), as Isaac Lab's ``--load_run`` / ``--checkpoint`` default to the latest.

A resumed run continues the saved run, so it takes the saved run's task, algorithm and model settings from its
``config.yaml`` (:data:`ADOPTED`) unless the command line sets them: a key given as an override, or set by a preset
chosen on the command line (``algo=ppo_safe``), keeps the new value. An override that would change the networks or
the task (:data:`FROZEN`) is refused with both values named: the checkpoint would not load into other networks (rsl-rl
stops with a cut-off "Error(s) in loading state_dict"), or its policy would be trained on in a different task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robo_safe_rl.config.compose import compose, config_groups
from robo_safe_rl.config.keys import check_node, leaf_keys, leaf_paths, schema_keys
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import CHECKPOINT_FILES, LOGS_DIR, RunDir

log = logging.getLogger(__name__)

#: ``resume=latest``: the newest run of this experiment.
LATEST = "latest"
#: The settings a resumed run takes from the saved run: the task, the algorithm and the models, and the runner keys
#: that are part of the algorithm (the rollout length, the reward clip of ``ppo_safe``, the reward scaling).
ADOPTED = (
    "task.",
    "algorithm.",
    "actor.",
    "critic.",
    "runner.num_steps_per_env",
    "runner.reward_clip",
    "runner.normalize_rewards",
)
#: The settings a resumed run cannot change: they shape the networks (or what their weights mean), or the task.
FROZEN = frozenset(
    {
        "task.env_id",
        "task.env_kwargs",
        "actor.hidden_dims",
        "actor.activation",
        "actor.obs_normalization",
        "actor.distribution_cfg.noise",
        "actor.distribution_cfg.std_type",
        "actor.distribution_cfg.noise_features",
        "critic.hidden_dims",
        "critic.activation",
        "critic.obs_normalization",
        "runner.normalize_rewards",  # the critic's weights predict returns on the scale it sets
    }
)
#: Adopted keys newer than some saved runs, and the value such a run trained with (not today's default, which a task's
#: recipe may have changed since).
ABSENT_MEANS: dict[str, Any] = {
    "runner.normalize_rewards": False,
    "actor.distribution_cfg.noise": "gaussian",
    "actor.distribution_cfg.std_floor": None,  # std_range alone bounded the std
    "algorithm.clip_param_final": None,  # a constant clip
    "algorithm.entropy_coef_final": None,  # a constant entropy bonus
    "algorithm.critic_learning_rate": None,  # one rate, the schedule's, for both networks
}


def find_run(resume: str, experiment: str) -> tuple[Path, Path]:
    """The checkpoint or run directory ``resume`` names, and the run directory it belongs to.

    Args:
        resume: ``resume=``: a file, a run directory, an experiment folder or ``latest``.
        experiment: ``runner.experiment_name`` (for ``latest``).

    Raises:
        ConfigError: If nothing there holds a checkpoint.
    """
    target = Path(LOGS_DIR) / experiment if resume == LATEST else Path(resume)
    if target.is_file():
        return target, target.parent
    if not target.is_dir():
        raise ConfigError(
            f"invalid config value resume={resume!r}: {target}: no such checkpoint file, run directory or "
            "experiment folder"
        )
    if _checkpoints(target):
        return target, target
    # The new run's own folder (made by Hydra) holds no checkpoint, so it is never taken for its predecessor.
    runs = [d for d in target.iterdir() if d.is_dir() and _checkpoints(d)]
    if not runs:
        raise ConfigError(
            f"invalid config value resume={resume!r}: {target} holds no {CHECKPOINT_FILES} and no run directory with "
            "one"
        )
    # The run that saved last: run folders may be named by hand (run_dir=logs/ant/my_run), so names do not sort.
    newest = max(runs, key=lambda d: max(p.stat().st_mtime_ns for p in _checkpoints(d)))
    log.info("resume=%s: the newest run of %s is %s", resume, target, newest)
    return newest, newest


def _checkpoints(folder: Path) -> list[Path]:
    """The ``model_<iter>.pt`` files of ``folder``; none when it cannot be listed."""
    try:
        return RunDir(folder).checkpoints()
    except OSError:
        return []


def explicit_keys(overrides: Iterable[str]) -> set[str]:
    """The leaf keys the command line sets: overridden keys, and every key a preset chosen there sets."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = config_groups()
    leaves = leaf_keys()
    keys: set[str] = set()
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in groups and isinstance(override.value(), str):
            option = compose([], config_name=f"{key}/{override.value()}")
            keys.update(leaf_paths(OmegaConf.to_container(option, resolve=False)))
        elif not key.startswith("hydra"):
            keys.add(key)
    # Map each key onto the schema's leaves: a whole node (actor.distribution_cfg={...}), or a key below an open dict
    # (task.env_kwargs.render_mode), counts for the leaves it covers.
    return {
        leaf
        for leaf in leaves
        for key in keys
        if leaf == key or leaf.startswith(key + ".") or key.startswith(leaf + ".")
    }


def _lookup(data: dict[str, Any], path: str) -> tuple[bool, Any]:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def read_saved_config(run: Path) -> dict[str, Any] | None:
    """The saved run's settings that a resume takes (the :data:`ADOPTED` sections), or ``None`` without a config.

    Raises:
        ConfigError: If the file cannot be read, or holds keys this version does not know in those sections.
    """
    files = RunDir(run)
    path = files.config_path
    if not path.is_file():
        return None
    saved = files.read_config()
    if saved is None:  # taking none of the settings silently is the failure this module exists to prevent
        raise ConfigError(f"{path}: cannot read the saved run's config (expected a YAML mapping)")
    sections = {prefix.split(".")[0] for prefix in ADOPTED}
    top = {key.split(".")[0] for key in schema_keys()}
    # Unknown sections (an older layout's `algo`) and unknown keys inside the adopted ones are errors: taking part of
    # the saved settings silently is the failure this module exists to prevent.
    check_node({k: v for k, v in saved.items() if k in sections or k not in top}, context=f"{path}: ")
    return saved


def adopt(node: DictConfig, saved: dict[str, Any], explicit: set[str], run: Path) -> None:
    """Set the saved run's :data:`ADOPTED` settings in ``node``, except those in ``explicit``.

    Raises:
        ConfigError: If an explicit value of a :data:`FROZEN` key differs from the saved run's.
    """
    current = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    for leaf in leaf_keys():
        if not leaf.startswith(ADOPTED):
            continue
        found, value = _lookup(saved, leaf)
        if not found and leaf in ABSENT_MEANS:
            found, value = True, ABSENT_MEANS[leaf]
        if not found:
            continue  # a key newer than the saved run: the current value stands
        if leaf not in explicit:
            OmegaConf.update(node, leaf, value, merge=False)
            continue
        _, mine = _lookup(current, leaf)
        if leaf in FROZEN and mine != value:
            raise ConfigError(
                f"invalid config value {leaf}={mine!r}: resume={run} was trained with {leaf}={value!r}, and a resumed "
                "run keeps its networks and task; drop the override, or start a new run"
            )


def prepare_resume(node: DictConfig, overrides: Iterable[str]) -> DictConfig:
    """Resolve ``node.resume`` to a checkpoint or run directory, and take the saved run's settings into ``node``.

    Raises:
        ConfigError: For a ``resume=`` that names nothing resumable, an unreadable saved config, or a conflicting
            override.
    """
    if node.get("resume") is None:
        return node
    target, run = find_run(str(node.resume), str(node.runner.experiment_name))
    saved = read_saved_config(run)
    if saved is None:
        log.warning("resume=%s: %s holds no saved config; the current settings are used as given", node.resume, run)
    else:
        adopt(node, saved, explicit_keys(overrides), run)
    node.resume = str(target)
    return node

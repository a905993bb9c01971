"""Tune with Hydra multirun: `python tools/sweep.py --multirun +sweep=ant [hydra.sweeper.n_trials=20]`.

Each trial trains as tools/train.py does and returns the final policy's mean deterministic return on the validation
seeds (tools/evaluate.py's protocol) to Hydra's Optuna sweeper; see README.md ("Tuning a task").
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from robo_safe_rl.apps.sweep import exit_if_unavailable, trial
from robo_safe_rl.config.compose import TRAIN_CONFIG, config_groups, config_source
from robo_safe_rl.config.keys import check_overrides
from robo_safe_rl.config.schema import register_configs
from robo_safe_rl.errors import ConfigError

register_configs()


@hydra.main(config_path=config_source(), config_name=TRAIN_CONFIG, version_base="1.3")
def main(cfg: DictConfig) -> float:
    # Imported here, not at the top: a launcher that runs trials in other processes (joblib's loky workers) sends
    # this function by value and never runs this file's imports there, and the tasks' gymnasium ids are registered
    # by this import.
    import robosafe_tasks  # noqa: F401

    return trial(cfg, list(HydraConfig.get().overrides.task))


if __name__ == "__main__":
    try:
        check_overrides(
            [a for a in sys.argv[1:] if not a.startswith("-") and ("=" in a or a.startswith("~"))], config_groups()
        )
    except ConfigError as err:
        print(f"sweep: {err}", file=sys.stderr)
        sys.exit(2)
    exit_if_unavailable()
    main()

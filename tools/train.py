"""Train a locomotion policy with PPO: `python tools/train.py task=ant algo=ppo runner.max_iterations=200 seed=3`.

`python tools/train.py --list-tasks` prints the tasks: name, gymnasium id, observation and action sizes.

Any key of configs/train.yaml can be overridden on the command line (Hydra syntax); see README.md.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from robo_safe_rl.apps.train import LIST_TASKS, run
from robo_safe_rl.apps.train import main as train_main
from robo_safe_rl.config.compose import TRAIN_CONFIG, config_groups, config_source
from robo_safe_rl.config.keys import check_overrides
from robo_safe_rl.config.schema import register_configs
from robo_safe_rl.errors import ConfigError

register_configs()
_composed = False


# The configs the installed package carries (or a checkout's configs/ folder), the same ones apps.train.main composes.
@hydra.main(config_path=config_source(), config_name=TRAIN_CONFIG, version_base="1.3")
def main(cfg: DictConfig) -> None:
    global _composed
    _composed = True
    code = run(cfg, list(HydraConfig.get().overrides.task))
    if code:
        sys.exit(code)


if __name__ == "__main__":
    if LIST_TASKS in sys.argv[1:]:  # before Hydra, which would take it for an unknown flag and make a run directory
        sys.exit(train_main(sys.argv[1:]))
    # Keys the schema does not know fail here, before Hydra makes a run directory; Hydra would add a `+key` silently.
    try:
        check_overrides(
            [a for a in sys.argv[1:] if not a.startswith("-") and ("=" in a or a.startswith("~"))], config_groups()
        )
    except ConfigError as err:
        print(f"train: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
    except SystemExit as stop:
        # Hydra reports its own composition errors (bad type, unknown preset) and exits 1; an invalid configuration is
        # exit code 2 everywhere else, and 1 means a run stopped by a safety error.
        sys.exit(2 if stop.code == 1 and not _composed else stop.code)

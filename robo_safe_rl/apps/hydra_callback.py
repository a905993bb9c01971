"""The checks ``tools/train.py`` makes before Hydra touches the run directory.

Hydra makes ``hydra.run.dir`` (the run directory) and writes its ``hydra/`` record there before the task function
runs. Checked only in the task function, an invalid value would leave an empty run directory
behind, and a ``run_dir`` that already holds a run would get that run's Hydra record overwritten before being
refused. ``configs/train.yaml`` registers :class:`CheckConfigFirst` as a Hydra callback: its ``on_run_start`` runs
after composition and before any of that. The task function checks again (``robo_safe_rl.apps.train.train``), for
callers that compose without ``@hydra.main``.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from robo_safe_rl.apps.preflight import check_run_dir
from robo_safe_rl.apps.resume import prepare_resume
from robo_safe_rl.apps.train import to_train_config
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.rsl_cfg import check_logger


class CheckConfigFirst(Callback):
    """Validate the composed configuration and refuse a used or unwritable run directory, before Hydra makes it."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Exit 2 with one line on stderr for an invalid configuration, or a run directory that holds a run or cannot
        be written (Hydra would fail making it with a traceback).

        Hydra prints an exception raised here with a hint about stack traces on further lines; an exit does not go
        through that, and ``tools/train.py`` passes its code on.
        """
        # Resolve run_dir in Hydra's own config first: a `${now:...}` in it is then cached there (Hydra's resolver
        # caches per config), the copy below inherits that value, and Hydra makes hydra.run.dir (`${run_dir}`) with
        # the same name as the folder checked here. Resolved only in the copy, it would be read again later, and a
        # clock that crossed a second between the two left this check's folder empty beside the run's.
        OmegaConf.select(config, "run_dir")
        task_cfg = copy.deepcopy(config)
        overrides = list(config.hydra.overrides.task)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        try:
            # As the task function will see it: a resume's saved settings taken, conflicting overrides refused.
            cfg = to_train_config(prepare_resume(task_cfg, overrides))
            check_logger(cfg.runner)
            RunDir(cfg.run_dir).check_unused(cfg.resume)
            check_run_dir(cfg.run_dir)
        except ConfigError as err:
            print(f"train: {err}", file=sys.stderr)
            raise SystemExit(2) from err

"""Where the Hydra configs are, and composing them.

The YAML files live in the repository's top-level ``configs/`` folder and are installed as package data of
``robo_safe_rl.configs`` (pyproject maps the folder into the package). Which copy a run reads follows the code that
runs, found through ``importlib.resources``:

- an installed wheel carries ``robo_safe_rl/configs/`` inside the package;
- a checkout (editable install, or the repository on ``PYTHONPATH``) has no such folder inside the package, and
  reads the ``configs/`` folder beside it. Looking beside the imported package, not through the import system, keeps
  two checkouts that share one environment from reading each other's configs.

Hydra gets the folder as an absolute path (``initialize_config_dir``, ``@hydra.main(config_path=...)``): its
``pkg://`` form would need an ``__init__.py`` among the YAML files.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from robo_safe_rl.errors import ConfigError

#: The package the ``configs/`` folder is installed as (pyproject.toml's package-dir mapping).
CONFIG_PACKAGE = "robo_safe_rl.configs"
#: The primary config of a training run.
TRAIN_CONFIG = "train"
_VERSION_BASE = "1.3"


def config_source() -> str:
    """The absolute path of the configs folder: the installed package data, or a checkout's ``configs/``.

    Usable as ``@hydra.main(config_path=...)`` (an absolute path is taken as it is).

    Raises:
        ConfigError: If neither the package data nor a checkout's ``configs/`` holds ``train.yaml``.
    """
    packaged = importlib.resources.files("robo_safe_rl").joinpath("configs")
    if isinstance(packaged, Path) and (packaged / f"{TRAIN_CONFIG}.yaml").is_file():
        return str(packaged.resolve())
    checkout = Path(__file__).resolve().parents[2] / "configs"  # robo_safe_rl/config/compose.py -> the checkout
    if (checkout / f"{TRAIN_CONFIG}.yaml").is_file():
        return str(checkout)
    raise ConfigError(
        f"no training configs found: neither {CONFIG_PACKAGE} (package data) nor {checkout} holds "
        f"{TRAIN_CONFIG}.yaml; reinstall robo-safe-rl"
    )


def config_groups() -> frozenset[str]:
    """The config groups (sub-folders of ``configs/``: ``task``, ``algo``, ``safety``, ``drill``)."""
    return frozenset(p.name for p in Path(config_source()).iterdir() if p.is_dir() and not p.name.startswith("_"))


@contextmanager
def _hydra() -> Iterator[None]:
    """Hydra's compose API over :func:`config_source`; inside a ``@hydra.main`` app the app's own instance is used."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from robo_safe_rl.config.schema import register_configs

    register_configs()
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=config_source(), version_base=_VERSION_BASE):
        yield


def compose(overrides: list[str], config_name: str = TRAIN_CONFIG) -> DictConfig:
    """Compose ``config_name`` (``train``, or one option such as ``algo/ppo_safe``) with Hydra override strings.

    Raises:
        hydra.errors.HydraException, omegaconf.errors.OmegaConfBaseException: Hydra's composition errors.
    """
    from hydra import compose as hydra_compose

    with _hydra():
        return hydra_compose(config_name=config_name, overrides=list(overrides))

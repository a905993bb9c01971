"""The keys the config schema knows, so that any other key fails before anything is built.

Hydra's structured configs refuse an unknown key in a plain override (``task.num_env=4``), but its ``+`` and ``++``
forms add the key anyway, and ``OmegaConf.to_object`` then drops it without a word: ``+task.num_env=4`` trained with 16
envs. So the override strings are checked before composition (:func:`check_overrides`) and the composed config is
checked before conversion (:func:`check_node`), whatever the prefix. The message names the key and the closest known
one (``difflib``), because Hydra's own hint for a misspelt key is the ``+`` form that silently did nothing.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from robo_safe_rl.errors import ConfigError

#: How a key of the schema takes what is below it: a node has a fixed set of keys, an open dict (``task.env_kwargs``)
#: takes any, a leaf takes a value.
NODE, OPEN, LEAF = "node", "open", "leaf"


@functools.cache
def schema_keys() -> dict[str, str]:
    """Every key path of :class:`~robo_safe_rl.config.schema.TrainConfig` (``algorithm.desired_kl``) and its kind."""
    from robo_safe_rl.config.schema import TrainConfig

    keys: dict[str, str] = {}
    _walk(TrainConfig, "", keys)
    return keys


def _walk(cls: type, prefix: str, keys: dict[str, str]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        kind = _kind(hints[f.name])
        keys[path] = kind
        if kind == NODE:
            _walk(_without_none(hints[f.name]), path + ".", keys)


def _without_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _kind(tp: Any) -> str:
    tp = _without_none(tp)
    if dataclasses.is_dataclass(tp):
        return NODE
    if tp is dict or typing.get_origin(tp) in (dict, Mapping):
        return OPEN
    return LEAF


def is_known(path: str) -> bool:
    """Whether ``path`` is a key of the schema, or lies below an open dict of it (``task.env_kwargs.render_mode``)."""
    keys = schema_keys()
    if path in keys:
        return True
    parts = path.split(".")
    return any(keys.get(".".join(parts[:n])) == OPEN for n in range(1, len(parts)))


def closest_key(path: str, extra: Iterable[str] = ()) -> str | None:
    """The known key (or ``extra`` name, e.g. a config group) nearest to ``path``, or ``None`` when none is close."""
    candidates = [*schema_keys(), *extra]
    match = difflib.get_close_matches(path, candidates, n=1, cutoff=0.6)
    if match:
        return match[0]
    # A key that moved to another node keeps its last name (algo.obs_clip -> actor.obs_clip).
    leaf = path.rsplit(".", 1)[-1]
    moved = [key for key in schema_keys() if key.rsplit(".", 1)[-1] == leaf]
    return moved[0] if moved else None


def unknown_key_error(path: str, source: str | None = None, extra: Iterable[str] = ()) -> ConfigError:
    """The one-line error for an unknown key: the key, where it came from, and the closest known one."""
    near = closest_key(path, extra)
    where = f" (from '{source}')" if source and source != path else ""
    hint = f"; did you mean {near}?" if near else "; the keys are documented in robo_safe_rl/config/"
    return ConfigError(f"invalid config key {path}{where}: expected a key of the config schema{hint}")


def check_overrides(overrides: Iterable[str], groups: Iterable[str] = ()) -> None:
    """Fail on an override of a key the schema does not know, with or without ``+``, ``++`` or ``~``.

    Group choices (``algo=ppo_safe``, ``+drill=gauntlet``) and Hydra's own keys (``hydra.*``) are left to Hydra, as
    are overrides it cannot parse (it reports them itself).

    Raises:
        ConfigError: Naming the first unknown key, the override it came from and the closest known key.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    groups = frozenset(groups)
    parser = OverridesParser.create()
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException:
            continue
        key = override.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")) or key.split("/")[0] in groups:
            continue
        if not is_known(key):
            raise unknown_key_error(key, text, groups)


def check_node(data: Mapping[str, Any], context: str = "") -> None:
    """Fail on a key of a composed (or saved) config that the schema does not know.

    Args:
        data: The config as plain data (``OmegaConf.to_container(node, resolve=False)``).
        context: Where ``data`` came from, for the message (e.g. a saved ``config.yaml``).

    Raises:
        ConfigError: Naming the first unknown key and the closest known key.
    """
    unknown = list(_unknown(data, ""))
    if unknown:
        err = unknown_key_error(unknown[0])
        more = f" ({len(unknown) - 1} more unknown: {', '.join(unknown[1:4])})" if len(unknown) > 1 else ""
        raise ConfigError(f"{context}{err}{more}")


def _unknown(data: Mapping[str, Any], prefix: str) -> Iterable[str]:
    keys = schema_keys()
    for name, value in data.items():
        path = f"{prefix}{name}"
        kind = keys.get(path)
        if kind in (OPEN, LEAF):  # a wrong type for a leaf is OmegaConf's to report
            continue
        if kind == NODE and isinstance(value, Mapping):
            yield from _unknown(value, path + ".")
        elif kind is None and isinstance(value, Mapping) and value:
            yield from (f"{path}.{leaf}" for leaf in leaf_paths(value))  # name the typo, not the node it created
        elif kind is None:
            yield path


def leaf_paths(data: Mapping[str, Any]) -> Iterable[str]:
    """The dotted path of every leaf of a nested mapping (``algorithm.learning_rate``); an empty mapping is a leaf."""
    for name, value in data.items():
        if isinstance(value, Mapping) and value:
            yield from (f"{name}.{leaf}" for leaf in leaf_paths(value))
        else:
            yield str(name)


def leaf_keys() -> list[str]:
    """The keys that take a value (leaves and open dicts), in schema order."""
    return [path for path, kind in schema_keys().items() if kind != NODE]

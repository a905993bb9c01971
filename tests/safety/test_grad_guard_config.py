"""``safety.grad_guard`` and ``faults.grad``: valid values pass, a bad key or value fails naming the key."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from robo_safe_rl.config.grad_guard import GradFaultCfg, GradGuardCfg, GuardMode
from robo_safe_rl.errors import ConfigError


def test_defaults() -> None:
    guard = GradGuardCfg()
    assert guard.mode is GuardMode.skip and guard.dump_on_raise
    faults = GradFaultCfg()
    assert not faults.enabled and math.isnan(faults.value) and faults.param is None and faults.rank is None


@pytest.mark.parametrize("mode", ["skip", "zero", "raise", "off"])
def test_every_mode_from_a_plain_dict_and_from_yaml(mode: str) -> None:
    assert GradGuardCfg.from_value({"mode": mode}).mode is GuardMode[mode]
    # Quoted, because YAML 1.1 reads a bare `off` as the boolean false (Hydra's command-line override does not).
    node = OmegaConf.merge(OmegaConf.structured(GradGuardCfg), OmegaConf.create(f'mode: "{mode}"'))
    assert OmegaConf.to_object(node).mode is GuardMode[mode]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"mode": "skipp"}, r"safety.grad_guard.mode: invalid value 'skipp'; valid values: \['skip', 'zero', 'raise'"),
        ({"mod": "skip"}, r"safety.grad_guard: unknown key\(s\) \['mod'\]; valid keys: \['mode', 'dump_on_raise'\]"),
        ({"dump_on_raise": "yes"}, "safety.grad_guard.dump_on_raise: expected true or false"),
        ("skip", "safety.grad_guard: expected a mapping or GradGuardCfg, got str"),
    ],
)
def test_bad_guard_config_names_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GradGuardCfg.from_value(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)])
def test_fault_value_from_a_hydra_override_and_a_plain_string(text: str, expected: float) -> None:
    node = OmegaConf.merge(OmegaConf.structured(GradFaultCfg), OmegaConf.from_dotlist([f"value={text}"]))
    for cfg in (OmegaConf.to_object(node), GradFaultCfg.from_value({"value": text})):
        value = cfg.value  # type: ignore[union-attr]
        assert (math.isnan(value) and math.isnan(expected)) or value == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"value": 1.0}, "faults.grad.value: expected nan, inf or -inf, got 1.0"),
        ({"value": "big"}, "faults.grad.value: expected nan, inf or -inf, got 'big'"),
        ({"at_updates": [-1]}, r"faults.grad.at_updates: expected an integer >= 0, got -1"),
        ({"at_updates": 3}, "faults.grad.at_updates: expected a list of update indices, got 3"),
        ({"loss_at_updates": [1.5]}, "faults.grad.loss_at_updates: expected an integer >= 0, got 1.5"),
        ({"every": -2}, "faults.grad.every: expected an integer >= 0, got -2"),
        ({"loss_every": "x"}, "faults.grad.loss_every: expected an integer >= 0, got 'x'"),
        ({"element": True}, "faults.grad.element: expected an integer >= 0, got True"),
        ({"rank": -1}, "faults.grad.rank: expected an integer >= 0, got -1"),
        ({"param": ""}, "faults.grad.param: expected a module path"),
        ({"at": [1]}, r"faults.grad: unknown key\(s\) \['at'\]"),
    ],
)
def test_bad_fault_config_names_the_key(value: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GradFaultCfg.from_value(value)


def test_fault_schedule() -> None:
    cfg = GradFaultCfg.from_value({"at_updates": [0, 7], "every": 5, "loss_at_updates": [3], "loss_every": 6})
    assert cfg.enabled
    # every=5 fires at indices 4, 9, 14, ... (the 5th, 10th, ... mini-batch); loss_every=6 at 5, 11, ...
    assert [u for u in range(15) if cfg.grad_due(u)] == [0, 4, 7, 9, 14]
    assert [u for u in range(15) if cfg.loss_due(u)] == [3, 5, 11]
    assert GradFaultCfg.from_value({"loss_every": 2}).enabled
    # An OmegaConf node (a ListConfig inside) is accepted as it is.
    node = OmegaConf.merge(OmegaConf.structured(GradFaultCfg), {"at_updates": [2]})
    assert GradFaultCfg.from_value(node).at_updates == [2]  # type: ignore[arg-type]

"""Config schemas of the env bridge: defaults, range checks with their messages, OmegaConf round trips."""

from __future__ import annotations

import math
from typing import Any

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from robo_safe_rl.config.safe_step import EnvFaultConfig, NonFiniteValue, SafeStepConfig, TensorGuardConfig
from robo_safe_rl.errors import ConfigError


def test_defaults_are_valid_and_faults_are_off() -> None:
    cfg = SafeStepConfig()
    assert (cfg.enabled, cfg.penalty, cfg.check_state) == (True, -10.0, True)
    assert (cfg.history_len, cfg.state_interval) == (32, 16)
    assert (cfg.max_rebuild_attempts, cfg.max_incidents, cfg.max_incident_mb) == (3, 1000, 200.0)
    faults = EnvFaultConfig()
    assert not faults.enabled and not faults.action_enabled and not faults.env_enabled
    assert faults.value is NonFiniteValue.any
    assert TensorGuardConfig().action_bound is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"penalty": 1.0}, r"safety\.step\.penalty=1\.0: expected a finite number in \[-1000000\.0, 0\.0\]"),
        ({"penalty": math.nan}, r"safety\.step\.penalty=nan: expected a finite number"),
        ({"penalty": -math.inf}, r"safety\.step\.penalty=-inf: expected a finite number"),
        ({"history_len": -1}, r"safety\.step\.history_len=-1: expected an integer in \[0, 4096\]"),
        ({"state_interval": 0}, r"safety\.step\.state_interval=0: expected an integer in \[1, 4096\]"),
        (
            {"history_len": 4, "state_interval": 8},
            r"safety\.step\.state_interval=8: expected at most safety\.step\.history_len - 1 = 3",
        ),
        ({"max_rebuild_attempts": 0}, r"safety\.step\.max_rebuild_attempts=0: expected an integer in \[1, 100\]"),
        ({"max_incidents": -5}, r"safety\.step\.max_incidents=-5"),
        ({"max_incident_mb": -1.0}, r"safety\.step\.max_incident_mb=-1\.0: expected a finite number in \[0\.0,"),
    ],
)
def test_safe_step_config_range_checks(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SafeStepConfig(**kwargs)


def test_state_interval_one_is_allowed_without_history() -> None:
    assert SafeStepConfig(history_len=0, state_interval=1).state_interval == 1


PROBABILITIES = ["action_nonfinite", "obs_nonfinite", "reward_nonfinite", "physics_error", "state_blowup"]


@pytest.mark.parametrize("key", PROBABILITIES)
@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan])
def test_fault_probabilities_must_be_probabilities(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"faults\.env\.{key}={value}: expected a finite number in \[0\.0, 1\.0\]"):
        EnvFaultConfig(**{key: value})


def test_fault_config_other_checks() -> None:
    with pytest.raises(ConfigError, match=r"faults\.env\.blowup_scale=1\.0: expected a finite number in \[1\.5,"):
        EnvFaultConfig(blowup_scale=1.0)
    with pytest.raises(ConfigError, match=r"faults\.env\.seed=-1: expected an integer"):
        EnvFaultConfig(seed=-1)
    with pytest.raises(ConfigError, match=r"faults\.env\.value='nan': expected one of nan, posinf, neginf, any"):
        EnvFaultConfig(value="nan")  # type: ignore[arg-type]
    cfg = EnvFaultConfig(action_nonfinite=0.1)
    assert cfg.enabled and cfg.action_enabled and not cfg.env_enabled
    assert EnvFaultConfig(state_blowup=0.1).env_enabled


def test_tensor_guard_config_checks() -> None:
    with pytest.raises(ConfigError, match=r"action_bound=0\.0: expected a number > 0 or None"):
        TensorGuardConfig(action_bound=0.0)
    with pytest.raises(ConfigError, match=r"history_len=2000: expected an integer in \[0, 1024\]"):
        TensorGuardConfig(history_len=2000)


def test_omegaconf_round_trip_runs_the_checks() -> None:
    # The lead composes these into the Hydra schema: enums from strings, checks at to_object.
    node = OmegaConf.merge(OmegaConf.structured(EnvFaultConfig), {"value": "posinf", "physics_error": 0.25})
    cfg = OmegaConf.to_object(node)
    assert isinstance(cfg, EnvFaultConfig) and cfg.value is NonFiniteValue.posinf and cfg.physics_error == 0.25
    with pytest.raises(ValidationError, match="Invalid value 'sometimes'"):
        OmegaConf.merge(OmegaConf.structured(EnvFaultConfig), {"value": "sometimes"})
    bad = OmegaConf.merge(OmegaConf.structured(SafeStepConfig), {"penalty": 3.0})
    with pytest.raises(ConfigError, match=r"safety\.step\.penalty=3\.0"):
        OmegaConf.to_object(bad)
    guard = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TensorGuardConfig), {"action_bound": 2.0}))
    assert isinstance(guard, TensorGuardConfig) and guard.action_bound == 2.0

"""Pure functions on walker state records: the limit check and the validation of a record to restore."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robosafe_tasks.spec import StateLimits
from robosafe_tasks.state import check_limits, state_shapes, validate_state

LIMITS = StateLimits(base_height=(0.0, 5.0), base_speed=20.0, base_angular_speed=50.0, joint_speed=80.0)
NAMES = ["hip", "knee"]


def query(
    pos: tuple = (0.0, 0.0, 0.75),
    orn: tuple = (0.0, 0.0, 0.0, 1.0),
    lin: tuple = (0.0, 0.0, 0.0),
    ang: tuple = (0.0, 0.0, 0.0),
    joints: tuple = ((0.1, 0.0), (-0.2, 0.0)),
) -> tuple:
    """A state query as PyBullet returns it (joint states carry reaction forces and torque as well)."""
    states = [(q, qd, (0.0,) * 6, 0.0) for q, qd in joints]
    return pos, orn, lin, ang, states


def test_a_plausible_state_passes() -> None:
    assert check_limits(query(), LIMITS, NAMES) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_named_by_group(bad: float) -> None:
    reason = check_limits(query(orn=(0.0, 0.0, bad, 1.0), joints=((0.1, bad), (0.0, 0.0))), LIMITS, NAMES)
    assert reason == "non-finite state in base_orn, joint_vel"


def test_plus_and_minus_inf_in_one_group_are_still_caught() -> None:
    # inf + -inf is NaN: still non-finite.
    assert check_limits(query(lin=(math.inf, -math.inf, 0.0)), LIMITS, NAMES) == "non-finite state in base_lin_vel"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"pos": (0.0, 0.0, -0.01)}, "base height -0.01 m is outside the range [0, 5] m"),
        ({"pos": (0.0, 0.0, 5.5)}, "base height 5.5 m is outside the range [0, 5] m"),
        # |(12, 16, 0)| = 20 is at the limit and passes; |(12, 16, 1)| = 20.02 does not.
        ({"lin": (12.0, 16.0, 0.0)}, None),
        ({"lin": (12.0, 16.0, 1.0)}, "base speed 20.02 m/s exceeds the limit 20 m/s"),
        ({"ang": (0.0, 30.0, 40.0)}, None),
        ({"ang": (0.0, 30.0, 41.0)}, "base angular speed 50.8 rad/s exceeds the limit 50 rad/s"),
        ({"joints": ((0.0, 80.0), (0.0, -80.0))}, None),
        ({"joints": ((0.0, 81.0), (0.0, -95.5))}, "joint speed 95.5 rad/s of knee exceeds the limit 80 rad/s"),
    ],
)
def test_limits_name_quantity_value_and_bound(kwargs: dict, reason: str | None) -> None:
    assert check_limits(query(**kwargs), LIMITS, NAMES) == reason


def test_height_is_checked_before_speed() -> None:
    assert check_limits(query(pos=(0.0, 0.0, 9.0), lin=(100.0, 0.0, 0.0)), LIMITS, NAMES).startswith("base height")


def test_state_limits_reject_empty_ranges() -> None:
    with pytest.raises(ValueError, match=r"base_height must be \(min, max\) with min < max, got \(1.0, 1.0\)"):
        StateLimits(base_height=(1.0, 1.0), base_speed=1.0, base_angular_speed=1.0, joint_speed=1.0)
    with pytest.raises(ValueError, match=r"joint_speed must be > 0, got 0\.0"):
        StateLimits(base_height=(0.0, 1.0), base_speed=1.0, base_angular_speed=1.0, joint_speed=0.0)


def record() -> dict[str, np.ndarray]:
    return {key: np.zeros(shape) for key, shape in state_shapes(2, 4).items()}


def test_validate_state_converts_to_float64() -> None:
    state = record()
    state["elapsed_steps"] = np.array(3, dtype=np.int64)
    values = validate_state({**state, "extra": np.ones(1)}, num_motors=2, num_feet=4)
    assert list(values) == list(state_shapes(2, 4))
    assert all(v.dtype == np.float64 for v in values.values())
    assert values["elapsed_steps"] == 3.0


def test_validate_state_names_the_missing_keys() -> None:
    state = record()
    del state["initial_z"], state["joint_vel"]
    with pytest.raises(ValueError, match=r"sim state lacks keys \['joint_vel', 'initial_z'\]"):
        validate_state(state, num_motors=2, num_feet=4)


def test_validate_state_names_a_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"sim state 'feet_contact' has shape \(3,\), expected \(4,\)"):
        validate_state({**record(), "feet_contact": np.zeros(3)}, num_motors=2, num_feet=4)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_validate_state_rejects_non_finite_values(bad: float) -> None:
    with pytest.raises(ValueError, match="sim state 'potential' is not finite"):
        validate_state({**record(), "potential": np.array(bad)}, num_motors=2, num_feet=4)

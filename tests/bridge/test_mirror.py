"""A task's declared mirror (robo_safe_rl.bridge.mirror): what is accepted, what is refused and how it is named."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import robosafe_tasks  # noqa: F401  (registers the tasks)
from robo_safe_rl.bridge.env_batch import EnvInfo
from robo_safe_rl.bridge.mirror import Mirror, SignedPermutation
from robo_safe_rl.errors import ConfigError


def test_a_swap_with_signs_is_accepted() -> None:
    # Three components: 0 <-> 2 swapped (both keep their sign), 1 changes sign in place.
    m = SignedPermutation.declared("Robot", "observation_mirror", ((2, 1, 0), (1, -1, 1)), 3)
    assert m == SignedPermutation((2, 1, 0), (1, -1, 1))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ((2, 1, 0), "Robot.observation_mirror must be a pair (index, sign), got (2, 1, 0)"),
        (((0, 1, 1), (1, 1, 1)), "Robot.observation_mirror: index must be a permutation of 0..2, got (0, 1, 1)"),
        (((0, 1), (1, 1)), "Robot.observation_mirror: index must be a permutation of 0..2, got (0, 1)"),
        (((0, 1.0, 2), (1, 1, 1)), "Robot.observation_mirror: index must be a permutation of 0..2, got (0, 1.0, 2)"),
        (((0, 1, 2), (1, 0.5, 1)), "Robot.observation_mirror: sign must be 3 values of +1 or -1, got (1, 0.5, 1)"),
        (((0, 1, 2), (1, True, 1)), "Robot.observation_mirror: sign must be 3 values of +1 or -1, got (1, True, 1)"),
        (((0, 1, 2), (1, -1)), "Robot.observation_mirror: sign must be 3 values of +1 or -1, got (1, -1)"),
        # Hostile shapes get the same messages, not a TypeError from sorting or iterating them.
        ((("a", 1, 2), (1, 1, 1)), "Robot.observation_mirror: index must be a permutation of 0..2, got ('a', 1, 2)"),
        ((5, (1, 1, 1)), "Robot.observation_mirror: index must be a permutation of 0..2, got 5"),
        (((0, 1, 2), "+-+"), "Robot.observation_mirror: sign must be 3 values of +1 or -1, got '+-+'"),
        ("ab", "Robot.observation_mirror must be a pair (index, sign), got 'ab'"),
        # A cycle 0 -> 1 -> 2 -> 0 is a permutation, not a reflection: applied twice it is not the identity.
        (
            ((1, 2, 0), (1, 1, 1)),
            "Robot.observation_mirror is not its own inverse: component 0 comes from +1 x [1], but component 1 from "
            "+1 x [2]; expected 1 to come from +1 x [0]",
        ),
        # A swap whose two signs differ maps x0 -> -x1 -> -(x0): twice, -x0.
        (
            ((1, 0, 2), (-1, 1, 1)),
            "Robot.observation_mirror is not its own inverse: component 0 comes from -1 x [1], but component 1 from "
            "+1 x [0]; expected 1 to come from -1 x [0]",
        ),
    ],
    ids=[
        "not-a-pair",
        "repeated-index",
        "short-index",
        "float-index",
        "half-sign",
        "bool-sign",
        "short-sign",
        "str-index",
        "int-index",
        "str-sign",
        "str",
        "cycle",
        "swap-of-unlike-signs",
    ],
)
def test_a_bad_declaration_is_refused_naming_the_attribute(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        SignedPermutation.declared("Robot", "observation_mirror", value, 3)
    assert str(err.value) == message


class _Half:
    observation_mirror = ((0,), (1,))


def test_half_a_mirror_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^_Half declares a mirror without action_mirror: expected both or neither$"):
        Mirror.of(_Half(), 1, 1)


def test_the_ant_declares_its_mirror_and_the_half_cheetah_none() -> None:
    ant, cheetah = gym.make("RoboSafe/Ant-v0"), gym.make("RoboSafe/HalfCheetah-v0")
    try:
        mirror = EnvInfo.of(ant).mirror
        assert mirror is not None and len(mirror.observation.index) == 28 and len(mirror.action.index) == 8
        assert EnvInfo.of(cheetah).mirror is None  # a planar robot: no left and right
    finally:
        ant.close()
        cheetah.close()

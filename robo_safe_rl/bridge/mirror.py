"""A task's left-right mirror: which observation and action components trade places, and which change sign.

A legged robot that is symmetric about its sagittal plane (the Ant about the xz plane, a quadruped's left and right
legs) has a mirror image of every transition: reflect the state and the action, and the physics answers with the
reflected next state and the same reward. rsl-rl's symmetry extension learns from both (Mittal et al., "Symmetry
Considerations for Learning Task Symmetric Robot Policies", ICRA 2024), given a function that mirrors observations
and actions (:mod:`robo_safe_rl.training.symmetry`). Where the components go is the task's knowledge, so the task
declares it on its unwrapped env (:mod:`robo_safe_rl.bridge.protocol`):

- ``observation_mirror`` and ``action_mirror``: each ``(index, sign)``, two sequences as long as the vector, with
  ``mirrored[i] = sign[i] * x[index[i]]``.

A mirror is its own inverse (reflecting twice is the identity), which is checked here: ``index[index[i]] == i`` and
``sign[i] * sign[index[i]] == 1``. This module imports neither torch nor rsl-rl: the worker processes import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from robo_safe_rl.errors import ConfigError


@dataclass(frozen=True)
class SignedPermutation:
    """``mirrored[..., i] = sign[i] * x[..., index[i]]``, an involution.

    Attributes:
        index: Where each component of the mirror image comes from.
        sign: +1 or -1 per component.
    """

    index: tuple[int, ...]
    sign: tuple[int, ...]

    @classmethod
    def declared(cls, owner: str, attribute: str, value: Any, size: int) -> SignedPermutation:
        """Check a task's declared ``(index, sign)`` for a vector of ``size`` components.

        Args:
            owner: The env class that declares it, for messages.
            attribute: ``observation_mirror`` or ``action_mirror``.
            value: What the env declares.
            size: The length of the observation or action vector.

        Raises:
            ConfigError: Naming ``owner.attribute``, the bad part and what was expected.
        """
        where = f"{owner}.{attribute}"
        if not (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2):
            raise ConfigError(f"{where} must be a pair (index, sign), got {value!r}")
        index, sign = value
        # Types first: sorting a mix of ints and strings would raise TypeError instead of naming the attribute.
        ints = isinstance(index, Sequence) and all(type(i) is int for i in index)
        if not (ints and sorted(index) == list(range(size))):
            raise ConfigError(f"{where}: index must be a permutation of 0..{size - 1}, got {index!r}")
        if not (
            isinstance(sign, Sequence) and len(sign) == size and all(type(s) is int and s in (-1, 1) for s in sign)
        ):
            raise ConfigError(f"{where}: sign must be {size} values of +1 or -1, got {sign!r}")
        index, sign = tuple(index), tuple(sign)
        for i, (j, s) in enumerate(zip(index, sign, strict=True)):
            if index[j] != i or s * sign[j] != 1:
                raise ConfigError(
                    f"{where} is not its own inverse: component {i} comes from {s:+d} x [{j}], but component {j} "
                    f"from {sign[j]:+d} x [{index[j]}]; expected {j} to come from {s:+d} x [{i}]"
                )
        return cls(index, sign)


@dataclass(frozen=True)
class Mirror:
    """A task's mirror of its observations and its actions."""

    observation: SignedPermutation
    action: SignedPermutation

    @classmethod
    def of(cls, unwrapped: object, num_obs: int, num_actions: int) -> Mirror | None:
        """The mirror ``unwrapped`` declares, or ``None`` when it declares none.

        Args:
            unwrapped: The task's unwrapped env.
            num_obs: Length of its observation vector.
            num_actions: Length of its action vector.

        Raises:
            ConfigError: If it declares one of the two attributes without the other, or a bad one.
        """
        owner = type(unwrapped).__name__
        obs, act = getattr(unwrapped, "observation_mirror", None), getattr(unwrapped, "action_mirror", None)
        if obs is None and act is None:
            return None
        if obs is None or act is None:
            missing = "observation_mirror" if obs is None else "action_mirror"
            raise ConfigError(f"{owner} declares a mirror without {missing}: expected both or neither")
        return cls(
            SignedPermutation.declared(owner, "observation_mirror", obs, num_obs),
            SignedPermutation.declared(owner, "action_mirror", act, num_actions),
        )

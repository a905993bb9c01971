"""Config schemas of the env bridge: SafeStep (``safety.step``), the tensor guard, env fault drills (``faults.env``).

Plain typed dataclasses, composed into the Hydra schema by :mod:`robo_safe_rl.config.schema`. Every field is
documented with its default below; ``__post_init__`` checks ranges and raises
:class:`~robo_safe_rl.errors.ConfigError` naming the key, the value and the allowed range.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

from robo_safe_rl.config.checks import float_in, int_in, require
from robo_safe_rl.errors import ConfigError

#: The config key naming extra physics-error types (used in messages).
PHYSICS_ERRORS_KEY = "safety.step.physics_errors"


@lru_cache(maxsize=64)
def resolve_exception_type(name: str, key: str = PHYSICS_ERRORS_KEY) -> type[BaseException]:
    """Import the exception class a dotted name refers to (``"pybullet.error"``, ``"mujoco.FatalError"``,
    ``"my_pkg.sim:EngineError"``).

    Args:
        name: ``module.Name`` or ``module:Name``; nested names (``module:Outer.Inner``) are followed.
        key: The config key the name came from, for the message.

    Returns:
        The class.

    Raises:
        ConfigError: Naming the key and the value, if the module cannot be imported, the name is not in it, or it is
            not an exception class.
    """
    if ":" in name:
        module_name, _, attr_path = name.partition(":")
    else:
        module_name, _, attr_path = name.rpartition(".")
    if not module_name or not attr_path:
        raise ConfigError(
            f"invalid config value {key}={name!r}: expected an exception class as 'module.Name' or 'module:Name'"
        )
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"invalid config value {key}={name!r}: cannot import module {module_name!r} ({err})") from err
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"invalid config value {key}={name!r}: module {module_name!r} has no {attr_path!r}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, BaseException)):
        kind = type(obj).__name__
        raise ConfigError(f"invalid config value {key}={name!r}: {attr_path} is a {kind}, not an exception class")
    return obj


@dataclass
class SafeStepConfig:
    """How :class:`~robo_safe_rl.bridge.safe_step.SafeStep` guards each env (``safety.step``)."""

    enabled: bool = True
    """Wrap every env in SafeStep. Off only to measure what it costs or to reproduce an unguarded failure."""
    penalty: float = -10.0
    """Reward of a transition that SafeStep ended (physics error, non-finite or implausible state, non-finite
    observation or reward, implausible reward). In [-1e6, 0]. Ant earns about 1 to 3 per step, so -10 is felt but
    does not swamp the value function."""
    check_state: bool = True
    """Call the task's ``check_state()`` (base height, speed limits) after every step. It is the only check that
    catches a robot knocked through the floor with finite numbers. Costs what the task's check costs (about 2 us
    for the Ant, which checks the state its observation already read)."""
    history_len: int = 32
    """K: how many of the last (observation, action) pairs of the episode an incident record keeps. In [0, 4096]."""
    state_interval: int = 16
    """Take a simulator snapshot (``get_sim_state``) before every this many steps; an incident records the latest
    one with its age in steps, and the history holds the actions to replay from it (a non-finite action's record
    always holds the exact state before it: nothing had reached the engine yet). 1 records the exact state
    before every step but costs about 5% of an Ant step (8 us of 160 us); 16 costs 0.3%. In [1, 4096] and at
    most ``max(history_len - 1, 1)``: the history must hold every action since the snapshot, and the age reaches
    ``state_interval`` when a dead engine fails the snapshot itself."""
    max_rebuild_attempts: int = 3
    """Rebuild-and-reset attempts in a row before SafeStep gives up with
    :class:`~robo_safe_rl.errors.RecoveryError` (an env that cannot come back). In [1, 100]."""
    max_incidents: int = 1000
    """Incident records written per run directory; later ones are counted as dropped. In [0, 10_000_000]."""
    max_incident_mb: float = 200.0
    """Disk cap of ``incidents/`` in MiB (JSON lines plus arrays); records past it are counted as dropped.
    In [0, 1e6]."""
    max_consecutive_failures: int = 100
    """Steps in a row that SafeStep may end in one env (physics error, non-finite or implausible state, observation
    or reward) before it stops the run with :class:`~robo_safe_rl.errors.RecoveryError`, naming the env and the
    incident kind. A broken env (one that returns NaN forever) would otherwise be reset on every step for the whole
    run and feed the policy nothing but penalties. 100: an env that cannot make one clean step in 100 is broken, not
    unlucky (a fault striking independently with probability 0.5 per step does this once in 2^100 steps; the
    gauntlet drill ends about 3% of steps); at 24 steps per iteration the run stops within 5 iterations. In
    [1, 1_000_000]."""
    reward_bound: float | None = None
    """Bound on ``|reward|`` of one step: a finite reward beyond it is an ``implausible_reward`` incident (the
    transition ends with the penalty, like an implausible state). ``None``: the task's own ``reward_bound`` (the Ant
    derives 200 from its reward terms and state limits), none for a task that declares none. In (0, 1e30]."""
    physics_errors: list[str] = field(default_factory=list)
    """Exception types, as ``module.Name`` (e.g. ``mujoco.FatalError``), that SafeStep treats as physics-engine
    errors besides :class:`~robo_safe_rl.errors.PhysicsError` and the task's own ``physics_error_types``. For a task
    that raises its engine's errors without declaring them. Any other exception propagates: a bug stays a bug."""

    def __post_init__(self) -> None:
        float_in("safety.step.penalty", self.penalty, -1.0e6, 0.0)
        int_in("safety.step.history_len", self.history_len, 0, 4096)
        int_in("safety.step.state_interval", self.state_interval, 1, 4096)
        require(
            self.state_interval <= max(self.history_len - 1, 1),
            "safety.step.state_interval",
            self.state_interval,
            f"at most safety.step.history_len - 1 = {self.history_len - 1} (or 1), so that the recorded history "
            "holds every action taken since the snapshot",
        )
        int_in("safety.step.max_rebuild_attempts", self.max_rebuild_attempts, 1, 100)
        int_in("safety.step.max_incidents", self.max_incidents, 0, 10_000_000)
        float_in("safety.step.max_incident_mb", self.max_incident_mb, 0.0, 1.0e6)
        int_in("safety.step.max_consecutive_failures", self.max_consecutive_failures, 1, 1_000_000)
        if self.reward_bound is not None:
            float_in("safety.step.reward_bound", self.reward_bound, 0.0, 1.0e30, low_open=True)
        names = list(self.physics_errors)
        require(all(isinstance(n, str) for n in names), PHYSICS_ERRORS_KEY, names, "a list of 'module.Name' strings")
        for name in names:  # fail at config time, naming the key, rather than when the first env is wrapped
            resolve_exception_type(name)


@dataclass
class TensorGuardConfig:
    """How :class:`~robo_safe_rl.bridge.tensor_guard.GuardedVecEnv` guards a ``VecEnv`` it cannot reset per env."""

    action_bound: float | None = None
    """Clamp actions to ``[-action_bound, action_bound]`` after replacing NaN by 0 and +-Inf by the bound. ``None``:
    replace every non-finite component by 0 and leave finite ones alone (the env's own clipping applies).
    In (0, 1e9]."""
    penalty: float = -10.0
    """Reward written into rows whose reward was NaN or Inf. In [-1e6, 0]."""
    history_len: int = 8
    """Last (observation, action) pairs per env kept on the env's device for incident records. In [0, 1024]."""

    def __post_init__(self) -> None:
        if self.action_bound is not None:
            float_in("action_bound", self.action_bound, 0.0, 1.0e9)
            require(self.action_bound > 0, "action_bound", self.action_bound, "a number > 0 or None")
        float_in("penalty", self.penalty, -1.0e6, 0.0)
        int_in("history_len", self.history_len, 0, 1024)


class NonFiniteValue(Enum):
    """Which non-finite value an injected fault writes."""

    nan = "nan"
    posinf = "posinf"
    neginf = "neginf"
    any = "any"  # one of the three, drawn per fault


@dataclass
class EnvFaultConfig:
    """Fire drill for the env bridge (``faults.env``): faults injected where real ones arise, off by default.

    Probabilities are per env step and drawn independently. A physics error ends the step (the others of that step
    are not injected). Action faults enter before SafeStep (as a bad policy's would), the others inside it, between
    SafeStep and the task.
    """

    action_nonfinite: float = 0.0
    """Probability that one action component is replaced by a non-finite value. In [0, 1]."""
    obs_nonfinite: float = 0.0
    """Probability that one observation element is replaced by a non-finite value. In [0, 1]."""
    reward_nonfinite: float = 0.0
    """Probability that the reward is replaced by a non-finite value. In [0, 1]."""
    physics_error: float = 0.0
    """Probability that the env's physics client is killed behind its back before the step (``break_simulation``;
    a task without the simulator protocol raises :class:`~robo_safe_rl.errors.PhysicsError` instead). In [0, 1]."""
    state_blowup: float = 0.0
    """Probability that the base is thrown at ``blowup_scale`` times its velocity limit before the step
    (``perturb_state``; simulated tasks only). In [0, 1]."""
    value: NonFiniteValue = NonFiniteValue.any
    """The non-finite value written by action, observation and reward faults."""
    blowup_scale: float = 10.0
    """Multiple of the task's plausible velocity limit a state blow-up throws the base at. In [1.5, 1e6]."""
    seed: int = 0
    """Seed of the injectors' generators (env i draws from ``(seed, i)``), so a drill replays exactly. >= 0."""

    def __post_init__(self) -> None:
        for key in ("action_nonfinite", "obs_nonfinite", "reward_nonfinite", "physics_error", "state_blowup"):
            float_in(f"faults.env.{key}", getattr(self, key), 0.0, 1.0)
        require(
            isinstance(self.value, NonFiniteValue),
            "faults.env.value",
            self.value,
            f"one of {', '.join(v.value for v in NonFiniteValue)}",
        )
        float_in("faults.env.blowup_scale", self.blowup_scale, 1.5, 1.0e6)
        int_in("faults.env.seed", self.seed, 0, 2**63 - 1)

    @property
    def enabled(self) -> bool:
        """Whether any fault has a non-zero probability."""
        return self.action_enabled or self.env_enabled

    @property
    def action_enabled(self) -> bool:
        """Whether the action-side injector (before SafeStep) is needed."""
        return self.action_nonfinite > 0

    @property
    def env_enabled(self) -> bool:
        """Whether the env-side injector (between SafeStep and the task) is needed."""
        return any(p > 0 for p in (self.obs_nonfinite, self.reward_nonfinite, self.physics_error, self.state_blowup))

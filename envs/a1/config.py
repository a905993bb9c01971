"""Settings of the A1 velocity task, as typed dataclasses built from the plain dicts of ``task.env_kwargs``.

Every default is Isaac Lab's (``isaaclab_tasks/manager_based/locomotion/velocity/velocity_env_cfg.py``, the A1
overrides in ``config/a1/rough_env_cfg.py`` and ``config/a1/flat_env_cfg.py``, the actuator in
``isaaclab_assets/robots/unitree.py``) unless its comment says otherwise. The task package imports nothing of
``robo_safe_rl``, so the checks live here: a wrong key or value raises ``ValueError`` naming it and what was expected.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ControlConfig:
    """Joint position actions tracked by an explicit PD law at every physics substep (Isaac Lab's ``DCMotorCfg``).

    Attributes:
        action_scale: Joint target = default pose + action_scale * action, rad (A1: 0.25, ``rough_env_cfg.py``).
        stiffness: Kp in N m/rad (``UNITREE_A1_CFG``: 25.0).
        damping: Kd in N m s/rad (``UNITREE_A1_CFG``: 0.5).
        effort_limit: Torque limit in N m (``UNITREE_A1_CFG``: effort_limit = saturation_effort = 33.5).
        velocity_limit: Joint speed at which the DC motor's torque reaches 0 in N m (``UNITREE_A1_CFG``: 21.0 rad/s).
        sim_dt: Physics substep in s (``sim.dt = 1/200``).
        decimation: Substeps per policy step (4: the policy runs at 50 Hz).
        action_clip: The action space is [-action_clip, action_clip] (not in Isaac Lab, whose actions are unbounded):
            10 * 0.25 = 2.5 rad of offset spans every joint's range from the standing pose, and the bound keeps the
            reward's action-rate term bounded for ``reward_bound``.
    """

    action_scale: float = 0.25
    stiffness: float = 25.0
    damping: float = 0.5
    effort_limit: float = 33.5
    velocity_limit: float = 21.0
    sim_dt: float = 0.005
    decimation: int = 4
    action_clip: float = 10.0

    def __post_init__(self) -> None:
        for name in ("action_scale", "effort_limit", "velocity_limit", "sim_dt", "action_clip"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"env_kwargs.control.{name} must be > 0, got {getattr(self, name)}")
        for name in ("stiffness", "damping"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"env_kwargs.control.{name} must be >= 0, got {getattr(self, name)}")
        if self.decimation < 1:
            raise ValueError(f"env_kwargs.control.decimation must be >= 1, got {self.decimation}")

    @property
    def step_dt(self) -> float:
        """Policy step in s (0.02)."""
        return self.sim_dt * self.decimation


@dataclass(frozen=True)
class CommandConfig:
    """Base velocity commands (Isaac Lab's ``UniformVelocityCommandCfg`` of ``CommandsCfg.base_velocity``).

    Attributes:
        resampling_time_s: Seconds between resamplings (the released Isaac Lab 2.x task: (10.0, 10.0)).
        lin_vel_x: Range of the forward velocity command in m/s.
        lin_vel_y: Range of the lateral velocity command in m/s.
        ang_vel_z: Range of the yaw rate command in rad/s (also the clip of the heading controller's output).
        heading: Range of the heading target in rad.
        heading_command: Derive the yaw rate from a heading target (``heading_control_stiffness * heading error``).
        rel_heading_envs: Fraction of samplings that use the heading target.
        heading_control_stiffness: Gain of the heading controller in 1/s.
        rel_standing_envs: Fraction of samplings that command standing still (all zero).
    """

    resampling_time_s: tuple[float, float] = (10.0, 10.0)
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    lin_vel_y: tuple[float, float] = (-1.0, 1.0)
    ang_vel_z: tuple[float, float] = (-1.0, 1.0)
    heading: tuple[float, float] = (-math.pi, math.pi)
    heading_command: bool = True
    rel_heading_envs: float = 1.0
    heading_control_stiffness: float = 0.5
    rel_standing_envs: float = 0.02


@dataclass(frozen=True)
class RandomRange:
    """One switchable randomisation event: a uniform draw from ``range`` when ``enabled``."""

    enabled: bool = True
    range: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class EventConfig:
    """Randomisation events (Isaac Lab's ``EventCfg``), each switchable.

    Attributes:
        friction: Lateral friction of the robot's links, drawn at every reset (Isaac Lab's ``physics_material``
            draws once at start-up from (0.8, 0.8); this range is legged_gym's ``friction_range`` (0.5, 1.25),
            a randomisation worth the name). Bullet multiplies it with the ground's 1.0.
        added_mass: Kilograms added to the trunk at every reset (A1: ``add_base_mass`` (-1.0, 3.0); Isaac Lab
            draws it once at start-up).
        joint_scale: Initial joint positions = default pose times a uniform factor, clipped to the joint limits
            (``reset_robot_joints``: (0.5, 1.5) in the base task; the A1 override (1.0, 1.0) is ``enabled: false``).
        yaw: Initial heading in rad (``reset_base`` pose_range yaw (-3.14, 3.14)).
        push_interval_s: Seconds between pushes (``push_robot`` interval_range_s (10.0, 15.0)); ``enabled`` switches
            the pushes.
        push_velocity: Each push adds a uniform draw from this range to the base's x and y velocity in m/s
            (``push_by_setting_velocity`` (-0.5, 0.5) in Isaac Lab 2.x).
    """

    friction: RandomRange = field(default_factory=lambda: RandomRange(True, (0.5, 1.25)))
    added_mass: RandomRange = field(default_factory=lambda: RandomRange(True, (-1.0, 3.0)))
    joint_scale: RandomRange = field(default_factory=lambda: RandomRange(True, (0.5, 1.5)))
    yaw: RandomRange = field(default_factory=lambda: RandomRange(True, (-3.14, 3.14)))
    push_interval_s: RandomRange = field(default_factory=lambda: RandomRange(True, (10.0, 15.0)))
    push_velocity: tuple[float, float] = (-0.5, 0.5)


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward terms (Isaac Lab's ``RewardsCfg`` with the A1 flat overrides); a 0 weight skips the term.

    Each term's value is ``weight * term * step_dt`` (Isaac Lab's ``RewardManager``), so a term's episode sum is
    in "weight x seconds".
    """

    track_lin_vel_xy_exp: float = 1.5
    track_ang_vel_z_exp: float = 0.75
    lin_vel_z_l2: float = -2.0
    ang_vel_xy_l2: float = -0.05
    dof_torques_l2: float = -0.0002
    dof_acc_l2: float = -2.5e-7
    action_rate_l2: float = -0.01
    feet_air_time: float = 0.25
    # Isaac Lab's A1 config drops this term (None); here the base task's -1.0 on thigh contacts is kept.
    undesired_contacts: float = -1.0
    flat_orientation_l2: float = -2.5
    dof_pos_limits: float = 0.0
    # Isaac Lab's mdp.is_terminated (its humanoids' termination_penalty, weight -200); its A1 has none.
    termination_penalty: float = 0.0
    tracking_std: float = math.sqrt(0.25)
    """Std of the exponential tracking kernels in m/s and rad/s (``std = sqrt(0.25)``)."""
    feet_air_time_threshold: float = 0.5
    """Air time in s a foot's swing is rewarded beyond (penalised below)."""
    contact_threshold: float = 1.0
    """Contact normal force in N above which a link counts as touching (``threshold = 1.0``)."""
    only_positive: bool = False
    """Clip a negative step total to 0 (legged_gym's ``only_positive_rewards``; Isaac Lab has no such switch). With
    the total negative, ending the episode early pays, and a policy learns to fall (measured here); the logged terms
    stay unclipped."""
    soft_joint_limit_factor: float = 0.9
    """Fraction of each joint's range inside which ``dof_pos_limits`` costs nothing (``soft_joint_pos_limit_factor``).
    """

    def weights(self) -> dict[str, float]:
        """Term name -> weight, for every term (the non-weight fields excluded)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in TERM_NAMES}


#: Every reward term, in the order they are computed and logged.
TERM_NAMES: tuple[str, ...] = (
    "track_lin_vel_xy_exp",
    "track_ang_vel_z_exp",
    "lin_vel_z_l2",
    "ang_vel_xy_l2",
    "dof_torques_l2",
    "dof_acc_l2",
    "action_rate_l2",
    "feet_air_time",
    "undesired_contacts",
    "flat_orientation_l2",
    "dof_pos_limits",
    "termination_penalty",
)


@dataclass(frozen=True)
class WeightChange:
    """One term of the reward-weight curriculum (Isaac Lab's ``mdp.modify_reward_weight``, with an optional ramp).

    The term keeps its ``rewards`` weight for the env's first ``num_steps`` policy steps (counted over all its
    episodes: Isaac Lab's ``common_step_counter``), then takes ``weight``: at once when ``ramp_steps`` is 0, as
    Isaac Lab does, else along a straight line reached ``ramp_steps`` steps later.

    Attributes:
        weight: The term's weight once the change is complete.
        num_steps: Policy steps of the env before the change starts (at 24 steps per env an iteration, iteration x 24).
        ramp_steps: Policy steps over which the weight moves from its ``rewards`` value to ``weight``.
    """

    weight: float = 0.0
    num_steps: int = 0
    ramp_steps: int = 0

    def weight_at(self, start: float, steps: int) -> float:
        """The weight after ``steps`` policy steps of a term whose ``rewards`` weight is ``start``."""
        past = steps - self.num_steps
        if past <= 0:
            return start
        if past >= self.ramp_steps:
            return self.weight
        return start + (self.weight - start) * past / self.ramp_steps


@dataclass(frozen=True)
class TerminationConfig:
    """When an episode terminates (the 20 s time-out is the registration's truncation).

    Attributes:
        base_contact: End when the trunk touches the ground with more than the contact threshold
            (``TerminationsCfg.base_contact`` on ``trunk``).
        bad_orientation: End when the trunk's tilt exceeds ``limit_angle`` (Isaac Lab's ``mdp.bad_orientation``,
            not in its velocity task).
        limit_angle: Tilt limit in rad: beyond 1 rad the legs, whose abduction stops at 0.8 rad, can no longer
            reach under the trunk to right it.
    """

    base_contact: bool = True
    bad_orientation: bool = True
    limit_angle: float = 1.0


@dataclass(frozen=True)
class A1Config:
    """Everything a :class:`~robosafe_tasks.a1.env.A1FlatEnv` can be given (``task.env_kwargs``)."""

    control: ControlConfig = field(default_factory=ControlConfig)
    commands: CommandConfig = field(default_factory=CommandConfig)
    events: EventConfig = field(default_factory=EventConfig)
    rewards: RewardConfig = field(default_factory=RewardConfig)
    terminations: TerminationConfig = field(default_factory=TerminationConfig)
    obs_noise: bool = True
    """Add Isaac Lab's uniform observation noise (``enable_corruption``; off to evaluate)."""
    curriculum: Mapping[str, WeightChange] = field(default_factory=dict)
    """Reward term name -> :class:`WeightChange` (Isaac Lab's ``CurriculumCfg`` of ``modify_reward_weight`` terms).
    The clock is the env's ``common_step_counter``: 0 when it is made, which a resumed run, a restarted env worker
    and ``tools/evaluate.py`` / ``play.py`` set to where the run's envs were (Isaac Lab's resume starts it at 0
    again)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.curriculum) - set(TERM_NAMES))
        if unknown:
            raise ValueError(f"env_kwargs.curriculum: unknown reward terms {unknown}; valid terms: {list(TERM_NAMES)}")

    def weights_at(self, steps: int) -> dict[str, float]:
        """Term name -> weight after ``steps`` policy steps of the env (the ``rewards`` weights moved by the
        curriculum)."""
        weights = self.rewards.weights()
        for name, change in self.curriculum.items():
            weights[name] = change.weight_at(weights[name], steps)
        return weights

    def curriculum_end(self) -> int:
        """The step count from which no weight changes any more (0 without a curriculum)."""
        return max((c.num_steps + c.ramp_steps for c in self.curriculum.values()), default=0)


@dataclass(frozen=True)
class StairsConfig:
    """Pyramid stairs, up and down (Isaac Lab's ``MeshPyramidStairsTerrainCfg`` and its inverted twin in
    ``ROUGH_TERRAINS_CFG``): rings of ``step_width`` inside a flat border, each ``step_height`` above (below) the
    one outside it, around a square platform one step above (below) the innermost ring.

    Attributes:
        proportion: Share of the tiles that climb (0.2).
        inverted_proportion: Share that descend (0.2).
        step_height: Step height in m at difficulty 0 and 1 (0.05, 0.23).
        step_width: Ring width in m (0.3).
        platform_width: Side of the middle platform in m (3.0).
        border_width: Flat border at height 0 in m (1.0).
    """

    proportion: float = 0.2
    inverted_proportion: float = 0.2
    step_height: tuple[float, float] = (0.05, 0.23)
    step_width: float = 0.3
    platform_width: float = 3.0
    border_width: float = 1.0

    def __post_init__(self) -> None:
        _at_least("stairs.step_height", self.step_height[0], 0.0)
        _above("stairs.step_width", self.step_width, 0.0)
        _at_least("stairs.platform_width", self.platform_width, 0.0)
        _at_least("stairs.border_width", self.border_width, 0.0)


@dataclass(frozen=True)
class BoxesConfig:
    """A grid of boxes of random heights (``MeshRandomGridTerrainCfg``, the A1's ``grid_height_range``): each cell
    ``grid_width`` wide, its top drawn uniformly in [-h, h] with h between ``grid_height`` by difficulty, around a
    platform at height h.

    Attributes:
        proportion: Share of the tiles (0.2).
        grid_width: Cell side in m (0.45).
        grid_height: h at difficulty 0 and 1 in m (the A1's (0.025, 0.1)).
        platform_width: Side of the middle platform in m (2.0).
    """

    proportion: float = 0.2
    grid_width: float = 0.45
    grid_height: tuple[float, float] = (0.025, 0.1)
    platform_width: float = 2.0

    def __post_init__(self) -> None:
        _above("boxes.grid_width", self.grid_width, 0.0)
        _at_least("boxes.grid_height", self.grid_height[0], 0.0)
        _at_least("boxes.platform_width", self.platform_width, 0.0)


@dataclass(frozen=True)
class RoughConfig:
    """Uniform random heights (``HfRandomUniformTerrainCfg``, the A1's ``noise_range`` and ``noise_step``): each
    sample a multiple of ``noise_step`` drawn from ``noise``, whatever the difficulty.

    Attributes:
        proportion: Share of the tiles (0.2).
        noise: Lowest and highest height in m (the A1's (0.01, 0.06)).
        noise_step: Height quantum in m (the A1's 0.01).
        border_width: Flat border at height 0 in m (0.25).
    """

    proportion: float = 0.2
    noise: tuple[float, float] = (0.01, 0.06)
    noise_step: float = 0.01
    border_width: float = 0.25

    def __post_init__(self) -> None:
        _above("rough.noise_step", self.noise_step, 0.0)
        _at_least("rough.border_width", self.border_width, 0.0)


@dataclass(frozen=True)
class SlopeConfig:
    """Pyramid slopes, up and down (``HfPyramidSlopedTerrainCfg`` and ``HfInvertedPyramidSlopedTerrainCfg``):
    Isaac Lab's surface ``slope * half * (1 - |x| / half) * (1 - |y| / half)`` inside the border, cut flat at the
    height of the platform's corner.

    Attributes:
        proportion: Share of the tiles that rise to the middle (0.1).
        inverted_proportion: Share that sink to it (0.1).
        slope: Slope at difficulty 0 and 1 (0.0, 0.4).
        platform_width: Side of the flat middle in m (2.0).
        border_width: Flat border at height 0 in m (0.25).
    """

    proportion: float = 0.1
    inverted_proportion: float = 0.1
    slope: tuple[float, float] = (0.0, 0.4)
    platform_width: float = 2.0
    border_width: float = 0.25

    def __post_init__(self) -> None:
        _at_least("slope.slope", self.slope[0], 0.0)
        _at_least("slope.platform_width", self.platform_width, 0.0)
        _at_least("slope.border_width", self.border_width, 0.0)


@dataclass(frozen=True)
class TerrainConfig:
    """Isaac Lab's rough terrain (``ROUGH_TERRAINS_CFG`` with the A1's overrides) and its level curriculum
    (``mdp.terrain_levels_vel``).

    Isaac Lab lays out one mesh of ``num_rows`` difficulty levels by ``num_cols`` columns, each column one
    sub-terrain (by the proportions: 4 of the 20 are stairs) with its own random tiles, and spawns each env's robot
    on the tile of its level in its column (columns assigned by env index). Here each env is its own PyBullet world
    and holds one tile at a time, the tile of its level in its column (a height field of 81 x 81 samples adds 12 MiB
    to an env; the whole 10 x 20 grid as one height field of 800 x 1600 samples took 1.2 GB and 11 s to make in one
    client, measured), with flat ground at height 0 around it where Isaac Lab has the neighbouring tiles; an env
    draws its column at a seeded reset. The tiles are the same in every env of a configuration (``seed``), as Isaac
    Lab's envs share one terrain. Widths are taken in whole samples of ``horizontal_scale`` and heights on the grid
    of ``vertical_scale``, as Isaac Lab's height-field sub-terrains take them (its stairs and boxes are meshes, not
    rounded).

    Attributes:
        tile_size: Side of a tile in m (8.0).
        horizontal_scale: Sample spacing of the height field in m (0.1).
        vertical_scale: Heights are multiples of this, in m (0.005).
        num_levels: Difficulty levels (``num_rows``: 10); level L has difficulty (L + u) / num_levels, u uniform.
        num_cols: Columns of tiles (``num_cols``: 20), shared among the sub-terrains by their proportions.
        max_init_level: Levels drawn at a seeded reset are 0 .. max_init_level (``max_init_terrain_level``: 5;
            ``num_levels - 1`` spreads an evaluation over every level, as Isaac Lab's play configurations do).
        curriculum: Move an env up a level when its robot ended an episode farther than half a tile from the
            tile's centre (Isaac Lab's env origin), down when nearer than half the distance its command asked for
            over ``episode_s`` (``terrain_levels_vel``); past the top level it goes to a random level. Off: an env
            keeps the level its seeded reset drew.
        episode_s: The episode's time limit in s that the curriculum scales the command by (Isaac Lab's
            ``max_episode_length_s``: the registration's 1000 steps of 20 ms). An env cannot see the time limit
            gymnasium wraps it in, so a run that changes ``task.max_episode_steps`` sets this to match.
        seed: Seed of the tiles' random heights (>= 0).
    """

    tile_size: float = 8.0
    horizontal_scale: float = 0.1
    vertical_scale: float = 0.005
    num_levels: int = 10
    num_cols: int = 20
    max_init_level: int = 5
    curriculum: bool = True
    episode_s: float = 20.0
    seed: int = 0
    stairs: StairsConfig = field(default_factory=StairsConfig)
    boxes: BoxesConfig = field(default_factory=BoxesConfig)
    rough: RoughConfig = field(default_factory=RoughConfig)
    slope: SlopeConfig = field(default_factory=SlopeConfig)

    def __post_init__(self) -> None:
        for name in ("tile_size", "horizontal_scale", "vertical_scale", "episode_s"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"env_kwargs.terrain.{name} must be > 0, got {getattr(self, name)}")
        samples = self.tile_size / self.horizontal_scale
        if round(samples) < 2 or abs(samples - round(samples)) > 1e-6 * samples:
            raise ValueError(
                f"env_kwargs.terrain.tile_size {self.tile_size} must be a multiple (>= 2) of horizontal_scale "
                f"{self.horizontal_scale}"
            )
        for name in ("num_levels", "num_cols"):
            if getattr(self, name) < 1:
                raise ValueError(f"env_kwargs.terrain.{name} must be >= 1, got {getattr(self, name)}")
        _at_least("seed", self.seed, 0)
        if not 0 <= self.max_init_level < self.num_levels:
            raise ValueError(
                f"env_kwargs.terrain.max_init_level must be in [0, num_levels - 1 = {self.num_levels - 1}], "
                f"got {self.max_init_level}"
            )
        shares = self.proportions()
        if any(share < 0.0 for share in shares.values()) or not sum(shares.values()) > 0.0:
            raise ValueError(
                f"env_kwargs.terrain: the sub-terrain proportions must be >= 0 and not all 0, got {shares}"
            )
        # The highest ground each sub-terrain can reach, so that a tile beyond the height field's range is refused
        # here rather than when the curriculum first reaches its level, hours into a run.
        st, sl = self.stairs, self.slope
        steps = (self.tile_size - 2 * st.border_width - st.platform_width) // (2 * st.step_width) + 2
        highest = {
            "stairs.step_height": steps * st.step_height[1],
            "slope.slope": sl.slope[1] * (self.tile_size - 2 * sl.border_width) / 2,
            "boxes.grid_height": self.boxes.grid_height[1],
            "rough.noise": max(abs(self.rough.noise[0]), abs(self.rough.noise[1])),
        }
        for key, height in highest.items():
            if height > HEIGHT_BOUND:
                raise ValueError(
                    f"env_kwargs.terrain.{key}: its hardest tile would reach {height:.2f} m, beyond the "
                    f"+-{HEIGHT_BOUND:g} m a tile may span"
                )

    def proportions(self) -> dict[str, float]:
        """Sub-terrain name -> its share of the tiles (not normalised), in :data:`SUB_TERRAINS` order."""
        s, b, r, sl = self.stairs, self.boxes, self.rough, self.slope
        return dict(zip(SUB_TERRAINS, (s.proportion, s.inverted_proportion, b.proportion, r.proportion,
                                       sl.proportion, sl.inverted_proportion), strict=True))  # fmt: skip


def _above(key: str, value: float, low: float) -> None:
    if not value > low:
        raise ValueError(f"env_kwargs.terrain.{key} must be > {low:g}, got {value}")


def _at_least(key: str, value: float, low: float) -> None:
    if not value >= low:
        raise ValueError(f"env_kwargs.terrain.{key} must be >= {low:g}, got {value}")


#: Every tile's heights lie within +-HEIGHT_BOUND m: PyBullet keeps the height range a height field was made with
#: (its placement and bounding box) when its data are replaced, so the rough task's height field is made with this
#: range once and every tile is written into it (measured: a replaced tile deeper than the first one's range sinks
#: by half the difference, and the bounding box no longer covers it).
HEIGHT_BOUND = 3.0

#: The sub-terrains of :class:`TerrainConfig`, in the order of ``ROUGH_TERRAINS_CFG``.
SUB_TERRAINS: tuple[str, ...] = (
    "pyramid_stairs", "pyramid_stairs_inv", "boxes", "random_rough", "pyramid_slope", "pyramid_slope_inv",
)  # fmt: skip


@dataclass(frozen=True)
class A1RoughConfig(A1Config):
    """Everything a :class:`~robosafe_tasks.a1.rough.A1RoughEnv` can be given: the flat task's sections with the
    rough task's reward weights (Isaac Lab's ``LocomotionVelocityRoughEnvCfg``: no flat-orientation penalty, feet
    air time 0.01, the A1's ``rough_env_cfg.py``), and the terrain."""

    rewards: RewardConfig = field(default_factory=lambda: RewardConfig(feet_air_time=0.01, flat_orientation_l2=0.0))
    terrain: TerrainConfig = field(default_factory=TerrainConfig)


def build(cls: type, values: Mapping[str, Any] | None, where: str, base: Any = None) -> Any:
    """Build the dataclass ``cls`` from a (nested) mapping, checking every key and value type.

    Args:
        cls: A dataclass of this module.
        values: The keys to set (``None``: all defaults); nested dataclasses take mappings.
        where: Dotted name of ``values`` for messages (``"env_kwargs.rewards"``).
        base: The instance whose values the unset keys keep (default: ``cls()``); a nested section starts from its
            parent's default (``events.friction`` keeps its range when only ``enabled`` is given).

    Returns:
        The instance.

    Raises:
        ValueError: On an unknown key, a value of the wrong kind, or a range whose low exceeds its high.
    """
    defaults = base if base is not None else cls()
    if values is None:
        return defaults
    if isinstance(values, cls):
        return values
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} must be a mapping of {cls.__name__} fields, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; valid keys: {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        default = getattr(defaults, name)
        key = f"{where}.{name}"
        if dataclasses.is_dataclass(default):
            kwargs[name] = build(type(default), value, key, default)
        elif isinstance(default, Mapping):
            # The curriculum: names chosen by the user, each a WeightChange (the names are checked by A1Config).
            if not isinstance(value, Mapping):
                raise ValueError(f"{key} must be a mapping of reward term -> {{weight, num_steps, ramp_steps}}, "
                                 f"got {value!r}")  # fmt: skip
            kwargs[name] = {str(k): _weight_change(v, f"{key}.{k}") for k, v in value.items()}
        elif isinstance(default, tuple):
            # Any sequence: a list, a tuple, or an OmegaConf ListConfig from a task YAML read as it is.
            pair = tuple(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else None
            if pair is None or len(pair) != 2 or not all(_is_real(v) for v in pair) or not pair[0] <= pair[1]:
                raise ValueError(f"{key} must be a range [low, high] of numbers with low <= high, got {value!r}")
            kwargs[name] = (float(pair[0]), float(pair[1]))
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false, got {value!r}")
            kwargs[name] = value
        elif isinstance(default, (int, float)):
            if not _is_real(value) or (isinstance(default, int) and not float(value).is_integer()):
                raise ValueError(f"{key} must be a finite {type(default).__name__}, got {value!r}")
            kwargs[name] = type(default)(value)
    return dataclasses.replace(defaults, **kwargs)


def _weight_change(value: Any, where: str) -> WeightChange:
    change = build(WeightChange, value, where)
    for name in ("num_steps", "ramp_steps"):
        if getattr(change, name) < 0:
            raise ValueError(f"{where}.{name} must be >= 0, got {getattr(change, name)}")
    return change


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

"""Real incidents and real policy checkpoints for the diagnose tests: the PyBullet Ant driven through SafeStep.

Nothing here mocks the engine: bad actions go through ``SafeStep(gymnasium.make("RoboSafe/Ant-v0"))`` and the
records are what the recorder writes; the faults that are not actions (a thrown base, a dead physics client) are
injected where a real one would arise, on the task's own world, between SafeStep and the task.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.utils import resolve_class
from tensordict import TensorDict

from robo_safe_rl.bridge.incidents import IncidentRecorder
from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.config.safe_step import SafeStepConfig
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.rsl_cfg import MODEL

ANT = "RoboSafe/Ant-v0"
OBS_DIM, ACT_DIM = 28, 8
HIDDEN = [16, 16]
#: The parts of rsl-rl's train dict that make an Ant actor ([16, 16], elu, Gaussian with a scalar std), as training
#: saves them beside its checkpoints.
TRAIN_CFG = {
    "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
    "actor": {
        "class_name": MODEL,
        "obs_clip": None,
        "hidden_dims": HIDDEN,
        "activation": "elu",
        "obs_normalization": False,
        "distribution_cfg": {"class_name": "rsl_rl.modules.distribution:GaussianDistribution", "init_std": 1.0},
    },
}
ANT_JOINTS = ["hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3", "hip_4", "ankle_4"]


class _BeforeStep(gym.Wrapper):
    """Calls ``hook(step, task)`` before each step reaches the task (inside SafeStep, as a fault drill would)."""

    def __init__(self, env: gym.Env, hook: Callable[[int, object], None]) -> None:
        super().__init__(env)
        self.hook = hook
        self.steps = 0

    def step(self, action: np.ndarray):  # type: ignore[override]
        self.hook(self.steps, self.env.unwrapped)
        self.steps += 1
        return self.env.step(action)


def drive_ant(
    run_dir: Path,
    steps: int,
    *,
    bad: dict[int, tuple[int, float]] | None = None,
    policy: Callable[[np.ndarray], np.ndarray] | None = None,
    inside: Callable[[int, object], None] | None = None,
    outside: Callable[[int, object], None] | None = None,
    cfg: SafeStepConfig | None = None,
    iteration: Callable[[int], int] = lambda t: t // 10,
) -> IncidentRecorder:
    """Step the Ant ``steps`` times under SafeStep with incidents recorded into ``run_dir/incidents``.

    Args:
        run_dir: The run directory.
        steps: Env steps (0-based numbering below).
        bad: ``{step: (component, value)}``: at that step one component of the action is replaced by ``value``.
        policy: Actions from the observation; default: a fixed random walk in [-0.5, 0.5] (seed 0).
        inside: ``hook(step, task)`` called between SafeStep and the task, before the task steps.
        outside: ``hook(step, task)`` called before SafeStep's step (the state SafeStep snapshots includes it).
        cfg: SafeStep's settings.
        iteration: Training iteration written into the records, from the step.

    Returns:
        The recorder (``written`` counts the records).
    """
    recorder = IncidentRecorder(run_dir / "incidents")
    task = gym.make(ANT)
    env = SafeStep(_BeforeStep(task, inside) if inside else task, cfg, recorder=recorder)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for t in range(steps):
        recorder.set_context(iteration=iteration(t), global_step=t)
        action = policy(obs) if policy is not None else rng.uniform(-0.5, 0.5, ACT_DIM).astype(np.float32)
        if bad and t in bad:
            component, value = bad[t]
            action = action.copy()
            action[component] = value
        if outside is not None:
            outside(t, env.unwrapped)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return recorder


def make_actor(*, nan_layer: str | None = None, zero_output: bool = False, obs_dim: int = OBS_DIM) -> torch.nn.Module:
    """An Ant actor as rsl-rl builds it from :data:`TRAIN_CFG` (``PPO.construct_algorithm``'s call).

    Args:
        nan_layer: Name of a parameter (``mlp.0.weight``) whose element [0, 0] (or [0]) is set to NaN.
        zero_output: Zero the last layer, so that every action is exactly 0 (a policy known to be in bounds).
        obs_dim: Observation size (28 for the Ant; another one makes a checkpoint of some other task).
    """
    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.zeros(1, obs_dim)}, batch_size=[1])
    actor_class, kwargs = resolve_class(TRAIN_CFG["actor"])
    actor = actor_class(obs, TRAIN_CFG["obs_groups"], "actor", ACT_DIM, **kwargs)
    params = dict(actor.named_parameters())
    with torch.no_grad():
        if zero_output:
            params["mlp.4.weight"].zero_()
            params["mlp.4.bias"].zero_()
        if nan_layer is not None:
            params[nan_layer].view(-1)[0] = float("nan")
    return actor


def save_policy(actor: torch.nn.Module, path: Path, iteration: int, *, obs_dim: int = OBS_DIM) -> Path:
    """``torch.save`` rsl-rl's checkpoint layout directly, without the finite-only check of training's saves, and
    the train dict beside it, as training saves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"actor_state_dict": actor.state_dict(), "iter": iteration, "infos": None}, path)
    RunDir(path.parent).write_train_cfg(TRAIN_CFG, {"policy": [obs_dim]}, ACT_DIM)
    return path


def act(actor: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
    """The actor's mean action for one observation. Shape: (ACT_DIM,)."""
    td = TensorDict({"policy": torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)}, batch_size=[1])
    with torch.inference_mode():
        return actor(td)[0].numpy()


def write_config(run_dir: Path, *, hidden: list[int] = HIDDEN) -> None:
    """The run's ``config.yaml``, with the keys the diagnosis reads."""
    dims = "\n".join(f"  - {h}" for h in hidden)
    text = f"task:\n  env_id: {ANT}\nactor:\n  hidden_dims:\n{dims}\n  activation: elu\n  obs_clip: null\n"
    (run_dir / "config.yaml").write_text(text)


def write_events(run_dir: Path, events: list[dict]) -> None:
    """The run's ``safety_events.jsonl``, as the runner appends it."""
    with (run_dir / "safety_events.jsonl").open("w") as f:
        for event in events:
            f.write(json.dumps({"time": 0.0, **event}) + "\n")

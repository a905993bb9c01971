"""Env-steps/s of the same task at each layer: raw simulator stepping, ``env.step``, and the vector adapter.

"Raw" is the task's ``raw_step(action)`` (apply the action and advance the simulator; no observation, no reward):
the physical limit on this machine. The other layers are judged as ratios against it, measured side by side.
Raw stepping is measured twice: one world stepped alone, and the adapter's N worlds stepped round-robin (what
the adapter does, minus everything else). N worlds in one process are slower per step than one (each step
touches another world's memory), so the adapter's fair reference is the round-robin figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.timing import interleaved_rates
from robo_safe_rl.bridge.vec_adapter import GymVecEnv


def bench_env_layers(env_id: str, steps: int = 2000, repeats: int = 5, num_envs: int = 16) -> dict[str, Any]:
    """Measure raw stepping, the env's ``step()`` and the adapter on ``env_id`` (one process, one core).

    Args:
        env_id: Registered gymnasium id whose unwrapped env has ``raw_step(action)``.
        steps: Env steps per measurement (the adapter does ``steps // num_envs`` vector steps).
        repeats: Interleaved rounds; medians are reported.
        num_envs: Envs in the adapter.

    Returns:
        ``rates`` (env-steps/s per layer), ``ratios`` against raw stepping of one world, and
        ``adapter_vs_round_robin`` (the adapter against raw stepping of its N worlds).
    """
    rng = np.random.default_rng(0)
    single = gym.make(env_id, disable_env_checker=True).unwrapped
    single.reset(seed=0)
    actions = rng.uniform(-1.0, 1.0, size=(steps, single.action_space.shape[0])).astype(np.float32)
    vec = GymVecEnv([gym.make(env_id, disable_env_checker=True) for _ in range(num_envs)], seed=0)
    vec_actions = torch.from_numpy(actions[: max(steps // num_envs, 1)]).unsqueeze(1).expand(-1, num_envs, -1)
    worlds = [gym.make(env_id, disable_env_checker=True).unwrapped for _ in range(num_envs)]
    for i, world in enumerate(worlds):
        world.reset(seed=100 + i)

    def raw() -> int:
        single.reset(seed=1)
        for a in actions:
            single.raw_step(a)
        return steps

    def raw_round_robin() -> int:
        for a in actions[: vec_actions.shape[0]]:
            for world in worlds:
                world.raw_step(a)
        return vec_actions.shape[0] * num_envs

    def env_step() -> int:
        single.reset(seed=1)
        for a in actions:
            _, _, terminated, truncated, _ = single.step(a)
            if terminated or truncated:
                single.reset()
        return steps

    def adapter() -> int:
        for a in vec_actions:
            vec.step(a)
        return vec_actions.shape[0] * num_envs

    try:
        rates = interleaved_rates(
            {"raw": raw, "env_step": env_step, "raw_round_robin": raw_round_robin, "adapter": adapter}, repeats
        )
    finally:
        single.close()
        vec.close()
        for world in worlds:
            world.close()
    return {
        "env_id": env_id,
        "steps": steps,
        "repeats": repeats,
        "num_envs": num_envs,
        "rates": rates,
        "ratios": {name: rate / rates["raw"] for name, rate in rates.items()},
        "adapter_vs_round_robin": rates["adapter"] / rates["raw_round_robin"],
    }


def bench_task_step(env_id: str, steps: int = 2000, repeats: int = 5) -> dict[str, Any]:
    """One task's ``step()`` against raw PyBullet stepping of the same robot with the same settings (one process).

    Raw stepping is the task's ``raw_step(action)``: torques for the action and one ``stepSimulation`` (the env's
    substeps), nothing else. For the A1, whose torques come from PD control at the physics rate, it is that control
    loop: per substep one joint-state query, the PD torques and one ``stepSimulation`` (4 per policy step); the
    observation, contacts, reward terms, commands and events are what ``step()`` adds. Both run the same actions from
    the same seeded reset and never reset in between (a fallen robot goes on being stepped), so they step the very
    same trajectory and the ratio is the cost of the observation, the reward and the checks alone. The second pair is
    what a training sees: ``step()`` with a reset at each episode end (a termination, or the registered time limit
    that a training's ``TimeLimit`` wrapper would end it at), against raw stepping reset at the very same steps (found
    by an untimed round of ``step()`` first; resets timed in both) into the very same states: every reset is seeded,
    the k-th with seed 1 + k. (The A1's ``step()`` draws from the env's generator, for commands, noise and pushes,
    where raw stepping does not: unseeded resets would start the two cases' episodes from different states, and the
    rough A1's on other tiles.) A fallen robot costs the engine more than a standing one (its contacts), so only a raw
    baseline that resets where ``step()`` does compares with it.

    Args:
        env_id: Registered gymnasium id whose unwrapped env has ``raw_step(action)``.
        steps: Env steps per measurement.
        repeats: Interleaved rounds; medians are reported.

    Returns:
        ``rates`` (env-steps/s: ``raw``, ``env_step``, ``raw_resets``, ``env_step_resets``), ``ratio`` (env_step /
        raw), ``ratio_resets`` (env_step_resets / raw_resets) and ``episode_ends`` (the indices of the actions after
        which both reset cases reset).

    Raises:
        RuntimeError: If a timed round of ``step()`` ended its episodes at other steps than the untimed one (the raw
            baseline would then reset elsewhere).
    """
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(steps, env.action_space.shape[0])).astype(np.float32)
    limit = gym.spec(env_id).max_episode_steps or steps + 1

    def raw() -> int:
        env.reset(seed=1)
        for a in actions:
            env.raw_step(a)
        return steps

    def env_step() -> int:
        env.reset(seed=1)
        for a in actions:
            env.step(a)
        return steps

    rounds: list[list[int]] = []  # where each round of env_step_resets reset

    def env_step_resets() -> int:
        env.reset(seed=1)
        at, length = [], 0
        for i, a in enumerate(actions):
            length += 1
            if env.step(a)[2] or length == limit:
                at.append(i)
                env.reset(seed=1 + len(at))
                length = 0
        rounds.append(at)
        return steps

    ends: dict[int, int] = {}  # the index of each action after which env_step_resets resets -> the reset's number

    def raw_resets() -> int:
        env.reset(seed=1)
        for i, a in enumerate(actions):
            env.raw_step(a)
            if i in ends:
                env.reset(seed=1 + ends[i])
        return steps

    cases = {"raw": raw, "env_step": env_step, "raw_resets": raw_resets, "env_step_resets": env_step_resets}
    try:
        env_step_resets()  # untimed: every reset being seeded, every round resets where this one does
        ends.update((i, k) for k, i in enumerate(rounds[0], 1))
        rates = interleaved_rates(cases, repeats)
    finally:
        env.close()
    for k, at in enumerate(rounds[1:], 1):
        if at != rounds[0]:
            raise RuntimeError(f"{env_id}: step() round {k} ended its episodes after steps {at}, not {rounds[0]}")
    return {
        "env_id": env_id,
        "steps": steps,
        "repeats": repeats,
        "rates": rates,
        "ratio": rates["env_step"] / rates["raw"],
        "ratio_resets": rates["env_step_resets"] / rates["raw_resets"],
        "episode_ends": rounds[0],
    }


def bench_a1_terms(steps: int = 2000, repeats: int = 5, calls: int = 20_000) -> dict[str, Any]:
    """What the A1's reward terms cost, against its whole ``step()``.

    Two measurements: ``step()`` with every term at its default weight against ``step()`` with every weight 0 (a
    term of weight 0 is never computed), the same actions from the same reset, a reset at each episode end (the
    rewards do not change the trajectory), interleaved: the terms' cost together,
    in the step's own context (caches, allocations); and each term function alone, timed over ``calls`` calls (best of
    ``repeats``) on a state of the step's shapes and typical magnitudes (12 joints, 4 feet, a command above the
    air-time term's 0.1 m/s, a foot touching down: every branch runs), as a share of the default ``step()``.

    Returns:
        ``rates`` (env-steps/s: ``all_terms``, ``no_terms``), ``step_us`` (the default step), ``terms_us`` (the
        difference per step) and ``per_term_us`` (term name -> microseconds per call).
    """
    import timeit

    from robosafe_tasks.a1 import A1FlatEnv, rewards
    from robosafe_tasks.a1.config import TERM_NAMES, RewardConfig

    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(steps, 12)).astype(np.float32)
    default, silent = A1FlatEnv(), A1FlatEnv(rewards=dict.fromkeys(TERM_NAMES, 0.0))
    if silent.reward_terms:
        raise RuntimeError(f"weights of 0 left terms computed: {silent.reward_terms}")

    def stepping(env: A1FlatEnv) -> Callable[[], int]:
        def run() -> int:  # with a reset at each episode end, as a training steps (random actions topple the A1)
            env.reset(seed=1)
            for a in actions:
                if env.step(a)[2]:
                    env.reset()
            return steps

        return run

    try:
        rates = interleaved_rates({"all_terms": stepping(default), "no_terms": stepping(silent)}, repeats)
    finally:
        default.close()
        silent.close()
    cfg = RewardConfig()
    # The types the step passes: tuples and lists for the 3- and 4-vectors, arrays for the joints.
    state = rewards.StepState(
        lin_vel_b=(0.4, -0.1, 0.05), ang_vel_b=(0.1, -0.2, 0.3), gravity_b=(0.05, 0.02, -0.99),
        command=[0.5, 0.2, -0.3], joint_pos=np.full(12, 0.1), torques=np.full(12, 3.0), joint_acc=np.full(12, 500.0),
        action=np.full(12, 0.2), last_action=np.full(12, 0.1), first_contact=[True, False, False, True],
        last_air_time=[0.3, 0.2, 0.4, 0.1], thigh_forces=(0.0, 0.0, 0.0, 0.0), soft_low=np.full(12, -1.0),
        soft_high=np.full(12, 1.0),
    )  # fmt: skip
    per_term = {}
    for name in TERM_NAMES:
        function = rewards.TERMS[name]
        best = min(timeit.repeat(lambda f=function: f(state, cfg), number=calls, repeat=repeats))
        per_term[name] = best / calls * 1e6
    step_us = 1e6 / rates["all_terms"]
    return {
        "steps": steps,
        "repeats": repeats,
        "rates": rates,
        "step_us": step_us,
        "terms_us": step_us - 1e6 / rates["no_terms"],
        "per_term_us": per_term,
    }

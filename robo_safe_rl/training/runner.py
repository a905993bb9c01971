"""``SafeRunner``: rsl-rl's ``OnPolicyRunner`` with recovery, safe checkpoints, CPU multi-process and metrics.

The PPO maths stays rsl-rl's (``alg.act``, ``alg.process_env_step``, ``alg.compute_returns``, ``alg.update``); the
iteration loop is rsl-rl 5.5's ``learn`` with four additions, marked in :meth:`SafeRunner.learn`:

1. **Action fuse.** Actions leaving the policy are checked before the envs see them. Non-finite rows are never
   sent (zeros go instead, so every env stays in step); the rollout is discarded and the learning state rolled back.
2. **Post-update check.** After every update, weights, normaliser buffers and optimizer state are checked with one
   host-device synchronisation; a non-finite value means a rollback, as does an update that stopped at the mini-batch
   where they turned non-finite (SafePPO's :class:`~robo_safe_rl.errors.NonFiniteStateError`).
3. **Snapshots and rollbacks** (:mod:`robo_safe_rl.training.recovery`): a snapshot every
   ``safety.recovery.snapshot_interval`` good iterations and at every good save; a rollback restores it with a
   lower learning rate, and repeats the iteration.
4. **Safe checkpoints**: a checkpoint with a non-finite tensor is refused and counted; a good one is written
   atomically (temp file, fsync, rename), so a kill at any moment leaves the previous checkpoint loadable.

Under ``torchrun``, CUDA ranks use NCCL on ``cuda:LOCAL_RANK`` as in rsl-rl and CPU ranks use gloo; the fuse and the
post-update check are agreed by all ranks (one all-reduce per iteration), so the replicas roll back together.

Checkpoints and safety events (rollbacks, fuse trips, refused checkpoints, gradient-guard events) go where the
runner's ``files`` say (:class:`RunFiles`; the run directory's layout is not the core's business); counters go to
TensorBoard under ``Safety/``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner

from robo_safe_rl.config.recovery import PolicyFaultConfig, RecoveryConfig
from robo_safe_rl.errors import CheckpointError, NonFiniteError, NonFiniteStateError, RecoveryError
from robo_safe_rl.training.display import Display
from robo_safe_rl.training.logger import SafeLogger
from robo_safe_rl.training.policy_faults import PolicyFaults
from robo_safe_rl.training.recovery import Recovery, nonfinite_layers, save_checkpoint_if_finite
from robo_safe_rl.training.reward_scale import ReturnScaler

log = logging.getLogger(__name__)

#: The checkpoint entry of ``runner.normalize_rewards``' statistics (absent when it is off).
REWARD_SCALER_KEY = "reward_scaler_state_dict"


class RunFiles(Protocol):
    """Where a runner writes its checkpoints and safety events (``robo_safe_rl.rundir.RunDir`` is one)."""

    def checkpoint(self, iteration: int) -> Path:
        """The checkpoint file of ``iteration``."""
        ...

    def append_event(self, event: dict[str, Any]) -> None:
        """Record one safety event."""
        ...


class SafeRunner(OnPolicyRunner):
    """On-policy runner that rolls back instead of training on from a NaN, and only writes finite checkpoints.

    Args:
        env: Any rsl-rl ``VecEnv`` (the PyBullet adapter, or an Isaac Lab env). Optional methods used when present:
            ``safety_counters()``, ``faults_injected()`` (cumulative dicts) and ``set_iteration(it)``.
        train_cfg: rsl-rl's runner dict (built by :func:`robo_safe_rl.training.rsl_cfg.build_rsl_rl_cfg`).
        log_dir: Run directory; ``None`` disables logging and checkpoints (as in rsl-rl).
        device: Torch device of the policy (``cpu``, ``cuda`` or ``cuda:N``).
        recovery: ``safety.recovery``; defaults when ``None``.
        policy_faults: ``faults.policy`` (a fire drill); none when ``None``.
        files: Names the checkpoints and records the safety events; required with a ``log_dir``
            (``robo_safe_rl.rundir.RunDir(log_dir)``).
        display: Shows each iteration on the console (rank 0 with a ``log_dir`` only, as in rsl-rl); ``None``:
            rsl-rl's block, as ``OnPolicyRunner`` prints it (``robo_safe_rl.training.display.make_display``).
        on_iteration: Called after every good iteration (after its checkpoint) with the iteration and the actor,
            in training mode: what the app wants done with the current policy (``video.interval``'s clips). It must
            not change the actor.

    Raises:
        ValueError: If ``log_dir`` is given without ``files``.
    """

    def __init__(
        self,
        env: VecEnv,
        train_cfg: dict,
        log_dir: str | None = None,
        device: str = "cpu",
        recovery: RecoveryConfig | None = None,
        policy_faults: PolicyFaultConfig | None = None,
        files: RunFiles | None = None,
        display: Display | None = None,
        on_iteration: Callable[[int, torch.nn.Module], None] | None = None,
    ) -> None:
        if log_dir is not None and files is None:
            raise ValueError(f"SafeRunner(log_dir={log_dir!r}) needs files= to name its checkpoints and events")
        super().__init__(env, train_cfg, log_dir, device)
        self.files = files
        self.on_iteration = on_iteration
        #: ``runner.normalize_rewards``: what PPO's rewards are divided by (saved in checkpoints and snapshots);
        #: ``None`` when off.
        self.reward_scaler: ReturnScaler | None = None
        if self.cfg.get("normalize_rewards"):  # the returns of PPO's own discount
            self.reward_scaler = ReturnScaler(self.env.num_envs, float(self.alg.gamma), device=self.device)
        self.recovery_cfg = recovery or RecoveryConfig()
        self.recovery = Recovery(
            self.recovery_cfg.lr_factor, self.recovery_cfg.max_rollbacks, log_dir, statistics=self.reward_scaler
        )
        self.policy_faults = PolicyFaults(policy_faults or PolicyFaultConfig())
        self.counters: dict[str, int] = {
            "checkpoints_refused": 0,
            "policy_fuse_trips": 0,
            "nonfinite_updates": 0,
            "rollout_steps_discarded": 0,
        }
        self._env_totals: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.last_clean_checkpoint: str | None = None
        self.final_checkpoint: str | None = None
        #: The iteration of the newest checkpoint this runner wrote (-1: none yet).
        self.saved_iteration = -1
        #: The iteration the next ``learn`` starts at (after a resume: the loaded iteration + 1).
        self.next_iteration = 0
        self.logger = SafeLogger(
            display=display,
            log_dir=log_dir,
            cfg=self.cfg,
            env_cfg=self.env.cfg,
            num_envs=self.env.num_envs,
            is_distributed=self.is_distributed,
            gpu_world_size=self.gpu_world_size,
            gpu_global_rank=self.gpu_global_rank,
            device=self.device,
        )

    # ------------------------------------------------------------------ counters and records

    def safety_counters(self) -> dict[str, int]:
        """Cumulative safety counters: gradient guard, env side (all ranks), recovery and checkpoints."""
        counters: dict[str, int] = dict(getattr(self.alg, "safety_counters", {}))
        counters.update(self._env_side()[0])
        counters.update(self.counters)
        counters["rollbacks"] = self.recovery.rollbacks
        return counters

    def faults_injected(self) -> dict[str, int]:
        """Cumulative counts of injected faults per kind, all ranks (empty when no drill runs)."""
        injected = dict(getattr(self.alg, "faults_injected", {}))
        injected.update(self._env_side()[1])
        return {k: v for k, v in injected.items() if v}

    def _env_side(self) -> tuple[dict[str, int], dict[str, int]]:
        """The env side's counters and the env and policy faults injected: read live in one process, else the
        all-rank sums of the last logged iteration."""
        if not self.is_distributed:
            self._refresh_env_totals()
        return self._env_totals

    def _refresh_env_totals(self) -> None:
        """Read the env side's counters and injected faults, summed over ranks (one all-reduce; every rank calls
        this at the same point of every iteration). The summary reads the last result, so that writing it after an
        error on one rank never waits on a collective."""
        counters = self._env_call("safety_counters", {})
        injected = {**self._env_call("faults_injected", {}), **self.policy_faults.injected}
        if self.is_distributed:
            # Same keys on every rank: SafeStep's fixed counter names, and the fault kinds the (shared) config arms.
            keys = [("c", k) for k in sorted(counters)] + [("f", k) for k in sorted(injected)]
            values = torch.tensor([float((counters if t == "c" else injected)[k]) for t, k in keys], device=self.device)
            torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.SUM)
            for (t, k), v in zip(keys, values.tolist(), strict=True):
                (counters if t == "c" else injected)[k] = int(v)
        self._env_totals = (counters, injected)

    def _env_call(self, name: str, default: Any, *args: Any) -> Any:
        method = getattr(self.env, name, None)
        return method(*args) if callable(method) else default

    def _record_event(self, event: dict[str, Any]) -> None:
        """Record one safety event through ``files`` (rank 0 with a log dir only)."""
        if self.files is None or self.logger.log_dir is None or self.logger.disable_logs:
            return
        self.files.append_event(event)

    def _agree(self, flag: bool) -> bool:
        """``flag`` OR-ed over all ranks (one all-reduce; a no-op in one process)."""
        if not self.is_distributed:
            return flag
        value = torch.tensor(float(flag), device=self.device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return bool(value.item())

    # ------------------------------------------------------------------ the loop

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Run ``num_learning_iterations`` good iterations (rolled-back attempts do not count)."""
        if init_at_random_ep_len:
            self.env.episode_length_buf = torch.randint_like(
                self.env.episode_length_buf, high=int(self.env.max_episode_length)
            )
        obs = self.env.get_observations().to(self.device)
        self.alg.train_mode()
        if self.is_distributed:
            self.alg.broadcast_parameters()
        self.logger.init_logging_writer()

        reward_clip = self.cfg.get("reward_clip")
        start_it = self.next_iteration
        total_it = start_it + num_learning_iterations
        if not nonfinite_layers(self.alg):  # else keep the snapshot an earlier learn() left
            self.recovery.take(self.alg, start_it - 1)
        it = start_it
        while it < total_it:
            self._env_call("set_iteration", None, it)
            self.policy_faults.before_rollout(self.alg, it)
            start = time.time()
            fuse_tripped = False
            with torch.inference_mode():
                for _ in range(self.cfg["num_steps_per_env"]):
                    try:
                        actions = self.alg.act(obs).to(self.env.device)
                    except (RuntimeError, ValueError):
                        # A NaN action std makes torch's sampler raise ("normal expects all elements of std >=
                        # 0.0"): the fuse's business when the policy is non-finite, a real bug otherwise.
                        if not nonfinite_layers(self.alg):
                            raise
                        fuse_tripped = True
                        break
                    # (1) Action fuse: one check per step on the env's device; bad rows are never sent.
                    finite_rows = torch.isfinite(actions).all(dim=-1)
                    if not bool(finite_rows.all()):
                        fuse_tripped = True
                        actions = torch.where(finite_rows.unsqueeze(-1), actions, torch.zeros_like(actions))
                    obs, rewards, dones, extras = self.env.step(actions)
                    if self.cfg.get("check_for_nan", True):
                        _check_env_outputs(obs, rewards, dones)
                    obs, rewards, dones = (obs.to(self.device), rewards.to(self.device), dones.to(self.device))
                    # The logger sees the env's rewards; PPO sees them clipped when a preset asks for it, and scaled
                    # with runner.normalize_rewards.
                    self.logger.process_env_step(rewards, dones, extras, None)
                    if reward_clip is not None:
                        rewards = rewards.clamp(-reward_clip, reward_clip)
                    if self.reward_scaler is not None:
                        rewards = self.reward_scaler(rewards, dones)
                    self.alg.process_env_step(obs, rewards, dones, extras)
                collect_time = time.time() - start
                start = time.time()
                fuse_tripped = self._agree(fuse_tripped)
                if not fuse_tripped:
                    self.alg.compute_returns(obs)
            if fuse_tripped:
                self.counters["policy_fuse_trips"] += 1
                self.alg.storage.clear()
                self._rollback(it, "the policy emitted non-finite actions (never sent to the envs)")
                continue

            # SafePPO names iteration and update indices (messages, dumps, gradient drills) after the runner's count.
            self.alg.current_iteration = it
            try:
                loss_dict, stopped = self.alg.update(), None
            except NonFiniteStateError as err:  # SafePPO stopped at the mini-batch where the weights turned non-finite
                loss_dict, stopped = {}, err
            guard_metrics = self._guard_metrics(it)
            if stopped is None:
                self.policy_faults.after_update(self.alg, it)
            # (2) Post-update check: weights, normaliser buffers and optimizer state, one sync.
            layers = nonfinite_layers(self.alg)
            if self._agree(stopped is not None or bool(layers)):
                self.counters["nonfinite_updates"] += 1
                what = stopped or "non-finite learning state after the update"
                self._rollback(it, f"{what} in {_names(layers)}", layers)
                continue
            learn_time = time.time() - start
            self.current_learning_iteration = it
            self._log_iteration(it, start_it, total_it, collect_time, learn_time, loss_dict, guard_metrics)
            # (3) Snapshots: every snapshot_interval good iterations and at every save iteration, on every rank (only
            # rank 0 writes the checkpoint), so that all replicas roll back to the same state.
            save_now = it % self.cfg["save_interval"] == 0
            if save_now or (it - start_it + 1) % self.recovery_cfg.snapshot_interval == 0:
                self.recovery.take(self.alg, it)
            if self.logger.writer is not None and save_now:
                self.save(str(self.files.checkpoint(it)))  # type: ignore[union-attr]  (a writer means files)
            if self.on_iteration is not None:
                self.on_iteration(it, self.alg.get_policy())
            it += 1
        self.next_iteration = total_it

        if self.logger.writer is not None:
            self.save(str(self.files.checkpoint(self.current_learning_iteration)))  # type: ignore[union-attr]
            self.logger.stop_logging_writer()

    def _guard_metrics(self, it: int) -> dict[str, float]:
        """The gradient guard's metrics of the update just made, recorded as an event when it caught something (also
        when the update is then rolled back: that is the update a diagnosis needs to see)."""
        iteration_metrics = getattr(self.alg, "iteration_metrics", None)
        metrics = iteration_metrics() if iteration_metrics is not None else {}
        if metrics.get("grad_nonfinite_steps") or metrics.get("grad_steps_zeroed"):
            self._record_event({"iteration": it, "kind": "grad_guard", **metrics})
        return metrics

    def _rollback(self, it: int, what: str, layers: list[str] | None = None) -> None:
        """Roll back (or stop when recovery is off or exhausted), recording the event.

        The discarded rollout leaves the logs too (its episodes and rewards belong to no update); its env steps are
        counted as ``rollout_steps_discarded``.
        """
        self.alg.transition.clear()
        self.counters["rollout_steps_discarded"] += self.cfg["num_steps_per_env"] * self.env.num_envs
        self.logger.discard_rollout()
        try:
            if not self.recovery_cfg.enabled:
                raise RecoveryError(f"training stopped at iteration {it}: {what} (safety.recovery.enabled=false)")
            event = self.recovery.rollback(self.alg, it, what)
        except RecoveryError:
            self._record_event({"iteration": it, "kind": "recovery_failed", "what": what, "layers": layers or []})
            raise
        self._record_event({**event, "layers": layers or []})

    def _log_iteration(
        self,
        it: int,
        start_it: int,
        total_it: int,
        collect_time: float,
        learn_time: float,
        loss_dict: dict,
        guard_metrics: dict[str, float],
    ) -> None:
        self._refresh_env_totals()
        counters = self.safety_counters()
        safety: dict[str, float] = {k: float(v) for k, v in counters.items()}
        # Counters are cumulative under their own name; this iteration's count of the same event gets a suffix.
        safety.update({f"{k}_in_iteration" if k in safety else k: v for k, v in guard_metrics.items()})
        # The divisor of runner.normalize_rewards (one host sync per iteration, where it is written): PPO's rewards are
        # the env's over it. Under torchrun, rank 0's (the one with the writer; each rank keeps its own statistics).
        train: dict[str, float] = {}
        if self.reward_scaler is not None and self.logger.writer is not None:
            train["reward_scale"] = self.reward_scaler.scale()
        # The clip range this iteration's update used, where algorithm.clip_param_final schedules it (SafePPO's (6)).
        if getattr(self.alg, "clip_param_final", None) is not None:
            train["clip_param"] = float(self.alg.clip_param)
        # The entropy bonus likewise, where algorithm.entropy_coef_final schedules it (SafePPO's (7)).
        if getattr(self.alg, "entropy_coef_final", None) is not None:
            train["entropy_coef"] = float(self.alg.entropy_coef)
        self.logger.log_iteration(
            it,
            safety,
            counters,
            train or None,
            start_it=start_it,
            total_it=total_it,
            collect_time=collect_time,
            learn_time=learn_time,
            loss_dict=loss_dict,
            learning_rate=self.alg.learning_rate,
            action_std=self.alg.get_policy().output_std,
            rnd_weight=None,
        )

    # ------------------------------------------------------------------ checkpoints

    def save_last_snapshot(self) -> str | None:
        """After a stop (a signal), keep what was learned since the last checkpoint: write the last good snapshot, at
        most ``safety.recovery.snapshot_interval`` iterations old, as the checkpoint of its iteration.

        Not the live state: a signal may land mid-update (weights half stepped) or mid-rollout (the observation
        normaliser already fed part of the next rollout); the snapshot is the state at the end of its iteration, so a
        resume from it continues as the run would have. Nothing is written when no iteration completed, when this
        runner already saved that iteration or a later one (a save iteration, the final save), or where the file
        exists (the checkpoint a resumed run started from). Rank 0 only (it has the writer).

        Returns:
            The checkpoint written, or ``None`` (nothing to write, or the snapshot refused as non-finite).
        """
        snapshot = self.recovery.snapshot
        if snapshot is None or snapshot.iteration < 0 or self.logger.writer is None or self.files is None:
            return None
        path = self.files.checkpoint(snapshot.iteration)
        if snapshot.iteration <= self.saved_iteration or path.exists():
            return None
        snapshot.restore(self.alg, lr_factor=1.0, statistics=self.reward_scaler)
        self.current_learning_iteration = snapshot.iteration
        self.save(str(path))
        return str(path) if self.final_checkpoint == str(path) else None

    def save(self, path: str, infos: dict | None = None) -> None:
        """Write rsl-rl's checkpoint format to ``path`` atomically, unless it holds a non-finite tensor."""
        saved = self.alg.save()
        if self.reward_scaler is not None:
            saved[REWARD_SCALER_KEY] = self.reward_scaler.state_dict()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        try:
            bad = save_checkpoint_if_finite(saved, path)
        except (OSError, RuntimeError) as err:
            # torch.save reports a failed write (a full disk) as RuntimeError "unexpected pos ..." raised while
            # handling the OSError that says why; name the file and that cause.
            cause = _os_error_in(err)
            if cause is None:
                raise
            raise CheckpointError(f"could not write checkpoint {path}: {cause.strerror or cause}") from err
        if not bad:
            self.last_clean_checkpoint = path
            self.final_checkpoint = path
            self.saved_iteration = max(self.saved_iteration, self.current_learning_iteration)
            self.logger.save_model(path, self.current_learning_iteration)
        else:
            self.counters["checkpoints_refused"] += 1
            it = self.current_learning_iteration
            self._record_event({"iteration": it, "kind": "checkpoint_refused", "path": path, "layers": bad})

    def load(
        self, path: str, load_cfg: dict | None = None, strict: bool = True, map_location: str | None = None
    ) -> dict:
        """Load a checkpoint with ``weights_only=True`` (never runs code from the file); the next ``learn``
        continues at the stored iteration + 1."""
        loaded = torch.load(path, weights_only=True, map_location=map_location or self.device)
        scaled = REWARD_SCALER_KEY in loaded
        if scaled != (self.reward_scaler is not None):
            # The critic predicts returns on the scale it was trained with: resuming across a switch would make every
            # value target wrong by the factor of the scaling.
            raise ValueError(
                f"{path} was trained with runner.normalize_rewards={str(scaled).lower()} (it "
                f"{'holds' if scaled else 'has no'} {REWARD_SCALER_KEY}), this run has "
                f"runner.normalize_rewards={str(not scaled).lower()}; expected the same setting"
            )
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = int(loaded["iter"])
            self.next_iteration = self.current_learning_iteration + 1
            if self.reward_scaler is not None:
                self.reward_scaler.load_state_dict(loaded[REWARD_SCALER_KEY])
        return loaded.get("infos")

    def _configure_multi_gpu(self) -> None:
        """Set up torch.distributed under torchrun: NCCL for CUDA ranks, gloo for CPU ranks."""
        multi_gpu_cfg = None
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from robo_safe_rl.training.distributed import init_distributed

            multi_gpu_cfg = init_distributed(self.device)
        self.cfg["multi_gpu"] = multi_gpu_cfg
        self.is_distributed = multi_gpu_cfg is not None
        if multi_gpu_cfg is None:
            self.gpu_world_size, self.gpu_local_rank, self.gpu_global_rank = 1, 0, 0
            return
        self.gpu_world_size = multi_gpu_cfg["world_size"]
        self.gpu_local_rank = multi_gpu_cfg["local_rank"]
        self.gpu_global_rank = multi_gpu_cfg["global_rank"]


def _check_env_outputs(obs: Any, rewards: torch.Tensor, dones: torch.Tensor) -> None:
    """rsl-rl's ``check_nan``, extended to Inf (rsl-rl checks NaN only)."""
    for key, tensor in obs.items():
        if not bool(torch.isfinite(tensor).all()):
            raise NonFiniteError(
                f"observation group '{key}' from the env holds NaN or Inf although SafeStep should have removed them; "
                "is the env wrapped (safety.step.enabled)?"
            )
    if not bool(torch.isfinite(rewards).all()):
        raise NonFiniteError("the rewards from the env hold NaN or Inf; is the env wrapped (safety.step.enabled)?")


def _os_error_in(err: BaseException) -> OSError | None:
    """The first ``OSError`` in ``err``'s chain of causes and contexts (itself included), or ``None``."""
    seen: BaseException | None = err
    for _ in range(16):  # a chain is short; a cycle must not loop forever
        if seen is None:
            return None
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _names(layers: list[str], shown: int = 4) -> str:
    more = f" and {len(layers) - shown} more" if len(layers) > shown else ""
    return ", ".join(layers[:shown]) + more if layers else "(no tensor named)"

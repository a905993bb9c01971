"""SafePPO: rsl-rl's PPO whose ``update()`` is owned, with the gradient guard and the gradient fire drill.

rsl-rl builds it from the algorithm dict (``class_name: robo_safe_rl.training.ppo:SafePPO``); the extra keys
``grad_guard`` (``safety.grad_guard``), ``grad_faults`` (``faults.grad``), ``dump_dir``, ``clip_param_final``,
``entropy_coef_final``, ``critic_learning_rate``, ``mirror_normalization`` and ``schedule_iterations`` reach
``__init__``. :meth:`SafePPO.update` is rsl-rl 5.5's ``PPO.update`` with ten additions, marked ``(n)`` in the code:

1. **Fire drill** (``faults.grad``): a NaN return in a copy of the mini-batch makes the loss NaN through the PPO maths
   below it; a gradient element is overwritten right after backward, where a bad op would have produced it.
2. **Gradient guard** (``safety.grad_guard``), after backward and before the all-reduce and the clip: the loss terms
   and the gradients are checked with one host-device sync (:class:`~robo_safe_rl.safety.grad_guard.GradGuard`). A
   non-finite value is an event: ``skip`` leaves the step out on every rank (and puts back the learning rate this
   mini-batch's KL chose), ``zero`` sets the bad elements to 0, ``raise`` stops with a diagnostic and a dump. Poisoned
   gradients never enter the all-reduce.
3. **Clip** as ``clip_grad_norm_`` in its two public halves, so that it reuses the guard's norms (bitwise the same).
4. **Loss terms** read in one sync and averaged over the applied mini-batches; with the guard on, a non-finite term is
   left out of its mean and a term never applied is dropped (a 0 or a NaN would mislead).
5. **Mid-update corruption**: weights or optimizer state turned non-finite during the update (guard off, or a path the
   guard does not see) show at a later mini-batch, as the sampler's "normal expects all elements of std >= 0.0" or
   as a guard event; a finite check of the learning state then stops the update with
   :class:`~robo_safe_rl.errors.NonFiniteStateError`, which ``SafeRunner`` answers with a rollback. The replicas of a
   multi-process run hold the same weights, so all ranks stop at the same mini-batch.
6. **Clip schedule** (``algorithm.clip_param_final``, keys ``clip_param_final`` and ``schedule_iterations``): before
   the mini-batches, ``clip_param`` is set to the iteration's value of a linear schedule (:func:`linear_schedule`);
   rsl-rl's clip is a constant. Without ``clip_param_final`` nothing changes.
7. **Entropy schedule** (``algorithm.entropy_coef_final``, keys ``entropy_coef_final`` and ``schedule_iterations``):
   likewise ``entropy_coef``, on the same timing. Without ``entropy_coef_final`` nothing changes.
8. **The critic's own rate** (``algorithm.critic_learning_rate``): the optimizer holds the actor's parameters in its
   first parameter group and the critic's in a second at that constant rate, and the schedule writes its rate into
   the first group only. Adam's step is per element, so two groups at one rate step exactly as rsl-rl's one group.
   Without ``critic_learning_rate`` the optimizer is rsl-rl's own, its one group holding both networks.
9. **The reported mirror loss** (``algorithm.symmetry_cfg`` augmenting without learning from the mirror loss): rsl-rl's
   symmetry extension computes the loss anyway, for its log (``Loss/symmetry``), with a second forward pass of the
   actor over the augmented mini-batch under autograd, then detaches it. Here it is the same value (bitwise on CPU),
   from the action means of the forward pass the update already made
   (:func:`~robo_safe_rl.training.symmetry.reported_mirror_loss`), for the distributions whose mean is their
   deterministic output; measured at 13% of the Ant's update on the 2-core EPYC. With the mirror loss learnt from, or
   another distribution, rsl-rl's ``compute_loss`` runs as it is.
10. **The mirrored normaliser statistics** (``algorithm.symmetry_cfg.mirror_normalization``): after the mini-batches
    the actor's and the critic's observation normalisers learn from the rollout followed by its mirror image (the
    symmetry extension's augmentation function), not from the rollout alone. rsl-rl's running mean and variance are
    then the mirror's own: a component the mirror negates has mean 0, two it swaps share mean and std, so normalising
    a mirrored observation gives the mirror of the normalised original, and the augmented mini-batches the networks
    learn from are mirror images in the space they see. Without the option the normalisers learn as in rsl-rl.

With mode ``off`` and no drill, the update is rsl-rl's: bitwise the same weights and losses.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import torch
import torch.nn as nn
from rsl_rl.algorithms import PPO
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.config.grad_guard import GradFaultCfg, GradGuardCfg, GuardMode
from robo_safe_rl.errors import ConfigError, NonFiniteError, NonFiniteStateError
from robo_safe_rl.fileio import atomic_open
from robo_safe_rl.safety.grad_guard import COUNTER_KEYS, GradGuard, Verdict, stack_scalars, sum_over_ranks
from robo_safe_rl.training.grad_drill import GradDrill
from robo_safe_rl.training.recovery import nonfinite_layers
from robo_safe_rl.training.symmetry import reported_mirror_loss, reports_from_forward

logger = logging.getLogger(__name__)

_LOG_FIRST = 10  # events logged one by one; after that every _LOG_EVERY-th, so a sick run does not flood the log
_LOG_EVERY = 100


def _plain(value: Any) -> Any:
    """Tensors (copied to CPU), numbers, strings and containers of them: what ``weights_only=True`` can load."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, TensorDict):
        return _plain(value.to_dict())
    if isinstance(value, dict):  # int keys kept: an optimizer state dict stays loadable as it is
        return {k if isinstance(k, (int, str)) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def linear_schedule(start: float, final: float, iteration: int, iterations: int) -> float:
    """The value at iteration ``iteration`` (0-based) of a linear schedule over ``iterations`` (the clip range, the
    entropy bonus).

    Stable-Baselines3 evaluates its schedules (``clip_range``, ``learning_rate``) on the progress after each rollout,
    so the update of iteration i already has (i + 1) / N of the way behind it: ``start + (final - start) * (i + 1) /
    N``, and ``final`` from the last iteration on. Example: rl-baselines3-zoo's ``lin_0.4`` clip over its 2M env steps,
    with rollouts of 8,192 env steps, is start 0.4 and final 0.2 over the 122 iterations of 1M env steps.
    """
    return start + (final - start) * min((iteration + 1) / iterations, 1.0)


class SafePPO(PPO):
    """PPO whose optimizer never applies a NaN/Inf loss or gradient (``safety.grad_guard``), with a gradient drill.

    With no non-finite value a guarded run is bitwise identical to plain PPO with the same seed: the guard only reads.

    For the runner: optionally set :attr:`current_iteration` before each ``update()`` (else it counts updates) and
    :attr:`dump_dir`; after ``update()`` log :meth:`iteration_metrics` under ``Safety/``; at the end put
    :attr:`safety_counters` and :attr:`faults_injected` into summary.json. Under multi-process training every rank
    calls ``update()`` (it holds collectives), and all counters are already summed over ranks.
    """

    def __init__(
        self,
        actor: torch.nn.Module,
        critic: torch.nn.Module,
        storage: RolloutStorage,
        *args: Any,
        grad_guard: GradGuardCfg | dict[str, Any] | None = None,
        grad_faults: GradFaultCfg | dict[str, Any] | None = None,
        dump_dir: str | os.PathLike[str] | None = None,
        clip_param_final: float | None = None,
        entropy_coef_final: float | None = None,
        schedule_iterations: int | None = None,
        critic_learning_rate: float | None = None,
        mirror_normalization: bool = False,
        **kwargs: Any,
    ) -> None:
        """Args:
        actor: Actor model, as rsl-rl passes it.
        critic: Critic model.
        storage: Rollout storage.
        *args: rsl-rl PPO's positional arguments.
        grad_guard: ``safety.grad_guard``; None means the defaults (mode ``skip``).
        grad_faults: ``faults.grad``; None means no fault.
        dump_dir: Where ``raise`` mode writes its dump (the run directory); None writes none.
        clip_param_final: ``algorithm.clip_param_final``: the clip at the last of ``schedule_iterations`` iterations
            (:func:`linear_schedule`); None keeps rsl-rl's constant ``clip_param``.
        entropy_coef_final: ``algorithm.entropy_coef_final``: the entropy bonus at the last of ``schedule_iterations``
            iterations; None keeps rsl-rl's constant ``entropy_coef``.
        schedule_iterations: The iterations the schedules span (``runner.max_iterations``); needed with
            ``clip_param_final`` or ``entropy_coef_final``.
        critic_learning_rate: ``algorithm.critic_learning_rate``: the critic's constant rate, in a parameter group
            of its own (8); None keeps rsl-rl's one group and one rate.
        mirror_normalization: ``algorithm.symmetry_cfg.mirror_normalization``: the normalisers also learn from the
            rollout's mirror image (10); needs ``symmetry_cfg``.
        **kwargs: rsl-rl PPO's keyword arguments (``device``, ``multi_gpu_cfg``, ``learning_rate``, ...).

        Raises:
            ConfigError: On a bad guard or fault config (naming the key), the guard combined with RND, a schedule
                without its iterations, or ``mirror_normalization`` without a symmetry extension.
        """
        for key, final in (("clip_param_final", clip_param_final), ("entropy_coef_final", entropy_coef_final)):
            if final is not None and (schedule_iterations is None or schedule_iterations < 1):
                raise ConfigError(
                    f"invalid config value algorithm.{key}={final}: the schedule needs its length, "
                    f"expected schedule_iterations >= 1 (runner.max_iterations), got {schedule_iterations!r}"
                )
        self.guard_cfg = GradGuardCfg.from_value(grad_guard)
        self.fault_cfg = GradFaultCfg.from_value(grad_faults)
        mode = self.guard_cfg.mode
        if kwargs.get("rnd_cfg") and mode is not GuardMode.off:
            raise ConfigError(
                f"safety.grad_guard.mode={mode.name} with algorithm.rnd_cfg set: the guard does not cover RND's own "
                "optimizer. Hint: set safety.grad_guard.mode=off or drop rnd_cfg"
            )
        super().__init__(actor, critic, storage, *args, **kwargs)
        if mirror_normalization and self.symmetry is None:
            raise ConfigError(
                "invalid config value algorithm.symmetry_cfg.mirror_normalization=true without a symmetry extension: "
                "expected symmetry_cfg with use_data_augmentation or use_mirror_loss (the mirror comes from its "
                "data_augmentation_func)"
            )
        #: (10) Whether the normalisers learn from each rollout's mirror image too.
        self.mirror_normalization = mirror_normalization
        #: (8) The critic's constant rate, or None: one rate (the schedule's) for both networks, as in rsl-rl.
        self.critic_learning_rate = critic_learning_rate
        if critic_learning_rate is not None:
            # The same optimizer class, built again with the networks in two groups (actor first, as rsl-rl chains
            # them, so a parameter keeps its index in the state dict).
            self.optimizer = type(self.optimizer)(
                [
                    {"params": list(self.actor.parameters())},
                    {"params": list(self.critic.parameters()), "lr": critic_learning_rate},
                ],
                lr=self.learning_rate,
            )
        #: (6) The clip schedule: ``clip_param`` as configured, the final value (None: constant) and the span.
        self.clip_param_start, self.clip_param_final = self.clip_param, clip_param_final
        #: (7) The entropy schedule, likewise.
        self.entropy_coef_start, self.entropy_coef_final = self.entropy_coef, entropy_coef_final
        self.schedule_iterations = schedule_iterations
        self.dump_dir = None if dump_dir is None else os.fspath(dump_dir)
        self.current_iteration = 0
        """Iteration number for fault schedules and messages; counts updates, or is set by the runner."""
        self.safety_counters: dict[str, int] = dict.fromkeys(COUNTER_KEYS, 0)
        """Cumulative event counts over all ranks (for summary.json)."""
        self.faults_injected: dict[str, int] = {}
        """Cumulative injected faults over all ranks, by kind (``grad_nonfinite``, ``loss_nonfinite``), only kinds
        that occurred (for summary.json)."""
        # One group per clip, in the order clip_grad_norm_ sees the parameters.
        groups = [
            [("actor." + n, p) for n, p in self._raw_actor.named_parameters()],
            [("critic." + n, p) for n, p in self._raw_critic.named_parameters()],
        ]
        self.guard: GradGuard | None = None
        if mode is not GuardMode.off:
            raising = mode is GuardMode["raise"]
            self.guard = GradGuard(
                groups,
                mode,
                world_size=self.gpu_world_size,
                keep_grads=raising,
                group_names=("actor", "critic"),
                max_norm=self.max_grad_norm,
            )
        self.drill = GradDrill(self.fault_cfg, dict(groups[0] + groups[1]), self.gpu_global_rank)
        self._metrics: dict[str, float] = {}
        self._mb = 0  # the mini-batch being processed, for schedules and messages
        self._events = 0

    def iteration_metrics(self) -> dict[str, float]:
        """Metrics of the last ``update()``, summed over ranks (tag names without ``Safety/``), no sync needed.

        Keys: ``grad_nonfinite_steps`` (mini-batches with a NaN/Inf loss term or gradient on any rank),
        ``grad_steps_skipped``, ``grad_steps_zeroed``, ``grad_nonfinite_elements``, ``loss_nonfinite``;
        ``grad_norm_preclip`` and ``grad_norm_preclip_max`` (mean and max over applied steps of this rank's
        actor+critic gradient norm before the all-reduce and the clip; absent when no step was applied), the same
        mean per clip group (``grad_norm_preclip_actor``, ``grad_norm_preclip_critic``) and the fraction of applied
        steps where each group's clip bound (``grad_clip_binds_actor``, ``grad_clip_binds_critic``; rsl-rl clips the
        two separately at ``max_grad_norm``); and during a drill ``faults_grad_nonfinite`` and
        ``faults_loss_nonfinite``. Empty with mode ``off`` and no drill.
        """
        return dict(self._metrics)

    def update(self) -> dict[str, float]:
        """rsl-rl 5.5's ``PPO.update`` with the additions (1)-(7) of the module docstring.

        Returns:
            rsl-rl's mean losses, over the applied mini-batches (exactly rsl-rl's without a non-finite event).

        Raises:
            NonFiniteError: In ``raise`` mode, at the first mini-batch with a non-finite loss term or gradient on any
                rank (the step is not applied).
            NonFiniteStateError: When the weights or optimizer state turned non-finite during the update; it stopped
                at that mini-batch and its rollout was dropped.
        """
        # (6) Clip schedule: this iteration's clip range.
        if self.clip_param_final is not None:
            self.clip_param = linear_schedule(
                self.clip_param_start, self.clip_param_final, self.current_iteration, self.schedule_iterations
            )
        # (7) Entropy schedule: this iteration's entropy bonus.
        if self.entropy_coef_final is not None:
            self.entropy_coef = linear_schedule(
                self.entropy_coef_start, self.entropy_coef_final, self.current_iteration, self.schedule_iterations
            )
        # (4) Sums and counts per loss term, of the applied mini-batches.
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        self.drill.injected = [0, 0]

        # Get mini-batch generator
        if self.actor.is_recurrent or self.critic.is_recurrent:
            generator = self.storage.recurrent_mini_batch_generator(self.num_mini_batches, self.num_learning_epochs)
        else:
            generator = self.storage.mini_batch_generator(self.num_mini_batches, self.num_learning_epochs)

        # Iterate over mini-batches
        for k, batch in enumerate(generator):
            self._mb = k
            original_batch_size = batch.observations.batch_size[0]
            lr_before = self.learning_rate
            # (1) Fire drill: a NaN return makes the loss NaN through the maths below.
            self.drill.begin(self._update_index())
            self.drill.poison_returns(batch)

            # Check if we should normalize advantages per mini-batch
            if self.normalize_advantage_per_mini_batch:
                with torch.no_grad():
                    batch.advantages = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)  # type: ignore

            # Perform symmetric augmentation if enabled
            if self.symmetry:
                self.symmetry.augment_batch(batch, original_batch_size)

            # Optionally use mixed precision for the forward pass and loss computation
            with torch.amp.autocast(  # type: ignore
                device_type=torch.device(self.device).type, enabled=self.use_mixed_precision, dtype=torch.bfloat16
            ):
                # Recompute actions log prob and entropy for current batch of transitions
                # Note: We need to do this because we updated the policy with new parameters
                try:
                    self.actor(
                        batch.observations,
                        masks=batch.masks,
                        hidden_state=batch.hidden_states[0],
                        stochastic_output=True,
                    )
                except (RuntimeError, ValueError) as err:
                    # (5) A NaN std makes the sampler raise ("normal expects all elements of std >= 0.0").
                    self._stop_if_state_nonfinite(err)
                    raise
                actions_log_prob = self.actor.get_output_log_prob(batch.actions)  # type: ignore
                values = self.critic(batch.observations, masks=batch.masks, hidden_state=batch.hidden_states[1])
                # Note: We only keep the following tensors for the original samples in case of symmetry augmentation
                distribution_params = tuple(p[:original_batch_size] for p in self.actor.output_distribution_params)
                entropy = self.actor.output_entropy[:original_batch_size]

                # Compute KL divergence and adapt the learning rate
                if self.desired_kl is not None and self.schedule == "adaptive":
                    with torch.inference_mode():
                        kl = self.actor.get_kl_divergence(batch.old_distribution_params, distribution_params)  # type: ignore
                        kl_mean = torch.mean(kl)

                        # Reduce the KL divergence across all GPUs
                        if self.is_multi_gpu:
                            torch.distributed.all_reduce(kl_mean, op=torch.distributed.ReduceOp.SUM)
                            kl_mean /= self.gpu_world_size

                        # Update the learning rate only on the main process
                        if self.gpu_global_rank == 0:
                            if kl_mean > self.desired_kl * 2.0:
                                self.learning_rate = max(1e-5, self.learning_rate / 1.5)
                            elif kl_mean < self.desired_kl / 2.0 and kl_mean > 0.0:
                                self.learning_rate = min(1e-2, self.learning_rate * 1.5)

                        # Update the learning rate for all GPUs
                        if self.is_multi_gpu:
                            lr_tensor = torch.tensor(self.learning_rate, device=self.device)
                            torch.distributed.broadcast(lr_tensor, src=0)
                            self.learning_rate = lr_tensor.item()

                        # Update the learning rate for all parameter groups
                        # (8) ... the actor's group: all parameters without critic_learning_rate.
                        self.optimizer.param_groups[0]["lr"] = self.learning_rate

                # Surrogate loss
                ratio = torch.exp(actions_log_prob - torch.squeeze(batch.old_actions_log_prob))  # type: ignore
                surrogate = -torch.squeeze(batch.advantages) * ratio  # type: ignore
                surrogate_clipped = -torch.squeeze(batch.advantages) * torch.clamp(  # type: ignore
                    ratio, 1.0 - self.clip_param, 1.0 + self.clip_param
                )
                surrogate_loss = torch.max(surrogate, surrogate_clipped).mean()

                # Value function loss
                if self.use_clipped_value_loss:
                    value_clipped = batch.values + (values - batch.values).clamp(-self.clip_param, self.clip_param)
                    value_losses = (values - batch.returns).pow(2)
                    value_losses_clipped = (value_clipped - batch.returns).pow(2)
                    value_loss = torch.max(value_losses, value_losses_clipped).mean()
                else:
                    value_loss = (batch.returns - values).pow(2).mean()

                loss = surrogate_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy.mean()

                # RND loss
                rnd_loss = self.rnd.compute_loss(batch.observations[:original_batch_size]) if self.rnd else None  # type: ignore

                # Symmetry loss
                if reports_from_forward(self.symmetry, self.actor):
                    # (9) Reported only: from the means of the forward pass above, not a second one with autograd.
                    symmetry_loss = reported_mirror_loss(self.symmetry, self.actor.output_mean, original_batch_size)
                elif self.symmetry:
                    symmetry_loss = self.symmetry.compute_loss(self.actor, batch, original_batch_size)
                    if self.symmetry.use_mirror_loss:
                        loss = loss + self.symmetry.mirror_loss_coeff * symmetry_loss

            # Compute the gradients for PPO
            self.optimizer.zero_grad()
            loss.backward()
            # Compute the gradients for RND
            if self.rnd:
                self.rnd.optimizer.zero_grad()
                rnd_loss.backward()

            # The loss terms, in the order of rsl-rl's loss dict.
            terms = {"value": value_loss, "surrogate": surrogate_loss, "entropy": entropy.mean()}
            if self.rnd:
                terms["rnd"] = rnd_loss
            if self.symmetry:
                terms["symmetry"] = symmetry_loss
            # (1) Fire drill: one gradient element turns non-finite, as if backward had produced it.
            self.drill.poison_grad()
            # (2) The gradient guard: the one place where a step is decided, before the all-reduce and the clip.
            verdict = self.guard.check(terms) if self.guard is not None else None
            if verdict is not None and verdict.nonfinite:
                self._guard_event(verdict, batch)  # raises in raise mode, or when the weights are what is non-finite
                if not verdict.step:
                    # The KL of this mini-batch moved the learning rate above: a skipped step leaves it as it was.
                    self.learning_rate = lr_before
                    self.optimizer.param_groups[0]["lr"] = lr_before  # (8) the scheduled group
                    continue

            # Collect gradients from all GPUs
            if self.is_multi_gpu:
                self.reduce_parameters()

            # Apply the gradients for PPO
            if verdict is None or self.is_multi_gpu:
                nn.utils.clip_grad_norm_(self.actor.parameters(), self.max_grad_norm)
                nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
            else:  # (3) clip_grad_norm_ is get_total_norm (the guard's norms) followed by this
                nn.utils.clip_grads_with_norm_(self.actor.parameters(), self.max_grad_norm, verdict.norms[0])
                nn.utils.clip_grads_with_norm_(self.critic.parameters(), self.max_grad_norm, verdict.norms[1])
            self.optimizer.step()
            # Apply the gradients for RND
            if self.rnd:
                self.rnd.optimizer.step()

            # Store the losses
            # (4) One sync for all terms (rsl-rl: one .item() each); with the guard on, the finite ones only.
            read = stack_scalars(terms.values(), self.device).tolist() if verdict is None else verdict.terms.values()
            for key, value in zip(terms, read, strict=True):
                if verdict is None or math.isfinite(value):
                    sums[key] = sums.get(key, 0.0) + value
                    counts[key] = counts.get(key, 0) + 1

        # Update the normalizers
        obs = self.storage.observations.flatten(0, 1)
        if self.mirror_normalization:  # (10) ... from the rollout and its mirror image
            obs, _ = self.symmetry.data_augmentation_func(env=self.symmetry.env, obs=obs, actions=None)
        self.actor.update_normalization(obs)  # type: ignore
        self.critic.update_normalization(obs)  # type: ignore
        if self.rnd:
            self.rnd.update_normalization(obs)  # type: ignore

        # Divide the losses by the number of updates
        # (4) ... that were applied, per term (rsl-rl: by epochs x mini-batches).
        loss_dict = {key: total / counts[key] for key, total in sums.items()}

        # Clear the storage
        self.storage.clear()

        self._end_update()
        self.current_iteration += 1
        return loss_dict

    # ---- events, accounting and raise mode ---------------------------------------------------------------------
    def _update_index(self) -> int:
        """The global mini-batch index of the drill schedules: ``iteration * epochs * mini_batches + k``."""
        return self.current_iteration * self.num_learning_epochs * self.num_mini_batches + self._mb

    def _guard_event(self, verdict: Verdict, batch: Any) -> None:
        """A mini-batch with a non-finite loss term or gradient on some rank: stop, raise or log (rate-limited)."""
        # (5) Weights made non-finite by something the guard does not see turn every later loss NaN: not a gradient
        # event, but the end of this update.
        self._stop_if_state_nonfinite()
        self._events += 1
        if self.guard_cfg.mode is GuardMode["raise"]:
            self._raise_nonfinite(verdict, batch)
        if self._events <= _LOG_FIRST or self._events % _LOG_EVERY == 0:
            if not verdict.step:
                action = "step skipped"
            elif verdict.event is not None and verdict.event.nonfinite_elements:
                action = "non-finite elements zeroed, step applied"
            else:
                action = "step applied"
            logger.warning("grad guard: %s; %s (event %d)", self._describe(verdict), action, self._events)

    def _stop_if_state_nonfinite(self, cause: BaseException | None = None) -> None:
        """Raise :class:`NonFiniteStateError` (rollout dropped) if the weights or optimizer state are not finite."""
        if not nonfinite_layers(self):
            return
        self._end_update()
        self.storage.clear()
        raise NonFiniteStateError(
            f"the update of iteration {self.current_iteration} stopped at mini-batch {self._mb} "
            f"(update {self._update_index()}), its rollout dropped: non-finite learning state"
        ) from cause

    def _end_update(self) -> None:
        """Per-update metrics and counters, summed over ranks (one small all-reduce when distributed)."""
        if self.guard is not None:
            metrics, injected = self.guard.end_iteration(self.drill.injected)
            self.safety_counters = dict(self.guard.totals)
        else:
            metrics, injected = {}, list(self.drill.injected)
            if self.gpu_world_size > 1:
                injected = [int(v) for v in sum_over_ranks(injected, self.device)]
        for key, count in zip(("grad_nonfinite", "loss_nonfinite"), injected, strict=True):
            if count:
                self.faults_injected[key] = self.faults_injected.get(key, 0) + count
            if self.fault_cfg.enabled:
                metrics[f"faults_{key}"] = count
        self._metrics = metrics

    def _describe(self, verdict: Verdict) -> str:
        event = verdict.event
        where = f"iteration {self.current_iteration}, mini-batch {self._mb} (update {self._update_index()})"
        if self.gpu_world_size > 1:
            where += f", rank {self.gpu_global_rank}"
        if event is None:
            what = "a non-finite loss or gradient on another rank"
        elif event.nonfinite_elements:
            what = f"{event.nonfinite_elements} non-finite gradient element(s), the first in {event.first_param},"
        else:
            what = "a non-finite loss"
        terms = ", ".join(f"{k} {v:.6g}" for k, v in verdict.terms.items())
        return f"{what} in {where}; loss terms: {terms}"

    def _raise_nonfinite(self, verdict: Verdict, batch: Any) -> None:
        self._end_update()  # every rank raises at this same mini-batch, so the collective in it is safe
        dump = self._write_dump(verdict, batch)
        raise NonFiniteError(
            f"grad guard (mode raise): {self._describe(verdict)}. "
            "The step was not applied: weights and optimizer state are those before this mini-batch. "
            + (f"Dump: {dump} (torch.load(path, weights_only=True)). " if dump else "No dump written. ")
            + "Hint: safety.grad_guard.mode=skip contains such mini-batches and keeps training."
        )

    def _write_dump(self, verdict: Verdict, batch: Any) -> str | None:
        event = verdict.event
        if not self.guard_cfg.dump_on_raise or self.dump_dir is None or event is None:
            return None
        suffix = f"_rank{self.gpu_global_rank}" if self.gpu_world_size > 1 else ""
        path = os.path.join(self.dump_dir, f"grad_guard_dump_it{self.current_iteration}_mb{self._mb}{suffix}.pt")
        payload = {
            "iteration": self.current_iteration,
            "mini_batch": self._mb,
            "update": self._update_index(),
            "rank": self.gpu_global_rank,
            "first_param": event.first_param,
            "nonfinite_elements": event.nonfinite_elements,
            "loss_terms": dict(verdict.terms),
            "batch": _plain(vars(batch)),
            "nonfinite_grads": _plain(event.grads or {}),
            "actor_state_dict": _plain(self._raw_actor.state_dict()),
            "critic_state_dict": _plain(self._raw_critic.state_dict()),
            "optimizer_state_dict": _plain(self.optimizer.state_dict()),
        }
        os.makedirs(self.dump_dir, exist_ok=True)
        with atomic_open(path) as f:
            torch.save(payload, f)
        return path

"""The training entry: Hydra config in, run directory with checkpoints, events and ``summary.json`` out.

``tools/train.py`` calls :func:`run` from its ``@hydra.main``; tests and scripts call :func:`main` with Hydra
override strings, which composes the same ``configs/train.yaml`` (package data, :mod:`robo_safe_rl.config.compose`)
through Hydra's compose API. Both end in :func:`train`.

Exit codes: 0 the run completed; 1 the run stopped before its end, with ``summary.json`` saying why: a safety error
(the guard in ``raise`` mode, a failed recovery, an env that keeps failing) or a file it could not write (a full
disk); 2 the configuration was invalid (values, task, memory for ``task.num_envs``, resume checkpoint, a run
directory that already holds a run or cannot be written are checked before the run directory is made; a setting only
the algorithm can check, such as ``faults.grad.param``, fails at its construction, before ``config.yaml`` is
written); 130 / 143 the run was stopped by SIGINT / SIGTERM (``summary.json`` written, status ``stopped``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from robo_safe_rl.apps.banner import banner, final_line
from robo_safe_rl.apps.interrupt import RunInterrupted, stop_on_signals
from robo_safe_rl.apps.preflight import check_resume_layout, check_run_dir
from robo_safe_rl.apps.resume import prepare_resume
from robo_safe_rl.apps.run_log import RunLog
from robo_safe_rl.apps.summary import build_summary, write_summary
from robo_safe_rl.apps.video import TrainingClips, clip_env_maker
from robo_safe_rl.config.compose import compose, config_groups
from robo_safe_rl.config.keys import check_node, check_overrides
from robo_safe_rl.config.schema import TrainConfig
from robo_safe_rl.errors import ConfigError, RoboSafeRLError
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.display import Display, make_display
from robo_safe_rl.training.env_builder import build_vec_env, check_task, task_env_factory
from robo_safe_rl.training.rsl_cfg import OBS_GROUPS, build_rsl_rl_cfg, check_logger
from robo_safe_rl.training.runner import SafeRunner

log = logging.getLogger(__name__)

#: The flag that lists the tasks instead of training.
LIST_TASKS = "--list-tasks"


def resolve_device(spec: str) -> str:
    """Turn ``auto`` into ``cuda`` or ``cpu``; under torchrun a CUDA rank gets ``cuda:LOCAL_RANK``.

    Raises:
        ConfigError: If CUDA is asked for but not available.
    """
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"invalid config value device={spec!r}: CUDA is not available here; use device=cpu")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        if spec == "cuda":
            return "cuda:0"
    return spec


def to_train_config(node: DictConfig) -> TrainConfig:
    """Convert a composed config to the typed schema, running every range check.

    Raises:
        ConfigError: Naming the key and the reason, for an unknown key, a wrong type or a value out of range.
    """
    # ``+key=...`` adds keys the schema does not have, and to_object would drop them without a word.
    check_node(OmegaConf.to_container(node, resolve=False))
    try:
        cfg = OmegaConf.to_object(node)
    except ConfigError:
        raise
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"invalid config at key '{key}': {_one_line(err)}") from err
    if not isinstance(cfg, TrainConfig):
        raise ConfigError(f"the config root must follow TrainConfig (train_schema), got {type(cfg).__name__}")
    return cfg


def resolve_resume(path: str) -> Path:
    """The checkpoint ``resume=`` names: the file itself, or a run directory's newest clean ``model_<iter>.pt``.

    Raises:
        ConfigError: If the path does not exist, or the directory holds no clean checkpoint.
    """
    return resolve_resume_start(path)[0]


def resolve_resume_start(path: str) -> tuple[Path, int]:
    """:func:`resolve_resume`'s checkpoint and the iteration a run resumed from it starts at (its ``iter`` + 1).

    Raises:
        ConfigError: As :func:`resolve_resume`.
    """
    from robo_safe_rl.checkpoint.report import Status, inspect_file, resolve_checkpoint

    try:
        checkpoint = resolve_checkpoint(path)
        report = inspect_file(checkpoint)
    except RoboSafeRLError as err:
        raise ConfigError(f"invalid config value resume={path!r}: {err}") from err
    if report.status is Status.CLEAN:
        iteration = check_resume_layout(path, checkpoint)
    else:
        bad = [row.name for row in report.nonfinite_rows]
        raise ConfigError(
            f"invalid config value resume={path!r}: {checkpoint} holds {len(bad)} non-finite tensor(s) "
            f"({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}); resume from a clean one (find it with "
            f"`python tools/inspect_checkpoint.py {checkpoint.parent}`)"
        )
    return checkpoint, iteration + 1


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (the env resets are seeded separately, per env)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # numpy's global seed is 32-bit; a rank offset may carry a valid seed past it
    torch.manual_seed(seed)


@dataclass(frozen=True)
class RunStart:
    """What the checks before a run settled: this process's rank, the device, the checkpoint a resume starts from,
    the run directory (made by rank 0), and the iteration the run starts at (0, or a resumed run's)."""

    rank: int
    device: str
    checkpoint: Path | None
    run_dir: RunDir
    start_iteration: int = 0


def start_run(cfg: TrainConfig) -> RunStart:
    """Check what only a run can check (device, task, resume checkpoint, a free run directory), then make the run
    directory.

    Raises:
        ConfigError: For any of them; nothing is made then.
    """
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(cfg.device)
    check_task(cfg)
    checkpoint, start_iteration = resolve_resume_start(cfg.resume) if cfg.resume is not None else (None, 0)
    run_dir = RunDir(cfg.run_dir)
    run_dir.check_unused(cfg.resume)
    if rank == 0:
        check_run_dir(run_dir.root)
    return RunStart(rank, device, checkpoint, run_dir, start_iteration)


def train(
    cfg: TrainConfig,
    resolved: dict[str, Any] | None = None,
    start: RunStart | None = None,
    display: Display | None = None,
) -> dict[str, Any]:
    """Train PPO as configured and return the run summary (also written to ``run_dir/summary.json``).

    Args:
        cfg: The validated configuration.
        resolved: The resolved config as plain data, written to ``run_dir/config.yaml``.
        start: What :func:`start_run` settled; it is called when ``None``.
        display: Shows the iterations (closed at the end); ``None``: ``cfg.display`` on stdout.

    Raises:
        RoboSafeRLError: When the run is stopped by a safety error; ``summary.json`` is written first.
    """
    start = start if start is not None else start_run(cfg)
    rank, device, checkpoint, run_dir = start.rank, start.device, start.checkpoint, start.run_dir
    # Every rank explores differently; rank 0's weights are broadcast to the others before the first update.
    seed_everything(cfg.seed + 1000 * rank)
    if cfg.torch_threads:  # on CPU, torch's threads compete with the envs (and their workers) for the cores
        torch.set_num_threads(cfg.torch_threads)
    started = time.monotonic()
    vec_env = None
    runner: SafeRunner | None = None
    clips = _training_clips(cfg, run_dir) if rank == 0 else None
    error: BaseException | None = None
    learning = False  # a summary describes a run that started learning (a refused resume leaves the run's own)
    if display is None:
        display = make_display(cfg.display, interval=cfg.display_interval)
    try:
        # A resumed run's envs have taken num_steps_per_env steps per iteration before it: a task's step clock (a
        # curriculum's, Isaac Lab's common_step_counter) goes on from there.
        vec_env = build_vec_env(
            cfg,
            incidents_dir=run_dir.incidents_dir(rank),
            rank=rank,
            device=device,
            start_step=start.start_iteration * cfg.runner.num_steps_per_env,
        )
        runner = SafeRunner(
            vec_env,
            build_rsl_rl_cfg(cfg, str(run_dir.root)),
            log_dir=str(run_dir.root) if rank == 0 else None,
            device=device,
            recovery=cfg.safety.recovery,
            policy_faults=cfg.faults.policy,
            files=run_dir,
            display=display,
            on_iteration=clips,
        )
        if checkpoint is not None:
            try:
                runner.load(str(checkpoint))
            except (KeyError, RuntimeError, ValueError, TypeError, AttributeError, IndexError) as err:
                # another format, another network, or optimizer state of another shape
                raise ConfigError(
                    f"invalid config value resume={cfg.resume!r}: {checkpoint} does not fit this run's networks "
                    f"({type(err).__name__}: {str(err).splitlines()[0]})"
                ) from err
            log.info("resumed from %s at iteration %d", checkpoint, runner.next_iteration)
        if rank == 0:
            # What rebuilds the policy (rsl-rl's dict as the runner resolved it), beside the checkpoints; after a
            # resume's load, so that a resume refused for other networks leaves the run's own files as they were.
            shapes = {k: list(v.shape[1:]) for k, v in vec_env.get_observations().items()}
            run_dir.write_train_cfg(runner.cfg, shapes, vec_env.num_actions)
            if resolved is not None:
                run_dir.write_config(resolved)
        # rsl-rl records the git state of rsl_rl's checkout; ours is the one that explains a run.
        runner.add_git_repo_to_log(str(Path(__file__).resolve()))
        learning = True
        runner.learn(num_learning_iterations=cfg.runner.max_iterations)
    except BaseException as err:
        error = err
        if isinstance(err, RunInterrupted) and learning and runner is not None and rank == 0:
            try:
                saved = runner.save_last_snapshot()
            except Exception:  # the stop stays the outcome (exit 130/143); say what was not kept, and why
                log.warning("stopped: the last good snapshot could not be saved", exc_info=True)
            else:
                if saved is not None:
                    log.info("stopped: the last good snapshot is saved as %s", saved)
        raise
    finally:
        display.close()  # a live view stops drawing before the summary or an error is printed
        try:
            summary = _write_summary(
                run_dir,
                runner,
                num_envs=cfg.task.num_envs,
                steps_per_env=cfg.runner.num_steps_per_env,
                wall_s=time.monotonic() - started,
                device=device,
                error=error,
                write=rank == 0 and learning,
            )
        finally:
            if clips is not None:
                clips.close()
            if vec_env is not None:
                vec_env.close()
            if runner is not None and runner.is_distributed and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    return summary


def _training_clips(cfg: TrainConfig, run_dir: RunDir) -> TrainingClips | None:
    """The recorder of ``video.interval``'s clips, ``None`` when it is off."""
    if cfg.video.interval <= 0:
        return None
    (group,) = OBS_GROUPS["actor"]
    return TrainingClips(cfg.video, run_dir, clip_env_maker(task_env_factory(cfg)), group, cfg.seed)


def _write_summary(run_dir: RunDir, runner: SafeRunner | None, *, error: BaseException | None, **kwargs: Any) -> dict:
    """:func:`write_summary`; when the run is already failing (a full disk) and the summary cannot be written either,
    it is logged instead, so that the second failure never hides the first, which is re-raised after this."""
    try:
        return write_summary(run_dir, runner, error=error, **kwargs)
    except OSError as write_error:
        if error is None:
            raise
        kwargs.pop("write", None)
        summary = build_summary(runner, error=error, **kwargs)
        log.error("could not write %s (%s); the run's summary: %s", run_dir.summary_path, write_error, summary)
        return summary


def run(node: DictConfig, overrides: list[str] | tuple[str, ...] = ()) -> int:
    """Validate ``node``, train, and return the exit code (the ``@hydra.main`` body of ``tools/train.py``).

    Args:
        node: The composed config.
        overrides: The command line's overrides: under ``resume=`` they keep their values over the saved run's.
    """
    try:
        check_node(OmegaConf.to_container(node, resolve=False))
        node = prepare_resume(node, overrides)
        cfg = to_train_config(node)
        check_logger(cfg.runner)
        resolved = OmegaConf.to_container(node, resolve=True)
    except ConfigError as err:
        print(f"train: {err}", file=sys.stderr)
        return 2
    with stop_on_signals():
        try:
            start = start_run(cfg)
        except ConfigError as err:
            print(f"train: {err}", file=sys.stderr)
            if int(os.environ.get("RANK", "0")) == 0:
                # Under tools/train.py, Hydra made the run directory and its record before these checks could run.
                RunDir(cfg.run_dir).remove_unstarted()
            return 2
        except RunInterrupted as stop:  # while the task and the resume checkpoint are checked
            print(f"train: {stop}; no summary written", file=sys.stderr)
            return stop.exit_code
        return _logged_run(node, cfg, resolved, start)


def _logged_run(node: DictConfig, cfg: TrainConfig, resolved: dict[str, Any], start: RunStart) -> int:
    """The run between its banner and its final line, all of it kept in ``train.log`` (rank 0's run directory); a
    run directory that no run started in (a configuration only the runner could reject) is removed afterwards."""
    code: int | None = None
    with RunLog(start.run_dir.train_log_path if start.rank == 0 else None) as run_log:
        if start.rank == 0:
            print(banner(node, cfg, start.device, start.checkpoint), flush=True)
        # On a terminal, the live view draws on the console itself and train.log gets the plain lines.
        display = make_display(
            cfg.display, console=run_log.console, record=run_log.record, interval=cfg.display_interval
        )
        try:
            code = _train(cfg, resolved, start, display)
        finally:
            if start.rank == 0:
                print(final_line(start.run_dir, code), flush=True)
    if code == 2 and start.rank == 0:
        start.run_dir.remove_unstarted()
    return code


def _train(cfg: TrainConfig, resolved: dict[str, Any], start: RunStart, display: Display) -> int:
    """Train, and turn the outcome into the exit code."""
    try:
        summary = train(cfg, resolved, start, display)
    except ConfigError as err:
        print(f"train: {err}", file=sys.stderr)
        return 2
    except RunInterrupted as stop:
        # A signal before the run started (while the envs are built) leaves no summary to point to.
        written = RunDir(cfg.run_dir).summary_path.is_file()
        where = f"summary.json in {cfg.run_dir} (status stopped)" if written else "no summary written"
        print(f"train: {stop}; {where}", file=sys.stderr)
        return stop.exit_code
    except RoboSafeRLError as err:
        print(f"train: stopped: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # mid-run: a file the run had to write (events, incidents, summary); the disk is full
        print(f"train: stopped: could not write a file of the run: {err}", file=sys.stderr)
        return 1
    log.info("run finished: %s", json.dumps({k: summary[k] for k in ("iterations", "env_steps", "return_last")}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Train from Hydra override strings (``["task=ant", "runner.max_iterations=5"]``); returns the exit code.

    ``["--list-tasks"]`` prints the tasks (name, gymnasium id, observation and action sizes) instead.
    """
    from hydra.errors import HydraException

    overrides = list(argv or [])
    if LIST_TASKS in overrides:
        if overrides != [LIST_TASKS]:
            print(f"train: {LIST_TASKS} takes no other arguments, got {overrides}", file=sys.stderr)
            return 2
        from robo_safe_rl.apps.task_list import list_tasks

        return list_tasks()
    try:
        check_overrides(overrides, config_groups())
        node = compose(overrides)
    except ConfigError as err:
        print(f"train: {err}", file=sys.stderr)
        return 2
    except (HydraException, OmegaConfBaseException) as err:
        print(f"train: invalid config: {_one_line(err)}", file=sys.stderr)
        return 2
    return run(node, overrides)


def _one_line(err: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line messages (reason, cause, key) joined into one line, search paths left out."""
    parts: list[str] = []
    seen: BaseException | None = err
    while seen is not None and len(parts) < 4:
        text = str(seen).split("Config search path:")[0]
        parts.extend(line.strip() for line in text.splitlines() if line.strip() and line.strip() not in parts)
        seen = seen.__cause__
    return " ".join(parts)

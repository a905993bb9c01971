"""``python tools/diagnose.py PATH [--checkpoint CKPT] [--json]`` and ``--policy CKPT [--task TASK]``.

Explains physics errors caused by bad actions, from the incidents SafeStep recorded to their root cause, or vets a
policy checkpoint by running it in its task. ``tools/diagnose.py`` imports ``envs`` first, so that the RoboSafe task
ids are registered for replays; this module never imports it.

Exit codes: 0 no incidents, or none caused by actions (vetting: no bad action); 1 incidents caused by actions
explained (vetting: the policy emitted a bad action); 2 unusable input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from robo_safe_rl.diagnose.inputs import resolve
from robo_safe_rl.diagnose.pipeline import ReplayMode, diagnose_source
from robo_safe_rl.diagnose.render import render
from robo_safe_rl.diagnose.replay import DEFAULT_STEPS_AFTER
from robo_safe_rl.diagnose.report import DiagnoseReport
from robo_safe_rl.diagnose.vet import DEFAULT_VET_STEPS, vet_policy
from robo_safe_rl.errors import CheckpointError, RoboSafeRLError
from robo_safe_rl.rundir import CONFIG_FILE
from robo_safe_rl.terminal import PIPE_WIDTH, QuietConsole, printable, reserved_stdout

_EPILOG = """\
PATH is a run directory (its incidents/ and incidents_rank<r>/), an incidents directory, an incidents.jsonl, one
record as any of those plus #<id> (run#3, run/incidents/incidents.jsonl#3), or one record's .npz file.

Attribution: a non-finite action after a non-finite observation -> non-finite observation into the policy; after a
finite one -> non-finite policy output (the checkpoint of that iteration is inspected); a finite action outside the
bounds -> finite but extreme action; a legal action and a state blow-up -> physics blow-up with a legal action
(these two move to env/engine fault when the replay shows the action was not the cause); anything else ->
env/engine fault. The replay restores the recorded state in a fresh env and applies the raw action, then the
sanitised one; a script that reproduces the fault is written to <run_dir>/repro/.

Exit codes: 0 no incidents, or none caused by actions (--policy: no bad action); 1 incidents caused by actions
(--policy: a bad action was emitted); 2 unusable input: missing, damaged or crafted incident files (a field or an
array that breaks the record schema, a task id with a module part, a file outside the incidents folder, sizes
beyond the limits), with one line naming the file, record and field."""


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="diagnose",
        description="Explain incidents (physics errors, non-finite or extreme actions) of a run: what happened,\n"
        "a replay in a fresh env with a reproduction script, and where the bad action came from.\n"
        "With --policy, run a checkpoint in its task and report the first bad action it emits.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path", nargs="?", help="run directory, incidents directory or file, PATH#<id>, or a record's .npz"
    )
    parser.add_argument(
        "--checkpoint", type=Path, metavar="CKPT", help="policy checkpoint to consult instead of the iteration's own"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--replay",
        choices=[m.value for m in ReplayMode],
        default=ReplayMode.first.value,
        help="which incidents to replay: the first of each group (default), all, or none",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"replay: zero-action steps after the sanitised action (default {DEFAULT_STEPS_AFTER}); "
        f"--policy: env steps to run (default {DEFAULT_VET_STEPS})",
    )
    parser.add_argument("--no-script", action="store_true", help="do not write <run_dir>/repro/incident_<id>.py")
    parser.add_argument("--policy", type=Path, metavar="CKPT", help="vet this checkpoint's actor in its task")
    parser.add_argument("--task", help=f"--policy: gymnasium id of the task (default: task.env_id of {CONFIG_FILE})")
    parser.add_argument("--stochastic", action="store_true", help="--policy: sample actions instead of the mean")
    parser.add_argument("--seed", type=int, default=0, help="--policy: seed of the first reset (default 0)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the diagnosis.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        The exit code: 0 nothing caused by actions, 1 incidents caused by actions (or a bad action), 2 unusable input.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.path is None) == (args.policy is None):
        parser.error("give PATH to diagnose incidents, or --policy CKPT to vet a checkpoint (not both)")
    if args.policy is None and (args.task is not None or args.stochastic):
        parser.error("--task and --stochastic go with --policy CKPT")
    if args.steps is not None and args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    target = str(args.policy if args.policy is not None else args.path)
    with reserved_stdout(args.json) as out:
        try:
            report = _vet(args) if args.policy is not None else _diagnose(args)
        except (RoboSafeRLError, OSError) as err:
            message = printable(" ".join(str(err).split()))
            report = DiagnoseReport(path=target, mode="policy" if args.policy else "incidents", error=message)
            print(f"diagnose: {message}", file=sys.stderr)
        if args.json:
            with contextlib.suppress(BrokenPipeError):  # the reader went away (| head): the exit code still tells
                out.write(json.dumps(report.to_json(), indent=2) + "\n")
    if not args.json and report.error is None:
        _print_human(report)
    return report.exit_code


def _diagnose(args: argparse.Namespace) -> DiagnoseReport:
    if args.checkpoint is not None and not args.checkpoint.is_file():
        raise CheckpointError(f"{args.checkpoint}: --checkpoint not found")
    source = resolve(args.path, progress=True)
    return diagnose_source(
        source,
        checkpoint=args.checkpoint,
        replay=ReplayMode(args.replay),
        steps_after=DEFAULT_STEPS_AFTER if args.steps is None else args.steps,
        write_scripts=not args.no_script,
        progress=True,
    )


def _vet(args: argparse.Namespace) -> DiagnoseReport:
    steps = DEFAULT_VET_STEPS if args.steps is None else args.steps
    with _quiet("robo_safe_rl.bridge"):  # SafeStep warns at every bad action; the report counts them instead
        vet = vet_policy(args.policy, args.task, steps=steps, stochastic=args.stochastic, seed=args.seed, progress=True)
    report = DiagnoseReport(path=str(args.policy), mode="policy", run_dir=vet.checkpoint.parent, vet=vet)
    report.notes.extend(vet.notes)
    return report


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _print_human(report: DiagnoseReport) -> None:
    if sys.stdout.isatty():
        render(QuietConsole(), report)
    else:
        render(QuietConsole(width=PIPE_WIDTH, color_system=None, soft_wrap=True), report)

"""``python tools/export.py PATH [--out DIR]``: a trained policy as TorchScript and ONNX, for deployment.

PATH is a ``model_<iter>.pt`` or a run directory (its newest clean checkpoint). The actor is rebuilt by
:func:`~robo_safe_rl.checkpoint.policy.load_policy` (as training built it, weights read with ``weights_only=True``)
and exported through rsl-rl's own exporters, as ``OnPolicyRunner.export_policy_to_jit`` / ``_to_onnx`` do: the
model's ``as_jit()`` scripted with ``torch.jit.script``, its ``as_onnx()`` exported with ``torch.onnx.export`` at
opset 18, input ``obs`` and output ``actions``. Two differences from rsl-rl's calls: the ONNX batch dimension is
dynamic (rsl-rl's export fixes it at 1, the size of its dummy input), and both files are written atomically.

Both files map observations to the deterministic action (the mean): input shape (batch, obs_dim), float32, the
actor's observation groups concatenated in order; output shape (batch, num_actions). The observation normaliser's
statistics are in the graph, and so is the observation clip of the conservative presets
(:class:`~robo_safe_rl.training.models.ClippedMLPModel`, whose exports add it back).

Exit codes: 0 written; 2 unusable input (a missing run, a checkpoint that is not rsl-rl's or has no train dict
beside it, an output folder that cannot be written), one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from robo_safe_rl.checkpoint.policy import LoadedPolicy, load_policy
from robo_safe_rl.errors import ConfigError, RoboSafeRLError
from robo_safe_rl.fileio import atomic_open
from robo_safe_rl.rundir import CHECKPOINT_FILES, POLICY_JIT_FILE, POLICY_ONNX_FILE, RunDir

#: rsl-rl's ``export_policy_to_onnx`` opset.
ONNX_OPSET = 18


@dataclass(frozen=True)
class ExportResult:
    """Where a policy was exported from and to."""

    checkpoint: Path
    jit: Path
    onnx: Path
    obs_dim: int
    num_actions: int


def export_policy(path: str | Path, out: str | Path | None = None) -> ExportResult:
    """Export the policy of ``path`` (a checkpoint or a run directory) as TorchScript and ONNX into ``out``.

    Args:
        path: A ``model_<iter>.pt`` beside its run's saved train dict, or a run directory.
        out: The output folder (made if missing); default ``exported/`` beside the checkpoint.

    Raises:
        CheckpointError: If the policy cannot be rebuilt (see :func:`~robo_safe_rl.checkpoint.policy.load_policy`).
        ConfigError: If the actor has no rsl-rl exporter, or ``out`` cannot be made or written.
    """
    policy = load_policy(path)
    folder = Path(out) if out is not None else RunDir(policy.checkpoint.parent).export_dir
    actor = policy.actor
    if not (callable(getattr(actor, "as_jit", None)) and callable(getattr(actor, "as_onnx", None))):
        raise ConfigError(f"{policy.checkpoint}: its actor {type(actor).__name__} has no as_jit()/as_onnx() to export")
    try:  # the folder is checked before the export, which takes seconds
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in ((POLICY_JIT_FILE, _jit_bytes(policy)), (POLICY_ONNX_FILE, _onnx_bytes(policy))):
            with atomic_open(folder / name) as f:
                f.write(data)
    except OSError as err:
        raise ConfigError(f"--out {folder}: cannot write the exported policy there ({err.strerror or err})") from err
    jit, onnx = folder / POLICY_JIT_FILE, folder / POLICY_ONNX_FILE
    return ExportResult(policy.checkpoint, jit, onnx, policy.obs_dim, policy.num_actions)


def _jit_bytes(policy: LoadedPolicy) -> bytes:
    """``torch.jit.script(actor.as_jit())`` on the CPU, saved (rsl-rl's ``export_policy_to_jit``)."""
    module = policy.actor.as_jit().to("cpu")
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def _onnx_bytes(policy: LoadedPolicy) -> bytes:
    """``torch.onnx.export(actor.as_onnx(), ...)`` on the CPU (rsl-rl's ``export_policy_to_onnx``), batch dynamic."""
    module = policy.actor.as_onnx(verbose=False).to("cpu").eval()
    with _quiet_onnx_exporter():
        program = torch.onnx.export(
            module,
            module.get_dummy_inputs(),
            None,
            export_params=True,
            opset_version=ONNX_OPSET,
            verbose=False,
            input_names=module.input_names,
            output_names=module.output_names,
            # One name per input: its dimension 0 is the batch (any size), as "batch" in the graph.
            dynamic_shapes=({0: "batch"},),
        )
    if program is None:  # only the legacy exporter returns nothing; torch>=2.9 defaults to the dynamo one
        raise ConfigError(f"torch {torch.__version__}: torch.onnx.export returned no program to save")
    return program.model_proto.SerializeToString()


@contextlib.contextmanager
def _quiet_onnx_exporter() -> Iterator[None]:
    """torch's ONNX exporter logs a warning per torchvision operator it cannot register (torchvision is not a
    dependency here) on every export, and torch.export warns of its own use of a deprecated pytree API; only errors
    are worth showing."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    """Command line of ``tools/export.py``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tools/export.py", description=__doc__.splitlines()[0])
    parser.add_argument("path", help=f"a {CHECKPOINT_FILES}, or a run directory (its newest clean checkpoint)")
    parser.add_argument("--out", type=Path, help="output folder (default: exported/ beside the checkpoint)")
    args = parser.parse_args(argv)
    try:
        result = export_policy(args.path, args.out)
    except (RoboSafeRLError, OSError) as err:
        print(f"export: {err}", file=sys.stderr)
        return 2
    print(f"{result.checkpoint}: policy {result.obs_dim} -> {result.num_actions}")
    print(f"TorchScript: {result.jit}")
    print(f"ONNX: {result.onnx}")
    return 0

"""Load a checkpoint's real tensors, for callers that need them (rebuilding a policy), never running code from it.

The file first goes through the inspector's own checks (:func:`~robo_safe_rl.checkpoint.containers.read_contents`:
limits, refusal of any global outside the weights-only allowlist, declared sizes; and every zip member's CRC-32),
so torch is only handed files that cannot make it allocate unbounded memory or load changed bytes. Torch files are
then loaded with ``torch.load(weights_only=True)`` onto the CPU; safetensors files tensor by tensor with
``safe_open``. Every failure becomes a :class:`~robo_safe_rl.errors.CheckpointError` whose message is
``"<path>: <reason>"``. To inspect a file for NaN/Inf, use :func:`~robo_safe_rl.checkpoint.report.inspect_file`,
which never builds a tensor.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from robo_safe_rl.checkpoint.archive import open_reader
from robo_safe_rl.checkpoint.containers import Format, detect_format, read_contents
from robo_safe_rl.checkpoint.structure import walk_refs
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.safety.walk import walk_tensors

__all__ = ["Format", "LoadedCheckpoint", "detect_format", "open_checkpoint"]


@dataclass
class LoadedCheckpoint:
    """A checkpoint loaded with its real tensors; iterate :meth:`tensors` inside the ``with`` of
    :func:`open_checkpoint`.

    Attributes:
        path: The file.
        format: Its container format.
        iteration: The training iteration stored in the file (rsl-rl's ``iter``, or ``iter`` in safetensors
            metadata); ``None`` when the file stores none.
    """

    path: Path
    format: Format
    iteration: int | None
    _obj: Any = None
    _safetensors: Any = field(default=None, repr=False)

    def tensors(self, skip: Callable[[str], bool] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` for every tensor of the file, in file order.

        Args:
            skip: Names for which it returns true are passed over without reading their data.
        """
        if self._safetensors is not None:
            for name in self._safetensors.keys():  # noqa: SIM118 - safe_open handles are not mappings
                if skip is None or not skip(name):
                    try:
                        tensor = self._safetensors.get_tensor(name)
                    except (SafetensorError, OSError, ValueError) as err:
                        raise CheckpointError(f"{self.path}: cannot read tensor {name} ({_first_line(err)})") from err
                    yield name, tensor
            return
        for name, tensor in walk_tensors(self._obj):
            if skip is None or not skip(name):
                yield name, tensor


@contextlib.contextmanager
def open_checkpoint(path: str | Path, *, mmap: bool = False) -> Iterator[LoadedCheckpoint]:
    """Load a checkpoint's tensors, never running code from it.

    Args:
        path: A ``.pt``/``.pth`` file written by ``torch.save`` or a ``.safetensors`` file.
        mmap: Memory-map torch zip archives instead of reading them into memory. Faster for large files, but a
            file truncated while it is mapped kills the process with SIGBUS; leave it off for files that may change.

    Yields:
        The loaded checkpoint; its tensors stay valid inside the ``with`` block.

    Raises:
        CheckpointError: Missing, empty, truncated, corrupt (CRC-32), over a limit, not a checkpoint, unreadable, or
            refused because loading it would run code. The message is ``"<path>: <reason>"``.
    """
    path = Path(path)
    fmt = detect_format(path)
    with open_reader(path) as reader:
        contents = read_contents(reader, fmt)
        if next(walk_refs(contents.obj), None) is None:
            kind = type(contents.obj).__name__
            raise CheckpointError(f"{path}: not a checkpoint: it holds no tensors (the file stores a {kind})")
        if contents.zip is not None:
            contents.zip.verify_rest()
    if fmt is Format.SAFETENSORS:
        with _open_safetensors(path, contents.stored_iteration) as loaded:
            yield loaded
        return
    obj = _torch_load(path, mmap=mmap and fmt is Format.TORCH_ZIP)
    yield LoadedCheckpoint(path=path, format=fmt, iteration=_iteration_of(obj), _obj=obj)


def _torch_load(path: Path, *, mmap: bool) -> Any:
    try:
        # torch warns about pickle protocols and legacy files; the one line the user gets is the error, if any.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path}: not a loadable checkpoint ({_first_line(err)})") from err
    except Exception as err:  # torch raises RuntimeError, EOFError, KeyError, OSError... on damaged files
        raise CheckpointError(f"{path}: unreadable, truncated or corrupt ({_first_line(err)})") from err


@contextlib.contextmanager
def _open_safetensors(path: Path, iteration: int | None) -> Iterator[LoadedCheckpoint]:
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(safe_open(str(path), framework="pt", device="cpu"))
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({_first_line(err)})") from err
        yield LoadedCheckpoint(path=path, format=Format.SAFETENSORS, iteration=iteration, _safetensors=handle)


def _iteration_of(obj: Any) -> int | None:
    """rsl-rl stores the iteration under ``iter`` as an int; accept a one-element integer tensor too."""
    value = obj.get("iter") if isinstance(obj, dict) else None
    if type(value) is int:
        return value
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.device.type != "cpu":
        return None
    if value.is_quantized or value.is_nested or value.is_floating_point() or value.is_complex():
        return None
    if value.dtype == torch.bool or value.numel() != 1:
        return None
    try:
        return int(value.item())
    except (RuntimeError, TypeError, ValueError):  # dtypes without kernels (uint1..7, bits)
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__

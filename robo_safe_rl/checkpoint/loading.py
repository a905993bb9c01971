"""Open a checkpoint file without running code from it, and say precisely why when that is impossible.

Three containers are recognised from their first bytes: torch's zip archive (``torch.save`` since torch 1.6),
torch's legacy pickle stream, and safetensors. Torch files are loaded with ``weights_only=True`` onto the CPU,
memory-mapped when the zip format allows; safetensors files are read tensor by tensor with ``safe_open``. Every
failure becomes a :class:`~robo_safe_rl.errors.CheckpointError` whose message is ``"<path>: <reason>"``.
"""

from __future__ import annotations

import contextlib
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from robo_safe_rl.checkpoint.pages import MappedFile
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.safety.finite import walk_tensors

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80
_TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""First value of a legacy ``torch.save`` stream (``torch.serialization.MAGIC_NUMBER``)."""
_LEGACY_PICKLES = 4
"""Pickles before the raw storages of a legacy stream: magic number, protocol, system info, the object."""
_SAFETENSORS_MAX_HEADER = 100_000_000
"""safetensors refuses headers above 100 MB, so a larger length word means the file is something else."""


class Format(str, Enum):
    """Container format of a checkpoint file."""

    TORCH_ZIP = "torch_zip"
    TORCH_LEGACY = "torch_legacy"
    SAFETENSORS = "safetensors"


@dataclass
class LoadedCheckpoint:
    """A checkpoint opened for inspection; iterate :meth:`tensors` inside the ``with`` of :func:`open_checkpoint`.

    Attributes:
        path: The file.
        format: Its container format.
        iteration: The training iteration stored in the file (rsl-rl's ``iter``, or ``iter`` in safetensors
            metadata); ``None`` when the file stores none.
        release: Called with each chunk once read, to drop memory-mapped pages; ``None`` when not mapped.
    """

    path: Path
    format: Format
    iteration: int | None
    release: Callable[[torch.Tensor], None] | None = None
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


def detect_format(path: Path) -> Format:
    """Tell the container format of a file from its first bytes.

    Raises:
        CheckpointError: The file is missing, unreadable, empty, or none of the three formats.
    """
    if not path.exists():
        raise CheckpointError(f"{path}: not found")
    if not path.is_file():
        raise CheckpointError(f"{path}: not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(9)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read it ({err.strerror or err})") from err
    if not head:
        raise CheckpointError(f"{path}: empty file (0 bytes)")
    if head.startswith(_ZIP_MAGIC):
        return Format.TORCH_ZIP
    if head[0] == _PICKLE_PROTO:
        return Format.TORCH_LEGACY
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") <= _SAFETENSORS_MAX_HEADER:
        return Format.SAFETENSORS
    if path.suffix == ".safetensors":
        return Format.SAFETENSORS
    raise CheckpointError(
        f"{path}: not a checkpoint: expected a torch zip archive, a torch pickle or a safetensors file, "
        f"but it starts with {head[:8]!r}"
    )


@contextlib.contextmanager
def open_checkpoint(path: str | Path, *, mmap: bool = True) -> Iterator[LoadedCheckpoint]:
    """Open a checkpoint for inspection, never running code from it.

    Args:
        path: A ``.pt``/``.pth`` file written by ``torch.save`` or a ``.safetensors`` file.
        mmap: Memory-map torch zip archives (tensors are then read only when touched). Legacy torch files
            cannot be mapped and are read whole.

    Yields:
        The opened checkpoint; its tensors stay valid inside the ``with`` block.

    Raises:
        CheckpointError: Missing, empty, truncated, not a checkpoint, unreadable, or refused because loading it
            would run code. The message is ``"<path>: <reason>"``.
    """
    path = Path(path)
    fmt = detect_format(path)
    if fmt is Format.SAFETENSORS:
        with _open_safetensors(path) as loaded:
            yield loaded
        return
    if fmt is Format.TORCH_ZIP:
        _check_zip(path)
    obj = _torch_load(path, fmt, mmap=mmap and fmt is Format.TORCH_ZIP)
    if next(walk_tensors(obj), None) is None:
        raise CheckpointError(f"{path}: not a checkpoint: it holds no tensors (the file stores a {type(obj).__name__})")
    release = MappedFile(path).release if mmap and fmt is Format.TORCH_ZIP else None
    yield LoadedCheckpoint(path=path, format=fmt, iteration=_iteration_of(obj), release=release, _obj=obj)


def _check_zip(path: Path) -> None:
    """Reject truncated archives and zips that torch did not write, before torch's less clear errors."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise CheckpointError(
            f"{path}: truncated or corrupt: a zip archive without its end record, as an interrupted write leaves"
        ) from err
    names = [info.filename for info in infos]
    if any(name.endswith("/constants.pkl") for name in names):
        raise CheckpointError(
            f"{path}: not a checkpoint: a TorchScript module (an exported policy); inspect the training checkpoint"
        )
    if not any(name.endswith("data.pkl") for name in names):
        raise CheckpointError(f"{path}: not a checkpoint: a zip archive without data.pkl, not written by torch.save")
    for info in infos:
        if info.header_offset + info.compress_size > size:
            raise CheckpointError(f"{path}: truncated: record {info.filename} ends past the end of the file")


def _torch_load(path: Path, fmt: Format, *, mmap: bool) -> Any:
    try:
        # torch warns about pickle protocols and legacy files; the one line the user gets is the error, if any.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path}: {_explain_unpickling(path, fmt, err)}") from err
    except Exception as err:  # torch raises RuntimeError, EOFError, KeyError, OSError... on damaged files
        raise CheckpointError(f"{path}: unreadable, truncated or corrupt ({_first_line(err)})") from err


def _explain_unpickling(path: Path, fmt: Format, err: pickle.UnpicklingError) -> str:
    """Tell a refused pickle (one that would call code) from a damaged one or one that torch did not write."""
    inner = _first_line(err.__context__) if err.__context__ is not None else _first_line(err)
    if fmt is Format.TORCH_ZIP:
        try:
            unsafe = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception:  # a damaged data.pkl: fall through to the generic reason
            unsafe = []
        if unsafe:
            return _refusal(unsafe)
        return f"not a loadable checkpoint ({inner})"
    pickles = _scan_pickles(path, _LEGACY_PICKLES)
    if pickles is None:
        return "truncated or corrupt: the pickle stream ends before it is complete"
    magic_is_torch = pickles[0].first_int == _TORCH_LEGACY_MAGIC
    if magic_is_torch and len(pickles) < _LEGACY_PICKLES:
        return "truncated: the torch pickle stream ends before the saved object"
    called = [name for p in (pickles if magic_is_torch else pickles[:1]) for name in p.globals]
    named = re.findall(r"GLOBAL ([\w.]+)", inner)
    if magic_is_torch and named:
        return _refusal(named)
    if not magic_is_torch and called:
        shown = ", ".join(dict.fromkeys(called))
        return f"refused: a plain pickle, not written by torch.save, and loading it would run code ({shown})"
    if not magic_is_torch:
        return "not a checkpoint: a plain pickle, not written by torch.save"
    return f"not a loadable checkpoint ({inner})"


def _refusal(names: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(names))
    return (
        f"refused: loading it would run code that the weights-only loader does not allow ({shown}); "
        "nothing from the file was executed"
    )


@dataclass
class _PickleScan:
    first_int: int | None
    globals: list[str]


def _scan_pickles(path: Path, count: int) -> list[_PickleScan] | None:
    """Disassemble up to ``count`` consecutive pickles without executing them; ``None`` if one is cut short.

    Only the opcodes are read (``pickletools.genops``), so no global is imported and nothing is called. The scan
    stops early, without error, at the end of the file.
    """
    scans: list[_PickleScan] = []
    with path.open("rb") as f:
        for index in range(count):
            if index and not f.peek(1):
                break
            first_int: int | None = None
            names: list[str] = []
            strings: list[str] = []
            try:
                for opcode, arg, _pos in pickletools.genops(f):
                    if opcode.name in ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"):
                        first_int = int(arg) if first_int is None else first_int
                    elif isinstance(arg, str) and "UNICODE" in opcode.name:
                        strings.append(arg)
                    elif opcode.name in ("GLOBAL", "INST"):
                        names.append(str(arg).replace(" ", "."))
                    elif opcode.name == "STACK_GLOBAL":
                        names.append(".".join(strings[-2:]) if len(strings) >= 2 else "<global>")
            except ValueError:
                return None
            scans.append(_PickleScan(first_int, names))
    return scans


@contextlib.contextmanager
def _open_safetensors(path: Path) -> Iterator[LoadedCheckpoint]:
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(safe_open(str(path), framework="pt", device="cpu"))
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({_first_line(err)})") from err
        if not list(handle.keys()):
            raise CheckpointError(f"{path}: not a checkpoint: the safetensors file holds no tensors")
        metadata = handle.metadata() or {}
        raw = metadata.get("iter", metadata.get("iteration"))
        iteration = int(raw) if raw is not None and raw.strip().lstrip("-").isdigit() else None
        yield LoadedCheckpoint(path=path, format=Format.SAFETENSORS, iteration=iteration, _safetensors=handle)


def _iteration_of(obj: Any) -> int | None:
    """rsl-rl stores the iteration under ``iter`` as an int; accept a 0-d integer tensor too."""
    if not isinstance(obj, dict):
        return None
    value = obj.get("iter")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        return int(value.item())
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__

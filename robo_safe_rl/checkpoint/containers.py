"""Tell a checkpoint's container format and read its structure and where each storage's bytes lie, reading no data.

Three containers are recognised from their first bytes: torch's zip archive (``torch.save`` since torch 1.6), torch's
legacy pickle stream, and safetensors. Each reader checks what the file declares (member sizes, storage sizes, header
length) against the file and :mod:`~robo_safe_rl.checkpoint.limits` before reading anything of that size. Every
failure is a :class:`~robo_safe_rl.errors.CheckpointError` whose message is ``"<path>: <reason>"``.
"""

from __future__ import annotations

import errno
import io
import os
import pickletools
import stat
import sys
from pathlib import Path
from typing import Any

from robo_safe_rl.checkpoint import limits
from robo_safe_rl.checkpoint.archive import FileReader, ZipCheckpoint
from robo_safe_rl.checkpoint.contents import Contents, Extent, Format
from robo_safe_rl.checkpoint.rebuild import ALLOWED_GLOBALS, storage_type_dtype
from robo_safe_rl.checkpoint.refs import StorageRef
from robo_safe_rl.checkpoint.safetensors_header import read_safetensors
from robo_safe_rl.checkpoint.structure import Refused, unpickle
from robo_safe_rl.errors import CheckpointError

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80
_TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""First value of a legacy ``torch.save`` stream (``torch.serialization.MAGIC_NUMBER``)."""
_LEGACY_PROTOCOL = 1001
_SAFETENSORS_MAX_HEADER = 100_000_000
"""safetensors refuses headers above 100 MB, so a larger length word means the file is something else."""


def detect_format(path: Path) -> Format:
    """Tell the container format of a file from its first bytes.

    Raises:
        CheckpointError: The file is missing, a symlink loop, unreadable, empty, or none of the three formats.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as err:
        raise CheckpointError(f"{path}: not found") from err
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CheckpointError(f"{path}: symlink loop: following its links never reaches a file") from err
        raise CheckpointError(f"{path}: cannot read it ({err.strerror or err})") from err
    if not stat.S_ISREG(mode):
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


def read_contents(reader: FileReader, fmt: Format) -> Contents:
    """Read a checkpoint's structure and storage places; only pickles and headers are read, never tensor data.

    Raises:
        CheckpointError: Truncated, corrupt, refused (a pickle that would run code), over a limit, or not a
            checkpoint.
    """
    if fmt is Format.TORCH_ZIP:
        return _read_zip(reader)
    if fmt is Format.TORCH_LEGACY:
        return _read_legacy(reader)
    return read_safetensors(reader)


def _read_zip(reader: FileReader) -> Contents:
    path, archive = reader.path, ZipCheckpoint(reader)
    pkl = archive.record("data.pkl")
    if pkl is None:  # ZipCheckpoint refuses such an archive already; this keeps the types honest
        raise CheckpointError(f"{path}: not a checkpoint: a zip archive without data.pkl")
    data = archive.read_member(pkl, limits.MAX_PICKLE_BYTES, "limits.MAX_PICKLE_BYTES")
    byteswap = False
    if (order := archive.record("byteorder")) is not None:
        mark = archive.read_member(order, limits.MAX_SMALL_RECORD_BYTES, "limits.MAX_SMALL_RECORD_BYTES")
        if mark not in (b"little", b"big"):
            raise CheckpointError(f"{path}: not a loadable checkpoint (byteorder record holds {mark[:16]!r})")
        byteswap = mark.decode() != sys.byteorder
    storages: dict[str, StorageRef] = {}

    def persistent_load(pid: Any) -> StorageRef:
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] not in ("storage", b"storage"):
            raise CheckpointError("not a loadable checkpoint (a persistent id that is not a storage reference)")
        _, storage_type, key, _location, numel = pid
        if not isinstance(key, str) or type(numel) is not int or numel < 0:
            raise CheckpointError("not a loadable checkpoint (a storage reference without a key and a size)")
        if key not in storages:  # torch keeps the first reference's dtype for a key
            storages[key] = StorageRef(key, storage_type_dtype(storage_type), numel)
        return storages[key]

    try:
        obj = unpickle(data, persistent_load)
    except Refused:
        names = [name for name in _globals_in(data)[0] if name not in ALLOWED_GLOBALS]
        raise CheckpointError(f"{path}: {_refusal(names)}") from None
    except CheckpointError as err:
        raise CheckpointError(f"{path}: {err}") from err
    extents = {}
    for key, ref in storages.items():
        record = archive.record(f"data/{key}")
        if record is None:
            raise CheckpointError(f"{path}: not a loadable checkpoint: tensor data data/{key} is not in the archive")
        if record.method != 0:
            raise CheckpointError(
                f"{path}: refused: {record.name} holds tensor data compressed; torch.save stores it uncompressed "
                "and the inspector does not inflate tensor data"
            )
        if record.size < ref.numel * ref.dtype.itemsize:
            raise CheckpointError(
                f"{path}: corrupt: storage data/{key} declares {ref.numel * ref.dtype.itemsize} bytes but its "
                f"record holds {record.size}"
            )
        extents[key] = Extent(record.data_offset, ref.numel * ref.dtype.itemsize, record)
    return Contents(Format.TORCH_ZIP, obj, extents, zip=archive, byteswap=byteswap)


def _read_legacy(reader: FileReader) -> Contents:
    path = reader.path
    head = reader.read(0, min(reader.size, limits.MAX_PICKLE_BYTES), "the pickles")
    stream = io.BytesIO(head)
    roots: dict[str, StorageRef] = {}

    def persistent_load(pid: Any) -> StorageRef:
        if not isinstance(pid, tuple) or len(pid) != 6 or pid[0] != "storage":
            raise CheckpointError("not a loadable checkpoint (a persistent id that is not a storage reference)")
        _, storage_type, key, _location, numel, view = pid
        if not isinstance(key, str) or type(numel) is not int or numel < 0:
            raise CheckpointError("not a loadable checkpoint (a storage reference without a key and a size)")
        root = roots.setdefault(key, StorageRef(key, storage_type_dtype(storage_type), numel))
        if view is None:
            return root
        if not isinstance(view, tuple) or len(view) != 3 or not all(type(v) is int for v in view[1:]):
            raise CheckpointError("not a loadable checkpoint (a malformed storage view)")
        return StorageRef(key, root.dtype, view[2], element_offset=view[1])

    def load(what: str, persistent: Any = None) -> Any:
        if stream.tell() >= len(head) and len(head) < reader.size:
            raise CheckpointError(_pickles_over_limit(path))
        try:
            return unpickle(stream, persistent or _no_persistent)
        except Refused as refused:
            raise CheckpointError(f"{path}: {_explain_legacy_refusal(head, refused.name)}") from None
        except CheckpointError as err:
            if stream.tell() >= len(head):
                raise CheckpointError(
                    _pickles_over_limit(path)
                    if len(head) < reader.size
                    else f"{path}: truncated: the torch pickle stream ends before {what}"
                ) from err
            raise CheckpointError(f"{path}: {err}") from err

    if load("its magic number") != _TORCH_LEGACY_MAGIC:
        raise CheckpointError(f"{path}: not a checkpoint: a plain pickle, not written by torch.save")
    if load("its protocol version") != _LEGACY_PROTOCOL:
        raise CheckpointError(f"{path}: not a loadable checkpoint (unknown legacy protocol version)")
    load("its system information")
    obj = load("the saved object", persistent_load)
    keys = load("its storage keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or set(keys) != set(roots):
        raise CheckpointError(f"{path}: not a loadable checkpoint (its storage keys do not match its tensors)")
    extents, at = {}, stream.tell()
    for key in keys:
        root = roots[key]
        declared = int.from_bytes(reader.read(at, 8, f"the size of storage {key}"), "little", signed=True)
        if declared != root.numel:
            raise CheckpointError(
                f"{path}: corrupt: storage {key} holds {declared} elements, its tensors declare {root.numel}"
            )
        nbytes = root.numel * root.dtype.itemsize
        if at + 8 + nbytes > reader.size:
            raise CheckpointError(f"{path}: truncated: storage {key} ends past the end of the file")
        extents[key] = Extent(at + 8, nbytes)
        at += 8 + nbytes
    return Contents(Format.TORCH_LEGACY, obj, extents)


def _no_persistent(pid: Any) -> Any:
    raise CheckpointError("not a loadable checkpoint (a storage reference outside the saved object)")


def _pickles_over_limit(path: Path) -> str:
    return (
        f"{path}: refused: the pickles of this legacy torch file run past {limits.MAX_PICKLE_BYTES} bytes, the most "
        "the inspector unpickles (limits.MAX_PICKLE_BYTES)"
    )


_INT_OPCODES = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})


def _globals_in(data: bytes, pickles: int = 1) -> tuple[list[str], int | None]:
    """Globals that up to ``pickles`` consecutive pickles name, and the first integer of the first one.

    Found by disassembling (``pickletools.genops``): nothing is imported or called. A damaged tail ends the scan.
    """
    stream = io.BytesIO(data)
    names: list[str] = []
    first_int: int | None = None
    for index in range(pickles):
        if index and stream.tell() >= len(data):
            break
        strings: list[str] = []
        try:
            for opcode, arg, _pos in pickletools.genops(stream):
                if opcode.name in _INT_OPCODES and index == 0 and first_int is None:
                    first_int = int(arg)
                elif isinstance(arg, str) and "UNICODE" in opcode.name:
                    strings.append(arg)
                elif opcode.name in ("GLOBAL", "INST"):
                    names.append(str(arg).replace(" ", "."))
                elif opcode.name == "STACK_GLOBAL":
                    names.append(".".join(strings[-2:]) if len(strings) >= 2 else "<global>")
        except ValueError:
            break
    return list(dict.fromkeys(names)), first_int


def _explain_legacy_refusal(head: bytes, name: str) -> str:
    """A refused global in a legacy stream: a torch stream that holds code, or a plain pickle that is not torch's."""
    names, first_int = _globals_in(head, pickles=5)
    if first_int == _TORCH_LEGACY_MAGIC:
        return _refusal([n for n in names if n not in ALLOWED_GLOBALS] or [name])
    shown = ", ".join(_globals_in(head)[0] or [name])
    return f"refused: a plain pickle, not written by torch.save, and loading it would run code ({shown})"


def _refusal(names: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(names))
    return (
        f"refused: loading it would run code that the weights-only loader does not allow ({shown}); "
        "nothing from the file was executed"
    )

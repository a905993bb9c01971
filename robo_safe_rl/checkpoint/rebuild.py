"""Stand-ins for the functions a torch pickle names to rebuild its tensors: each checks its arguments and returns a
description (:class:`~robo_safe_rl.checkpoint.refs.TensorRef`) instead of a tensor.

:data:`ALLOWED_GLOBALS` maps every name torch's weights-only loader allows by default to its stand-in, or to a plain
data type (``OrderedDict``, ``set``, a dtype). A stand-in allocates nothing a file declares: ``bytearray(n)`` and
``_codecs.encode`` with another codec are refused, a shape of 2**40 elements is only a tuple.
"""

from __future__ import annotations

import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from robo_safe_rl.checkpoint.refs import Kind, StorageRef, TensorRef
from robo_safe_rl.errors import CheckpointError


@dataclass(frozen=True)
class _StorageType:
    dtype: torch.dtype

    def __setstate__(self, state: Any) -> None:
        raise TypeError("a storage type takes no state")


@dataclass(frozen=True)
class _TypeName:
    """A tensor class named by the pickle (``torch.nn.parameter.Parameter``); used only as a marker."""

    name: str

    def __setstate__(self, state: Any) -> None:
        raise TypeError("a type name takes no state")


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(type(v) is int and v >= 0 for v in value):
        raise CheckpointError(f"not a loadable checkpoint (a tensor's {what} is not a tuple of non-negative ints)")
    return tuple(value)


def _storage(storage: Any, dtype: torch.dtype | None = None) -> tuple[StorageRef, torch.dtype]:
    if not isinstance(storage, StorageRef):
        raise CheckpointError(f"not a loadable checkpoint (a tensor's storage is a {type(storage).__name__})")
    return storage, storage.dtype if dtype is None else dtype


def _dense(storage: Any, offset: Any, size: Any, stride: Any, dtype: Any = None, metadata: Any = None) -> TensorRef:
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise CheckpointError("not a loadable checkpoint (a tensor's dtype is not a torch dtype)")
    ref, dtype = _storage(storage, dtype)
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides) or type(offset) is not int or offset < 0:
        raise CheckpointError("not a loadable checkpoint (a tensor's size, stride and offset do not agree)")
    negative = isinstance(metadata, dict) and bool(metadata.get("neg"))
    return TensorRef(Kind.DENSE, dtype, shape, strides, offset + ref.element_offset, ref, negative=negative)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> TensorRef:
    return _dense(storage, offset, size, stride)


def _rebuild_tensor_v2(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, metadata: Any = None
) -> TensorRef:
    return _dense(storage, offset, size, stride, metadata=metadata)


def _rebuild_tensor_v3(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any, metadata: Any = None
) -> TensorRef:
    return _dense(storage, offset, size, stride, dtype, metadata)


def _tensor(value: Any, what: str) -> TensorRef:
    if not isinstance(value, TensorRef):
        raise CheckpointError(f"not a loadable checkpoint ({what} is a {type(value).__name__}, not a tensor)")
    return value


def _rebuild_parameter(data: Any, requires_grad: Any, hooks: Any, state: Any = None) -> TensorRef:
    return _tensor(data, "a parameter's data")


def _rebuild_qtensor(
    storage: Any, offset: Any, size: Any, stride: Any, qparams: Any, requires_grad: Any, hooks: Any
) -> TensorRef:
    dense = _dense(storage, offset, size, stride)
    if not isinstance(qparams, tuple) or len(qparams) < 3:
        raise CheckpointError("not a loadable checkpoint (a quantized tensor without its quantizer parameters)")
    labelled = (("q_scale", qparams[1]), ("q_zero_point", qparams[2]))
    return TensorRef(
        Kind.QUANTIZED, dense.dtype, dense.shape, dense.stride, dense.offset, dense.storage, None, labelled
    )


def _rebuild_sparse_tensor(layout: Any, data: Any) -> TensorRef:
    if not isinstance(layout, torch.layout) or not isinstance(data, tuple) or len(data) not in (3, 4):
        raise CheckpointError("not a loadable checkpoint (a sparse tensor's layout or data is malformed)")
    values, size = (data[1], data[2]) if layout == torch.sparse_coo else (data[2], data[3])
    values = _tensor(values, "a sparse tensor's values")
    name = str(layout).removeprefix("torch.")
    return TensorRef(Kind.SPARSE, values.dtype, _ints(size, "size"), values=values, layout=name)


def _rebuild_nested_tensor(buffer: Any, sizes: Any, strides: Any, offsets: Any) -> TensorRef:
    buffer = _tensor(buffer, "a nested tensor's buffer")
    return TensorRef(Kind.NESTED, buffer.dtype, buffer.shape, values=buffer, layout="nested")


def _rebuild_meta(dtype: Any, size: Any, stride: Any, requires_grad: Any) -> TensorRef:
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError("not a loadable checkpoint (a meta tensor's dtype is not a torch dtype)")
    return TensorRef(Kind.NO_DATA, dtype, _ints(size, "size"), note="a meta tensor: it holds no data")


def _rebuild_wrapper_subclass(
    cls: Any, dtype: Any, size: Any, stride: Any, offset: Any, layout: Any, device: Any, requires_grad: Any
) -> TensorRef:
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError("not a loadable checkpoint (a tensor subclass's dtype is not a torch dtype)")
    return TensorRef(Kind.NO_DATA, dtype, _ints(size, "size"), note="a tensor subclass saved without its data")


def _rebuild_device_tensor(data: Any, dtype: Any, device: Any, requires_grad: Any) -> TensorRef:
    return _tensor(data, "a device tensor's data")


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    if func not in _REBUILDERS.values() or not isinstance(args, tuple):
        raise CheckpointError("not a loadable checkpoint (a tensor subclass names no tensor rebuild function)")
    return func(*args)


def _get_layout(name: Any) -> torch.layout:
    layout = _LAYOUTS.get(name) if isinstance(name, str) else None
    if layout is None:
        raise CheckpointError(f"not a loadable checkpoint (unknown tensor layout {name!r})")
    return layout


def _size(*args: Any) -> tuple[int, ...]:
    return _ints(args[0] if args else (), "torch.Size")


def _device(*args: Any) -> str:
    return ":".join(str(a) for a in args)


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # Protocol 2 pickles bytes as _codecs.encode(str, "latin1"); no other codec is ever needed.
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise CheckpointError("not a loadable checkpoint (_codecs.encode used other than for latin-1 bytes)")
    return text.encode("latin1")


def _bytearray(data: Any = b"", *args: Any) -> bytearray:
    # bytearray(n) would allocate n bytes: only a copy of data that is already in the pickle is allowed.
    if isinstance(data, str):
        return bytearray(_encode(data, *args[:1]))
    if not isinstance(data, (bytes, bytearray)):
        raise CheckpointError("not a loadable checkpoint (bytearray built from other than bytes)")
    return bytearray(data)


_REBUILDERS: dict[str, Callable[..., Any]] = {
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch._utils._rebuild_qtensor": _rebuild_qtensor,
    "torch._utils._rebuild_sparse_tensor": _rebuild_sparse_tensor,
    "torch._utils._rebuild_nested_tensor": _rebuild_nested_tensor,
    "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta,
    "torch._utils._rebuild_wrapper_subclass": _rebuild_wrapper_subclass,
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _rebuild_device_tensor,
    "torch._utils._rebuild_device_tensor_from_numpy": _rebuild_device_tensor,
}
_LAYOUTS = {
    f"torch.{name}": getattr(torch, name)
    for name in ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "jagged")
    if isinstance(getattr(torch, name, None), torch.layout)
}


def _allowed_globals() -> dict[str, Any]:
    """The names torch's weights-only loader allows by default, each mapped to our stand-in or a plain data type."""
    allowed: dict[str, Any] = {
        "collections.OrderedDict": OrderedDict,
        "collections.Counter": Counter,
        "torch.serialization._get_layout": _get_layout,
        "torch.Size": _size,
        "torch.device": _device,
        "_codecs.encode": _encode,
        "builtins.bytearray": _bytearray,
        "builtins.set": set,
        "builtins.complex": complex,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        **_REBUILDERS,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading .dtype of TypedStorage warns that the class is deprecated
        storage_dtypes = {
            name: value.dtype
            for name, value in vars(torch).items()
            if isinstance(value, type)
            and name.endswith("Storage")
            and isinstance(getattr(value, "dtype", None), torch.dtype)
        }
    for name, value in vars(torch).items():
        if name in storage_dtypes:
            allowed[f"torch.{name}"] = _StorageType(storage_dtypes[name])
        elif isinstance(value, (torch.dtype, torch.qscheme)):
            allowed[f"torch.{name}"] = value
        elif isinstance(value, type) and name.endswith("Tensor"):
            allowed[f"torch.{name}"] = _TypeName(f"torch.{name}")
    allowed["torch.storage.UntypedStorage"] = _StorageType(torch.uint8)
    allowed["torch.nn.parameter.Parameter"] = _TypeName("torch.nn.parameter.Parameter")
    return allowed


ALLOWED_GLOBALS = _allowed_globals()
"""Every global name a checkpoint pickle may use, as ``module.name``."""


def storage_type_dtype(storage_type: Any) -> torch.dtype:
    """The dtype a persistent id's storage type declares.

    Raises:
        CheckpointError: It is not a storage type.
    """
    if not isinstance(storage_type, _StorageType):
        raise CheckpointError(f"not a loadable checkpoint (a storage reference names {type(storage_type).__name__})")
    return storage_type.dtype

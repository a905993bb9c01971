"""Unpickle a checkpoint's structure into descriptions of its tensors, without building a tensor or running code.

A torch checkpoint's pickle names the functions that rebuild each tensor (``torch._utils._rebuild_tensor_v2`` and
its kin) and refers to the raw data by storage key. Here the pickle is read by Python's own unpickler restricted to
the names torch's weights-only loader allows, each mapped to a stand-in of ours that records what the tensor would be
(its kind, dtype, shape, strides and storage) instead of building it. So nothing is allocated for a tensor however
large it claims to be, no sparse tensor is densified, and the data is read later, once per storage, by
:mod:`robo_safe_rl.checkpoint.scan`. Any other name is refused before it is imported, exactly as ``weights_only=True``
refuses it. The unpickler is iterative: a structure nested a million levels deep is no problem for it, and
:func:`walk_refs` walks the result without recursion.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterator
from typing import Any

from robo_safe_rl.checkpoint.rebuild import ALLOWED_GLOBALS
from robo_safe_rl.checkpoint.refs import Kind, StorageRef, TensorRef
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.safety.walk import walk_leaves


class Refused(Exception):
    """A pickle named a global that the weights-only loader does not allow; nothing was imported or called."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def unpickle(data: bytes | io.BytesIO, persistent_load: Callable[[Any], Any]) -> Any:
    """Unpickle one pickle with the restricted stand-ins; ``data`` may be a stream holding several pickles.

    Raises:
        Refused: The pickle names a global outside the weights-only allowlist.
        CheckpointError: It is damaged or does not follow torch's layout (the message has no path).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        return _Unpickler(stream, persistent_load).load()
    except (Refused, CheckpointError):
        raise
    except MemoryError as err:
        raise CheckpointError("its pickle describes more objects than fit in memory") from err
    except Exception as err:  # the unpickler raises UnpicklingError, EOFError, TypeError, ValueError, ... on bad data
        raise CheckpointError(f"not a loadable checkpoint ({type(err).__name__}: {err})") from err


def walk_refs(obj: Any) -> Iterator[tuple[str, TensorRef]]:
    """Yield every tensor (and bare storage) of an unpickled structure with its path, in container order.

    Paths are built as :func:`~robo_safe_rl.safety.walk.walk_tensors` builds them: keys and indices joined with
    ``/``, a container reached twice walked once, any depth walked without recursion.
    """
    return walk_leaves(obj, _as_ref)


def _as_ref(item: Any) -> TensorRef | None:
    if isinstance(item, TensorRef):
        return item
    if isinstance(item, StorageRef):
        return TensorRef(Kind.DENSE, item.dtype, (item.numel,), (1,), item.element_offset, item, note="a bare storage")
    return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream: io.BytesIO, persistent_load: Callable[[Any], Any]) -> None:
        super().__init__(stream)
        self._persistent = persistent_load

    def find_class(self, module: str, name: str) -> Any:
        # Looked up in our table, never imported: a refused name's module is not even loaded.
        try:
            return ALLOWED_GLOBALS[f"{module}.{name}"]
        except KeyError:
            raise Refused(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        return self._persistent(pid)

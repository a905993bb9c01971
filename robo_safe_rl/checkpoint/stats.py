"""Pure functions over checkpoint contents: name the part of a tensor, count its non-finite elements.

Nothing here touches files; :mod:`robo_safe_rl.checkpoint.loading` opens them and
:mod:`robo_safe_rl.checkpoint.report` puts the pieces together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import torch

from robo_safe_rl.safety.finite import NATIVE_FLOAT_DTYPES

CHUNK_ELEMENTS = 1 << 22
"""Elements per chunk when scanning a tensor (16 MiB of float32), so the memory used stays bounded by one chunk
whatever the tensor's size, and a chunk of a memory-mapped file can be released as soon as it is read."""

_OPTIMIZER_STATE_KEYS = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "step", "sum"})
"""Per-parameter state keys of torch's optimizers, used to recognise a bare optimizer state dict."""


class Part(str, Enum):
    """Which part of a policy checkpoint a tensor belongs to."""

    ACTOR = "actor"
    CRITIC = "critic"
    OPTIMIZER = "optimizer"
    OTHER = "other"


@dataclass(frozen=True)
class TensorRow:
    """Finite-value statistics of one tensor of a checkpoint.

    Attributes:
        name: Path of the tensor through the file, components joined with ``/``
            (``actor_state_dict/mlp.0.weight``, ``optimizer_state_dict/state/3/exp_avg_sq``).
        part: Which part of the checkpoint it belongs to (see :func:`classify_part`).
        dtype: torch dtype without the ``torch.`` prefix (``float32``).
        shape: Shape of the tensor.
        numel: Number of elements.
        nan: Number of NaN elements.
        posinf: Number of +Inf elements.
        neginf: Number of -Inf elements.
        min: Smallest finite element; ``None`` when the tensor has no finite element.
        max: Largest finite element; ``None`` when the tensor has no finite element.
        max_abs: Largest absolute value of the finite elements; ``None`` when there is none.
    """

    name: str
    part: Part
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nan: int
    posinf: int
    neginf: int
    min: float | int | None
    max: float | int | None
    max_abs: float | int | None

    @property
    def nonfinite(self) -> int:
        """Number of NaN, +Inf and -Inf elements together."""
        return self.nan + self.posinf + self.neginf

    @property
    def is_finite(self) -> bool:
        """Whether every element is finite."""
        return self.nonfinite == 0

    def to_dict(self) -> dict[str, Any]:
        """Return the row as plain JSON-ready values (no NaN or Inf can appear in it)."""
        return {**asdict(self), "part": self.part.value, "shape": list(self.shape)}


def classify_part(name: str) -> Part:
    """Say which part of a policy checkpoint a tensor belongs to, from its path.

    Recognised layouts: rsl-rl 5.x (``actor_state_dict``, ``critic_state_dict``, ``optimizer_state_dict``), older
    rsl-rl (``model_state_dict`` with ``actor.``/``critic.``/``std``/``log_std`` keys, ``obs_norm_state_dict`` for
    the policy's normaliser and ``privileged_obs_norm_state_dict`` for the critic's), bare model state dicts with
    the same key prefixes, and bare optimizer state dicts (``state/<index>/exp_avg``).

    Args:
        name: Path of the tensor as built by :func:`~robo_safe_rl.safety.finite.walk_tensors`.

    Returns:
        The part; :attr:`Part.OTHER` when the path names none of them (RND, ``infos``, unknown layouts).
    """
    parts = name.split("/")
    if any("optimizer" in p for p in parts[:-1]):
        return Part.OPTIMIZER
    if len(parts) >= 3 and parts[-3] == "state" and parts[-2].isdigit() and parts[-1] in _OPTIMIZER_STATE_KEYS:
        return Part.OPTIMIZER
    top = parts[0] if len(parts) > 1 else ""
    if top in ("actor_state_dict", "obs_norm_state_dict"):
        return Part.ACTOR
    if top in ("critic_state_dict", "privileged_obs_norm_state_dict"):
        return Part.CRITIC
    if top not in ("", "model_state_dict", "state_dict", "model"):
        return Part.OTHER
    head = parts[-1].split(".")[0]
    if head.startswith("actor") or head in ("std", "log_std", "distribution"):
        return Part.ACTOR
    if head.startswith("critic"):
        return Part.CRITIC
    return Part.OTHER


def tensor_stats(
    name: str,
    tensor: torch.Tensor,
    *,
    part: Part | None = None,
    on_chunk_done: Callable[[torch.Tensor], None] | None = None,
) -> TensorRow:
    """Count the NaN, +Inf and -Inf elements of a tensor and find the range of its finite elements.

    The tensor is scanned in chunks of :data:`CHUNK_ELEMENTS`, so the extra memory is bounded by one chunk. Integer
    and bool tensors are always finite. Complex tensors are scanned as their real and imaginary parts, so their
    counts are of components. Sparse tensors are scanned through their stored values.

    Args:
        name: Path of the tensor through the file.
        tensor: The tensor, on any device.
        part: Its part; derived from ``name`` with :func:`classify_part` when omitted.
        on_chunk_done: Called with each chunk once it has been read (used to release memory-mapped pages).

    Returns:
        The row of statistics. Shape and element count are those of ``tensor`` itself.
    """
    t = tensor.detach()
    shape, numel, dtype = tuple(t.shape), t.numel(), str(t.dtype).removeprefix("torch.")
    if t.layout == torch.sparse_coo:
        t = t.coalesce().values()
    elif t.layout != torch.strided:
        t = t.to_dense()
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.reshape(-1)
    nan = posinf = neginf = 0
    lo: float | int | None = None
    hi: float | int | None = None
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        chunk = flat[start : start + CHUNK_ELEMENTS]
        c_nan, c_pos, c_neg, c_lo, c_hi = _chunk_stats(chunk)
        nan, posinf, neginf = nan + c_nan, posinf + c_pos, neginf + c_neg
        if c_lo is not None and c_hi is not None:
            lo = c_lo if lo is None else min(lo, c_lo)
            hi = c_hi if hi is None else max(hi, c_hi)
        if on_chunk_done is not None:
            on_chunk_done(chunk)
    max_abs = None if lo is None or hi is None else max(abs(lo), abs(hi))
    return TensorRow(
        name=name,
        part=classify_part(name) if part is None else part,
        dtype=dtype,
        shape=shape,
        numel=numel,
        nan=nan,
        posinf=posinf,
        neginf=neginf,
        min=lo,
        max=hi,
        max_abs=max_abs,
    )


def _chunk_stats(chunk: torch.Tensor) -> tuple[int, int, int, float | int | None, float | int | None]:
    """Return ``(nan, posinf, neginf, finite_min, finite_max)`` of a 1-D chunk."""
    if chunk.numel() == 0:
        return 0, 0, 0, None, None
    if chunk.dtype == torch.bool:
        chunk = chunk.to(torch.uint8)
    if not chunk.is_floating_point():
        lo, hi = torch.aminmax(chunk)
        return 0, 0, 0, int(lo.item()), int(hi.item())
    if chunk.dtype not in NATIVE_FLOAT_DTYPES:
        chunk = chunk.float()
    # min and max propagate NaN and reach ±Inf, so finite extremes prove the whole chunk finite in one pass;
    # only a chunk that holds a non-finite element pays for the counts and the masked range.
    lo, hi = torch.aminmax(chunk)
    lo_f, hi_f = float(lo.item()), float(hi.item())
    if math.isfinite(lo_f) and math.isfinite(hi_f):
        return 0, 0, 0, lo_f, hi_f
    # count_nonzero of a mask is several times faster than mask.sum(), which widens the mask to int64 first. A chunk
    # that is all NaN (the usual state of a blown-up layer) stops after the first count.
    n = chunk.numel()
    nan = int(torch.count_nonzero(torch.isnan(chunk)))
    posinf = 0 if nan == n else int(torch.count_nonzero(chunk == math.inf))
    neginf = 0 if nan + posinf == n else int(torch.count_nonzero(chunk == -math.inf))
    if nan + posinf + neginf == n:
        return nan, posinf, neginf, None, None
    lo, hi = torch.aminmax(chunk[torch.isfinite(chunk)])
    return nan, posinf, neginf, float(lo.item()), float(hi.item())

"""Pure functions over checkpoint contents: walk the tensors, name their part, count their non-finite elements.

Nothing here touches files; :mod:`robo_safe_rl.checkpoint.loading` opens them and
:mod:`robo_safe_rl.checkpoint.report` puts the pieces together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import torch

from robo_safe_rl.checkpoint.chunks import chunk_stats, scan_dtype

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


@dataclass
class Counts:
    """Non-finite counts and finite range, accumulated over chunks (see :func:`chunk_stats`)."""

    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    min: float | int | None = None
    max: float | int | None = None

    def add(self, nan: int, posinf: int, neginf: int, lo: float | int | None, hi: float | int | None) -> None:
        """Fold the statistics of one more chunk in."""
        self.nan, self.posinf, self.neginf = self.nan + nan, self.posinf + posinf, self.neginf + neginf
        if lo is not None and hi is not None:
            self.min = lo if self.min is None else min(self.min, lo)
            self.max = hi if self.max is None else max(self.max, hi)

    def scaled(self, times: int, *, negative: bool = False) -> Counts:
        """The counts of a view that repeats every element ``times`` times (stride 0), negated if ``negative``."""
        lo, hi = (self.min, self.max) if not negative or self.min is None else (-self.max, -self.min)  # type: ignore[operator]
        pos, neg = (self.neginf, self.posinf) if negative else (self.posinf, self.neginf)
        return Counts(self.nan * times, pos * times, neg * times, lo, hi)


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
        scope: What the counts are of: ``tensor`` (its own elements), ``storage`` (the whole storage it views: an
            overlapping view, or one too large to scan apart) or ``none`` (nothing could be scanned: a meta tensor).
        note: Why the scope is not ``tensor``, or what kind of tensor it is (``sparse_csr: the 12 stored values``).
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
    scope: str = "tensor"
    note: str | None = None

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
        name: Path of the tensor as built by :func:`~robo_safe_rl.safety.walk.walk_tensors`.

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
    shape = tuple(t.shape) if not t.is_nested else (t.values().numel(),)
    numel, dtype = (t.numel() if not t.is_nested else shape[0]), str(t.dtype).removeprefix("torch.")
    note = None
    if t.device.type == "meta":
        return row_from_counts(name, part, dtype, shape, numel, Counts(), scope="none", note="a meta tensor: no data")
    if t.is_quantized:
        t = t.int_repr()
    elif t.is_nested:
        t, note = t.values(), "nested: counts of its buffer"
    elif t.layout == torch.sparse_coo:
        t, note = t.coalesce().values(), "sparse_coo: counts of its stored values"
    elif t.layout != torch.strided:
        t, note = t.values(), f"{str(t.layout).removeprefix('torch.')}: counts of its stored values"
    if t.is_complex():
        t = torch.view_as_real(t)
    counts = Counts()
    if scan_dtype(t.dtype) is not None:
        flat = t.reshape(-1)
        for start in range(0, flat.numel(), CHUNK_ELEMENTS):
            chunk = flat[start : start + CHUNK_ELEMENTS]
            counts.add(*chunk_stats(chunk))
            if on_chunk_done is not None:
                on_chunk_done(chunk)
    return row_from_counts(name, part, dtype, shape, numel, counts, note=note)


def row_from_counts(
    name: str,
    part: Part | None,
    dtype: str,
    shape: tuple[int, ...],
    numel: int,
    counts: Counts,
    *,
    scope: str = "tensor",
    note: str | None = None,
) -> TensorRow:
    """Build a :class:`TensorRow` from accumulated counts (``part`` derived from ``name`` when ``None``)."""
    lo, hi = counts.min, counts.max
    max_abs = None if lo is None or hi is None else max(abs(lo), abs(hi))
    return TensorRow(
        name=name,
        part=classify_part(name) if part is None else part,
        dtype=dtype,
        shape=shape,
        numel=numel,
        nan=counts.nan,
        posinf=counts.posinf,
        neginf=counts.neginf,
        min=lo,
        max=hi,
        max_abs=max_abs,
        scope=scope,
        note=note,
    )

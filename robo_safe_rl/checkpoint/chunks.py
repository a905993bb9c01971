"""Non-finite counts and finite range of one 1-D chunk, for every dtype torch has (pure functions, no files)."""

from __future__ import annotations

import math

import torch

from robo_safe_rl.safety.finite import NATIVE_FLOAT_DTYPES

_WIDENED_INT_DTYPES = (torch.uint16, torch.uint32)
"""Unsigned dtypes without CPU min/max kernels; widened to int64, which holds every value exactly."""

PACKED_DTYPES = frozenset(
    [getattr(torch, f"{kind}{bits}") for kind in ("int", "uint") for bits in range(1, 8)]
    + [torch.float4_e2m1fn_x2, torch.quint4x2, torch.quint2x4]
)
"""Sub-byte dtypes packed several values to a byte. They have no kernels to compute with; no bit pattern of theirs
is NaN or Inf (float4_e2m1fn has no such encodings), so they are finite by construction and their range is not
computed."""

OPAQUE_DTYPES = frozenset([torch.bits1x8, torch.bits2x4, torch.bits4x2, torch.bits8, torch.bits16])
"""Raw bit containers: their bytes have no numeric meaning, so there is nothing to call finite or not."""

QUANTIZED_REPR = {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.qint32: torch.int32}
"""The integer type a quantized tensor's storage holds; always finite (the float values come from its scale)."""

_COMPONENT = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


def scan_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a storage's bytes are scanned as: complex as its real components, quantized as its integers;
    ``None`` for packed and opaque dtypes, which have nothing to scan."""
    if dtype in PACKED_DTYPES or dtype in OPAQUE_DTYPES:
        return None
    return _COMPONENT.get(dtype, QUANTIZED_REPR.get(dtype, dtype))


def chunk_stats(chunk: torch.Tensor) -> tuple[int, int, int, float | int | None, float | int | None]:
    """Return ``(nan, posinf, neginf, finite_min, finite_max)`` of a 1-D chunk of any real dtype.

    Packed and opaque dtypes (see :func:`scan_dtype`) have no range: ``(0, 0, 0, None, None)``.
    """
    if chunk.numel() == 0 or scan_dtype(chunk.dtype) is None:
        return 0, 0, 0, None, None
    if chunk.dtype == torch.bool:
        chunk = chunk.to(torch.uint8)
    elif chunk.dtype in _WIDENED_INT_DTYPES:
        chunk = chunk.to(torch.int64)
    elif chunk.dtype == torch.uint64:
        return (0, 0, 0, *_uint64_range(chunk))
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


def _uint64_range(chunk: torch.Tensor) -> tuple[int, int]:
    """Unsigned range of a uint64 chunk: its bits read as int64, values of 2**63 and up appear negative."""
    signed = chunk.view(torch.int64)
    high = signed < 0
    n_high = int(torch.count_nonzero(high))
    if n_high == 0:
        lo, hi = torch.aminmax(signed)
        return int(lo.item()), int(hi.item())
    top = int(signed[high].max().item()) + (1 << 64)
    if n_high == signed.numel():
        return int(signed.min().item()) + (1 << 64), top
    return int(signed[~high].min().item()), top

"""Pure functions: per-tensor statistics, naming the part of a tensor."""

from __future__ import annotations

import pytest
import torch

from robo_safe_rl.checkpoint import stats
from robo_safe_rl.checkpoint.stats import Part, TensorRow, classify_part, tensor_stats

NAN, INF = float("nan"), float("inf")
NONFINITE = pytest.mark.parametrize(
    ("value", "field"), [(NAN, "nan"), (INF, "posinf"), (-INF, "neginf")], ids=["nan", "posinf", "neginf"]
)


def _counts(row: TensorRow) -> tuple[int, int, int]:
    return row.nan, row.posinf, row.neginf


def test_mixed_tensor_worked_example() -> None:
    # [[1.0, NaN, -3.0], [+Inf, 2.5, -Inf]]: one of each kind; finite elements 1.0, -3.0, 2.5
    # -> min -3.0, max 2.5, max|x| 3.0.
    t = torch.tensor([[1.0, NAN, -3.0], [INF, 2.5, -INF]])
    row = tensor_stats("actor_state_dict/mlp.0.weight", t)
    assert row == TensorRow("actor_state_dict/mlp.0.weight", Part.ACTOR, "float32", (2, 3), 6, 1, 1, 1, -3.0, 2.5, 3.0)
    assert row.nonfinite == 3 and not row.is_finite


@NONFINITE
def test_each_kind_counted_apart(value: float, field: str) -> None:
    # [0.5, -2.0, v, v]: two elements of the kind under test; finite ones 0.5 and -2.0.
    row = tensor_stats("w", torch.tensor([0.5, -2.0, value, value]))
    expected = {"nan": 0, "posinf": 0, "neginf": 0, field: 2}
    assert _counts(row) == (expected["nan"], expected["posinf"], expected["neginf"])
    assert (row.min, row.max, row.max_abs) == (-2.0, 0.5, 2.0)


@NONFINITE
def test_no_finite_element_has_no_range(value: float, field: str) -> None:
    row = tensor_stats("std", torch.full((3,), value))
    assert getattr(row, field) == 3
    assert (row.min, row.max, row.max_abs) == (None, None, None)


@NONFINITE
def test_chunks_are_combined(monkeypatch: pytest.MonkeyPatch, value: float, field: str) -> None:
    # Chunks of 4 over [-1, 0, 1, 2 | 3, v, 5, 6 | 7, -8]: the non-finite element sits in the middle chunk, the
    # extremes in the first and last ones -> min -8.0, max 7.0, max|x| 8.0, one non-finite element.
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 4)
    seen: list[int] = []
    t = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.0, value, 5.0, 6.0, 7.0, -8.0]).reshape(2, 5)
    row = tensor_stats("w", t, on_chunk_done=lambda chunk: seen.append(chunk.numel()))
    assert getattr(row, field) == 1 and row.nonfinite == 1
    assert (row.min, row.max, row.max_abs) == (-8.0, 7.0, 8.0)
    assert seen == [4, 4, 2]


@NONFINITE
def test_large_tensor_over_several_real_chunks(value: float, field: str) -> None:
    # 2.5 chunks of zeros with 1.5 at index 7, -4.0 at the last index and the bad value at 3 chunk offsets.
    n = stats.CHUNK_ELEMENTS * 5 // 2
    t = torch.zeros(n)
    t[7], t[-1] = 1.5, -4.0
    bad = [1, stats.CHUNK_ELEMENTS + 3, 2 * stats.CHUNK_ELEMENTS + 11]
    t[bad] = value
    row = tensor_stats("big", t)
    assert getattr(row, field) == 3 and row.nonfinite == 3
    assert (row.min, row.max, row.max_abs) == (-4.0, 1.5, 4.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@NONFINITE
def test_other_float_dtypes(dtype: torch.dtype, value: float, field: str) -> None:
    row = tensor_stats("w", torch.tensor([0.25, value, -0.5]).to(dtype))
    assert getattr(row, field) == 1
    assert (row.dtype, row.min, row.max, row.max_abs) == (str(dtype).removeprefix("torch."), -0.5, 0.25, 0.5)


def test_float8_is_widened() -> None:
    # float8_e4m3fn has no Inf; NaN is its only non-finite value. 0.5 and -2.0 are exact in it.
    row = tensor_stats("w", torch.tensor([0.5, NAN, -2.0]).to(torch.float8_e4m3fn))
    assert (row.dtype, _counts(row), row.min, row.max) == ("float8_e4m3fn", (1, 0, 0), -2.0, 0.5)


def test_integer_and_bool_tensors_are_finite() -> None:
    count = tensor_stats("actor_state_dict/obs_normalizer.count", torch.tensor(64))
    assert (count.dtype, count.shape, count.numel, count.nonfinite, count.min, count.max) == ("int64", (), 1, 0, 64, 64)
    flags = tensor_stats("mask", torch.tensor([True, False]))
    assert (flags.nonfinite, flags.min, flags.max, flags.max_abs) == (0, 0, 1, 1)


def test_complex_counts_components() -> None:
    # (1+NaN j, -3+0j): components 1, NaN, -3, 0 -> one NaN, range [-3, 1].
    row = tensor_stats("z", torch.tensor([complex(1, NAN), complex(-3, 0)]))
    assert (row.shape, row.numel, _counts(row), row.min, row.max) == ((2,), 2, (1, 0, 0), -3.0, 1.0)


def test_empty_tensor() -> None:
    row = tensor_stats("e", torch.empty(0, 4))
    assert (row.shape, row.numel, row.nonfinite, row.min, row.max, row.max_abs) == ((0, 4), 0, 0, None, None, None)


def test_row_to_dict_is_json_ready() -> None:
    row = tensor_stats("critic_state_dict/mlp.0.bias", torch.tensor([NAN, 1.0]))
    assert row.to_dict() == {
        "name": "critic_state_dict/mlp.0.bias",
        "part": "critic",
        "dtype": "float32",
        "shape": [2],
        "numel": 2,
        "nan": 1,
        "posinf": 0,
        "neginf": 0,
        "min": 1.0,
        "max": 1.0,
        "max_abs": 1.0,
        "scope": "tensor",
        "note": None,
    }


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("actor_state_dict/mlp.0.weight", Part.ACTOR),
        ("actor_state_dict/distribution.std_param", Part.ACTOR),
        ("actor_state_dict/obs_normalizer._mean", Part.ACTOR),
        ("critic_state_dict/mlp.4.bias", Part.CRITIC),
        ("optimizer_state_dict/state/3/exp_avg_sq", Part.OPTIMIZER),
        ("rnd_optimizer_state_dict/state/0/exp_avg", Part.OPTIMIZER),
        ("model_state_dict/actor.0.weight", Part.ACTOR),
        ("model_state_dict/std", Part.ACTOR),
        ("model_state_dict/log_std", Part.ACTOR),
        ("model_state_dict/actor_obs_normalizer._mean", Part.ACTOR),
        ("model_state_dict/critic.2.bias", Part.CRITIC),
        ("obs_norm_state_dict/_mean", Part.ACTOR),
        ("privileged_obs_norm_state_dict/_var", Part.CRITIC),
        ("actor.0.weight", Part.ACTOR),
        ("std", Part.ACTOR),
        ("critic.0.weight", Part.CRITIC),
        ("state/0/exp_avg", Part.OPTIMIZER),
        ("rnd_state_dict/predictor.0.weight", Part.OTHER),
        ("infos/actor_loss", Part.OTHER),
        ("mlp.0.weight", Part.OTHER),
    ],
)
def test_classify_part(name: str, part: Part) -> None:
    assert classify_part(name) is part

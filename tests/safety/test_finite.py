"""The finiteness helpers (robo_safe_rl.safety.finite), with expected values worked out by hand."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pytest
import torch

from robo_safe_rl.safety.finite import (
    all_finite,
    all_finite_flag,
    describe_nonfinite,
    find_nonfinite,
    json_fields,
    json_float,
    nonfinite_state_keys,
)

NAN, INF = math.nan, math.inf
NONFINITE = pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "+inf", "-inf"])


@NONFINITE
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_catches_each_nonfinite_value(value: float, dtype: type) -> None:
    x = np.linspace(-1, 1, 28).astype(dtype)
    assert all_finite(x)
    x[17] = value
    assert not all_finite(x)
    assert not all_finite(x.reshape(4, 7))  # the elementwise path


def test_all_finite_is_not_fooled_by_overflow_of_the_dot_product() -> None:
    # 1e20 squared is 1e40, beyond float32's 3.4e38: the fast test overflows, the confirmation finds it finite.
    x = np.array([1e20, 0.0], dtype=np.float32)
    with np.errstate(over="ignore"):
        assert math.isinf(float(x.dot(x)))
        assert all_finite(x)


def test_describe_nonfinite() -> None:
    x = np.array([0.0, NAN, 1.0, -INF, INF])
    assert describe_nonfinite(x) == "3 of 5 elements non-finite: [1]=nan, [3]=-inf, [4]=inf"
    assert describe_nonfinite(np.full(10, NAN), max_items=2) == (
        "10 of 10 elements non-finite: [0]=nan, [1]=nan, ... (8 more)"
    )
    assert describe_nonfinite(np.zeros(3)) == "all finite"
    # Tensors of any float dtype, complex as (real, imaginary) pairs: [1+0j, nan+0j] -> [1, 0, nan, 0].
    assert describe_nonfinite(torch.tensor([[1.0, 2.0], [INF, 3.0]], dtype=torch.bfloat16)) == (
        "1 of 4 elements non-finite: [2]=inf"
    )
    assert describe_nonfinite(torch.tensor([1.0, NAN], dtype=torch.complex64)) == "1 of 4 elements non-finite: [2]=nan"


def test_nonfinite_state_keys_in_key_order() -> None:
    state = {"base_pos": np.zeros(3), "joint_vel": np.array([1.0, NAN]), "potential": np.array(-INF)}
    assert nonfinite_state_keys(state) == ["joint_vel", "potential"]


@NONFINITE
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64])
def test_all_finite_flag(dtype: torch.dtype, value: float) -> None:
    clean = torch.tensor([[1.0, -2.0], [3.0, 4.0]]).to(dtype)
    assert all_finite_flag(clean).item() is True
    bad = clean.clone()
    bad[1, 0] = value
    assert all_finite_flag(bad).item() is False
    assert all_finite_flag(bad.t()).item() is False  # non-contiguous view
    assert all_finite_flag(bad).shape == ()


def test_all_finite_flag_special_dtypes() -> None:
    assert all_finite_flag(torch.empty(0)).item() is True
    assert all_finite_flag(torch.tensor([1, 2])).item() is True
    assert all_finite_flag(torch.tensor([True])).item() is True
    assert all_finite_flag(torch.tensor([1.0, NAN]).to(torch.float8_e4m3fn)).item() is False


@NONFINITE
def test_find_nonfinite_names_every_bad_floating_tensor_in_walk_order(value: float) -> None:
    # An rsl-rl-shaped checkpoint: a normaliser's mean with one bad element, an integer step counter (never
    # non-finite), and an Adam moment that is bad everywhere.
    mean = torch.tensor([[0.0, 1.0, value, 3.0]])
    moment = torch.full((2,), value)
    obj = {
        "actor_state_dict": {"mlp.0.weight": torch.ones(2, 2), "obs_normalizer._mean": mean},
        "optimizer_state_dict": {"state": {0: {"step": torch.tensor(3), "exp_avg": moment}}},
        "iter": 2,
    }
    assert find_nonfinite({"clean": torch.ones(3), "iter": 1}) == []
    found = find_nonfinite(obj)
    assert [name for name, _ in found] == [
        "actor_state_dict/obs_normalizer._mean",
        "optimizer_state_dict/state/0/exp_avg",
    ]
    assert found[0][1] is mean and found[1][1] is moment


def test_json_float() -> None:
    assert [json_float(v) for v in (1.5, NAN, INF, -INF)] == [1.5, "nan", "inf", "-inf"]


class _Colour(str, Enum):
    red = "red"


@dataclass
class _Row:
    colour: _Colour
    where: Path
    shape: tuple[int, ...]
    value: float
    values: np.ndarray
    state: dict[str, np.ndarray]
    count: int = 0
    note: str | None = None


def test_json_fields_makes_asdict_strict_json() -> None:
    row = _Row(_Colour.red, Path("runs/a"), (2, 1), -INF, np.array([[1.0], [NAN]]), {"vel": np.array(2.5)})
    as_json = asdict(row, dict_factory=json_fields)
    assert as_json == {
        "colour": "red",
        "where": "runs/a",
        "shape": [2, 1],
        "value": "-inf",
        "values": [1.0, "nan"],
        "state": {"vel": [2.5]},
        "count": 0,
        "note": None,
    }
    json.dumps(as_json, allow_nan=False)  # strict JSON: no NaN literal anywhere

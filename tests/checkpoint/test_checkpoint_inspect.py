"""Inspecting real rsl-rl 5.5 checkpoints, corrupted in known tensors, in every supported format."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_factory import ACTOR_TENSORS, ALL_TENSORS, CRITIC_TENSORS, OPTIMIZER_TENSORS
from safetensors.torch import save_file

from robo_safe_rl.checkpoint import Format, Part, Status, TensorRow, inspect_file, to_json

NAN, INF = float("nan"), float("inf")
NONFINITE = pytest.mark.parametrize(
    ("value", "field"), [(NAN, "nan"), (INF, "posinf"), (-INF, "neginf")], ids=["nan", "posinf", "neginf"]
)


def _corrupt(ckpt: dict[str, Any], value: float) -> None:
    """Put ``value`` into four known tensors: a weight, a bias, the std parameter and an Adam moment."""
    actor, critic = ckpt["actor_state_dict"], ckpt["critic_state_dict"]
    # mlp.0.weight (8, 5) := arange(40) * 0.25 - 5, i.e. -5.0, -4.75, ..., 4.75; the first (-5.0) and the last (4.75)
    # become bad -> finite min -4.75 (index 1), max 4.5 (index 38), max|x| 4.75.
    w = torch.arange(40, dtype=torch.float32).reshape(8, 5) * 0.25 - 5.0
    w[0, 0], w[7, 4] = value, value
    actor["mlp.0.weight"].copy_(w)
    # The std parameter (3,): all three bad -> no finite element.
    actor["distribution.std_param"].fill_(value)
    # critic mlp.2.bias (8,) := 0.5, 1.0, ..., 4.0 with index 3 (2.0) bad -> min 0.5, max 4.0, max|x| 4.0.
    b = torch.arange(1, 9, dtype=torch.float32) * 0.5
    b[3] = value
    critic["mlp.2.bias"].copy_(b)
    # Adam's second moment of parameter 3 (the actor's mlp.2.weight, (8, 8)) := 0.25 with row 4 bad -> 8 bad elements.
    m = ckpt["optimizer_state_dict"]["state"][3]["exp_avg_sq"]
    m.fill_(0.25)
    m[4] = value


def _expected_rows(field: str, prefix: str = "") -> list[TensorRow]:
    def row(name: str, part: Part, shape: tuple[int, ...], bad: int, lo: Any, hi: Any, top: Any) -> TensorRow:
        counts = {"nan": 0, "posinf": 0, "neginf": 0, field: bad}
        numel = int(torch.tensor(shape).prod()) if shape else 1
        return TensorRow(prefix + name, part, "float32", shape, numel, *counts.values(), lo, hi, top)  # type: ignore[arg-type]

    return [
        row("actor_state_dict/distribution.std_param", Part.ACTOR, (3,), 3, None, None, None),
        row("actor_state_dict/mlp.0.weight", Part.ACTOR, (8, 5), 2, -4.75, 4.5, 4.75),
        row("critic_state_dict/mlp.2.bias", Part.CRITIC, (8,), 1, 0.5, 4.0, 4.0),
        row("optimizer_state_dict/state/3/exp_avg_sq", Part.OPTIMIZER, (8, 8), 8, 0.25, 0.25, 0.25),
    ]


def test_clean_checkpoint(rsl_checkpoint: dict[str, Any], save_as: Callable[..., Path]) -> None:
    report = inspect_file(save_as(rsl_checkpoint))
    assert (report.status, report.iteration, report.format) == (Status.CLEAN, 2, Format.TORCH_ZIP)
    assert len(report.rows) == ALL_TENSORS and report.nonfinite_rows == []
    assert report.part_counts() == {
        Part.ACTOR: (ACTOR_TENSORS, 0),
        Part.CRITIC: (CRITIC_TENSORS, 0),
        Part.OPTIMIZER: (OPTIMIZER_TENSORS, 0),
        Part.OTHER: (0, 0),
    }
    # The finite statistics match the tensors themselves.
    row = next(r for r in report.rows if r.name == "actor_state_dict/mlp.2.weight")
    w = rsl_checkpoint["actor_state_dict"]["mlp.2.weight"]
    assert (row.min, row.max, row.max_abs) == (w.min().item(), w.max().item(), w.abs().max().item())


@NONFINITE
def test_corrupt_layers_give_exact_rows(
    rsl_checkpoint: dict[str, Any], save_as: Callable[..., Path], value: float, field: str
) -> None:
    _corrupt(rsl_checkpoint, value)
    report = inspect_file(save_as(rsl_checkpoint))
    assert report.status is Status.CORRUPT
    assert report.nonfinite_rows == _expected_rows(field)
    assert report.part_counts() == {
        Part.ACTOR: (ACTOR_TENSORS, 2),
        Part.CRITIC: (CRITIC_TENSORS, 1),
        Part.OPTIMIZER: (OPTIMIZER_TENSORS, 1),
        Part.OTHER: (0, 0),
    }
    doc = to_json(report)
    json.dumps(doc, allow_nan=False)  # no NaN/Inf can leak into the document
    summary = doc["checkpoints"][0]
    assert (summary["status"], summary["tensors"], summary["nonfinite_tensors"], summary[field]) == (
        "corrupt",
        ALL_TENSORS,
        4,
        3 + 2 + 1 + 8,
    )
    assert [r["name"] for r in summary["rows"]] == [r.name for r in _expected_rows(field)]


@NONFINITE
def test_weights_clean_but_adam_moment_bad(
    rsl_checkpoint: dict[str, Any], save_as: Callable[..., Path], value: float, field: str
) -> None:
    rsl_checkpoint["optimizer_state_dict"]["state"][0]["exp_avg"][1] = value
    path = save_as(rsl_checkpoint)
    report = inspect_file(path)
    assert report.status is Status.CORRUPT
    assert [(r.name, getattr(r, field)) for r in report.nonfinite_rows] == [("optimizer_state_dict/state/0/exp_avg", 1)]
    # Skipping the optimizer hides the bad moment: the weights alone are clean.
    no_opt = inspect_file(path, include_optimizer=False)
    assert (no_opt.status, len(no_opt.rows)) == (Status.CLEAN, ACTOR_TENSORS + CRITIC_TENSORS)


@NONFINITE
def test_legacy_torch_format(
    rsl_checkpoint: dict[str, Any], save_as: Callable[..., Path], value: float, field: str
) -> None:
    _corrupt(rsl_checkpoint, value)
    report = inspect_file(save_as(rsl_checkpoint, _use_new_zipfile_serialization=False))
    assert (report.format, report.iteration) == (Format.TORCH_LEGACY, 2)
    assert report.nonfinite_rows == _expected_rows(field)


@NONFINITE
def test_older_rsl_rl_model_state_dict(
    rsl_checkpoint: dict[str, Any], save_as: Callable[..., Path], value: float, field: str
) -> None:
    # rsl-rl before 5.x: one ActorCritic module; keys "actor.<i>.weight", "critic.<i>.weight" and "std".
    actor, critic = rsl_checkpoint["actor_state_dict"], rsl_checkpoint["critic_state_dict"]
    model = {"std": actor["distribution.std_param"]}
    model |= {f"actor.{k.removeprefix('mlp.')}": v for k, v in actor.items() if k.startswith("mlp.")}
    model |= {f"critic.{k.removeprefix('mlp.')}": v for k, v in critic.items() if k.startswith("mlp.")}
    model["std"][1] = value
    model["critic.2.bias"][0] = value
    old = {"model_state_dict": model, "optimizer_state_dict": rsl_checkpoint["optimizer_state_dict"], "iter": 1500}
    report = inspect_file(save_as(old, "model_1500.pt"))
    assert report.iteration == 1500
    assert [(r.name, r.part, getattr(r, field)) for r in report.nonfinite_rows] == [
        ("model_state_dict/std", Part.ACTOR, 1),
        ("model_state_dict/critic.2.bias", Part.CRITIC, 1),
    ]


def test_bare_state_dict_and_nesting(save_as: Callable[..., Path]) -> None:
    bare = {"mlp.0.weight": torch.tensor([[1.0, NAN]]), "mlp.0.bias": torch.zeros(1)}
    report = inspect_file(save_as(bare, "policy.pt"))
    assert report.iteration is None
    assert [(r.name, r.part, r.nan, r.min) for r in report.nonfinite_rows] == [("mlp.0.weight", Part.OTHER, 1, 1.0)]
    nested = {"nets": [torch.ones(2), (torch.tensor([-INF]), {"deep": torch.tensor([INF, 3.0])})], "iter": 7}
    report = inspect_file(save_as(nested, "nested.pt"))
    assert report.iteration == 7
    assert [(r.name, r.neginf, r.posinf) for r in report.nonfinite_rows] == [
        ("nets/1/0", 1, 0),
        ("nets/1/1/deep", 0, 1),
    ]


@NONFINITE
def test_safetensors(rsl_checkpoint: dict[str, Any], tmp_path: Path, value: float, field: str) -> None:
    _corrupt(rsl_checkpoint, value)
    flat = {f"actor_state_dict/{k}": v for k, v in rsl_checkpoint["actor_state_dict"].items()}
    flat |= {f"critic_state_dict/{k}": v for k, v in rsl_checkpoint["critic_state_dict"].items()}
    path = tmp_path / "policy.safetensors"
    save_file(flat, path, metadata={"iter": "2"})
    report = inspect_file(path)
    assert (report.format, report.iteration, len(report.rows)) == (
        Format.SAFETENSORS,
        2,
        ACTOR_TENSORS + CRITIC_TENSORS,
    )
    assert report.nonfinite_rows == _expected_rows(field)[:3]


def test_checkpoint_saved_from_views_and_noncontiguous_tensors(save_as: Callable[..., Path]) -> None:
    # A transposed view is saved with its strides; statistics are over its elements, whatever the layout.
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    base[1, 2] = NAN
    report = inspect_file(save_as({"t": base.t(), "slice": base[:, 1]}, "views.pt"))
    assert [(r.name, r.shape, r.nan, r.min, r.max) for r in report.rows] == [
        ("t", (3, 2), 1, 0.0, 4.0),
        ("slice", (2,), 0, 1.0, 4.0),
    ]

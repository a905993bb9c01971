"""``--policy CKPT``: a checkpoint's actor rebuilt and run in the Ant under SafeStep, its first bad action reported."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from diagnose_factory import ANT, make_actor, save_policy
from tensordict import TensorDict

from robo_safe_rl.checkpoint.policy import load_policy
from robo_safe_rl.diagnose.cli import main
from robo_safe_rl.rundir import TRAIN_CFG_FILE


def _vet(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_nan_policy_emits_its_first_bad_action_at_step_0(
    policy_run: Path, copy_run: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(policy_run)
    code, doc = _vet(capsys, ["--policy", str(run / "model_10.pt"), "--steps", "30"])  # task from config.yaml
    vet = doc["vet"]
    assert code == doc["exit_code"] == 1 and doc["mode"] == "policy"
    assert (vet["task"], vet["iteration"], vet["steps_run"], vet["network"]["source"]) == (ANT, 10, 30, TRAIN_CFG_FILE)
    assert vet["first_bad"]["step"] == 0 and vet["first_bad"]["obs_finite"] is True
    assert vet["first_bad"]["action"]["nonfinite"] == 8 and vet["nonfinite_actions"] == 30
    assert vet["inspection"]["actor_layers"] == ["actor_state_dict/mlp.0.weight"]
    assert doc["verdicts"] == [
        "bad actions from a corrupted policy: model_10.pt has 1 non-finite tensor (actor_state_dict/mlp.0.weight); "
        "first non-finite action at step 0 from a finite observation"
    ]
    # SafeStep sanitised every action and recorded the first ones, which diagnose then explains.
    assert vet["safe_step"]["nonfinite_actions"] == 30 and vet["incidents_written"] == 20
    code, doc = _vet(capsys, [vet["incidents_dir"], "--steps", "3"])
    assert code == 1 and doc["groups"][0]["checkpoints"] == ["model_10.pt"]
    assert doc["incidents"][0]["replay"]["raw"]["outcome"] == "nonfinite_state"


def test_the_network_comes_from_the_saved_train_dict_and_actions_can_be_sampled(
    policy_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "model_10.pt"
    shutil.copy(policy_run / "model_10.pt", alone)
    shutil.copy(policy_run / TRAIN_CFG_FILE, tmp_path / TRAIN_CFG_FILE)  # no config.yaml: the task is given
    code, doc = _vet(capsys, ["--policy", str(alone), "--task", ANT, "--steps", "3", "--stochastic"])
    vet = doc["vet"]
    assert code == 1 and vet["first_bad"]["step"] == 0 and vet["stochastic"]
    assert (vet["network"]["actor"]["hidden_dims"], vet["network"]["obs_dim"]) == ([16, 16], 28)


def test_a_checkpoint_without_its_train_dict_is_refused_not_guessed(
    policy_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "model_10.pt"
    shutil.copy(policy_run / "model_10.pt", alone)  # as an older run left it: weights only
    assert main(["--policy", str(alone), "--task", ANT, "--steps", "3"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"diagnose: {alone}: no {TRAIN_CFG_FILE} beside it")


def test_a_policy_in_bounds_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The last layer is zero, so every action is exactly 0: inside [-1, 1]. A run directory names its newest clean
    # checkpoint.
    checkpoint = save_policy(make_actor(zero_output=True), tmp_path / "model_3.pt", 3)
    assert main(["--policy", str(checkpoint.parent), "--task", ANT, "--steps", "25"]) == 0
    out = capsys.readouterr().out
    assert "first bad action: none" in out
    assert out.rstrip().endswith(
        "- no bad action in 25 steps (deterministic actions); model_3.pt is clean (7 tensors finite)"
    )


def test_rebuilt_actor_matches_the_trained_one(policy_run: Path) -> None:
    actor = make_actor()
    policy = load_policy(policy_run / "model_5.pt")
    obs = torch.randn(4, 28)
    td = TensorDict({"policy": obs}, batch_size=[4])
    assert policy.iteration == 5
    assert torch.equal(policy.actor(td), actor(td))


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--policy", "{tmp}/none.pt", "--task", ANT], "no such checkpoint"),
        (["--policy", "{run}/model_10.pt", "--task", "RoboSafe/Nope-v0"], "RoboSafe/Nope-v0"),
        (["--policy", "{tmp}/model_1.pt"], "no --task given and no config.yaml"),
        (["--policy", "{tmp}/junk.pt", "--task", ANT], "not a checkpoint"),
        (["--policy", "{tmp}/foreign.pt", "--task", ANT], "not an rsl-rl checkpoint: it holds no actor_state_dict"),
        (["--policy", "{tmp}/other/model_1.pt", "--task", ANT], "the actor maps 30 observations to 8 actions"),
    ],
)
def test_unusable_policy_input_exits_2(
    policy_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], why: str
) -> None:
    save_policy(make_actor(), tmp_path / "model_1.pt", 1)
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    torch.save({"model": make_actor().state_dict()}, tmp_path / "foreign.pt")  # a torch checkpoint, not rsl-rl's
    save_policy(make_actor(obs_dim=30), tmp_path / "other" / "model_1.pt", 1, obs_dim=30)
    code = main([a.format(tmp=tmp_path, run=policy_run) for a in argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("diagnose: ") and why in line

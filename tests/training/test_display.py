"""The training displays: rsl-rl's block byte for byte, plain lines on a worked example, the compact view's counters
on a terminal, and which display a mode becomes where stdout goes."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from rsl_rl.utils.logger import Logger

from robo_safe_rl.config.display import DisplayMode
from robo_safe_rl.training.display import (
    Displays,
    IterationStats,
    PlainDisplay,
    RslDisplay,
    make_display,
    safety_shown,
)
from robo_safe_rl.training.display_compact import CompactDisplay
from robo_safe_rl.training.logger import SafeLogger

ESCAPE = "\x1b"


def stats(it: int, total: int = 8, **changes: object) -> IterationStats:
    figures: dict = {
        "iteration": it,
        "start_iteration": 0,
        "total_iterations": total,
        "total_steps": 384 * (it + 1),
        "steps_per_s": 1234,
        "collect_time": 0.2,
        "learn_time": 0.1,
        "elapsed_s": 0.3 * (it + 1),
        "eta_s": 0.3 * (total - it - 1),
        "losses": {"value": 0.5, "surrogate": -0.01, "entropy": 2.8},
        "learning_rate": 1e-3,
        "action_std": 1.0,
        "mean_return": 10.0 + it,
        "mean_episode_length": 100.0,
        "safety": {"rollbacks": 0, "actions_sanitised": 40},
    }
    return IterationStats(**{**figures, **changes})


def logger_cfg() -> dict:
    return {"num_steps_per_env": 3, "algorithm": {}, "logger": "tensorboard", "run_name": "drill"}


def feed(logger: Logger) -> None:
    """Three steps of 2 envs; env 1 ends an episode at step 2 (return 1 + 2 = 3, length 2), with episode terms."""
    for step in range(3):
        dones = torch.tensor([0.0, 1.0 if step == 1 else 0.0])
        extras = {"episode": {"rew_alive": torch.tensor(0.5), "Episode/return": torch.tensor([3.0])}} if step else {}
        logger.process_env_step(torch.tensor([1.0, float(step + 1)]), dones, extras)


def test_the_rsl_display_prints_rsl_rls_own_block_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kwargs = {"num_envs": 2, "is_distributed": False, "gpu_world_size": 1, "gpu_global_rank": 0, "device": "cpu"}
    call = {
        "it": 4,
        "start_it": 3,
        "total_it": 10,
        "collect_time": 0.25,
        "learn_time": 0.125,
        "loss_dict": {"value": 0.75, "surrogate": -0.03125, "entropy": 2.5},
        "learning_rate": 3e-4,
        "action_std": torch.tensor([0.5, 1.5]),
        "rnd_weight": None,
    }
    theirs = Logger(log_dir=str(tmp_path / "rsl"), cfg=logger_cfg(), env_cfg={}, **kwargs)
    ours = SafeLogger(display=RslDisplay(), log_dir=str(tmp_path / "ours"), cfg=logger_cfg(), env_cfg={}, **kwargs)
    for logger in (theirs, ours):
        logger.init_logging_writer()
        feed(logger)
    capsys.readouterr()
    theirs.log(**call)
    expected = capsys.readouterr().out
    ours.log_iteration(safety={"rollbacks": 0.0}, counters={"rollbacks": 0}, **call)
    assert capsys.readouterr().out == expected
    # The worked example shows in it: 3 steps x 2 envs = 6 steps; 6 / 0.375 s = 16 steps/s; one episode of return 3.
    assert "Learning iteration 4/10" in expected and "Mean reward: 3.00" in expected
    assert "Mean episode rew_alive: 0.5000" in expected and "Episode/return: 3.0000" in expected
    assert "Steps per second: 16 " in expected and "Run name: drill" in expected


def test_plain_lines_every_n_iterations_and_at_every_safety_change_without_control_codes() -> None:
    out = io.StringIO()
    display = PlainDisplay(out, interval=3)
    for it in range(8):
        rollbacks = 1 if it >= 4 else 0  # a rollback happened during iteration 4
        display.show(stats(it, safety={"rollbacks": rollbacks, "actions_sanitised": 40 * it}))
    lines = out.getvalue().splitlines()
    # Iterations 0, 3, 6 are regular (every 3rd from the start), 4 changed a counter, 7 is the last.
    assert [line.split(" |")[0] for line in lines] == [f"iteration {n}/8" for n in (1, 4, 5, 7, 8)]
    assert ESCAPE not in out.getvalue()
    assert lines[0] == (
        "iteration 1/8 | 1,234 steps/s | ETA 0:00:02 | return 10.00 | episode length 100.0 | lr 1.00e-03 "
        "| loss value 0.5000 surrogate -0.0100 | safety ok"
    )
    # Return 10 + it: over iterations 0..7 it rose by 7 (the trend spans up to 10 iterations); clipped actions are
    # routine and never an event.
    assert lines[-1].endswith("| safety: rollbacks 1")
    assert "return 17.00 (+7.00 over 10 it)" in lines[-1] and "episode length 100.0 (+0.0 over 10 it)" in lines[-1]


def test_safety_shown_names_the_four_counters_and_every_other_non_zero_event() -> None:
    counters = {"physics_errors": 2, "actions_sanitised": 900, "nonfinite_obs": 0, "checkpoints_refused": 1}
    assert safety_shown(counters) == {
        "rollbacks": 0,
        "skipped steps": 0,
        "physics errors": 2,
        "worker crashes": 0,
        "checkpoints_refused": 1,
    }


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system="standard"), out


def test_the_compact_view_on_a_terminal_shows_counters_red_once_non_zero() -> None:
    console, out = terminal()
    display = CompactDisplay(console=console)
    display.show(stats(0, total=3))
    display.show(stats(1, total=3, safety={"physics_errors": 3, "worker_crashes": 0}))
    text = out.getvalue()
    assert "\x1b[32mrollbacks 0" in text and "\x1b[32mphysics errors 0" in text  # green while zero
    assert "\x1b[1;31mphysics errors 3" in text and "\x1b[32mworker crashes 0" in text  # bold red once non-zero
    assert "2/3" in text and "1,234 steps/s" in text and "ETA 0:00:00" in text
    assert "11.00" in text and "▲ +1.00" in text and "surrogate" in text and "1.00e-03" in text
    display.show(stats(2, total=3))  # the last iteration stops the live view: the cursor is shown again
    assert out.getvalue().endswith("\x1b[?25h")


class TerminalText(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_written_while_the_view_is_drawn_goes_above_it_and_into_the_record() -> None:
    console, out = terminal()
    record = io.StringIO()
    handler_stream = TerminalText()
    handler = logging.StreamHandler(handler_stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with CompactDisplay(console=console, record=record) as display:
            display.show(stats(0))
            print("a line printed meanwhile")
            logging.getLogger("robo_safe_rl.test").warning("a record meanwhile")
            assert handler.stream is not handler_stream
        assert handler.stream is handler_stream  # given back when the view stops
    finally:
        root.removeHandler(handler)
    assert "a line printed meanwhile" in out.getvalue() and "a record meanwhile" in out.getvalue()
    assert handler_stream.getvalue() == ""  # drawn through the console, above the view
    assert record.getvalue() == "a line printed meanwhile\n"  # records reach train.log through its own handler


def test_compact_is_plain_where_stdout_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # CI sets it; rich alone would then draw into the pipe
    assert isinstance(make_display("compact", console=io.StringIO()), PlainDisplay)
    assert isinstance(make_display(DisplayMode.rsl), RslDisplay)
    assert isinstance(make_display("plain", console=TerminalText()), PlainDisplay)
    both = make_display("compact", console=TerminalText(), record=io.StringIO(), interval=5)
    assert isinstance(both, Displays)
    assert [type(d) for d in both.displays] == [CompactDisplay, PlainDisplay]
    with pytest.raises(ValueError, match="'fancy' is not a valid DisplayMode"):
        make_display("fancy")


@pytest.mark.parametrize(
    ("override", "key"), [("display=fancy", "display"), ("display_interval=0", "display_interval")]
)
def test_a_bad_display_setting_exits_2_naming_the_key(
    override: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from robo_safe_rl.apps.train import main

    assert main([override, f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(rf"\b{key}\b", err), err
    assert not (tmp_path / "run").exists()

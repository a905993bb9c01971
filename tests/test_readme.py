"""Every code block of README.md runs as written.

- The Python blocks run in-process, from an empty working directory, as a user's would be.
- Every command of the shell blocks runs as a real subprocess (``bash -c``) from a repository root: a temporary folder
  holding a link to each top-level entry of the checkout except ``logs/``, so that the commands' relative paths mean
  what they mean in the checkout while the runs they make (and ``resume=latest``) see only this test's runs. The
  interpreter's folder comes first on ``PATH``, as ``source .venv/bin/activate`` puts it. A command that would train
  or play for long gets the short settings of :data:`SHORT`; the README's placeholder paths are replaced by a run
  trained first (:data:`PLACEHOLDERS`); a command that cannot run here is in :data:`NOT_RUN` with the reason. A
  command that is neither run nor listed fails :func:`test_every_shell_command_is_run_or_listed`.
- A transcript (a plain block of ``$ command`` lines, each followed by its output) runs its commands and compares the
  output line for line.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, in order (a fence line opens a block, the next one closes it)."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                blocks.append((language, "".join(body)))
                language = None
        elif language is not None:
            body.append(line)
    return blocks


ALL_BLOCKS = code_blocks(README.read_text(encoding="utf-8"))
BLOCKS = [body for language, body in ALL_BLOCKS if language == "python"]
SHELL_BLOCKS = [body for language, body in ALL_BLOCKS if language == "bash"]
TRANSCRIPTS = [body for language, body in ALL_BLOCKS if language == "" and body.startswith("$ ")]

#: README commands this test does not run, and why.
NOT_RUN = {
    "make train": "CI runs it; its set-up builds a virtual environment of its own, minutes of installing",
    "make test": "CI runs it, and this test is part of it",
    "source .venv/bin/activate": "what it does for the commands after it (the venv's python first on PATH) this test "
    "does for every command",
    "tensorboard --logdir logs": "a server: it runs until it is stopped",
    'pip install -e ".[sweep]"': "installs into the environment under test; tests/apps/test_sweep.py runs a sweep",
    "python tools/sweep.py --multirun +sweep=ant": "20 trainings of 300k env steps (hours); tests/apps/test_sweep.py "
    "runs a 2-trial sweep of tiny ones",
    "python tools/sweep.py --multirun +sweep=ant hydra/launcher=joblib hydra.launcher.n_jobs=2": "the same, two at a "
    "time; tests/apps/test_sweep.py runs a 2-trial sweep of tiny ones with joblib",
    "python tools/sweep.py --multirun +sweep=ant_grid hydra/launcher=joblib hydra.launcher.n_jobs=2": "8 trainings of "
    "400k env steps (half an hour); tests/apps/test_sweep.py runs a 2-trial grid of tiny ones with joblib",
    "python tools/sweep.py --multirun +sweep=ant_seeds hydra/launcher=joblib hydra.launcher.n_jobs=2 "
    "algorithm.critic_learning_rate=1e-3": "4 trainings of 1M env steps (half an hour); tests/apps/test_sweep.py "
    "composes it",
    "python tools/sweep.py --multirun +sweep=ant hydra/launcher=submitit_slurm hydra.launcher.partition=cpu "
    "hydra.launcher.cpus_per_task=2 hydra.launcher.timeout_min=120": "a Slurm cluster",
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=NODE0_HOST:29400 --rdzv_id=my_run "
    "tools/train.py device=cuda run_dir=logs/ant/my_run": "two machines with 8 GPUs each",
    **dict.fromkeys(
        [
            "docker build -f docker/Dockerfile -t robo-safe-rl .",
            'docker build -f docker/Dockerfile -t robo-safe-rl:cu128 --build-arg TORCH_INDEX="$CUDA128_WHEEL_INDEX" .',
            'docker run --gpus all --rm -v "$PWD/logs:/workspace/logs" robo-safe-rl python tools/gpu_check.py',
            'docker run --gpus all --rm -v "$PWD/logs:/workspace/logs" robo-safe-rl python tools/train.py task=ant '
            "task.num_envs=64 device=cuda",
            'docker run --gpus all --ipc=host --rm -v "$PWD/logs:/workspace/logs" robo-safe-rl torchrun --standalone '
            "--nproc_per_node=4 tools/train.py device=cuda run_dir=logs/ant/ddp",
        ],
        "no Docker engine on the test machines (docker/Dockerfile is checked by reading)",
    ),
}
#: README commands that run only where there are as many CUDA devices as they start ranks on.
NEEDS_GPUS = {"torchrun --standalone --nproc_per_node=4 tools/train.py device=cuda": 4, "python tools/gpu_check.py": 1}


@dataclass(frozen=True)
class Short:
    """A setting that makes a long command short: the value it gets, whether it is added when the command does not
    set it, and why."""

    value: str
    add: bool
    why: str


#: Per tool, its settings for a short run. A Hydra key (``key=value``) or option (``--option value``) the command sets
#: gets the value here; one it does not set is added when ``add``.
SHORT: dict[str, dict[str, Short]] = {
    "tools/train.py": {
        "runner.max_iterations": Short("1", True, "one iteration, not up to 500: seconds instead of hours"),
        "task.num_envs": Short("2", True, "2 Ant envs instead of 16 (or 32)"),
        "runner.num_steps_per_env": Short("8", True, "8 steps per env and iteration instead of 24 (or 48)"),
    },
    "tools/evaluate.py": {
        "--episodes": Short("1", True, "one 1000-step episode instead of 16"),
    },
    "tools/play.py": {
        "--episodes": Short("1", True, "one 1000-step episode instead of 16 (or 4)"),
        "--every": Short("100", False, "10 frames of that episode instead of 200 PNG files"),
    },
}

#: The run the README's commands read, trained first (:func:`fixture_run`). Its folder is the README's own example
#: (``resume=logs/ant/2026-11-30_10-00-00``), which therefore runs as written. A short fire drill: its incidents are
#: what ``diagnose`` reads (its 8 envs step in 2 workers, whose first part's record 1 is a NaN action), and it saves
#: ``model_0.pt`` and ``model_2.pt``.
FIXTURE_RUN = "logs/ant/2026-11-30_10-00-00"
FIXTURE_ARGS = [
    "+drill=gauntlet",
    "runner.max_iterations=3",
    "task.num_envs=8",
    # As a default run on 2 cores or more; set, so that the incident folders are the same on a machine of one core.
    "task.num_workers=2",
    "runner.num_steps_per_env=16",
    f"run_dir={FIXTURE_RUN}",
]
#: The README's placeholders and what stands in for them (a whole word of the command for ``PATH``, part of a word
#: for the others).
PLACEHOLDERS = {
    "logs/ant/RUN": (FIXTURE_RUN, "the run directory of the examples"),
    "model_400.pt": ("model_2.pt", "a checkpoint of that run (it saved iterations 0 and 2)"),
    "model_2800.pt": ("model_2.pt", "the same"),
    "PATH": (f"{FIXTURE_RUN}/model_2.pt", "the inspector's input"),
}
#: Exit codes other than 0 that a README command has by design, and why.
EXIT_CODES = {
    "python tools/diagnose.py logs/ant/RUN": (1, "the drill's injected bad actions are incidents caused by actions"),
    "python tools/diagnose.py logs/ant/RUN/incidents_worker0#1": (1, "record 1 of the first worker's is a NaN action"),
    "python tools/diagnose.py logs/ant/RUN --checkpoint logs/ant/RUN/model_2800.pt --json": (1, "the same"),
}


def shell_commands() -> list[str]:
    """The commands of the shell blocks: continuation lines joined, comments dropped, spaces collapsed."""
    commands = []
    for block in SHELL_BLOCKS:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment (`RUN#12` is no comment)
            if line and not line.startswith("#"):
                commands.append(" ".join(line.split()))
    return commands


COMMANDS = shell_commands()
RUN = [c for c in COMMANDS if c not in NOT_RUN]


def script_of(words: list[str]) -> str | None:
    """The ``tools/...`` script a command runs (after environment assignments, through ``python`` or torchrun)."""
    words = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    if words[:1] == ["python"] and len(words) > 1 and words[1].startswith("tools/"):
        return words[1]
    if words[:2] == ["torchrun", "--standalone"]:
        return next((w for w in words if w.startswith("tools/")), None)
    return None


def as_run_here(command: str) -> str:
    """The command with the placeholders replaced and the short settings of its tool."""
    words = shlex.split(command)
    for placeholder, (real, _) in PLACEHOLDERS.items():
        if placeholder == "PATH":
            words = [real if w == placeholder else w for w in words]
        else:
            words = [w.replace(placeholder, real) for w in words]
    for key, short in SHORT.get(script_of(words) or "", {}).items():
        if key.startswith("--"):
            if key in words[:-1]:
                words[words.index(key) + 1] = short.value
            elif short.add:
                words += [key, short.value]
        else:
            found = [i for i, w in enumerate(words) if w.lstrip("+").split("=", 1)[0] == key]
            for i in found:
                words[i] = f"{key}={short.value}"
            if not found and short.add:
                words.append(f"{key}={short.value}")
    return shlex.join(words)


def run_in(root: Path, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # CPU trainings set torch's threads on purpose (README)
    return subprocess.run(
        ["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root (module docstring): links to the checkout's entries, and a ``logs/`` of its own."""
    folder = tmp_path_factory.mktemp("checkout")
    for entry in ROOT.iterdir():
        if entry.name not in ("logs", "wandb", "frames"):
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def fixture_run(root: Path) -> Path:
    done = run_in(root, shlex.join(["python", "tools/train.py", *FIXTURE_ARGS]))
    assert done.returncode == 0, done.stderr[-3000:]
    return root / FIXTURE_RUN


# ---------------------------------------------------------------------------------------------------- Python blocks


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 2
    # Every block is Python, shell, a transcript, or plain text that shows output or a layout (nothing to run): a block
    # in another language (```sh, ```console) would escape the tests here.
    assert {language for language, _ in ALL_BLOCKS} == {"python", "bash", ""}


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_block_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})


# ---------------------------------------------------------------------------------------------------- shell commands


def test_every_shell_command_is_run_or_listed() -> None:
    assert len(COMMANDS) >= 25
    unknown = [c for c in RUN if script_of(shlex.split(c)) is None]
    assert unknown == [], f"README commands neither run by this test nor in NOT_RUN with a reason: {unknown}"
    # Nothing listed that the README no longer has, and every placeholder and exception still in use.
    assert [c for c in [*NOT_RUN, *NEEDS_GPUS, *EXIT_CODES] if c not in COMMANDS] == []
    assert [p for p in PLACEHOLDERS if not any(p in c for c in COMMANDS)] == []


def test_short_settings_and_placeholders_are_applied_as_listed() -> None:
    assert as_run_here("python tools/train.py task=ant runner.max_iterations=200 seed=3") == (
        "python tools/train.py task=ant runner.max_iterations=1 seed=3 task.num_envs=2 runner.num_steps_per_env=8"
    )
    assert as_run_here("python tools/play.py logs/ant/RUN/model_400.pt --episodes 4 --every 5") == (
        f"python tools/play.py {FIXTURE_RUN}/model_2.pt --episodes 1 --every 100"
    )
    assert as_run_here("python tools/inspect_checkpoint.py PATH --json") == (
        f"python tools/inspect_checkpoint.py {FIXTURE_RUN}/model_2.pt --json"
    )
    assert as_run_here("WANDB_MODE=offline python tools/train.py 'actor.hidden_dims=[512,256,128]'").startswith(
        "WANDB_MODE=offline python tools/train.py 'actor.hidden_dims=[512,256,128]' runner.max_iterations=1"
    )


@pytest.mark.slow  # about two minutes: 20-odd real trainings, plays, inspections and diagnoses
@pytest.mark.parametrize("command", RUN)
def test_shell_command_runs(command: str, root: Path, request: pytest.FixtureRequest) -> None:
    if command in NEEDS_GPUS and torch.cuda.device_count() < NEEDS_GPUS[command]:
        pytest.skip(f"needs {NEEDS_GPUS[command]} CUDA devices, found {torch.cuda.device_count()}")
    if "resume=" in command or any(p in command for p in PLACEHOLDERS) or FIXTURE_RUN in command:
        request.getfixturevalue("fixture_run")
    done = run_in(root, as_run_here(command))
    expected = EXIT_CODES.get(command, (0, ""))[0]
    assert done.returncode == expected, f"{as_run_here(command)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


# ---------------------------------------------------------------------------------------------------- transcripts


def transcript_steps() -> list[tuple[str, list[str]]]:
    """``(command, output lines)`` of every transcript block."""
    steps: list[tuple[str, list[str]]] = []
    for block in TRANSCRIPTS:
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


@pytest.mark.parametrize(("command", "output"), transcript_steps())
def test_transcript_shows_what_the_command_prints(command: str, output: list[str], root: Path) -> None:
    assert script_of(shlex.split(command)) is not None and command not in NOT_RUN
    done = run_in(root, command)
    assert (done.stdout + done.stderr).splitlines() == output

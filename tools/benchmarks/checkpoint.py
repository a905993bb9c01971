"""Speed and peak memory of inspecting a large checkpoint, against ``torch.load`` and a plain read of the same file.

Each measurement runs in its own child process, so its peak resident memory is its own (see ``_CHILD``). Cases
are interleaved (read, inspect, load, read, ...) and medians reported. The file is written once and read from a
warm page cache in every case, so the figures compare CPU and memory cost, not the disk.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from robo_safe_rl.rundir import RunDir

MB = 1_000_000
"""Throughputs are in MB/s (10^6 bytes per second); sizes in MiB."""
MIB = 1 << 20

_CHILD = """
import json, re, resource, sys, time
import torch
from robo_safe_rl.checkpoint import inspect_file


def status(key):
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


mode, path = sys.argv[1], sys.argv[2]
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
cpu_start, start = cpu(), time.perf_counter()
if mode == "inspect":
    report = inspect_file(path)
elif mode == "torch_load":
    loaded = torch.load(path, map_location="cpu", weights_only=True)
elif mode == "read":
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu_start
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_bytes": status("VmHWM") - before}))
"""
"""Child process body: run one case and print its wall time, its CPU time (user + system: steadier than wall time
on a shared machine) and its peak resident memory above what the imports left resident. Linux only: the peak is
``VmHWM``, reset after the imports through ``/proc/self/clear_refs`` (``ru_maxrss`` would not do: it keeps the
high-water mark of the parent that forked the child)."""

CASES = ("read", "inspect", "torch_load")
"""``read``: the file read in 16 MiB blocks; ``inspect``: :func:`inspect_file`; ``torch_load``: weights-only load."""


def write_rsl_shaped_checkpoint(path: Path, size_mib: int, seed: int = 0) -> int:
    """Write an rsl-rl-5.x-shaped checkpoint of about ``size_mib`` MiB and return its size in bytes.

    Actor and critic each hold two square hidden layers (float32) plus small input/output layers; the optimizer
    state holds Adam's ``exp_avg`` and ``exp_avg_sq`` for every parameter, so parameters are a third of the file.

    Args:
        path: Where to write it.
        size_mib: Approximate file size in MiB (at least 1).
        seed: Seed of the random weights.
    """
    # 3 copies (weights, exp_avg, exp_avg_sq) x 2 networks x 2 square layers x hidden^2 x 4 bytes ~ size.
    hidden = max(8, int(math.sqrt(size_mib * MIB / (3 * 2 * 2 * 4))))
    gen = torch.Generator().manual_seed(seed)
    shapes = {"mlp.0.weight": (hidden, 48), "mlp.0.bias": (hidden,), "mlp.2.weight": (hidden, hidden)}
    shapes |= {"mlp.2.bias": (hidden,), "mlp.4.weight": (hidden, hidden), "mlp.4.bias": (hidden,)}
    shapes |= {"mlp.6.weight": (12, hidden), "mlp.6.bias": (12,)}
    actor = {"distribution.std_param": torch.ones(12)}
    actor |= {name: torch.randn(shape, generator=gen) * 0.05 for name, shape in shapes.items()}
    critic = {name: torch.randn(shape, generator=gen) * 0.05 for name, shape in shapes.items()}
    params = [*actor.values(), *critic.values()]
    state = {
        i: {"step": torch.tensor(100.0), "exp_avg": p * 1e-3, "exp_avg_sq": p.square() * 1e-6}
        for i, p in enumerate(params)
    }
    groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0, "params": list(state)}]
    checkpoint = {
        "actor_state_dict": actor,
        "critic_state_dict": critic,
        "optimizer_state_dict": {"state": state, "param_groups": groups},
        "iter": 4050,
        "infos": None,
    }
    torch.save(checkpoint, path)
    return path.stat().st_size


def bench_inspect(size_mib: int = 1024, repeats: int = 3, directory: str | Path | None = None) -> dict[str, Any]:
    """Measure inspecting a checkpoint of ``size_mib`` MiB against ``torch.load`` and a plain read of it.

    Args:
        size_mib: Size of the checkpoint written for the measurement (it is deleted afterwards).
        repeats: Interleaved rounds; medians are reported.
        directory: Where to write the file; the system's temporary directory when ``None``.

    Returns:
        ``file_mib``; per case (``read``, ``inspect``, ``torch_load``) ``seconds`` (wall), ``cpu_seconds``,
        ``mb_per_s`` (from wall time) and ``peak_mib`` (peak resident memory of the case itself, Linux only); and
        ``ratios``: ``inspect_peak_over_file``, ``torch_load_peak_over_file``, ``inspect_speed_over_torch_load``,
        ``inspect_speed_over_read``.
    """
    with tempfile.TemporaryDirectory(dir=directory, prefix="bench_checkpoint_") as tmp:
        path = RunDir(tmp).checkpoint(4050)
        size = write_rsl_shaped_checkpoint(path, size_mib)
        _sync(path)
        samples: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
        for _ in range(repeats):
            for case in CASES:
                samples[case].append(_run_child(case, path))
    result: dict[str, Any] = {"file_mib": size / MIB, "repeats": repeats}
    for case, runs in samples.items():
        seconds = statistics.median(run["seconds"] for run in runs)
        cpu_seconds = statistics.median(run["cpu_seconds"] for run in runs)
        peak = statistics.median(run["peak_bytes"] for run in runs)
        result[case] = {
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "mb_per_s": size / MB / seconds,
            "peak_mib": max(0.0, peak / MIB),
        }
    result["ratios"] = {
        "inspect_peak_over_file": result["inspect"]["peak_mib"] * MIB / size,
        "torch_load_peak_over_file": result["torch_load"]["peak_mib"] * MIB / size,
        "inspect_speed_over_torch_load": result["inspect"]["mb_per_s"] / result["torch_load"]["mb_per_s"],
        "inspect_speed_over_read": result["inspect"]["mb_per_s"] / result["read"]["mb_per_s"],
    }
    return result


def _sync(path: Path) -> None:
    """Flush the new file to disk first, so no case pays for writeback of the others' dirty pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _run_child(case: str, path: Path) -> dict[str, float]:
    """Run one case in a fresh interpreter and return its ``seconds`` and ``peak_bytes``."""
    done = subprocess.run([sys.executable, "-c", _CHILD, case, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark case {case!r} on {path} failed (exit {done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])

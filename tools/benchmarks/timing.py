"""Timing helpers shared by the benchmarks: interleaved repeats, medians, machine description."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone


def interleaved_rates(cases: dict[str, Callable[[], int]], repeats: int) -> dict[str, float]:
    """Run every case once per round, ``repeats`` rounds, and return each case's median rate (units per second).

    Interleaving the cases (a, b, c, a, b, c, ...) spreads the noise of a shared machine over all of them, so their
    ratios are fairer than those of back-to-back blocks. Each case returns how many units (env steps, iterations)
    it did.
    """
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            start = time.perf_counter()
            units = case()
            rates[name].append(units / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def machine_description() -> dict[str, str]:
    """CPU model, core count, OS, library versions and the date: what BENCHMARKS.md states for every table."""
    import numpy
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import pybullet

        bullet = str(pybullet.getAPIVersion())
    except ImportError:
        bullet = "not installed"
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "cpu": cpu,
        "cores": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pybullet_api": bullet,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }

"""Measure the figures of BENCHMARKS.md side by side in one run.

python tools/bench.py [--only env,safestep,guard,checkpoint,workers] [--quick] [--write BENCHMARKS.md]
"""

from __future__ import annotations

import sys

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

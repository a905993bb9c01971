"""Measure the figures of BENCHMARKS.md side by side in one run.

python tools/bench.py [--only SECTION,...] [--quick] [--write BENCHMARKS.md]

Sections: env, safestep, guard, checkpoint (the default set), presets, workers, wake, learning, schedule, a1.
"""

from __future__ import annotations

import sys

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

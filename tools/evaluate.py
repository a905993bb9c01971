"""Evaluate a trained policy: `python tools/evaluate.py logs/ant/RUN [--episodes 16] [--json]`."""

from __future__ import annotations

import sys

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from robo_safe_rl.apps.evaluate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

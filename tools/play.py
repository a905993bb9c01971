"""Play a trained policy: `python tools/play.py logs/ant/RUN [--episodes 16] [--frames DIR] [--json]`."""

from __future__ import annotations

import sys

import robosafe_tasks  # noqa: F401  (registers the tasks' gymnasium ids)
from robo_safe_rl.apps.play import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

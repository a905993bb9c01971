"""Explain physics errors caused by bad actions, from a run's incidents to their root cause; or vet a policy.

Usage: ``python tools/diagnose.py PATH [--checkpoint CKPT] [--json] [--replay first|all|none]`` or
``python tools/diagnose.py --policy CKPT [--task TASK] [--steps N] [--stochastic] [--json]``. Exit codes: 0 no
incidents or none caused by actions (no bad action), 1 incidents caused by actions explained (a bad action
emitted), 2 unusable input.
"""

from __future__ import annotations

import sys

import robosafe_tasks  # noqa: F401  (registers the RoboSafe task ids, which replays and --policy make)
from robo_safe_rl.diagnose.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

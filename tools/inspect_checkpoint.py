"""Find NaN/Inf tensors in a checkpoint, or the newest clean checkpoint of a run directory.

Usage: ``python tools/inspect_checkpoint.py PATH [--json] [--all] [--no-optimizer]``. Exit codes: 0 every
inspected checkpoint clean, 1 non-finite values found, 2 unusable input.
"""

from __future__ import annotations

import sys

from robo_safe_rl.checkpoint.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

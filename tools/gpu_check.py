"""Check the CUDA path in one command: `python tools/gpu_check.py` (under 5 minutes on one GPU).

A short CUDA training of the Ant with the guard on (summary.json and checkpoints checked), a 2-process torchrun on
NCCL when two GPUs exist, the guard's overhead on CUDA and the host-device syncs per mini-batch; it prints what it
measured. Exit codes: 0 all passed, 1 a check failed, 3 no CUDA device here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], train_script=Path(__file__).resolve().with_name("train.py")))

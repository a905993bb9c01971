"""Export a trained policy for deployment: `python tools/export.py logs/ant/RUN [--out DIR]` (TorchScript and ONNX)."""

from __future__ import annotations

import sys

from robo_safe_rl.apps.export import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

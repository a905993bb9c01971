"""robo_safe_rl: PPO training for legged robots that does not die of a NaN.

The library knows rsl-rl, torch, gymnasium and Hydra, and never imports the task package ``envs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["SafeStep", "__version__"]

if TYPE_CHECKING:
    from robo_safe_rl.bridge.safe_step import SafeStep


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import robo_safe_rl` (for the tools' --help, the inspector) does not pay for gymnasium.
    if name == "SafeStep":
        from robo_safe_rl.bridge.safe_step import SafeStep

        return SafeStep
    raise AttributeError(f"module 'robo_safe_rl' has no attribute {name!r}")

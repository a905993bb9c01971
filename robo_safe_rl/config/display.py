"""How training shows its progress on the console (``display=`` and ``display_interval=`` in ``train.yaml``)."""

from __future__ import annotations

from enum import Enum


class DisplayMode(Enum):
    """What each training iteration shows on stdout (``robo_safe_rl.training.display``)."""

    compact = "compact"  # a live progress bar with a few lines below it, on a terminal; plain lines elsewhere
    rsl = "rsl"  # rsl-rl's own block of about 20 lines per iteration
    plain = "plain"  # one line every display_interval iterations (and whenever a safety counter changes)

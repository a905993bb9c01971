"""Which renderer draws a task's frames: PyBullet's EGL plugin when it loads here and is faster, else the tiny one.

PyBullet renders a DIRECT client's ``getCameraImage`` with its built-in software rasteriser (ER_TINY_RENDERER), on
one core. Its ``eglRenderer`` plugin renders through EGL instead, headless, on a GPU when the EGL driver has one.
Facts measured with PyBullet 3.2.7:

- The plugin is loaded per client (``loadPlugin(path, "_eglRendererPlugin", physicsClientId=c)``) and then renders
  every ``getCameraImage`` of that client, whatever its ``renderer`` flag; it survives ``resetSimulation``. It only
  draws bodies loaded after it: loaded into a world already built, it renders an empty sky. So :func:`attach` comes
  before the world is loaded.
- Where EGL is unusable, loading it may not fail politely: the plugin can call ``exit()`` or crash the process. So it
  is first tried in a subprocess (:func:`probe`, once per process), and only loaded here when that one survived.
- With Mesa's software EGL (llvmpipe, no GPU), it loads but is no faster than the tiny renderer: frame times of the
  Ant at 320x240 on this project's CPU machine are in README's video section. ``auto`` therefore takes EGL only when
  the probe measured it clearly faster.
- The plugin writes its OpenGL banner and some notices (``ven = ...``, ``Destroy EGL OpenGL window.``) to the C-level
  standard output, where they would corrupt a tool's JSON output; calls that may print run under :func:`quiet`,
  which points file descriptor 1 at standard error meanwhile.

``ROBOSAFE_RENDERER`` chooses: ``auto`` (default), ``egl`` (EGL whenever it loads) or ``tiny`` (never probe).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pybullet

logger = logging.getLogger(__name__)

#: Environment variable that chooses the renderer (see the module docstring).
RENDERER_ENV = "ROBOSAFE_RENDERER"
_CHOICES = ("auto", "egl", "tiny")
_PLUGIN_MODULE = "eglRenderer"
_PLUGIN_ENTRY = "_eglRendererPlugin"
#: Seconds the probe may take (a Python start, PyBullet's import, two dozen frames); a hung EGL driver gives up.
_PROBE_TIMEOUT_S = 120.0
_PROBE_MARK = "robosafe-render-probe "
#: ``auto`` takes EGL when its frame takes less than this fraction of the tiny renderer's: on a loaded CPU machine the
#: two measured within +-15% of each other from run to run, and the choice should not flip between runs.
_CLEARLY_FASTER = 0.8
# The probe: the Ant on the stadium floor at 320x240 from the tasks' camera, 10 frames per renderer after one to warm
# up, median frame time, one client per renderer (the plugin is loaded before the bodies, see attach). It prints one
# marked JSON line, after a line break: PyBullet's warnings end without one. Anything else it prints (EGL's banner,
# the warnings) is ignored.
_PROBE_SCRIPT = f"""
import json, os, statistics, sys, time
import numpy, pybullet as p, pybullet_data
def frame_ms(egl):
    c = p.connect(p.DIRECT)
    if egl and p.loadPlugin(sys.argv[1], "{_PLUGIN_ENTRY}", physicsClientId=c) < 0:
        return None
    data = pybullet_data.getDataPath()
    p.loadSDF(os.path.join(data, "plane_stadium.sdf"), physicsClientId=c)
    p.loadMJCF(os.path.join(data, "mjcf", "ant.xml"), physicsClientId=c)
    view = p.computeViewMatrixFromYawPitchRoll([0, 0, 0.75], 3.0, 0.0, -30.0, 0.0, 2, physicsClientId=c)
    proj = p.computeProjectionMatrixFOV(60.0, 320 / 240, 0.1, 100.0, physicsClientId=c)
    times = []
    for i in range(11):
        start = time.perf_counter()
        image = p.getCameraImage(320, 240, view, proj, renderer=p.ER_TINY_RENDERER, physicsClientId=c)[2]
        times.append((time.perf_counter() - start) * 1e3)
    if numpy.asarray(image).size != 320 * 240 * 4:
        sys.exit("getCameraImage returned no 320x240 RGBA image")
    return statistics.median(times[1:])
tiny = frame_ms(False)
egl = frame_ms(True)
print("\\n{_PROBE_MARK}" + json.dumps({{"tiny_ms": tiny, "egl_ms": egl}}), flush=True)
"""


@dataclass(frozen=True)
class Probe:
    """What the subprocess probe found.

    Attributes:
        egl_ms: Median frame time with the EGL plugin (ms), ``None`` when it did not load.
        tiny_ms: Median frame time of the tiny renderer (ms), ``None`` when the probe did not get that far.
        reason: Why EGL is not usable, ``""`` when it is.
    """

    egl_ms: float | None
    tiny_ms: float | None
    reason: str = ""


def plugin_path() -> str | None:
    """The file of PyBullet's ``eglRenderer`` plugin, ``None`` when this PyBullet build has none."""
    spec = importlib.util.find_spec(_PLUGIN_MODULE)
    return spec.origin if spec is not None and spec.origin else None


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """Load the EGL plugin and time both renderers in a subprocess (once per process: the answer is cached).

    Never raises: a probe that crashed, hung or printed nothing says why in :attr:`Probe.reason`.
    """
    path = plugin_path()
    if path is None:
        return Probe(None, None, f"PyBullet {pybullet.__file__} has no {_PLUGIN_MODULE} plugin")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, path],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Probe(None, None, f"the EGL probe did not finish ({type(err).__name__}: {err})")
    lines = [line for line in done.stdout.splitlines() if line.startswith(_PROBE_MARK)]
    if done.returncode != 0 or not lines:
        tail = " ".join(done.stderr.strip().splitlines()[-2:])[-300:]
        return Probe(None, None, f"the EGL probe exited with code {done.returncode} ({tail or 'no message'})")
    found = json.loads(lines[-1].removeprefix(_PROBE_MARK))
    egl, tiny = found["egl_ms"], found["tiny_ms"]
    return Probe(egl, tiny, "" if egl is not None else "loadPlugin refused the EGL plugin")


@functools.lru_cache(maxsize=1)
def chosen() -> str:
    """``"egl"`` or ``"tiny"``: what new renderings use here (``ROBOSAFE_RENDERER``, and the probe for ``auto``).

    Raises:
        ValueError: If ``ROBOSAFE_RENDERER`` is not one of ``auto``, ``egl``, ``tiny``.
    """
    asked = os.environ.get(RENDERER_ENV, "auto").strip().lower() or "auto"
    if asked not in _CHOICES:
        raise ValueError(f"{RENDERER_ENV}={asked!r}: expected one of {', '.join(_CHOICES)}")
    if asked == "tiny":
        return "tiny"
    found = probe()
    if found.egl_ms is None:
        logger.info("rendering with PyBullet's tiny renderer: %s", found.reason)
        return "tiny"
    faster = found.tiny_ms is None or found.egl_ms < _CLEARLY_FASTER * found.tiny_ms
    choice = "egl" if asked == "egl" or faster else "tiny"
    logger.info(
        "rendering with %s (frame at 320x240: EGL %.1f ms, tiny %.1f ms)",
        "PyBullet's EGL plugin" if choice == "egl" else "PyBullet's tiny renderer",
        found.egl_ms,
        found.tiny_ms if found.tiny_ms is not None else float("nan"),
    )
    return choice


def attach(client: int) -> str:
    """Load the chosen renderer into ``client``, before any body is loaded into it (the EGL plugin draws only bodies
    loaded after it); returns ``"egl"`` or ``"tiny"`` (what its frames will use)."""
    if chosen() != "egl":
        return "tiny"
    path = plugin_path()
    with quiet():
        plugin = pybullet.loadPlugin(path, _PLUGIN_ENTRY, physicsClientId=client) if path else -1
    if plugin < 0:
        logger.warning("the EGL plugin loaded in the probe but not in client %d; rendering with the tiny one", client)
        return "tiny"
    return "egl"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Send what C code writes to the standard output (file descriptor 1) to the standard error meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        # C's stdout is fully buffered on a pipe: text printed meanwhile may still sit in its buffer, and would reach
        # the real stdout at the next flush. Flushed here, it goes to stderr, where it was written.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)

"""The one cache root of the platform (bundled server and model, base image rootfs, frozen harnesses, staged tasks).

``$RISE_CACHE_DIR`` names it. ``$RISE_CACHE`` is a deprecated alias, still read so an old environment keeps
working; when both are set, ``RISE_CACHE_DIR`` wins. Without either: ``$XDG_CACHE_HOME/riseharness``, else
``~/.cache/riseharness``. ``research/store.py`` and ``scripts/setup.sh`` spell the same rule out themselves
(``research/`` imports no other room); keep the three in step.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "RISE_CACHE_DIR"
DEPRECATED_CACHE_ENV = "RISE_CACHE"  # older name of the same setting; read only when CACHE_ENV is unset


def cache_root() -> Path:
    """The rise cache directory, by the rule in this module's docstring (not created here)."""
    for name in (CACHE_ENV, DEPRECATED_CACHE_ENV):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "riseharness"

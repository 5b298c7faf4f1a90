"""scipy.stats' distributions, imported the first time one is used.

scipy.stats takes most of a second to import, and every ``rise`` command imports this package (the round's
decision code), while only a decision, a power check or a simulation computes with it."""

from __future__ import annotations

import importlib
from typing import Any


class _Distribution:
    """Stands for ``scipy.stats.<name>``; the first attribute read imports scipy.stats and the rest are its."""

    def __init__(self, name: str):
        self._name = name
        self._dist: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._dist is None:
            self._dist = getattr(importlib.import_module("scipy.stats"), self._name)
        return getattr(self._dist, attr)


binom = _Distribution("binom")
hypergeom = _Distribution("hypergeom")

"""Where the corpus lives: the user's cache (never an experiment's harness repository), and its lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def research_root() -> Path:
    """The research cache: ``$RISE_RESEARCH_DIR``, else ``<rise cache>/research``.

    The rise cache follows the same rule as the bundled model's (``$RISE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/riseharness``); it is spelled out here because ``research/`` imports no other room.
    """
    if os.environ.get("RISE_RESEARCH_DIR"):
        return Path(os.environ["RISE_RESEARCH_DIR"])
    base = os.environ.get("RISE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "riseharness")
    return Path(base) / "research"


@contextlib.contextmanager
def locked(root: Path, name: str = "sync") -> Iterator[None]:
    """Hold an exclusive lock so two syncs never write the same mirror or index at once."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)

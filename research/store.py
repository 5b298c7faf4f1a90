"""Where the corpus lives: the user's cache (never an experiment's harness repository), and its lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def research_root() -> Path:
    """The research cache: ``$RISE_RESEARCH_DIR``, else ``<rise cache>/research``.

    The rise cache is the one of ``trials.cache.cache_root`` (``$RISE_CACHE_DIR``, else the deprecated alias
    ``$RISE_CACHE``, else ``$XDG_CACHE_HOME/riseharness``, else ``~/.cache/riseharness``). The rule is spelled out
    here, not imported, because ``research/`` imports no other room; a test checks that the two agree.
    """
    if os.environ.get("RISE_RESEARCH_DIR"):
        return Path(os.environ["RISE_RESEARCH_DIR"])
    base = next((os.environ[n] for n in ("RISE_CACHE_DIR", "RISE_CACHE") if os.environ.get(n)), None)
    if base:
        return Path(base).expanduser() / "research"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "riseharness" / "research"


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

"""The experiment lock: one process at a time may change an experiment (``runs/<name>/experiment.lock``).

Two processes on one experiment would both append the same ledger keys and run the same cells. ``rise round``,
``rise reference`` (and every other command that writes an experiment) hold :func:`experiment_lock` for their
whole run; a second one is refused at once with the holder's pid, start time and command. The lock is an OS file
lock (``filelock``), so a holder killed with SIGKILL releases it; the holder's details sit in a separate JSON file
because taking the lock truncates the lock file itself.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

from trials.errors import RiseError

LOCK_NAME = "experiment.lock"
HOLDER_NAME = "experiment.lock.json"


_held: dict[Path, int] = {}  # experiments this process holds: nested holders (rise evolve → a round) re-enter


class ExperimentLocked(RiseError):
    """Another process holds the experiment."""


def _holder(root: Path) -> str:
    try:
        info = json.loads((root / HOLDER_NAME).read_text())
        return (f"pid {info.get('pid')} since {info.get('started')} "
                f"({' '.join(info.get('argv') or []) or 'unknown command'})")
    except (OSError, ValueError):
        return "a process that has not written its details yet"


@contextmanager
def experiment_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold the experiment at ``root`` for the block; :class:`ExperimentLocked` when another process has it."""
    root = Path(root).resolve()
    if _held.get(root):
        _held[root] += 1
        try:
            yield
        finally:
            _held[root] -= 1
        return
    lock = FileLock(root / LOCK_NAME, timeout=0, is_singleton=False, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise ExperimentLocked(f"{root}: the experiment is in use by {_holder(root)}; wait for it to finish "
                               f"or stop it") from None
    try:
        info = {"pid": os.getpid(), "started": datetime.now(UTC).isoformat(timespec="seconds"), "argv": sys.argv}
        tmp = root / (HOLDER_NAME + ".tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, root / HOLDER_NAME)
        _held[root] = 1
        yield
    finally:
        _held.pop(root, None)
        lock.release()

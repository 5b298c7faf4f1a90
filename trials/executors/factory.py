"""Which executor runs a grid: ``local`` unless an :class:`~trials.executors.config.ExecutorConfig` says ``ray``.

Kept apart from :mod:`trials.executors.base` so the interface imports none of its implementations.
"""

from __future__ import annotations

from .base import Executor, LocalExecutor
from .config import ExecutorConfig


def make_executor(executor: ExecutorConfig | Executor | None, concurrency: int = 1) -> Executor:
    """The executor for a grid: ``executor`` itself when it is one, else the one its config names (None: local
    with ``concurrency``)."""
    if isinstance(executor, Executor):
        return executor
    if executor is None or executor.kind == "local":
        return LocalExecutor(concurrency)
    from .ray_executor import RayExecutor

    return RayExecutor(executor)

"""Error types shared by the trial stack.

The runner maps an :class:`InfraError` to the ⊥ status (the grid is then incomplete), and everything else a
harness or a task does wrong to ``failed`` with its class kept.
"""

from __future__ import annotations


class RiseError(Exception):
    """Base of every error this platform raises on purpose."""


class TaskError(RiseError):
    """A task folder is invalid; names the file and the key."""

    def __init__(self, path: str, key: str | None, message: str):
        self.path, self.key, self.message = str(path), key, message
        where = f"{self.path}" + (f" [{key}]" if key else "")
        super().__init__(f"{where}: {message}")


class InfraError(RiseError):
    """An infrastructure failure (⊥): the environment, the model server, a missing artefact.

    ``cause`` is a short machine-readable tag (``image_build``, ``sandbox``, ``model_unreachable``,
    ``missing``...), ``log_path`` points at the evidence when there is a log.
    """

    cause = "infra"

    def __init__(self, message: str, *, cause: str | None = None, log_path: str | None = None):
        super().__init__(message)
        if cause:
            self.cause = cause
        self.log_path = log_path


class EnvironmentBuildError(InfraError):
    cause = "image_build"


class SandboxError(InfraError):
    cause = "sandbox"


class ModelServerUnreachable(InfraError):
    cause = "model_unreachable"


class UnsupportedTaskError(TaskError):
    """The task needs something this environment cannot give (e.g. a Dockerfile RUN of a base image)."""

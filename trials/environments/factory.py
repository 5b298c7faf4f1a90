"""Pick a sandbox implementation by name: ``make_environment("local"|"docker", task, trial_dir, job_id)``, and
reconnect to a started one of any kind from its handle (``attach``).

The choice by kind lives here, not in base.py, so the interface module imports none of its implementations."""

from __future__ import annotations

import os
from typing import Any

from .base import Environment

KINDS = ("local", "docker")


def make_environment(kind: str, task: Any, trial_dir: str | os.PathLike, job_id: str | None = None,
                     **opts: Any) -> Environment:
    """A not-yet-started environment of ``kind`` for one trial; ``opts`` go to its constructor
    (``base_image_map=`` and ``client=`` for docker)."""
    if kind == "local":
        from .local import LocalEnvironment

        return LocalEnvironment(task, trial_dir, job_id=job_id, **opts)
    if kind == "docker":
        from .docker import DockerEnvironment

        return DockerEnvironment(task, trial_dir, job_id=job_id, **opts)
    raise ValueError(f"unknown environment kind {kind!r}; expected one of {', '.join(KINDS)}")


def reap_leftovers(kind: str, job_id: str | None = None, include_live: bool = False) -> int:
    """Kill/remove the sandboxes a crashed run of ``job_id`` left behind (owner process gone); returns how many."""
    if kind == "local":
        from .local import reap_leftovers as reap
    elif kind == "docker":
        from .docker import reap_leftovers as reap
    else:
        raise ValueError(f"unknown environment kind {kind!r}")
    return reap(job_id, include_live=include_live)


def attach(handle: dict[str, Any]) -> Environment:
    """Reconnect to a running sandbox of any kind from ``handle``."""
    kind = handle.get("kind")
    if kind == "local":
        from .local import LocalEnvironment

        return LocalEnvironment.attach(handle)
    if kind == "docker":
        from .docker import DockerEnvironment

        return DockerEnvironment.attach(handle)
    if kind == "channel":  # a confined harness: its sandbox through the trial channel (trials/channel.py)
        from .channel import ChannelEnvironment

        return ChannelEnvironment.attach(handle)
    raise ValueError(f"unknown environment kind {kind!r} in handle {handle}")

"""Backends run one role call: ``openai`` (pydantic-ai on any OpenAI-compatible endpoint), ``claude`` (Claude
Agent SDK), ``replay`` (the openai backend over recorded HTTP). :func:`make_backend` builds one by name."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from evolve.roles.runtime.backends.base import Backend, BackendJob, BackendReply
from trials.endpoints.spec import EndpointSpec

BackendName = Literal["openai", "claude", "replay"]
BACKENDS: tuple[str, ...] = ("openai", "claude", "replay")


def make_backend(name: str, endpoint: EndpointSpec | None = None, *, recording: str | Path | None = None,
                 record: bool = False, **options: object) -> Backend:
    """A backend by name. ``openai`` needs ``endpoint``; ``replay`` needs ``recording`` (and ``endpoint`` when
    ``record`` is true); ``claude`` takes an optional endpoint (an Anthropic-style base URL) and options."""
    if name == "openai":
        if endpoint is None:
            raise ValueError("the openai backend needs an endpoint (base URL and model)")
        from evolve.roles.runtime.backends.openai import OpenAIBackend

        return OpenAIBackend(endpoint, **options)  # type: ignore[arg-type]
    if name == "replay":
        if recording is None:
            raise ValueError("the replay backend needs a recording file")
        from evolve.roles.runtime.backends.replay import ReplayBackend

        return ReplayBackend(Path(recording), endpoint=endpoint, record=record, **options)  # type: ignore[arg-type]
    if name == "claude":
        from evolve.roles.runtime.backends.claude import ClaudeBackend

        return ClaudeBackend(endpoint, **options)  # type: ignore[arg-type]
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "BackendJob", "BackendName", "BackendReply", "make_backend"]

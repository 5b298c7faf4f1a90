"""Start the real bundled model server for a test module (skips, with the reason, when it is not cached)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from trials.endpoints import bundled
from trials.endpoints.serve import ServerProcess, free_port
from trials.endpoints.spec import EndpointSpec

TEST_MODEL = "qwen2.5-coder-0.5b"


@contextmanager
def bundled_server(name: str, ctx: int = 4096, parallel: int = 2,
                   model: str = TEST_MODEL) -> Iterator[tuple[ServerProcess, EndpointSpec]]:
    """A started bundled server on a free port; never builds (tests must not), stops on exit."""
    reason = bundled.not_ready_reason(model)
    if reason:
        pytest.skip(reason)
    proc = ServerProcess.bundled(model, free_port(), ctx=ctx, threads=2, parallel=parallel,
                                 name=f"{name}-{os.getpid()}")
    spec = proc.start(progress=lambda m: None)
    try:
        yield proc, spec
    finally:
        proc.stop()

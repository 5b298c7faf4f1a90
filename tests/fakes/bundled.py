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
SEED_TRIAL_CAP = 256  # tokens a reply on the seed trial the model tests share (tests/conftest.py)


def big_model_skip_reason(model: str) -> str | None:
    """Why a test that needs a bundled model other than the tests' 0.5B (the main job's 1.5B) does not run here:
    RISE_TEST_BIG_MODEL=0 (what .ci/run sets: CI tests the same set on a fresh machine and on one where the main
    job left the 1.5B in the cache), or the model is not assembled. None: run it."""
    if model != TEST_MODEL and os.environ.get("RISE_TEST_BIG_MODEL", "1") in ("0", "false", ""):
        return (f"{model} tests are off (RISE_TEST_BIG_MODEL=0, as in .ci/run; run them with "
                f"RISE_TEST_BIG_MODEL=1 bash scripts/test.sh once the main job assembled the model)")
    return bundled.not_ready_reason(model)


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

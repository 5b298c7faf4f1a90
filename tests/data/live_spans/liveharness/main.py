"""A harness that ends one span (``tools:tick``), then waits, asking its sandbox through the channel, until
``/app/seen`` appears: the test writes it when its OTLP receiver has that span. So the outcome's ``live`` is
true only when the span reached the collector while this harness was still running (tests/test_live_spans.py)."""

from __future__ import annotations

import asyncio
import sys
import time

import trials.harness_api as api

from .tools import tick

WAIT_SEC = 60.0


async def wait_for_mark(spec: api.TrialSpec) -> float | None:
    env = api.attach_environment(spec.env)
    start = time.monotonic()
    try:
        while time.monotonic() - start < WAIT_SEC:
            res = await env.exec("cat /app/seen 2>/dev/null || true")
            if "seen" in res.stdout:
                return time.monotonic() - start
            await asyncio.sleep(0.2)
        return None
    finally:
        await env.stop()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    spec = api.TrialSpec.load(args[args.index("--spec") + 1])
    tick(1)
    waited = asyncio.run(wait_for_mark(spec))
    api.AgentOutcome(status="completed", episodes=1,
                     metadata={"live": waited is not None, "waited_sec": waited}).write(spec.agent_dir)
    return 0

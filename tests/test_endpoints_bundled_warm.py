"""The shared first-prompt head computed once and copied to every slot of the real bundled server (issue 37).

Two first calls arriving together land on both slots; with the warm-up each prefills only what follows the
head, without it the slot that never saw the head prefills all of it. Marked ``model``; skips when the server or
the 0.5B is not cached. A short head keeps it quick: the mechanism, not the seed's length, is under test.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from harness_seed.templates import first_prompt_head
from trials.endpoints import bundled
from trials.endpoints.serve import ServerProcess, free_port

MODEL = "qwen2.5-coder-0.5b"
HEAD = first_prompt_head()[:700]

pytestmark = pytest.mark.model


async def _first_calls(root: str) -> list[dict]:
    """Two trials' first calls at once: the same head, then different instructions."""
    async with httpx.AsyncClient(timeout=300) as http:
        async def one(task: str) -> dict:
            resp = await http.post(f"{root}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"{HEAD}Task Description:\n{task}\n"}], "max_tokens": 1})
            resp.raise_for_status()
            return resp.json()["timings"]

        return list(await asyncio.gather(one("Create hello.txt with hello."), one("Count the lines of a.txt.")))


def _served(warm: bool) -> list[dict]:
    if reason := bundled.not_ready_reason(MODEL):
        pytest.skip(reason)
    port = free_port()
    server = ServerProcess.bundled(MODEL, port, ctx=4096, threads=2, parallel=2, name=f"test-warm-{os.getpid()}",
                                   warm_head=HEAD if warm else None)
    server.start(progress=lambda m: None)
    try:
        return asyncio.run(_first_calls(f"http://127.0.0.1:{port}"))
    finally:
        server.stop()


def test_warm_slots_share_the_head_on_both_slots():
    head_tokens = 120  # well under the head's ~170 tokens, above anything a cold slot could reuse
    warm = _served(warm=True)
    assert all(t["cache_n"] >= head_tokens for t in warm), warm
    cold = _served(warm=False)
    assert min(t["cache_n"] for t in cold) < head_tokens, cold  # the control: one slot had never seen the head
    assert sum(t["prompt_n"] for t in warm) < sum(t["prompt_n"] for t in cold)

"""Mid-Harness verification against the real bundled model (llama.cpp + Qwen2.5-Coder-0.5B).

Scripted candidates come from the fake server; the verifier is the real model, so this checks what only a real
server can: the llama.cpp grammar constraint, one-token answers and their logprob margins, and reasoning
verdicts. Marked ``model``; skips when the server binary or the model is not cached (it never builds them).
"""

from __future__ import annotations

import pytest

from harness_seed.midharness.actor import build_actor
from tests.fakes.bundled import bundled_server
from tests.fakes.openai_server import ScriptedServer
from tests.test_midharness_actor import HISTORY, INSTRUCTION, Caller, action, client_for, is_verifier, parse
from trials.endpoints.client import ModelClient
from trials.harness_api import CostLedger

MODEL = "qwen2.5-coder-0.5b"
pytestmark = pytest.mark.model

SAMPLES = [action("echo ok > /app/done.txt\n"), action("rm -rf /app\n"), action("echo ok > /app/done.txt\n")]


@pytest.fixture(scope="module")
def verifier_spec():
    with bundled_server("test-midharness", ctx=4096, parallel=2, model=MODEL) as (_, spec):
        yield spec.model_copy(update={"timeout_sec": 300})


async def _step(verifier_spec, settings):
    cost = CostLedger()
    with ScriptedServer(lambda body: list(SAMPLES)) as srv:
        async with client_for(srv) as gen, ModelClient(verifier_spec) as ver:
            actor = build_actor(settings, Caller(gen), ver, INSTRUCTION, parse, cost)
            reply = await actor.act(HISTORY)
        assert not any(is_verifier(b) for b in srv.requests)  # every verdict came from the real model
    return reply.extra["midharness"], cost


async def test_decision_only_duel_with_grammar_and_logprobs(verifier_spec):
    rec, cost = await _step(verifier_spec, {"n": 3, "verifier": "pairwise"})
    assert rec["unique"] == 2 and rec["calls"] == 1 and [c["count"] for c in rec["candidates"]] == [2, 1]
    v = rec["verdicts"][0]
    assert v["verdict"] in ("A", "B") and v["text"].strip() in ("A", "B")
    assert v["p_a"] is not None and 0.0 <= v["p_a"] <= 1.0 and v["probs"] is not None
    assert cost.verifier.calls == 1 and cost.verifier.input_tokens > 100 and cost.verifier.output_tokens <= 2


async def test_reasoning_verdict_is_read_from_its_final_line(verifier_spec):
    rec, cost = await _step(verifier_spec, {"n": 3, "verifier": "pairwise", "decision_only": False,
                                            "reasoning_max_tokens": 160})
    v = rec["verdicts"][0]
    assert v["output_tokens"] > 2 and cost.verifier.calls == 1
    # A 0.5B model does not always end with the verdict line; when it does not, the verdict is unread.
    assert v["verdict"] in ("A", "B", None)

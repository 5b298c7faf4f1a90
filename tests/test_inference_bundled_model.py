"""Inference timings from the real bundled model server (llama.cpp + Qwen2.5-Coder-0.5B): what its chat
completions say (``timings`` on every non-streamed answer, n = 2 included), and a real seed trial through
``rise eval`` whose spans, rich trajectory and result.json carry the server's figures.

Marked ``model`` (minutes on CPU); skips when the server binary or the model is not cached (never builds).
It asserts what the server reports and where it lands, never what the 0.5B model says."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from monitor.inference import model_calls
from monitor.store import TrialTrace
from rise.cli import app
from tests.fakes.bundled import bundled_server
from trials.endpoints.client import ModelClient
from trials.results import TrialResult

MODEL = "qwen2.5-coder-0.5b"
CAP = 64
pytestmark = [pytest.mark.model]

SYSTEM = {"role": "system", "content": "You are a careful shell assistant. Answer with one short command. " * 8}


def _turn(question: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": question}]


async def test_server_timings_reach_the_client():
    with bundled_server("test-timings", ctx=4096, parallel=2, model=MODEL) as (_, spec):
        body = {"model": spec.model, "messages": _turn("list files"), "max_tokens": 8, "temperature": 0}
        async with httpx.AsyncClient(timeout=120) as http:
            raw = (await http.post(f"{spec.base_url}/chat/completions", json=body)).json()
        async with ModelClient(spec) as client:
            first = await client.chat(_turn("list the files here"), max_tokens=CAP, temperature=0, seed=1)
            second = await client.chat(_turn("show the disk usage"), max_tokens=CAP, temperature=0, seed=1)
            pair = await client.chat(_turn("print the date"), n=2, max_tokens=CAP, temperature=0.8, seed=1)
    # what llama-server says of a non-streamed completion
    assert {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"} <= set(raw["timings"]), raw
    for res in (first, second):
        t = res.timings
        assert t is not None and t.source == "llamacpp", res
        assert t.prompt_ms > 0 and t.predicted_ms > 0 and t.predicted_n >= 1
        assert t.wall_ms >= t.prompt_ms + t.predicted_ms - 1.0 and t.queue_ms >= 0
        assert t.prompt_n + (t.cache_n or 0) == res.input_tokens  # usage.prompt_tokens counts cached tokens too
    # the second prompt shares the long system prompt with the first: most of it comes from the slot's cache
    assert second.timings.cache_n and second.timings.cache_n > second.timings.prompt_n
    # n = 2 in one request: llama-server's timings describe one of the two choices (its first)
    assert pair.timings is not None and pair.timings.source == "llamacpp" and pair.timings.choices == 2
    assert pair.timings.requests == 1 and pair.timings.predicted_n <= CAP


def test_real_trial_records_the_servers_timings(seed_trial_on_bundled_model):
    done, job, _ = seed_trial_on_bundled_model  # tests/conftest.py: the seed trial the model tests share
    trial = job / "hello-file__r1"
    assert done.returncode == 0, done.stdout + done.stderr
    calls = model_calls(TrialTrace.load(trial))
    assert calls and all(t.source == "llamacpp" and t.prompt_ms > 0 and t.predicted_ms > 0 for _, t in calls)
    rich = json.loads((trial / "agent" / "trajectory.rich.json").read_text())
    steps = [s for s in rich["steps"] if s["source"] == "agent"]
    assert steps and all(s["metrics"]["inference"]["source"] == "llamacpp" for s in steps)
    assert all(s["metrics"]["inference"]["prompt_ms"] > 0 for s in steps)
    res = TrialResult.load(trial / "result.json")
    assert res.inference is not None and res.inference.calls == len(calls)
    assert res.inference.prefill_sec > 0 and res.inference.decode_sec > 0 and res.inference.decode_tok_s > 0
    assert res.machine_load is not None and res.machine_load.busy is not None
    out = CliRunner().invoke(app, ["trace", "time", str(trial)])
    assert out.exit_code == 0 and "ModelCaller.call" in out.output, out.output
    print(out.output)  # the figures of a real trial, for the record (pytest -s)

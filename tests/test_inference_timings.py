"""Per-call inference timings (trials/endpoints/timings.py) through the real client over real HTTP: llama.cpp's
``timings`` object, vLLM's cached-token count, and a server that says neither; a trial's sum of its calls."""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import ScriptedServer
from trials.endpoints.client import ModelClient
from trials.endpoints.spec import EndpointSpec
from trials.endpoints.timings import CallTimings, InferenceSummary

SYSTEM = {"role": "system", "content": "You are a terminal agent. " * 40}  # a long shared prefix


def _client(srv: ScriptedServer) -> ModelClient:
    return ModelClient(EndpointSpec(base_url=srv.base_url, model=srv.model, timeout_sec=10))


def _turn(text: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": text}]


async def test_llamacpp_timings_split_the_wall_time():
    explicit = {"content": "ok", "timings": {"prompt_ms": 100.0, "predicted_ms": 50.0}}
    with ScriptedServer(["first", explicit], flavor="llamacpp", delay=0.3) as srv:
        async with _client(srv) as client:
            first = await client.chat(_turn("hello"))
            second = await client.chat(_turn("hello again"))
    t1, t2 = first.timings, second.timings
    assert t1 is not None and t2 is not None
    assert t1.source == t2.source == "llamacpp"
    # the first prompt found nothing cached; the second shares the long system prompt with it
    assert t1.cache_n == 0 and t1.prompt_n == first.input_tokens
    assert t2.cache_n > 0.8 * second.input_tokens and t2.cache_n + t2.prompt_n == second.input_tokens
    assert t2.cache_hit_ratio == pytest.approx(t2.cache_n / second.input_tokens, abs=1e-3)
    # the server held the request 300 ms and says 150 of them were prefill and decode: the rest is waiting
    assert t2.prompt_ms == 100.0 and t2.predicted_ms == 50.0
    assert t2.wall_ms >= 300.0
    assert t2.queue_ms == pytest.approx(t2.wall_ms - 150.0, abs=0.01) and t2.queue_ms >= 150.0
    assert t2.predicted_n == second.output_tokens and t2.decode_tok_s == pytest.approx(
        t2.predicted_n * 1000 / 50.0, abs=0.01)
    attrs = t2.span_attributes()
    assert attrs["rise.inference.cache_n"] == t2.cache_n and attrs["rise.inference.queue_ms"] == t2.queue_ms
    assert all(v is not None for v in attrs.values())


async def test_vllm_cached_tokens_without_a_time_split():
    with ScriptedServer(["a", "b"], prefix_cache=True) as srv:
        async with _client(srv) as client:
            await client.chat(_turn("first question"))
            res = await client.chat(_turn("second question"))
    t = res.timings
    assert t is not None and t.source == "vllm"
    assert t.cache_n is not None and t.cache_n > 0 and t.cache_n % 16 == 0  # whole blocks, as vLLM caches
    assert t.cache_n + t.prompt_n == res.input_tokens
    assert t.prompt_ms is None and t.queue_ms is None and t.prefill_tok_s is None  # vLLM does not split time


async def test_a_server_that_says_nothing_leaves_the_client_wall_time():
    with ScriptedServer(["a"], delay=0.2) as srv:
        async with _client(srv) as client:
            res = await client.chat(_turn("q"))
    t = res.timings
    assert t is not None and t.source == "client" and t.wall_ms >= 200.0
    assert t.cache_n is None and t.cache_hit_ratio is None and t.queue_ms is None
    assert t.prompt_tokens == res.input_tokens


async def test_n_filled_by_parallel_requests_sums_the_server_figures():
    """A server that ignores ``n``: the call is three requests; the server's figures are summed."""
    with ScriptedServer(lambda body: ["x"], flavor="llamacpp", delay=0.1) as srv:
        async with _client(srv) as client:
            res = await client.chat(_turn("q"), n=3)
    t = res.timings
    assert t is not None and t.requests == 3 and t.choices == len(res.choices) == 3
    assert t.predicted_n == 3 and t.prompt_n + t.cache_n == res.input_tokens
    assert t.queue_ms is not None and t.queue_ms >= 0.0  # overlapping requests: a lower bound, never negative


def _call(**kw) -> CallTimings:
    return CallTimings(**kw)


def test_summary_adds_split_and_unsplit_calls():
    summary = InferenceSummary()
    summary.add(_call(source="llamacpp", wall_ms=4000, prompt_tokens=1000, prompt_n=800, cache_n=200,
                      prompt_ms=3000, predicted_n=50, predicted_ms=500))
    summary.add(_call(source="llamacpp", wall_ms=1000, prompt_tokens=1100, prompt_n=100, cache_n=1000,
                      prompt_ms=200, predicted_n=20, predicted_ms=400))
    summary.add(_call(source="client", wall_ms=2000, prompt_tokens=500))
    assert summary.calls == 3 and summary.split_calls == 2
    assert summary.prefill_sec == pytest.approx(3.2) and summary.decode_sec == pytest.approx(0.9)
    assert summary.waiting_sec == pytest.approx(0.5 + 0.4) and summary.unsplit_sec == pytest.approx(2.0)
    assert summary.wall_sec == pytest.approx(7.0)
    assert summary.cache_hit_ratio == pytest.approx(1200 / 2100, abs=1e-4)
    assert summary.prefill_tok_s == pytest.approx(900 / 3.2, abs=0.01)
    assert summary.decode_tok_s == pytest.approx(70 / 0.9, abs=0.01)
    dumped = summary.model_dump()
    assert dumped["cache_hit_ratio"] == summary.cache_hit_ratio and dumped["wall_sec"] == 7.0
    again = InferenceSummary.model_validate(dumped)  # result.json round trip: computed keys are ignored
    assert again == summary
    total = InferenceSummary().merge(summary).merge(again)
    assert total.calls == 6 and total.cache_known and total.cache_hit_ratio == summary.cache_hit_ratio


def test_summary_without_cache_counts_has_no_ratio():
    summary = InferenceSummary().add(_call(source="client", wall_ms=10, prompt_tokens=5))
    assert summary.cache_hit_ratio is None and summary.prefill_tok_s is None and summary.decode_tok_s is None

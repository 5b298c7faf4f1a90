"""The scripted OpenAI server that other tests rely on: routes, scripting, errors, concurrency."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from tests.fakes.openai_server import ScriptedError, ScriptedServer


def _get(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_list_script_with_openai_sdk():
    with ScriptedServer(["hello", {"content": "cut", "finish_reason": "length"}]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r1 = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
        r2 = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}],
                                            response_format={"type": "json_object"}, extra_body={"seed": 3})
        assert r1.choices[0].message.content == "hello"
        assert r1.usage.prompt_tokens > 0 and r1.usage.completion_tokens == 2
        assert r2.choices[0].finish_reason == "length"
        assert srv.requests[1]["response_format"] == {"type": "json_object"}
        assert srv.requests[1]["seed"] == 3
        with pytest.raises(openai.InternalServerError, match="exhausted"):
            client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])


def test_n_replication_list_choices_and_logprobs():
    with ScriptedServer(["A", ["x", "y", "z"], ["only"]]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "q"}]
        r = client.chat.completions.create(model="m", messages=msgs, n=3, logprobs=True, top_logprobs=2)
        assert [c.message.content for c in r.choices] == ["A", "A", "A"]
        lp = r.choices[0].logprobs.content[0]
        assert lp.token == "A" and len(lp.top_logprobs) == 2
        r = client.chat.completions.create(model="m", messages=msgs, n=3)
        assert [c.message.content for c in r.choices] == ["x", "y", "z"]
        r = client.chat.completions.create(model="m", messages=msgs, n=2)  # a server ignoring n
        assert len(r.choices) == 1


def test_errors_and_auth():
    script = [ScriptedError.context_length_vllm(8192, 9000), ScriptedError(429, "slow down")]
    with ScriptedServer(script, api_key="secret") as srv:
        bad = openai.OpenAI(base_url=srv.base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model="m", messages=[])
        good = openai.OpenAI(base_url=srv.base_url, api_key="secret", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="maximum context length is 8192"):
            good.chat.completions.create(model="m", messages=[])
        with pytest.raises(openai.RateLimitError):
            good.chat.completions.create(model="m", messages=[])


def test_callable_and_side_routes():
    with ScriptedServer(lambda body: body["messages"][-1]["content"].upper(), context_limit=4096) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "echo"}])
        assert r.choices[0].message.content == "ECHO"
        models = client.models.list()
        assert models.data[0].id == "scripted"
        assert models.data[0].model_extra["max_model_len"] == 4096
        status, body = _post(srv.root_url + "/tokenize", {"content": "12345678"})
        assert status == 200 and len(body["tokens"]) == 2
        with urllib.request.urlopen(srv.root_url + "/health", timeout=5) as resp:
            assert resp.status == 200
    with ScriptedServer(["x"], flavor="llamacpp", context_limit=2048) as srv:
        status, props = _get(srv.root_url + "/props")
        assert status == 200 and props["default_generation_settings"]["n_ctx"] == 2048


def test_concurrent_requests_overlap():
    with ScriptedServer(lambda body: "ok", delay=0.3) as srv:
        results: list[int] = []

        def call() -> None:
            results.append(_post(srv.base_url + "/chat/completions", {"messages": []})[0])

        threads = [threading.Thread(target=call) for _ in range(4)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [200] * 4
        assert time.monotonic() - t0 < 0.9  # served concurrently, not 4 × 0.3 s
        assert len(srv.requests) == 4

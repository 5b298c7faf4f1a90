"""ModelClient over the scripted server: choices, logprobs, sampling merge, error mapping, n fallback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.fakes.openai_server import RawReply, ScriptedError, ScriptedServer
from trials.endpoints.client import (
    AuthError,
    BadResponse,
    ContextLengthExceeded,
    ModelClient,
    ModelError,
    RateLimited,
    ServerUnreachable,
    server_root,
)
from trials.endpoints.spec import EndpointSpec
from trials.errors import InfraError, ModelServerUnreachable

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}]


def _client(srv: ScriptedServer, **kw) -> ModelClient:
    return ModelClient(EndpointSpec(base_url=srv.base_url, model=srv.model, timeout_sec=10, **kw))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_chat_single_and_usage():
    with ScriptedServer(["hello there"]) as srv:
        async with _client(srv) as client:
            res = await client.chat(MSGS)
    assert res.text == "hello there" and res.choices[0].finish_reason == "stop"
    assert res.input_tokens > 0 and res.output_tokens == 3 and res.requests == 1
    assert res.model == "scripted" and res.latency_sec > 0


async def test_n2_and_logprobs():
    with ScriptedServer([["A", "B"]]) as srv:
        async with _client(srv) as client:
            res = await client.chat(MSGS, n=2, logprobs=True, top_logprobs=3)
            assert client.supports_n is True
    assert [c.text for c in res.choices] == ["A", "B"]
    lp = res.choices[0].logprobs
    assert lp is not None and lp[0].token == "A" and len(lp[0].top_logprobs) == 3
    assert srv.requests[0]["n"] == 2 and srv.requests[0]["logprobs"] is True


async def test_sampling_defaults_merge_under_explicit_args():
    sampling = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 100, "top_k": 20}
    with ScriptedServer(["x", "y"]) as srv:
        async with _client(srv, sampling=sampling) as client:
            await client.chat(MSGS)
            await client.chat(MSGS, temperature=0.0, max_tokens=5, stop=["\n"],
                              response_format={"type": "json_object"}, extra_body={"top_k": 1, "seed": 7},
                              model="verifier")
    first, second = srv.requests
    assert first["temperature"] == 0.7 and first["top_p"] == 0.9 and first["top_k"] == 20
    assert "n" not in first and "logprobs" not in first
    assert second["temperature"] == 0.0 and second["max_tokens"] == 5 and second["top_p"] == 0.9
    assert second["top_k"] == 1 and second["seed"] == 7 and second["stop"] == ["\n"]
    assert second["response_format"] == {"type": "json_object"} and second["model"] == "verifier"


async def test_n_fallback_fills_with_parallel_single_requests():
    # A server that ignores n: one choice per request, whatever n says.
    counter = iter(range(100))
    with ScriptedServer(lambda body: [f"c{next(counter)}"]) as srv:
        async with _client(srv) as client:
            res = await client.chat(MSGS, n=3)
            assert client.supports_n is False
            assert len(res.choices) == 3 and res.requests == 3
            assert len({c.text for c in res.choices}) == 3
            res2 = await client.chat(MSGS, n=2)  # now straight to single requests
    assert len(res2.choices) == 2
    assert [r.get("n") for r in srv.requests] == [3, None, None, None, None]
    assert res.output_tokens == 3


async def test_n_over_the_servers_limit_is_asked_in_parts():
    # llama-server refuses an n above its slots (-np 2) with a 400 that names the limit: a Mid-Harness N of 3 or
    # 4 must still get its N candidates, in parts of at most 2, not fail the trial.
    counter = iter(range(100))

    def llama(body):
        n = body.get("n", 1)
        if n > 2:
            return ScriptedError(400, f"Field 'n': Value must be between 1 <= value <= 2, but got {n}")
        return [f"c{next(counter)}" for _ in range(n)]

    with ScriptedServer(llama) as srv:
        async with _client(srv) as client:
            res = await client.chat(MSGS, n=3)
            assert client.n_limit == 2 and client.supports_n is True
            res4 = await client.chat(MSGS, n=4)  # now straight to parts of 2
            res5 = await client.chat(MSGS, n=5)
    assert len(res.choices) == 3 and res.requests == 2 and len({c.text for c in res.choices}) == 3
    assert len(res4.choices) == 4 and res4.requests == 2
    assert len(res5.choices) == 5 and res5.requests == 3
    assert [r.get("n") for r in srv.requests[:3]] == [3, 2, None]
    assert sorted(r.get("n") or 1 for r in srv.requests[3:5]) == [2, 2]
    assert sorted(r.get("n") or 1 for r in srv.requests[5:]) == [1, 2, 2]


async def test_a_400_that_names_no_n_limit_is_raised():
    with ScriptedServer([ScriptedError(400, "unsupported response_format")]) as srv:
        async with _client(srv) as client:
            with pytest.raises(BadResponse, match="response_format"):
                await client.chat(MSGS, n=3)
            assert client.n_limit is None
    assert len(srv.requests) == 1


@pytest.mark.parametrize("error", [
    ScriptedError.context_length_vllm(8192, 9000),
    ScriptedError.context_length_llamacpp(4096, 5000),
    ScriptedError.context_length_openai(8192, 9000),
    ScriptedError(400, "The decoder prompt (length 9000) is longer than the maximum model length of 8192."),
])
async def test_context_length_dialects(error):
    with ScriptedServer([error]) as srv:
        async with _client(srv) as client:
            with pytest.raises(ContextLengthExceeded) as info:
                await client.chat(MSGS)
    assert info.value.status_code == 400
    assert info.value.limit in (8192, 4096)
    assert info.value.requested in (9000, 5000)


@pytest.mark.parametrize("error", [
    ScriptedError(422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: 9000 "
                       "`inputs` tokens and 256 `max_new_tokens`"),  # TGI
    ScriptedError(400, "Requested tokens exceed the model's context length of 8192"),
    ScriptedError(400, "ValidationException: Input is too long for requested model."),  # Bedrock via a proxy
    ScriptedError(400, "Error: context length exceeded"),
])
async def test_more_context_length_wordings(error):
    with ScriptedServer([error]) as srv:
        async with _client(srv) as client:
            with pytest.raises(ContextLengthExceeded):
                await client.chat(MSGS)


async def test_llamacpp_context_error_fields():
    err = ScriptedError(400, "the request exceeds the available context size, try increasing it",
                        type="exceed_context_size_error", code=400)
    with ScriptedServer([err]) as srv:
        async with _client(srv) as client:
            with pytest.raises(ContextLengthExceeded):
                await client.chat(MSGS)


async def test_auth_rate_limit_and_server_errors():
    with ScriptedServer(["never"], api_key="right") as srv:
        spec = EndpointSpec(base_url=srv.base_url, model="m", api_key_env="RISE_TEST_KEY", timeout_sec=5)
        async with ModelClient(spec) as client:
            with pytest.raises(AuthError) as info:
                await client.chat(MSGS)
    assert info.value.status_code == 401 and not info.value.retryable
    script = [ScriptedError(429, "slow down"), ScriptedError(500, "boom"), ScriptedError(503, "loading model"),
              ScriptedError(422, "bad schema")]
    with ScriptedServer(script) as srv:
        async with _client(srv) as client:
            with pytest.raises(RateLimited):
                await client.chat(MSGS)
            with pytest.raises(BadResponse) as info:
                await client.chat(MSGS)
            assert info.value.retryable
            with pytest.raises(ServerUnreachable):
                await client.chat(MSGS)
            with pytest.raises(BadResponse) as info:
                await client.chat(MSGS)
            assert not info.value.retryable


async def test_api_key_from_env_is_sent(monkeypatch):
    monkeypatch.setenv("RISE_TEST_KEY", "right")
    with ScriptedServer(["ok"], api_key="right") as srv:
        spec = EndpointSpec(base_url=srv.base_url, model="m", api_key_env="RISE_TEST_KEY", timeout_sec=5)
        async with ModelClient(spec) as client:
            assert (await client.chat(MSGS)).text == "ok"
            assert "right" not in repr(client)


async def test_connection_refused_is_unreachable_infra_error():
    spec = EndpointSpec(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", timeout_sec=3)
    async with ModelClient(spec) as client:
        with pytest.raises(ServerUnreachable) as info:
            await client.chat(MSGS)
        assert not await client.health()
    err = info.value
    assert isinstance(err, ModelError) and isinstance(err, ModelServerUnreachable) and isinstance(err, InfraError)
    assert err.cause == "model_unreachable" and err.retryable


async def test_timeout_is_unreachable():
    with ScriptedServer(lambda body: "late", delay=2.0) as srv:
        spec = EndpointSpec(base_url=srv.base_url, model="m", timeout_sec=0.5)
        async with ModelClient(spec) as client:
            with pytest.raises(ServerUnreachable, match="timed out"):
                await client.chat(MSGS)


async def test_context_limit_sources():
    with ScriptedServer([], context_limit=32768) as srv:
        async with _client(srv) as client:
            assert await client.context_limit() == 32768
        async with _client(srv, context_limit=1000) as client:
            assert await client.context_limit() == 1000
    with ScriptedServer([], flavor="llamacpp", context_limit=4096) as srv:
        async with _client(srv) as client:
            assert await client.context_limit() == 4096


async def test_context_limit_default_warns(caplog):
    spec = EndpointSpec(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", timeout_sec=2)
    async with ModelClient(spec) as client:
        assert await client.context_limit() == 8192
    assert "assuming 8192" in caplog.text


async def test_count_tokens_server_and_fallback():
    with ScriptedServer([]) as srv:
        async with _client(srv) as client:
            assert await client.count_tokens("x" * 40) == 10
            n_msgs = await client.count_tokens(MSGS)
            assert n_msgs > 0
            assert await client.count_tokens("x" * 40) == 10  # cached: no second request
            assert [p for _, p, _ in srv.calls].count("/tokenize") == 2
    spec = EndpointSpec(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", timeout_sec=2)
    async with ModelClient(spec) as client:
        assert await client.count_tokens("y" * 80) == 20
        assert await client.count_tokens(MSGS) > 0


async def test_health():
    with ScriptedServer([]) as srv:
        async with _client(srv) as client:
            assert await client.health()


def test_server_root():
    assert server_root("http://h:8080/v1") == "http://h:8080"
    assert server_root("http://h:8080/v1/") == "http://h:8080"
    assert server_root("https://api.example.com/openai/v1") == "https://api.example.com/openai"
    assert server_root("http://h:9") == "http://h:9"


async def test_choice_args_per_server_kind():
    with ScriptedServer(["A"]) as srv:
        async with _client(srv) as client:
            assert await client.server_kind() == "vllm"
            args = await client.choice_args(["A", "B"])
            assert args == {"extra_body": {"structured_outputs": {"choice": ["A", "B"]}}}
            await client.chat(MSGS, max_tokens=1, **args)
    assert srv.requests[0]["structured_outputs"] == {"choice": ["A", "B"]}
    with ScriptedServer([], flavor="llamacpp") as srv:
        async with _client(srv) as client:
            args = await client.choice_args(["yes", 'say "no"'])
    assert args == {"extra_body": {"grammar": 'root ::= "yes" | "say \\"no\\""'}}
    spec = EndpointSpec(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", timeout_sec=2)
    async with ModelClient(spec) as client:
        assert await client.server_kind() == "other" and await client.choice_args(["A"]) == {}


async def test_endpoint_ceiling_applies_with_and_without_a_request_cap():
    with ScriptedServer(["a", "b", "c"]) as srv:
        async with _client(srv, max_output_tokens=64) as client:
            await client.chat(MSGS)
            await client.chat(MSGS, max_tokens=1000)
            await client.chat(MSGS, max_tokens=10, seed=3)
    assert [r["max_tokens"] for r in srv.requests] == [64, 64, 10] and srv.requests[2]["seed"] == 3


@pytest.mark.parametrize(("item", "words"), [
    (RawReply("<html>502 Bad Gateway</html>", content_type="text/html"), "unparseable response"),
    (RawReply('["a", "list"]', content_type="application/json"), "unparseable response"),
    (RawReply('{"choices": []}', content_type="application/json"), "no choices"),
    (RawReply('{"choices": ["just text"]}', content_type="application/json"), "malformed completion"),
    ({"content": "x", "logprobs": [{"tok": "x"}]}, "malformed completion"),
    ({"content": "x", "finish_reason": {"not": "a string"}}, "malformed completion"),
])
async def test_garbage_from_the_server_is_a_bad_response_naming_it(item, words):
    """A reply that is not a completion (a proxy's HTML page, JSON of the wrong shape) is a BadResponse that
    says what came back, never a TypeError from deep inside the harness."""
    with ScriptedServer([item]) as srv:
        async with _client(srv) as client:
            with pytest.raises(BadResponse, match=words) as info:
                await client.chat(MSGS, logprobs=True)
    assert "/chat/completions" in str(info.value) or "no choices" in str(info.value)


async def test_an_error_page_that_is_not_json_keeps_its_status_and_text():
    with ScriptedServer([RawReply("upstream overloaded", status=503)]) as srv:
        async with _client(srv) as client:
            with pytest.raises(ServerUnreachable, match="overloaded") as info:
                await client.chat(MSGS)
    assert info.value.status_code == 503 and info.value.retryable


def test_the_model_client_and_the_seed_agent_start_without_the_openai_sdk():
    """Importing the openai SDK cost a trial's agent more CPU than the rest of its start (issue 42): the client
    must not bring it back, directly or through the seed's launcher preload."""
    from trials.runner import PRELOAD

    modules = ", ".join(PRELOAD["monitor.host"])
    probe = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'openai'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "trials.endpoints.client" in modules and out.stdout.strip() == "[]", out.stdout


def test_channel_transports_load_no_certificate_store_and_refuse_tls(monkeypatch, tmp_path):
    """A confined agent reaches everything through the channel's socket in plain HTTP: its transports must not
    load the certificate store (40 ms of CPU each, three per agent), and a TLS handshake through one cannot pass
    unverified (no certificate is trusted)."""
    import ssl

    from trials.environments.channel import channel_transport

    loaded: list[object] = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations",
                        lambda self, *a, **k: (loaded.append(a or k), real(self, *a, **k))[1])
    monkeypatch.setenv("RISE_CHANNEL", str(tmp_path / "channel.sock"))
    client = ModelClient(EndpointSpec(base_url="http://model-0.rise/v1", model="m", timeout_sec=5))
    transports = [channel_transport(str(tmp_path / "s")), channel_transport(str(tmp_path / "s"), sync=True)]
    assert loaded == [], loaded
    for t in transports:
        ctx = t._pool._ssl_context  # httpcore's pool keeps the context it was given
        assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname and ctx.get_ca_certs() == []
    transports[1].close()
    import asyncio
    asyncio.run(client.aclose())

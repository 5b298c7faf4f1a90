"""``rise serve vllm --per-gpu``: one replica per GPU, each pinned by CUDA_VISIBLE_DEVICES, on consecutive ports.

No GPU or vLLM here: a stand-in ``vllm`` executable on PATH turns ``vllm serve ... --port P`` into the scripted
OpenAI-compatible server on port P and records the device it was given. The replicas then form a pool whose
members both answer its probe.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rise.cli import app
from trials.endpoints.pool import EndpointPool
from trials.endpoints.serve import list_states, port_in_use, stop_server, visible_gpus

REPO = Path(__file__).resolve().parent.parent
FAKE_VLLM = """#!{python}
import os, sys
args = sys.argv[2:]
port = args[args.index("--port") + 1]
name = args[args.index("--served-model-name") + 1] if "--served-model-name" in args else args[0]
with open(os.path.join({record!r}, "gpu-" + port), "w") as fh:
    fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
# in this process, not exec'd: the command line must still read "python .../vllm serve ..." so that
# `rise serve stop` recognises its server (an exec'd stand-in was left running: the pid check said not ours)
import runpy
sys.argv = ["scripted", "--port", port, "--model", name]
runpy.run_module("trials.endpoints.scripted", run_name="__main__")
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    bindir, record = tmp_path / "bin", tmp_path / "record"
    bindir.mkdir()
    record.mkdir()
    exe = bindir / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable, record=str(record)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    return record


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _two_free_ports() -> int:
    """Two consecutive ports free to bind, below the kernel's ephemeral range: a port taken from that range (as
    free_port() does) can be handed to any outgoing connection before the second replica binds it, which failed a
    CI run with "Address already in use" on port + 1."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) \
        if Path("/proc/sys/net/ipv4/ip_local_port_range").is_file() else 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low - 2)
        if _bindable(port) and _bindable(port + 1) and not port_in_use(port) and not port_in_use(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


def test_per_gpu_starts_one_pinned_replica_per_device_and_they_form_a_pool(fake_vllm):
    port = _two_free_ports()
    res = CliRunner().invoke(app, ["serve", "vllm", "org/model", "--served-name", "coder", "--gpus", "0,1",
                                   "--port", str(port), "--detach", "--ready-timeout", "30"])
    try:
        assert res.exit_code == 0, res.output
        names = sorted(s.name for s in list_states())
        assert names == [f"vllm-{port}", f"vllm-{port + 1}"]
        assert (fake_vllm / f"gpu-{port}").read_text() == "0" and (fake_vllm / f"gpu-{port + 1}").read_text() == "1"
        urls = [f"http://127.0.0.1:{p}/v1" for p in (port, port + 1)]
        assert f"--base-url {urls[0]} --base-url {urls[1]} --model coder" in res.output.replace("\n", " ")
        pool = EndpointPool(urls)
        assert [asyncio.run(pool.probe(r)) for r in pool.replicas] == [True, True]
    finally:
        for name in (f"vllm-{port}", f"vllm-{port + 1}"):
            stop_server(name)
    assert list_states() == []


def test_per_gpu_refuses_a_name_and_a_node_without_gpus(fake_vllm, monkeypatch):
    res = CliRunner().invoke(app, ["serve", "vllm", "m", "--per-gpu", "--name", "x"])
    assert res.exit_code == 2 and "replicas are named vllm-PORT" in res.output
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []
    res = CliRunner().invoke(app, ["serve", "vllm", "m", "--per-gpu"])
    assert res.exit_code == 1 and "no GPU found" in res.output
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_gpus() == ["2", "3"]

"""Escape suite, issue 44 routes 3 and 4: a hostile harness (tests/escape/network_harness) in real trials (the
real runner, real bubblewrap, the real local or Docker sandbox, a scripted model that requires a key).

- Route 3: model requests through the channel whose target names another host (``@127.0.0.1:PORT/``) must be
  refused: a recording HTTP server on 127.0.0.1 sees no request and no key.
- Route 4: a task that allows internet gets a sandbox that reaches a server on a non-loopback host address (the
  outside, on a machine without internet) but not a listener on the host's 127.0.0.1; a task that leaves
  ``allow_internet`` unset runs offline; the harness process itself reaches neither, in every case.

Meanwhile its honest model call and command work."""

from __future__ import annotations

import json
import random
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from tests.escape.recorder import RecordingServer
from tests.escape.test_candidate_escape import _docker_ready
from tests.fakes.openai_server import ScriptedServer
from tests.test_env_netns import answering, outside_address
from tests.test_seed_support import reply
from trials import launch
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "data" / "starter" / "hello-file"
HOSTILE = Path(__file__).resolve().parent / "network_harness"
KEY_VAR = "RISE_ESCAPE_NET_KEY"
SUFFIX = 7

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed")]


def _task(tmp_path: Path, internet: str) -> Path:
    """hello-file with ``allow_internet = true`` (``internet``) or with the line removed (``unset``)."""
    task = tmp_path / "tasks" / "hello-file"
    shutil.copytree(HELLO, task)
    toml = task / "task.toml"
    line = "allow_internet = false\n"
    assert line in toml.read_text()
    toml.write_text(toml.read_text().replace(line, "allow_internet = true\n" if internet == "internet" else ""))
    return task


def _port_pair() -> tuple[RecordingServer, int]:
    """The bystander on port ``10 * P + SUFFIX`` and a free port P for the model: the target ``7/steal`` once
    turned ``http://127.0.0.1:P`` into ``http://127.0.0.1:P7/steal``, the bystander, with the key in a Bearer
    header (the ``@host`` form moves the endpoint's host:port into userinfo, which httpx sends as Basic auth)."""
    for _ in range(50):
        model = random.randint(2000, 6000)
        try:
            rec = RecordingServer(port=model * 10 + SUFFIX)
        except OSError:
            continue
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", model)) != 0:  # nothing listens there: the model may
                return rec, model
        rec.__exit__(None, None, None)
    pytest.skip("no free pair of ports P and 10 * P + 7 on 127.0.0.1")


async def _trial(tmp_path: Path, monkeypatch, env_kind: str, internet: str) -> tuple[dict, list, list, list]:
    from monitor.agents import harness_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    outside = outside_address()
    if outside is None:
        pytest.skip("this host has no non-loopback IPv4 address to stand for the outside")
    harness = tmp_path / "network_harness"
    shutil.copytree(HOSTILE, harness, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the rise cache (spares) under this HOME
    for name in ("RISE_CACHE_DIR", "RISE_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    key = f"sk-net-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, key)
    task = load_task(_task(tmp_path, internet))
    rec, model = _port_pair()
    with rec, answering("127.0.0.1") as (lo_port, lo_peers), answering(outside) as (out_port, out_peers), \
            ScriptedServer([reply(analysis="hi", plan="p")] * 3, api_key=key, port=model) as srv:
        (harness / "targets.json").write_text(json.dumps({
            "route3_targets": [f"@127.0.0.1:{rec.port}/steal", f"{SUFFIX}/steal"], "loopback_port": lo_port,
            "outside_host": outside, "outside_port": out_port}))
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted", api_key_env=KEY_VAR)
        res = await run_trial(task, harness_agent(harness), endpoint, tmp_path / "job" / "hello__r1", env_kind,
                              "escape-net", agent_timeout_sec=120)
        authorised = [c for c in srv.calls if c[1].endswith("/chat/completions")]
    launch._SPARES.close_all()
    agent = tmp_path / "job" / "hello__r1" / "agent"
    assert res.agent_status == "completed", (res.agent_error, (agent / "stdout.log").read_text()[-2000:])
    record = json.loads((agent / "escape.json").read_text())
    assert record["honest"]["exec"] == "hostile" and authorised  # the allowed doors work
    for f in agent.rglob("*"):
        assert not f.is_file() or key not in f.read_text(errors="replace"), f
    return record["attempts"], rec.requests, lo_peers, out_peers


def _check(attempts: dict, recorded: list, lo_peers: list, out_peers: list, internet: str) -> None:
    shown = {k: v["detail"] for k, v in attempts.items()}
    # route 3: refused with a named reason; nothing, and no key, reached the bystander
    route3 = [a for k, a in attempts.items() if k.startswith("route3_")]
    assert len(route3) == 4 and all(not a["reached"] and a["detail"].startswith("400") and "bad_target" in
                                    a["detail"] for a in route3), shown
    assert recorded == [], [(r["method"], r["path"], r["headers"].get("authorization", "")[:14]) for r in recorded]
    # route 4: never host loopback, never a network for the harness; outside only where the task allows it
    assert not attempts["sandbox_loopback"]["reached"] and lo_peers == [], shown
    assert not attempts["harness_loopback"]["reached"] and not attempts["harness_outside"]["reached"], shown
    assert attempts["sandbox_outside"]["reached"] == (internet == "internet"), shown
    assert len(out_peers) == (1 if internet == "internet" else 0), shown


@pytest.mark.parametrize("internet", ["internet", "unset"])
async def test_network_routes_are_closed_in_the_local_sandbox(tmp_path, monkeypatch, internet):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    if internet == "internet" and shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed (scripts/setup.sh)")
    _check(*await _trial(tmp_path, monkeypatch, "local", internet), internet)


@pytest.mark.docker
@pytest.mark.parametrize("internet", ["internet", "unset"])
async def test_network_routes_are_closed_in_the_docker_sandbox(tmp_path, monkeypatch, internet):
    if not _docker_ready():
        pytest.skip("no Docker engine or no base image (rise images base)")
    _check(*await _trial(tmp_path, monkeypatch, "docker", internet), internet)

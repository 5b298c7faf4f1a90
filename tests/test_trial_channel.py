"""The trial channel (trials/channel.py) and its harness side (trials/environments/channel.py, ModelClient over
the socket), with real unix sockets and real HTTP: a directory-backed sandbox, the scripted model server."""

from __future__ import annotations

import httpx
import pytest

from tests.escape.recorder import RecordingServer
from tests.fakes.openai_server import ScriptedServer
from tests.test_runner_fake_env import DirEnv
from tests.test_seed_support import reply
from trials.channel import ChannelError, TrialChannel, harness_endpoint, upstream_url
from trials.endpoints.client import AuthError, ModelClient, ServerUnreachable
from trials.endpoints.spec import EndpointSpec
from trials.environments.channel import ChannelEnvironment
from trials.environments.factory import attach
from trials.telemetry import Collector, collector_from_env

KEY_VAR = "RISE_TEST_CHANNEL_KEY"


@pytest.fixture
async def served(tmp_path):
    """A started DirEnv behind a channel on a socket in a deep folder (longer than sun_path allows)."""
    env = DirEnv(None, tmp_path / "trial")
    await env.start()
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    channel = TrialChannel(env, [EndpointSpec(base_url="http://127.0.0.1:9/v1", model="none")])
    await channel.start(deep / "channel.sock")
    short = tmp_path / "c.sock"  # a client connects by a short path (the harness's is /rise/agent/...)
    short.symlink_to(deep / "channel.sock")
    yield env, channel, str(short)
    await channel.close()


async def test_exec_upload_download_through_the_channel(served, tmp_path):
    env, channel, sock = served
    remote = attach(ChannelEnvironment(sock, "/app", "fake").handle())
    assert isinstance(remote, ChannelEnvironment)
    res = await remote.exec("echo hi > /app/a.txt && cat /app/a.txt", env={"X": "1"}, timeout=10)
    assert res.ok and res.stdout == "hi\n"
    src = tmp_path / "up"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("payload")
    await remote.upload(src, "/app/up")
    assert (env.root / "app" / "up" / "sub" / "f.txt").read_text() == "payload"
    await remote.download("/app/up", tmp_path / "down")
    assert (tmp_path / "down" / "sub" / "f.txt").read_text() == "payload"
    with pytest.raises(FileNotFoundError):
        await remote.upload(tmp_path / "missing", "/app/x")
    await remote.stop()
    assert channel.requests["sandbox.rise"] == 3


async def test_the_channel_refuses_other_hosts_and_paths(served):
    _, _, sock = served
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=sock)) as client:
        other = await client.get("http://127.0.0.1:22/")
        assert other.status_code == 403 and "model endpoints and its sandbox only" in other.json()["error"]["message"]
        wrong = await client.get("http://sandbox.rise/exec")
        assert wrong.status_code == 404
        bad = await client.post("http://sandbox.rise/exec", content=b"[1]")
        assert bad.status_code == 400


async def test_model_requests_get_the_key_from_the_runner(tmp_path, monkeypatch):
    """The harness's endpoint names no key variable; the channel adds the key, which the server requires."""
    env = DirEnv(None, tmp_path / "trial")
    monkeypatch.setenv(KEY_VAR, "sk-channel-test")
    with ScriptedServer([reply(analysis="ok")] * 2, api_key="sk-channel-test") as srv:
        spec = EndpointSpec(base_url=srv.base_url, model="scripted", api_key_env=KEY_VAR)
        seen = harness_endpoint(spec, 0)
        assert seen.api_key_env is None and seen.base_url == "http://model-0.rise/v1"
        channel = TrialChannel(env, [spec, None])
        await channel.start(tmp_path / "c.sock")
        monkeypatch.setenv("RISE_CHANNEL", str(tmp_path / "c.sock"))
        try:
            async with ModelClient(seen) as client:
                result = await client.chat([{"role": "user", "content": "hi"}])
                assert "ok" in result.text
            monkeypatch.setenv(KEY_VAR, "wrong")  # the runner's key is what counts
            async with ModelClient(seen) as client:
                with pytest.raises(AuthError):
                    await client.chat([{"role": "user", "content": "hi"}])
            async with ModelClient(harness_endpoint(spec, 1)) as client:  # no verifier endpoint: refused
                with pytest.raises(Exception, match="403"):
                    await client.chat([{"role": "user", "content": "hi"}])
        finally:
            await channel.close()


async def test_an_unreachable_model_reads_as_unreachable(served, monkeypatch):
    _, _, sock = served
    monkeypatch.setenv("RISE_CHANNEL", sock)
    async with ModelClient(harness_endpoint(EndpointSpec(base_url="http://127.0.0.1:9/v1", model="none"), 0)) as c:
        with pytest.raises(ServerUnreachable, match="unreachable"):
            await c.chat([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("target", ["1/v1/models", "@127.0.0.1:18999/", ".evil.example/v1", "//evil.example/v1",
                                    "http://evil.example/v1", "evil.example:443", "*", "/v1\\@evil", "/a#b",
                                    "v1/models"])
def test_upstream_url_refuses_every_target_but_a_path(target):
    with pytest.raises(ChannelError) as exc:
        upstream_url(EndpointSpec(base_url="https://api.example.test/v1", model="m"), target)
    assert exc.value.status == 400 and exc.value.kind == "bad_target" and repr(target) in str(exc.value)


def test_upstream_url_keeps_the_endpoint_host_and_the_path():
    spec = EndpointSpec(base_url="http://127.0.0.1:8080/v1", model="m")
    assert str(upstream_url(spec, "/v1/chat/completions?a=1")) == "http://127.0.0.1:8080/v1/chat/completions?a=1"
    odd = upstream_url(spec, "/@127.0.0.1:18999/x")  # '@' inside a path is a path, not userinfo
    assert (odd.host, odd.port, odd.userinfo) == ("127.0.0.1", 8080, b"")


def _raw(sock: str, method: str, target: str, body: bytes = b"") -> bytes:
    """One raw HTTP/1.1 request over the channel socket (an HTTP client would normalise the target)."""
    import socket as _socket

    with _socket.socket(_socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(sock)
        s.sendall(f"{method} {target} HTTP/1.1\r\nhost: model-0.rise\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


async def test_model_targets_cannot_pick_the_host(tmp_path, monkeypatch):
    """Issue 44 route 3: request targets that once moved the upstream URL's host or port (``@host:port/``,
    ``1/...``, absolute form) are refused with 400 bad_target; a bystander on 127.0.0.1 sees no request and no
    key; the honest path still reaches the model with the runner's key."""
    import asyncio

    env = DirEnv(None, tmp_path / "trial")
    monkeypatch.setenv(KEY_VAR, "sk-route3-key")
    with RecordingServer() as rec, ScriptedServer([reply(analysis="ok")] * 2, api_key="sk-route3-key") as srv:
        spec = EndpointSpec(base_url=srv.base_url, model="scripted", api_key_env=KEY_VAR)
        channel = TrialChannel(env, [spec, None])
        await channel.start(tmp_path / "c.sock")
        sock = str(tmp_path / "c.sock")
        try:
            for method in ("GET", "POST"):
                for target in (f"@127.0.0.1:{rec.port}/steal", "1/v1/models", f"http://127.0.0.1:{rec.port}/",
                               f"127.0.0.1:{rec.port}", f"//127.0.0.1:{rec.port}/"):
                    out = await asyncio.to_thread(_raw, sock, method, target, b"{}")
                    assert out.startswith(b"HTTP/1.1 400") and b"bad_target" in out, (target, out[:200])
            assert rec.requests == [] and channel.requests["refused"] == 10
            monkeypatch.setenv("RISE_CHANNEL", sock)
            async with ModelClient(harness_endpoint(spec, 0)) as client:
                assert "ok" in (await client.chat([{"role": "user", "content": "hi"}])).text
        finally:
            await channel.close()
    assert rec.requests == []


def test_collector_from_env_follows_the_sdk_rules():
    assert collector_from_env({}) is None
    assert collector_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}) is None
    c = collector_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_EXPORTER_OTLP_HEADERS":
                            "api_key=a%20b, X-Y = z ,broken"})
    assert c is not None and c.url == "http://c:4318/v1/traces" and c.headers == {"api_key": "a b", "x-y": "z"}
    t = collector_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/v1/traces",
                            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert t is not None and t.url == "http://t/v1/traces"


async def test_the_telemetry_route_forwards_to_the_runners_collector_only(tmp_path):
    """No collector: 404 no_collector. With one: GET / says so, POST /v1/traces goes to the collector's fixed URL
    with the runner's headers; another path or content type is refused."""
    env = DirEnv(None, tmp_path / "trial")
    with RecordingServer() as rec:
        for collector in (None, Collector(url=f"http://127.0.0.1:{rec.port}/v1/traces", headers={"k": "v"})):
            channel = TrialChannel(env, [None], collector)
            await channel.start(tmp_path / "t.sock")
            try:
                async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(tmp_path / "t.sock"))) as c:
                    probe = await c.get("http://telemetry.rise/")
                    post = await c.post("http://telemetry.rise/v1/traces", content=b"\x0a\x00",
                                        headers={"content-type": "application/x-protobuf"})
                    if collector is None:
                        assert probe.status_code == post.status_code == 404
                        assert post.json()["error"]["type"] == "no_collector" and rec.requests == []
                        continue
                    assert probe.status_code == 200 and post.status_code == 200
                    other = await c.post(f"http://telemetry.rise/@127.0.0.1:{rec.port}/x", content=b"",
                                         headers={"content-type": "application/x-protobuf"})
                    text = await c.post("http://telemetry.rise/v1/traces", content=b"x",
                                        headers={"content-type": "text/plain"})
                    assert other.status_code == 404 and text.status_code == 415
            finally:
                await channel.close()
    assert [(r["method"], r["path"], r["headers"]["k"], r["headers"]["content-type"]) for r in rec.requests] == [
        ("POST", "/v1/traces", "v", "application/x-protobuf")]

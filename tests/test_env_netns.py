"""The local sandbox's network (trials/environments/netns.py) with the real parts: bwrap, nsenter, slirp4netns.

This machine may have no internet, so "outside" is a server bound to one of the host's non-loopback addresses
(what a sandbox reaches through slirp4netns like any outside host); a server on 127.0.0.1 stands for the host's
loopback services (the model server, the runner's ports), which no sandbox may reach (issue 44 route 4)."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from tests.test_env_local import make_task
from trials.environments.local import LocalEnvironment, bwrap_available

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("slirp4netns") is None, reason="slirp4netns is not installed")]


def outside_address() -> str | None:
    """A non-loopback IPv4 address of this host (eth0's, typically), or None."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


@contextmanager
def answering(host: str) -> Iterator[tuple[int, list[str]]]:
    """A TCP server on ``host`` that answers 'hi' and records each peer."""
    srv = socket.create_server((host, 0))
    peers: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, peer = srv.accept()
            except OSError:
                return
            peers.append(peer[0])
            conn.sendall(b"hi\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1], peers
    finally:
        srv.close()


def probe(host: str, port: int) -> str:
    return (f"python3 -c \"import socket; c = socket.create_connection(('{host}', {port}), timeout=3); "
            f"print(c.recv(8).decode().strip())\"")


async def test_internet_task_reaches_outside_but_not_host_loopback(tmp_path):
    outside = outside_address()
    if outside is None:
        pytest.skip("this host has no non-loopback IPv4 address to stand for the outside")
    env = LocalEnvironment(make_task(tmp_path / "net", allow_internet=True), tmp_path / "trial")
    with answering("127.0.0.1") as (lo_port, lo_peers), answering(outside) as (out_port, out_peers):
        await env.start()
        try:
            out = await env.exec(probe(outside, out_port))
            assert out.ok and out.stdout.strip() == "hi", out
            for host in ("127.0.0.1", "10.0.2.2", outside):  # loopback, slirp's gateway, the host's own address
                res = await env.exec(probe(host, lo_port))
                assert res.returncode != 0 and ("refused" in res.stderr or "unreachable" in res.stderr), (host, res)
            slirp = env._net.proc if env._net else None
            assert slirp is not None and slirp.poll() is None
        finally:
            await env.stop()
    assert lo_peers == [] and len(out_peers) == 1
    assert slirp.poll() is not None  # stop() ends slirp4netns with the sandbox


async def test_offline_task_reaches_nothing(tmp_path):
    outside = outside_address() or "192.0.2.1"
    env = LocalEnvironment(make_task(tmp_path / "off", allow_internet=False), tmp_path / "trial")
    with answering("127.0.0.1") as (lo_port, lo_peers):
        await env.start()
        try:
            assert env._net is None
            for host, port in (("127.0.0.1", lo_port), (outside, 9)):
                res = await env.exec(probe(host, port))
                assert res.returncode != 0, (host, res)
            links = await env.exec("tail -n +3 /proc/net/dev | cut -d: -f1")
            assert links.stdout.split() == ["lo"], links
        finally:
            await env.stop()
    assert lo_peers == []

"""Outside network for a local sandbox whose task allows internet, without the host's loopback.

Every local sandbox has its own network namespace (``bwrap --unshare-net``); a task with ``allow_internet = true``
gets a user-mode network in it from ``slirp4netns`` (a Debian package; the same helper rootless Podman uses):
a ``tap0`` device with 10.0.2.100/24, gateway 10.0.2.2 and a DNS forwarder at 10.0.2.3, whose traffic leaves
through ordinary sockets that slirp4netns opens on the host. ``--disable-host-loopback`` refuses every connection
to 127.0.0.0/8 on the host (the gateway is not mapped to it either), so a task's agent reaches the outside but
not the runner's or the model server's loopback ports. Host services bound to a non-loopback address stay
reachable at that address, as from any machine on the same network. slirp4netns itself runs with its own
seccomp filter and mount sandbox (``--enable-seccomp --enable-sandbox``) and exits when the runner closes the
pipe it watches (``--exit-fd``), or when the runner dies.

Before this (issue 44 route 4) an allow_internet task shared the host's network namespace: host loopback and
all. The harness process is not affected either way: it runs with no network at all (trials/confine.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import SandboxError

SLIRP = "slirp4netns"
DEVICE = "tap0"
READY_TIMEOUT_SEC = 10.0


@dataclass
class SandboxNetwork:
    """A running slirp4netns for one sandbox: the process and the write end of its exit pipe."""

    proc: subprocess.Popen
    exit_fd: int

    def close(self) -> None:
        """Stop slirp4netns (closing its exit pipe ends it; a kill is the backstop)."""
        if self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def network_available() -> bool:
    return shutil.which(SLIRP) is not None


def slirp_argv(pid: int, exit_fd: int, ready_fd: int) -> list[str]:
    return [SLIRP, "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp", "--enable-sandbox",
            "--exit-fd", str(exit_fd), "--ready-fd", str(ready_fd), str(pid), DEVICE]


async def connect(pid: int, log_path: Path) -> SandboxNetwork:
    """Give the network namespace of ``pid`` (a sandbox keeper) outside access without host loopback.

    Raises SandboxError (naming the log) when slirp4netns is missing or does not come up."""
    if not network_available():
        raise SandboxError(f"the task allows internet, and the local sandbox gives it through {SLIRP}, which is "
                           "not installed (scripts/setup.sh installs it; or run the task with --env docker)")
    exit_r, exit_w = os.pipe()
    ready_r, ready_w = os.pipe()
    try:
        with log_path.open("ab") as logf:
            # Popen, not asyncio: like the keeper, it must not belong to the event loop that started it.
            proc = subprocess.Popen(  # noqa: ASYNC220 - fork is quick
                slirp_argv(pid, exit_r, ready_w), pass_fds=(exit_r, ready_w), stdin=subprocess.DEVNULL,
                stdout=logf, stderr=logf, start_new_session=True)
    finally:
        os.close(exit_r)
        os.close(ready_w)
    net = SandboxNetwork(proc, exit_w)
    try:
        ready = await asyncio.to_thread(_wait_ready, ready_r, READY_TIMEOUT_SEC)
    finally:
        os.close(ready_r)
    if not ready:
        net.close()
        raise SandboxError(f"{SLIRP} did not bring up the sandbox's network (exit {proc.returncode}); "
                           f"see {log_path}", log_path=str(log_path))
    return net


def _wait_ready(fd: int, timeout: float) -> bool:
    """slirp4netns writes '1' to its ready fd once tap0 is configured; EOF first means it died."""
    import select

    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready) and os.read(fd, 1) == b"1"

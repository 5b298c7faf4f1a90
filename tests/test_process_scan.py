"""Process scans through psutil (issue 15 item 14): orphaned sandbox keepers are found by name and environment
and killed, live owners' keepers are kept; the model server's pid check reads the command line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import psutil
import pytest

from trials.endpoints.serve import _pid_is
from trials.environments.local import JOB_MARK, OWNER_MARK, owner_tag, reap_leftovers


def _keeper(job: str, owner: str) -> subprocess.Popen:
    env = {**os.environ, JOB_MARK: job, OWNER_MARK: owner}
    return subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "sleep", "120"], env=env)


def _settled(proc: subprocess.Popen) -> bool:
    """bwrap has exec'd and so has its child: one process named bwrap, its sleep below it."""
    try:
        keeper = psutil.Process(proc.pid)
        return keeper.name() == "bwrap" and any(c.name() == "sleep" for c in keeper.children(recursive=True))
    except psutil.Error:
        return False


@pytest.mark.sandbox
def test_reap_kills_only_keepers_whose_owner_is_gone(tmp_path):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is needed")
    live = _keeper("scan-job", owner_tag())
    dead = _keeper("scan-job", f"{socket.gethostname()}:999999999:1")  # a pid that cannot exist
    other = _keeper("other-job", f"{socket.gethostname()}:999999999:1")
    try:
        # until each keeper runs its sleep: before, bwrap's own child is a second process named bwrap with the
        # same marks, and reaping it too counted 2 (seen once in 8 runs on a loaded machine)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(_settled(p) for p in (live, dead, other)):
            time.sleep(0.05)
        assert reap_leftovers("scan-job") == 1
        assert dead.wait(timeout=10) == -9 and live.poll() is None and other.poll() is None
        assert reap_leftovers("scan-job", include_live=True) == 1 and live.wait(timeout=10) == -9
    finally:
        for p in (live, dead, other):
            p.kill()
            p.wait()


def test_pid_is_reads_the_command_line():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        # Popen returns once the exec has begun, but the kernel sets the new command line a moment later: under
        # load /proc/PID/cmdline can still be empty (CI saw this once), so wait until the exec has finished.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not psutil.Process(proc.pid).cmdline():
            time.sleep(0.01)
        assert _pid_is(proc.pid, ["/usr/bin/sleep", "30"]) and not _pid_is(proc.pid, ["python3"])
    finally:
        proc.kill()
        proc.wait()
    assert not _pid_is(proc.pid, ["sleep"])  # gone

"""A bubblewrap sandbox for the implementer's ``run(cmd)``: the host read-only, one writable folder, no network.

The command gets a private /run (no host sockets such as Docker's), a private PID namespace and its own
session; on the time limit the whole process group is killed, and ``--die-with-parent`` takes the rest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

OUTPUT_CHARS = 20000
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing: the implementer cannot run commands without it."""


@dataclass
class RunResult:
    returncode: int | None
    output: str
    timed_out: bool
    seconds: float

    def render(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (killed)\n{self.output}"
        return f"exit {self.returncode}\n{self.output}"


def bwrap_argv(cmd: str, worktree: Path) -> list[str]:
    """The bubblewrap command line that runs ``cmd`` with only ``worktree`` writable and no network."""
    exe = shutil.which("bwrap")
    if exe is None:
        raise SandboxUnavailable("run(cmd) needs bubblewrap (bwrap); install it (apt-get install bubblewrap)")
    home = str(worktree)
    return [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run",
            "--dir", "/run/tmp", "--bind", str(worktree), str(worktree),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH", CLEAN_PATH,
            "--setenv", "HOME", home, "--setenv", "TMPDIR", "/run/tmp", "--setenv", "LANG", "C.UTF-8",
            "--chdir", str(worktree), "--", "/bin/bash", "-c", cmd]


def run_confined(cmd: str, worktree: Path, timeout_s: float, live: set[int] | None = None) -> RunResult:
    """Run ``cmd`` in the sandbox; stdout and stderr together, cut to a readable size. ``live`` holds the
    process group while it runs, so a caller cut off at its deadline can kill it."""
    started = time.monotonic()
    proc = subprocess.Popen(bwrap_argv(cmd, worktree), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    if live is not None:
        live.add(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_sandbox(proc.pid)
        out, _ = proc.communicate()
        timed_out = True
    finally:
        if live is not None:
            live.discard(proc.pid)
    text = out.decode("utf-8", errors="replace")
    if len(text) > OUTPUT_CHARS:
        text = text[:OUTPUT_CHARS] + f"\n[truncated: {OUTPUT_CHARS} of {len(text)} characters shown]"
    return RunResult(None if timed_out else proc.returncode, text, timed_out, time.monotonic() - started)


def kill_sandbox(pid: int) -> None:
    """SIGKILL the sandbox started as ``pid`` (its own process group): every process under it first, since
    bwrap's ``--new-session`` puts the command in a session of its own, out of the group's reach, and a kill that
    lands while bwrap is still starting can come before ``--die-with-parent`` is armed; then the group."""
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

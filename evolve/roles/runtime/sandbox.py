"""A bubblewrap sandbox for the implementer's ``run(cmd)``: the worktree's files writable, little else visible.

What the command sees (:func:`sandbox_view`), nothing else of the host:

- the worktree, writable, except its git metadata: the ``.git`` file (or folder) is bound read-only over itself
  (it can be neither rewritten, nor moved, nor removed), and the harness repository it belongs to (found through
  that file and verified by :func:`evolve.gitsafe.verified_gitdir`) is bound read-only, so ``git log``/``diff``
  work inside but no hook, config, index, ref or tag can be written;
- read-only: the Python environment (``sys.prefix``), this project's packages (an editable install: the
  ``rise`` CLI and ``import trials`` work; the checkout's ``data/``, ``runs/`` and tests stay hidden), ``/usr``
  and its ``/bin``, ``/lib*`` links, and an allow-list of ``/etc`` (no credentials, package-manager or git
  config);
- a private ``/tmp`` (also ``$HOME`` and ``$TMPDIR``), ``/dev``, its own ``/proc``; the rest of ``/`` is an
  empty read-only tmpfs: no home directory, no task folder, no ``/var/run/docker.sock``;
- no network (its own loopback only), its own PID, IPC, UTS and user namespaces, every capability dropped, an
  environment of :data:`ENV` only.

On the time limit the whole process group is killed, and ``--die-with-parent`` takes the rest.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from evolve.gitsafe import UnsafeRepository, verified_gitdir
from trials.confine import CLEAN_PATH, SYSTEM_LINK_DIRS, system_link_binds

OUTPUT_CHARS = 20000
PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The project's importable packages (pyproject's [tool.setuptools.packages.find]); never data/, runs/, tests/.
PROJECT_PACKAGES = ("trials", "harness_seed", "monitor", "handbook", "research", "validate", "evolve", "rise")
# What of /etc programs need to start (users, libraries, locale, time zone, certificates, terminal types);
# everything else (ssh, pip, npm, git, docker config, shadow files) stays out.
ETC_ALLOWED = ("passwd", "group", "nsswitch.conf", "host.conf", "hosts", "ld.so.cache", "ld.so.conf",
               "ld.so.conf.d", "localtime", "timezone", "locale.alias", "alternatives", "ssl", "ca-certificates",
               "mime.types", "magic", "terminfo", "inputrc", "bash.bashrc", "profile", "os-release",
               "debian_version", "shells", "protocols", "services", "python3", "python3.11")
HOME = "/tmp/home"
ENV = {"PATH": "", "HOME": HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb", "PYTHONPATH": "",
       "PYTHONDONTWRITEBYTECODE": "1"}  # PATH and PYTHONPATH are filled in by sandbox_view
WRITE_BLOCKED = ("Read-only file system", "Device or resource busy")
NET_BLOCKED = ("Network is unreachable", "Connection refused", "Temporary failure in name resolution",
               "Name or service not known", "Cannot assign requested address")
_MISSING = re.compile(r"(/[^\s'\":]+)['\"]?:? ?.*(?:No such file or directory|cannot access|not found)"
                      r"|(?:No such file or directory|cannot access|not found)[^/\n]*['\"](/[^'\"]+)['\"]")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing: the implementer cannot run commands without it."""


@dataclass
class RunResult:
    returncode: int | None
    output: str
    timed_out: bool
    seconds: float
    visible: list[Path] = field(default_factory=list)

    def render(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (killed)\n{self.output}"
        return f"exit {self.returncode}\n{self.output}"

    def blocked(self) -> str | None:
        """Why the sandbox, not the command's own logic, made it fail, if it did: a write outside the worktree's
        files or into its git metadata, the network, or a host path it does not show."""
        if self.timed_out or self.returncode == 0:
            return None
        if any(m in self.output for m in WRITE_BLOCKED):
            return ("the sandbox blocked a write outside the worktree's files (everything else, the worktree's "
                    ".git and the harness repository included, is read-only)")
        if any(m in self.output for m in NET_BLOCKED):
            return "the sandbox has no network (only a loopback of its own)"
        tmp = Path("/tmp")
        for match in _MISSING.finditer(self.output):
            path = Path(match.group(1) or match.group(2))
            shown = any(path == v or v in path.parents for v in self.visible if v != tmp)
            # under the private /tmp, a path the host has is the host's, hidden (a checkout under /tmp); one the
            # host lacks is the command's own missing file
            if not shown and (not (path == tmp or tmp in path.parents) or path.exists()):
                return (f"{path} is outside what the sandbox shows (the worktree, the harness repository, the "
                        "Python environment, system folders and a private /tmp)")
        return None


@dataclass
class SandboxView:
    """The mounts of one sandbox (bubblewrap arguments), the folders they show and its environment."""

    mounts: list[str]
    visible: list[Path]
    env: dict[str, str]


def _harness_repo(worktree: Path) -> Path | None:
    """The repository a linked worktree belongs to, when its ``.git`` link checks out both ways (one that points
    anywhere else shows nothing more)."""
    dot = worktree / ".git"
    if dot.is_symlink() or not dot.is_file():
        return None
    try:
        line = dot.read_text(encoding="utf-8", errors="replace").strip()
        gitdir = (worktree / line.removeprefix("gitdir:").strip()).resolve()
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        verified_gitdir(worktree, common)
    except (OSError, UnsafeRepository):
        return None
    return common.parent if common.name == ".git" else common


def sandbox_view(worktree: Path) -> SandboxView:
    """Everything the sandbox of ``worktree`` shows (see the module docstring)."""
    worktree = worktree.resolve()
    m: list[str] = ["--tmpfs", "/tmp", "--dir", HOME, "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/usr", "/usr"]
    visible = [Path("/tmp"), Path("/dev"), Path("/proc"), Path("/usr")]
    m += system_link_binds()
    visible += [Path(link) for link in SYSTEM_LINK_DIRS]
    for name in ETC_ALLOWED:
        if os.path.lexists(f"/etc/{name}"):
            m += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
            visible.append(Path("/etc", name))
    env = dict(ENV, PATH=f"{Path(sys.executable).parent}:{CLEAN_PATH}", PYTHONPATH=str(PROJECT_ROOT))
    for prefix in sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}):
        m += ["--ro-bind", str(prefix), str(prefix)]
        visible.append(prefix)
    for pkg in PROJECT_PACKAGES:
        if (PROJECT_ROOT / pkg).is_dir():
            m += ["--ro-bind", str(PROJECT_ROOT / pkg), str(PROJECT_ROOT / pkg)]
            visible.append(PROJECT_ROOT / pkg)
    repo = _harness_repo(worktree)
    if repo is not None:  # first: the worktree mounted after it stays on top should it lie inside
        m += ["--ro-bind", str(repo), str(repo)]
        visible.append(repo)
    m += ["--bind", str(worktree), str(worktree)]
    dot = worktree / ".git"
    if dot.exists() and not dot.is_symlink():  # the .git file or folder, read-only over itself
        m += ["--ro-bind", str(dot), str(dot)]
    visible.append(worktree)
    return SandboxView(m, visible, env)


def bwrap_argv(cmd: str, worktree: Path, view: SandboxView | None = None) -> list[str]:
    """The bubblewrap command line that runs ``cmd`` in the sandbox of ``worktree``."""
    exe = shutil.which("bwrap")
    if exe is None:
        raise SandboxUnavailable("run(cmd) needs bubblewrap (bwrap); install it (apt-get install bubblewrap)")
    view = view or sandbox_view(worktree)
    env = [a for k, v in view.env.items() for a in ("--setenv", k, v)]
    return [exe, *view.mounts, "--remount-ro", "/", "--unshare-all", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--clearenv", *env, "--chdir", str(worktree.resolve()), "--", "/bin/bash", "-c",
            cmd]


def run_confined(cmd: str, worktree: Path, timeout_s: float, live: set[int] | None = None) -> RunResult:
    """Run ``cmd`` in the sandbox; stdout and stderr together, cut to a readable size. ``live`` holds the
    process group while it runs, so a caller cut off at its deadline can kill it."""
    started = time.monotonic()
    view = sandbox_view(worktree)
    proc = subprocess.Popen(bwrap_argv(cmd, worktree, view), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
    return RunResult(None if timed_out else proc.returncode, text, timed_out, time.monotonic() - started,
                     view.visible)


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

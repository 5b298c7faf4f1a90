"""Confinement of untrusted code: a harness process (or a smoke step) under bubblewrap (DESIGN.md, "Trust
boundaries").

What a confined process sees: the system folders (/usr, /etc and the /bin, /lib... links), the Python
environment and the platform packages a harness imports (``trials``, ``monitor``), its own harness package, all
read-only at their host paths; one writable folder at :data:`AGENT_DIR` (its trial's ``agent/``); a private
``/tmp`` (also its HOME), ``/proc`` and ``/dev``. Nothing else of the host: no home directory, no runs/, no task
folders, no held-out split, no Docker socket. It has no network (``--unshare-net``): the model and the sandbox are
reached through the trial's channel socket (:mod:`trials.channel`), bound at :data:`CHANNEL_SOCKET` inside the
writable folder. Its environment is an allow-list (:func:`scrubbed_env`): no API key; the runner's channel adds the
key to model requests. Capabilities are dropped; it stays in the runner's process group (no ``--new-session``) so
the runner's SIGTERM/SIGKILL of the group reach it.

It runs as an unprivileged host uid (:func:`harness_identity`: ``RISE_HARNESS_USER``, default ``nobody``): bwrap
builds the view as root, then ``setpriv`` drops to that uid with no capability left, so a root-only host file in
its view (``/etc/shadow``, a private key under ``/etc``) is unreadable to it. Only its writable folder is handed
to that uid (:func:`hand_over`). A runner that is not root cannot switch uid: the harness then runs as the
runner's own uid, and the trial record says so. Root-only entries under ``/etc`` are also hidden behind empty
stand-ins in every view that shows the host's ``/etc`` (:func:`mask_binds`; the local sandbox runs as root).

``RISE_CONFINE=off`` runs harnesses unconfined, as before (for a host without bubblewrap; unsafe with candidate
code, and said so in the log).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AGENT_DIR = "/rise/agent"
CHANNEL_NAME = ".rise-channel.sock"
CHANNEL_SOCKET = f"{AGENT_DIR}/{CHANNEL_NAME}"
LEARNED_PATH = "/rise/learned.json"
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RO_SYSTEM_DIRS = ("/usr", "/etc")
SYSTEM_LINK_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Host variables a harness may see (values copied when set); everything else is dropped. No secret is here.
ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "RISE_TRACE_PROJECT")
PLATFORM_PACKAGES = ("trials", "monitor")
# Where library code lives (standard library, site-packages), each with a trailing separator: a module found
# there may be preloaded by a launcher; candidate code never lies there (launch.py's preloadable).
LIBRARY_DIRS = tuple({os.path.join(os.path.realpath(sysconfig.get_paths()[k]), "")
                      for k in ("stdlib", "platstdlib", "purelib", "platlib")})


class ConfinementUnavailable(RuntimeError):
    """bubblewrap is missing and confinement was not switched off."""


def enabled() -> bool:
    """Whether harness processes run confined: ``RISE_CONFINE`` unset or anything but ``off``/``0``."""
    return os.environ.get("RISE_CONFINE", "on").strip().lower() not in {"off", "0", "false", "no"}


def system_link_binds() -> list[str]:
    """bwrap arguments for ``/bin``, ``/lib*`` ...: the same link where the host has a link (merged /usr), the
    folder read-only where it has a folder (shared with the implementer's sandbox)."""
    argv: list[str] = []
    for d in SYSTEM_LINK_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    return argv


def system_binds() -> list[str]:
    """bwrap arguments that show the host's system folders read-only, root-only entries of ``/etc`` masked
    (shared with the local sandbox)."""
    argv: list[str] = []
    for d in RO_SYSTEM_DIRS:
        argv += ["--ro-bind", d, d]
    return argv + system_link_binds() + mask_binds()


MASKED_DIRS = ("/etc",)  # where host secrets live; /usr holds packaged files and takes seconds to scan


def root_only_entries() -> tuple[list[str], list[str]]:
    """(files, folders) under :data:`MASKED_DIRS` that others may not read: ``/etc/shadow``, ``/etc/ssl/private``,
    ``/etc/docker/key.json``... Scanned afresh for every view (about 20 ms), so a file made since is masked too."""
    files: list[str] = []
    folders: list[str] = []

    def scan(folder: str) -> None:
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for e in entries:
                try:
                    mode = e.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    if mode & 0o005 != 0o005:  # others cannot list or enter it
                        folders.append(e.path)
                    else:
                        scan(e.path)
                elif stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                    files.append(e.path)

    for top in MASKED_DIRS:
        scan(top)
    return files, folders


def mask_binds() -> list[str]:
    """bwrap arguments that put an empty read-only stand-in over every root-only entry of :data:`MASKED_DIRS`."""
    files, folders = root_only_entries()
    argv: list[str] = []
    for d in folders:
        argv += ["--tmpfs", d, "--remount-ro", d]
    for f in files:
        argv += ["--ro-bind", _empty_file(), f]
    return argv


@functools.lru_cache(maxsize=1)
def _empty_file() -> str:
    """An empty read-only regular file of this process (not /dev/null: a download of a masked file must be an
    empty file, not a device), removed when the process ends."""
    folder = tempfile.mkdtemp(prefix="rise-mask-")
    path = os.path.join(folder, "empty")
    Path(path).touch(0o444)
    atexit.register(shutil.rmtree, folder, True)
    return path


@functools.lru_cache(maxsize=1)
def harness_identity() -> tuple[int, int] | str:
    """(uid, gid) a confined process runs as, or why it keeps the runner's: ``RISE_HARNESS_USER`` (a user name,
    or ``UID[:GID]``), default ``nobody``. Never 0."""
    if os.geteuid() != 0:
        return f"the runner is not root: harnesses run as its own uid {os.geteuid()}"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing: harnesses run as root without capabilities"
    ref = os.environ.get("RISE_HARNESS_USER", "nobody").strip()
    try:
        if ref.split(":")[0].isdigit():
            uid, _, gid = ref.partition(":")
            ids = int(uid), int(gid or uid)
        else:
            pw = pwd.getpwnam(ref)
            ids = pw.pw_uid, pw.pw_gid
    except (KeyError, ValueError):
        raise ValueError(f"RISE_HARNESS_USER={ref!r}: no such user; give a user name or UID[:GID]") from None
    if 0 in ids:
        raise ValueError(f"RISE_HARNESS_USER={ref!r}: harnesses must not run as root (uid or gid 0)")
    return ids


def hand_over(folder: Path, ids: tuple[int, int] | None) -> None:
    """Make ``folder`` and what it holds the confined uid's (its one writable place)."""
    if ids is None:
        return
    os.chown(folder, *ids, follow_symlinks=False)
    # bwrap enters it (--chdir) after dropping its capabilities: others need the x bit (a tempdir is 0700)
    os.chmod(folder, stat.S_IMODE(os.stat(folder).st_mode) | 0o711)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(root, name), *ids, follow_symlinks=False)


def _ancestors(paths: tuple[str, ...]) -> list[str]:
    """The folders above ``paths`` that bwrap makes itself (outside the system folders), each once, parents
    first: made 0755, since bwrap copies the host folder's mode (``/root`` is 0700) and the uid must pass."""
    out: dict[str, None] = {}
    for p in paths:
        parts = Path(p).parts
        for i in range(2, len(parts)):
            a = str(Path(*parts[:i]))
            if not _under(a, RO_SYSTEM_DIRS) and a not in ("/tmp",):
                out[a] = None
    return list(out)


def platform_root() -> Path:
    """The folder holding the platform packages (``trials``, ``monitor``): the harness's PYTHONPATH."""
    return Path(__file__).resolve().parent.parent


def python_paths() -> list[str]:
    """Host folders of this Python environment (interpreter, standard library, site-packages)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(sys.executable)}
    paths.update(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    return [os.path.realpath(p) for p in paths if p and os.path.isdir(p)]


def _under(path: str, prefixes: tuple[str, ...] | list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _minimal(paths: list[str]) -> list[str]:
    """Drop paths under the system folders or under another path of the list (one bind covers them)."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if _under(p, RO_SYSTEM_DIRS) or _under(p, out):
            continue
        out.append(p)
    return out


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The confined process's whole environment: the allow-list, a private HOME, the platform on PYTHONPATH,
    the channel's socket, and ``extra`` (the agent's own variables, e.g. ``RISE_*`` of its spec)."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env.update({
        "PATH": f"{os.path.dirname(sys.executable)}:{CLEAN_PATH}", "HOME": "/tmp", "TMPDIR": "/tmp",
        "PYTHONPATH": str(platform_root()), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        "RISE_CHANNEL": CHANNEL_SOCKET,
    })
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Confinement:
    """How to start one kind of confined process: its read-only host paths and its environment."""

    ro_paths: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    learned: str | None = None  # a host file bound read-only at LEARNED_PATH when it exists
    ids: tuple[int, int] | None = None  # the unprivileged (uid, gid) it runs as; None: the runner's own

    def key(self) -> str:
        """Equal for processes a warm spare may serve interchangeably."""
        return hashlib.sha256(json.dumps([self.ro_paths, sorted(self.env.items()), self.learned, self.ids]
                                         ).encode()).hexdigest()[:16]

    def argv(self, folder: Path, cmd: list[str]) -> list[str]:
        """``cmd`` under bwrap with host ``folder`` writable at :data:`AGENT_DIR` (the working folder)."""
        exe = shutil.which("bwrap")
        if exe is None:
            raise ConfinementUnavailable("harness code runs under bubblewrap: install bwrap (apt-get install "
                                         "bubblewrap), or set RISE_CONFINE=off to run it unconfined (unsafe)")
        argv = [exe, *system_binds(), "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
                "--perms", "1777", "--tmpfs", "/run"]
        for a in _ancestors(self.ro_paths):
            argv += ["--perms", "0755", "--dir", a]
        for p in self.ro_paths:  # after /tmp's tmpfs: a harness under /tmp (a test's) is bound on top of it
            argv += ["--ro-bind", p, p]
        argv += ["--dir", "/rise", "--bind", str(folder), AGENT_DIR]
        if self.learned:
            argv += ["--ro-bind-try", self.learned, LEARNED_PATH]
        argv += ["--remount-ro", "/",  # the sandbox's own root: nothing written outside its folder and /tmp
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net",
                 "--hostname", "harness", "--cap-drop", "ALL", "--chdir", AGENT_DIR, "--clearenv"]
        for k, v in sorted(self.env.items()):
            argv += ["--setenv", k, v]
        if self.ids is not None:  # setpriv needs these three to switch; it leaves the uid with none at all
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
            cmd = ["/usr/bin/setpriv", f"--reuid={self.ids[0]}", f"--regid={self.ids[1]}", "--clear-groups",
                   "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", *cmd]
        return [*argv, "--", *cmd]


def for_harness(read_only: list[Path], extra_env: dict[str, str] | None = None,
                learned: Path | None = None) -> Confinement:
    """The confinement of a harness process: the Python environment, the platform packages and ``read_only``
    (its harness package) visible, ``extra_env`` added to the scrubbed environment."""
    root = platform_root()
    paths = python_paths() + [str(root / p) for p in PLATFORM_PACKAGES] + [str(Path(p).resolve()) for p in read_only]
    ids = harness_identity()
    return Confinement(tuple(_minimal(paths)), scrubbed_env(extra_env), str(learned) if learned else None,
                       None if isinstance(ids, str) else ids)


# ----------------------------------------------------------------- starting confined processes (launch.py)

# bwrap itself starts with SIGTERM ignored: the runner's SIGTERM to the group must reach the agent (which unwinds
# and exits, and bwrap with it), not end bwrap first and tear the sandbox down under the agent's last writes.
# The launcher restores the default for the agent; a direct command gets it back from this small exec shim.
IGNORE_TERM = ["/bin/sh", "-c", 'trap "" TERM; exec "$@"', "sh"]
RESTORE_TERM = ["-c", ("import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
                 "os.execvp(sys.argv[1], sys.argv[1:])")]


def launch_argv(conf: Confinement, folder: Path, cmd: list[str], cgroup: Any = None) -> list[str]:
    """The full command line of a confined agent or launcher: bwrap, started with SIGTERM ignored, in
    ``cgroup`` (a :class:`trials.limits.Cgroup`) from its first instruction on."""
    from .limits import join_argv

    return [*join_argv(cgroup), *IGNORE_TERM, *conf.argv(folder, cmd)]


def spare_root(agent_dir: Path) -> Path | None:
    """Where confined spares keep their folders: ``<cache>/spares``, shared by every job (spares serve any
    trial of the same harness), when it is on ``agent_dir``'s file system (a spare's folder becomes the agent
    folder by a rename); else None (no spares: each trial starts its launcher)."""
    from .cache import cache_root

    root = cache_root() / "spares"
    try:
        root.mkdir(parents=True, exist_ok=True)
        _reap_spare_folders(root)
        return root if root.stat().st_dev == Path(agent_dir).stat().st_dev else None
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _reap_spare_folders(root: Path) -> None:
    """Once per process: remove the spare folders (``<pid>-<hex>``) of runners that are gone (a killed runner
    cannot remove its own; its spares died with it, on their pipe's end)."""
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            pid, _, rest = child.name.partition("-")
            if pid.isdigit() and rest and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(child, ignore_errors=True)


def new_spare_folder(root: Path) -> Path:
    """A fresh empty folder for a spare launcher, under ``root`` (on the trial folders' file system)."""
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"{os.getpid()}-{os.urandom(6).hex()}"
    folder.mkdir()
    return folder


def drop_folder(folder: Path | None) -> None:
    """Remove an unused spare's folder (and the spares' root when it is empty)."""
    if folder is None or not folder.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()


def adopt(folder: Path, agent_dir: Path) -> None:
    """Make a spare's ``folder`` the trial's ``agent_dir``: agent_dir's entries move in, the folder takes its
    place (renames within one file system; the sandbox's bind of the folder follows it)."""
    for entry in list(agent_dir.iterdir()):
        os.replace(entry, folder / entry.name)
    agent_dir.rmdir()
    os.rename(folder, agent_dir)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()


LEARNED_OUT = ".launch-modules.json"
# A spare launcher writes this into its agent folder first thing: once it is there, bubblewrap has bound the folder,
# so renaming the folder (adopt) cannot pull it from under a sandbox still being built.
LAUNCH_READY = ".launch-ready"


def absorb_learned(agent_dir: Path, learned: Path | None) -> None:
    """Keep what a confined launcher learned (``agent/.launch-modules.json``): only names of platform packages
    and of library modules found outside the harness (candidate code must never be preloaded), at most 5000."""
    found = agent_dir / LEARNED_OUT
    names = read_names(found)
    with contextlib.suppress(OSError):
        found.unlink()
    if learned is None or not names:
        return
    import importlib.util

    known: dict[str, bool] = {}

    def trusted(top: str) -> bool:
        if top not in known:
            try:
                spec = importlib.util.find_spec(top) if top.isidentifier() else None
            except (ImportError, ValueError):
                spec = None
            origin = getattr(spec, "origin", None) or next(iter(getattr(spec, "submodule_search_locations",
                                                                        None) or []), None)
            known[top] = top in PLATFORM_PACKAGES or origin in ("built-in", "frozen") or (
                isinstance(origin, str) and os.path.realpath(origin).startswith(LIBRARY_DIRS))
        return known[top]

    kept = [n for n in names[:5000] if all(p.isidentifier() for p in n.split(".")) and trusted(n.split(".")[0])]
    if set(kept) - set(read_names(learned)):
        with contextlib.suppress(OSError):
            learned.parent.mkdir(parents=True, exist_ok=True)
            tmp = learned.with_name(f"{learned.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(kept))
            os.replace(tmp, learned)


def read_names(path: Path) -> list[str]:
    """The module names listed in a learned-preload file (empty when it is missing or malformed)."""
    try:
        names = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def run_python(args: list[str], harness_dir: Path, timeout: float, what: str,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` on candidate code (a check: import it, load its settings...), confined like its trials
    with an empty scratch folder as the only writable place; unconfined (``env`` or the runner's) when
    ``RISE_CONFINE=off``. Output captured as text. Raises :class:`ConfinementUnavailable` and
    ``subprocess.TimeoutExpired``."""
    argv = [sys.executable, *args]
    with tempfile.TemporaryDirectory(prefix="rise-check-") as scratch:
        if enabled():
            conf = for_harness([harness_dir])
            hand_over(Path(scratch), conf.ids)
            argv, env = conf.argv(Path(scratch), argv), {}
        else:
            warn_unconfined(what)
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout,
                              cwd=Path(harness_dir).parent, stdin=subprocess.DEVNULL)


def inside(host: Path, folder: Path) -> str:
    """The path a confined process sees for ``host``, a path in its writable ``folder``."""
    rel = Path(host).resolve().relative_to(Path(folder).resolve())
    return AGENT_DIR if str(rel) == "." else f"{AGENT_DIR}/{rel.as_posix()}"


def warn_unconfined(what: str) -> None:
    """Say, once per call site, that untrusted code runs on the host."""
    log.warning("RISE_CONFINE=off: %s runs unconfined on the host, with the runner's environment", what)

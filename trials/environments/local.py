"""The ``local`` sandbox: bubblewrap namespaces on the host, no Docker.

Each trial gets a fresh host folder ``<trial_dir>/sandbox/root`` bound as the sandbox's ``/``; the host's system
folders (/usr, /etc and the /bin, /lib... links) are bound read-only on top, so ``/app``, ``/logs``, ``/tests``,
``/solution``, ``/tmp`` and ``/root`` (HOME) are private, writable, and visible to no other trial. The host's
/root, /work, /home... are simply not there. The sandbox always has its own network namespace: empty when the
task says ``allow_internet = false`` (the default), else with outside access but no host loopback
(:mod:`.netns`, slirp4netns).

``start()`` launches one keeper process (``bwrap ... -- sleep infinity``) that holds the namespaces; ``exec``
enters them with ``nsenter`` (mount, pid, net, ipc, uts, and the keeper's root), so a tmux server started by one
exec is still there for the next, whichever process runs it. The keeper uses ``--die-with-parent``: it belongs to
the process (and thread) that called ``start()``, survives any harness subprocess that ``attach()``es to it, and
dies with the runner if that is killed. Commands run as root but with Docker's default capability set (no
CAP_SYS_ADMIN, so nothing inside can remount the host folders writable); root-only files of the host's /etc are
masked (trials/confine.py). The keeper and every command run in one cgroup with task.toml's ``memory_mb`` and a
pids limit (trials/limits.py; where the machine allows none, ``limit_usage.note`` says so); CPU is not limited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from .. import limits
from ..confine import RO_SYSTEM_DIRS, SYSTEM_LINK_DIRS, system_binds
from ..errors import EnvironmentBuildError, SandboxError, UnsupportedTaskError
from . import netns
from .archive import split_sandbox_path, unpack_single, upload_payload
from .base import Environment, ExecResult, in_workdir
from .dockerfile import LocalPlan, plan_local

log = logging.getLogger(__name__)

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": CLEAN_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "SHELL": "/bin/bash"}
TASK_DIRS = ("app", "logs/verifier", "logs/agent", "tests", "solution", "tmp", "root", "var/tmp", "run",
             "home", "opt", "srv", "mnt")
# Docker's default capabilities: root inside can chown, kill, bind low ports..., but not mount.
CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap", "net_bind_service",
        "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap")
MAX_OUTPUT = 8 * 1024 * 1024
KEEPER_SCRIPT = "trap '' TERM INT HUP QUIT USR1 USR2; while :; do sleep 86400 & wait; done"
JOB_MARK, TRIAL_MARK, OWNER_MARK = "RISE_SANDBOX_JOB", "RISE_SANDBOX_TRIAL", "RISE_SANDBOX_OWNER"


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None and shutil.which("nsenter") is not None


def _starttime(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot (guards against a recycled pid), or None if it is gone.

    Not ``psutil.Process.create_time()``: that adds the boot time computed from the wall clock, so a clock step
    (NTP, a suspended or snapshotted VM resuming) changes it for every live process. One such step here (the
    kernel logged a VM fork) made four running sandboxes look gone at once, each trial booked ⊥."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # field 22; the command name (field 2, in parentheses) may hold spaces and ')' itself
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _read_capped(f) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    if size <= MAX_OUTPUT:
        data = f.read()
    else:
        head = f.read(MAX_OUTPUT // 2)
        f.seek(size - MAX_OUTPUT // 2)
        data = head + f"\n[... {size - MAX_OUTPUT} bytes of output cut ...]\n".encode() + f.read()
    return data.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------- tar helpers (shared with docker.py)


# ------------------------------------------------------------------------------------------------ sandbox


class LocalEnvironment(Environment):
    """A bubblewrap sandbox for one trial (see the module docstring)."""

    kind = "local"

    def __init__(self, task: Any, trial_dir: str | os.PathLike, job_id: str | None = None):
        self.task = task
        self.trial_dir = Path(trial_dir).resolve()
        self.job_id = job_id
        self.sandbox_dir = self.trial_dir / "sandbox"
        self.root = self.sandbox_dir / "root"
        self.build_log = self.sandbox_dir / "build.log"
        cfg = task.config.environment
        self.allow_internet = bool(cfg.allow_internet)
        self.workdir = cfg.workdir or "/app"
        self.env: dict[str, str] = dict(BASE_ENV)
        self.pid: int | None = None
        self._starttime: float | None = None
        self._proc: subprocess.Popen | None = None
        self._owner = True
        self._plan: LocalPlan | None = None
        self._net: netns.SandboxNetwork | None = None
        self.cgroup: limits.Cgroup | None = None
        self.limit_usage: limits.LimitUsage | None = None  # the cgroup's record, final once stopped

    # ------------------------------------------------------------------ lifecycle

    def plan(self) -> LocalPlan:
        """The task's Dockerfile as start steps; raises UnsupportedTaskError for what needs docker."""
        if self._plan is None:
            dockerfile = self.task.dockerfile
            self._plan = (plan_local(Path(dockerfile), Path(self.task.environment_dir), base_env=BASE_ENV)
                          if dockerfile else LocalPlan())
            for step in self._plan.steps:
                if step.kind == "copy" and _under(step.dest, RO_SYSTEM_DIRS + SYSTEM_LINK_DIRS):
                    raise UnsupportedTaskError(
                        f"{dockerfile}:{step.lineno}", "COPY",
                        f"COPY into the read-only host folder {step.dest}; run this task with --env docker")
        return self._plan

    def _bwrap_argv(self, info_fd: int) -> list[str]:
        argv = ["bwrap", "--bind", str(self.root), "/", *system_binds()]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                 "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                 "--info-fd", str(info_fd), "--chdir", "/", "--clearenv", "--setenv", "PATH", CLEAN_PATH,
                 "--unshare-net"]  # always: internet, where allowed, comes through netns.connect, never host loopback
        # The keeper is pid 1 itself (--as-pid-1): the kernel ignores signals from inside the sandbox to it, so
        # an agent's `kill -9 -1` or `pkill sleep` cannot end the sandbox; bash as pid 1 reaps orphans.
        return [*argv, "--as-pid-1", "--", "/bin/bash", "-c", KEEPER_SCRIPT]

    async def start(self) -> None:
        if not bwrap_available():
            raise SandboxError("the local sandbox needs bubblewrap (bwrap) and nsenter on the host")
        plan = self.plan()
        self.workdir = _choose_workdir(self.task.config.environment.workdir, plan.workdir)
        self.env = {**BASE_ENV, **plan.env, **{k: str(v) for k, v in self.task.config.environment.env.items()}}
        if self.sandbox_dir.exists():
            shutil.rmtree(self.sandbox_dir)
        for sub in TASK_DIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        (self.root / self.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        await self._launch_keeper()
        try:
            if self.allow_internet:
                self._net = await netns.connect(self.pid, self.sandbox_dir / "network.log")
            await self._replay(plan)
        except BaseException:
            await self.stop()
            raise

    async def _launch_keeper(self) -> None:
        read_fd, write_fd = os.pipe()
        keeper_log = self.sandbox_dir / "keeper.log"
        marks = {"PATH": CLEAN_PATH, JOB_MARK: self.job_id or "", TRIAL_MARK: str(self.trial_dir),
                 OWNER_MARK: owner_tag()}
        self.cgroup, self.limit_usage = limits.sandbox_cgroup(self.task.config.environment.memory_mb)
        with keeper_log.open("wb") as errf:
            # Popen, not asyncio: the keeper must not depend on the event loop that happened to start it.
            self._proc = subprocess.Popen(  # noqa: ASYNC220 - fork is quick; PDEATHSIG ties it to this thread
                [*limits.join_argv(self.cgroup), *self._bwrap_argv(write_fd)], pass_fds=(write_fd,), env=marks,
                stdin=subprocess.DEVNULL, stdout=errf, stderr=errf, start_new_session=True)
        os.close(write_fd)
        try:
            info = await asyncio.to_thread(_read_info, read_fd, 20)
        finally:
            os.close(read_fd)
        if info is None or "child-pid" not in info:
            self._proc.kill()
            self._proc.wait()
            raise SandboxError(f"bubblewrap did not start: {keeper_log.read_text(errors='replace')[-2000:]}",
                               log_path=str(keeper_log))
        self.pid = int(info["child-pid"])
        self._starttime = _starttime(self.pid)
        # bwrap reports the pid before it has built the mounts; the sandbox is ready once pid 1 runs bash.
        deadline = time.monotonic() + 20
        while not _is_bash(self.pid):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._proc.kill()
                self._proc.wait()
                raise SandboxError(f"bubblewrap did not finish setting up: {keeper_log.read_text()[-2000:]}",
                                   log_path=str(keeper_log))
            await asyncio.sleep(0.002)

    async def _replay(self, plan: LocalPlan) -> None:
        """Run the Dockerfile's WORKDIR/COPY/RUN steps in order; RUN output goes to build.log."""
        cfg = self.task.config.environment
        deadline = time.monotonic() + float(cfg.build_timeout_sec or 600)
        context = Path(self.task.environment_dir)
        with self.build_log.open("a") as logf:
            logf.write(f"# local sandbox for {self.task.name}; FROM {plan.base} (not used, host system)\n")
            for text in plan.ignored:
                logf.write(f"# ignored: {text}\n")
            for step in plan.steps:
                if step.kind == "workdir":
                    res = await self.exec(f"mkdir -p {shlex.quote(step.workdir)}", cwd="/")
                    logf.write(res.stderr)
                elif step.kind == "copy":
                    await self._copy_step(context, step.sources, step.dest)
                    continue
                else:
                    remaining = deadline - time.monotonic()
                    logf.write(f"# line {step.lineno}: RUN {step.command}\n")
                    logf.flush()
                    res = await self.exec(step.command, cwd=step.workdir, env=step.env,
                                          timeout=max(remaining, 1.0))
                    logf.write(res.stdout + res.stderr + f"# exit {res.returncode}\n")
                if not res.ok:
                    what = "timed out (build_timeout_sec)" if res.timed_out else f"exited {res.returncode}"
                    raise EnvironmentBuildError(
                        f"{self.task.dockerfile}:{step.lineno} {what} in the local sandbox; see {self.build_log}",
                        log_path=str(self.build_log))

    async def _copy_step(self, context: Path, sources: list[str], dest: str) -> None:
        paths: list[Path] = []
        for src in sources:
            exact = context / src
            paths += [exact] if exact.exists() else sorted(context.glob(src))
        into_dir = dest.endswith("/") or len(paths) > 1 or (self.root / dest.lstrip("/")).is_dir()
        for p in paths:
            if p.is_dir():
                await self.upload(p, dest)  # docker copies a folder's contents, not the folder
            else:
                await self.upload(p, str(Path(dest) / p.name) if into_dir else dest)

    async def stop(self) -> None:
        if not self._owner:
            return  # an attached sandbox belongs to the runner
        if self.pid is not None and _starttime(self.pid) == self._starttime:
            try:
                os.kill(self.pid, signal.SIGKILL)  # pid 1 of the sandbox: the kernel kills everything inside
            except ProcessLookupError:
                pass
        if self._proc is not None:
            proc, self._proc = self._proc, None
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.cgroup is not None:
            self.limit_usage, self.cgroup = self.cgroup.finish(), None
        self.pid = None
        if self._net is not None:
            net, self._net = self._net, None
            await asyncio.to_thread(net.close)
        if os.environ.get("RISE_KEEP_SANDBOX") != "1" and self.root.exists():
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    # ------------------------------------------------------------------ handle / attach

    def handle(self) -> dict[str, Any]:
        return {"kind": self.kind, "pid": self.pid, "starttime": self._starttime, "root": str(self.root),
                "workdir": self.workdir, "env": self.env, "trial_dir": str(self.trial_dir),
                "job_id": self.job_id, "allow_internet": self.allow_internet, "cgroup": limits.to_handle(self.cgroup)}

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> LocalEnvironment:
        env = cls.__new__(cls)
        env.task = None
        env.trial_dir = Path(handle["trial_dir"])
        env.job_id = handle.get("job_id")
        env.sandbox_dir = env.trial_dir / "sandbox"
        env.root = Path(handle["root"])
        env.build_log = env.sandbox_dir / "build.log"
        env.allow_internet = bool(handle.get("allow_internet", False))
        env.workdir = handle.get("workdir") or "/app"
        env.env = dict(handle.get("env") or BASE_ENV)
        env.pid = int(handle["pid"])
        env._starttime = handle.get("starttime")
        env._proc = None
        env._owner = False
        env._plan = None
        env._net = None
        env.cgroup, env.limit_usage = limits.from_handle(handle.get("cgroup")), None
        return env

    async def verifier_target(self) -> dict[str, Any] | str:
        """The keeper: the verifier's private run joins its namespaces (trials/environments/verifier.py)."""
        if os.geteuid() != 0:
            return "the verifier's private view needs root on the host"
        return {"pid": self._check_alive(), "cgroups": False, "env": dict(self.env)}

    # ------------------------------------------------------------------ exec and copies

    def _check_alive(self) -> int:
        if self.pid is None:
            raise SandboxError("the local sandbox is not started")
        if _starttime(self.pid) != self._starttime:
            raise SandboxError(f"the local sandbox keeper (pid {self.pid}) is gone",
                               log_path=str(self.sandbox_dir / "keeper.log"))
        return self.pid

    def _enter_argv(self, cwd: str, env: dict[str, str], user: str | None) -> list[str]:
        """nsenter into the keeper, drop to Docker's capabilities (and ``user``), set env and cwd."""
        pid = self._check_alive()
        argv = [*limits.join_argv(self.cgroup), "/usr/bin/nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--",
                "/usr/bin/setpriv", "--bounding-set=-all," + ",".join(f"+{c}" for c in CAPS)]
        if user not in (None, "", "root", "0"):
            try:
                pw = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
            except KeyError as exc:
                raise SandboxError(f"user {user!r} does not exist in the local sandbox") from exc
            argv += [f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
            env = {**env, "USER": pw.pw_name, "HOME": env.get("HOME", pw.pw_dir)}
        return [*argv, "/usr/bin/env", "-i", "-C", cwd, *(f"{k}={v}" for k, v in env.items())]

    async def exec(self, cmd: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None, user: str | None = None) -> ExecResult:
        argv = [*self._enter_argv("/", {**self.env, **(env or {})}, user), "/bin/bash", "-c",
                in_workdir(cmd, cwd or self.workdir)]
        # Files, not pipes: a background process that keeps stdout open must not hold the call hostage.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                                        start_new_session=True)
            timed_out = False
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except (TimeoutError, asyncio.CancelledError) as exc:
                timed_out = isinstance(exc, TimeoutError)
                _kill_group(proc.pid)
                await proc.wait()
                if not timed_out:
                    raise
            rc = 124 if timed_out else proc.returncode
            return ExecResult(returncode=rc, stdout=_read_capped(out), stderr=_read_capped(err),
                              timed_out=timed_out)

    async def _run_bytes(self, inner: list[str], data: bytes | None = None) -> tuple[int, bytes, bytes]:
        argv = [*self._enter_argv("/", self.env, None), *inner]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        out, err = await proc.communicate(data)
        return proc.returncode, out, err

    async def upload(self, src: Path, dst: str) -> None:
        """Copy host ``src`` to sandbox path ``dst`` (a folder's contents go into folder ``dst``)."""
        target, data = upload_payload(src, dst, self.workdir)
        rc, _, err = await self._run_bytes(
            ["/bin/bash", "-c", 'mkdir -p -- "$1" && exec tar --no-same-owner -x -C "$1" -f -', "upload", target],
            data)
        if rc != 0:
            raise SandboxError(f"upload {src} -> {dst} failed: {err.decode(errors='replace').strip()}")

    async def download(self, src: str, dst: Path) -> None:
        """Copy sandbox path ``src`` (file or folder) to host path ``dst``."""
        src = src if src.startswith("/") else f"{self.workdir}/{src}"
        parent, name = split_sandbox_path(src)
        rc, out, err = await self._run_bytes(["tar", "-C", parent, "-c", "-f", "-", "--", name])
        if rc != 0:
            message = err.decode(errors="replace").strip()
            if "No such file" in message:
                raise FileNotFoundError(f"{src} does not exist in the sandbox")
            raise SandboxError(f"download {src} failed: {message}")
        await asyncio.to_thread(unpack_single, out, name, Path(dst))


# ------------------------------------------------------------------------------------------------ helpers


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def _choose_workdir(configured: str | None, from_dockerfile: str | None) -> str:
    """task.toml's workdir when it is not the default, else the Dockerfile's last WORKDIR, else /app."""
    if configured and configured != "/app":
        return configured
    return from_dockerfile or configured or "/app"


def owner_tag() -> str:
    """Who owns a sandbox: host, pid and start time of this process (a recycled pid does not match)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_starttime(os.getpid())}"


def owner_alive(tag: str) -> bool:
    """False when the process named by ``owner_tag()`` on this host is gone; other hosts count as alive."""
    try:
        host, pid, start = tag.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    return str(_starttime(int(pid))) == start


def _is_bash(pid: int) -> bool:
    try:
        return os.path.basename(psutil.Process(pid).exe()) == "bash"
    except psutil.Error:
        return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_info(fd: int, timeout: float) -> dict[str, Any] | None:
    """bwrap's --info-fd JSON (it holds the sandbox pid), or None if bwrap died first."""
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        try:
            return json.loads(buf)
        except json.JSONDecodeError:
            continue
    return None


def reap_leftovers(job_id: str | None = None, include_live: bool = False) -> int:
    """SIGKILL local sandbox keepers left by a crashed job (of any job when ``job_id`` is None).

    Only keepers whose owning process is gone are touched unless ``include_live``: other jobs running on the
    same machine keep their sandboxes. (With ``--die-with-parent`` an orphan is rare; this is the backstop.)
    """
    killed = 0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "bwrap":
            continue
        try:
            environ = proc.environ()
        except psutil.Error:  # gone, or not ours to read
            continue
        if JOB_MARK not in environ or (job_id is not None and environ[JOB_MARK] != job_id):
            continue
        if include_live or not owner_alive(environ.get(OWNER_MARK, "")):
            try:
                proc.kill()
                killed += 1
            except psutil.NoSuchProcess:
                pass
    return killed

"""How the runner starts an agent process: through a warm launcher, with a spare ready for the next trial.

Starting a harness costs seconds before its loop runs: the interpreter, then pydantic, httpx, jinja2 and the
monitor. A **launcher** (``python -m trials.launch --preload a,b``) pays that up front: it imports the
preload modules, then blocks on stdin for one job line (JSON: ``module``, ``args``, ``env``, ``output``),
points its stdout/stderr at the trial's ``stdout.log``, takes the trial's environment and runs ``module`` as
``__main__`` with ``args``, exactly as ``python -m module args`` would (the module itself is imported afresh).
It ends with the module's exit status, running ``atexit`` handlers but skipping the interpreter's slow module
teardown.

The runner keeps **spares**: after it starts an agent it spawns launchers for the next trials (at most one
per agent running with the same command, interpreter, environment and working folder, and
``RISE_WARM_AGENTS`` in all, default 4; ``0`` turns spares off). A spare's imports overlap the rest of its
trial and the next one's environment start. Each launcher runs **one** trial and exits: a crashing candidate
takes only its own process down, as before. Candidate code is never preloaded (only platform and library
modules), so a broken candidate cannot break a spare.

Orphans: the runner holds the launcher's stdin open while the agent runs. When the runner dies, the launcher
reads end-of-file and kills its own process group (the agent and anything it started), so a killed runner
leaves no agent behind.

An ``argv`` that is not ``<this interpreter> -m module ...`` is started directly (no launcher, no spare).

Confined agents (every harness): the launcher runs under bubblewrap from the start, a spare with a folder of its own
bound as its agent folder, which takes the trial's ``agent/`` place when the trial takes the spare (see
:mod:`trials.confine`). The runner keeps what a confined launcher learned through
:func:`trials.confine.absorb_learned` (it cannot write the cache itself).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import confine, limits

log = logging.getLogger(__name__)

DEFAULT_MAX_SPARES = 4
# Part of the learned-preload file's name: raised when the platform's own imports change, so that no launcher
# keeps importing what the platform no longer uses (a learned list only grows). 2: the model client without openai.
LEARNED_VERSION = 2
# A successor spare (made when an agent starts, for the next trial) waits this long before its imports, so that
# they do not compete with that agent's own start for the CPU; a job arriving ends the wait at once.
SUCCESSOR_DELAY_SEC = 1.0
# The job line (its environment) is written while a launcher may still be importing: the pipe holds this much.
JOB_PIPE_BYTES = 1 << 20
# Not part of the key of a spare: it differs for every trial and is set when the job arrives.
PER_TRIAL_ENV = ("RISE_TRIAL_SPEC",)


def max_spares() -> int:
    """``RISE_WARM_AGENTS`` (spares in all; 0: none), default :data:`DEFAULT_MAX_SPARES`."""
    try:
        return max(int(os.environ.get("RISE_WARM_AGENTS", DEFAULT_MAX_SPARES)), 0)
    except ValueError:
        return DEFAULT_MAX_SPARES


def module_of(cmd: list[str]) -> str | None:
    """The module of ``[this interpreter, "-m", module, ...]``; None for any other command line."""
    if len(cmd) >= 3 and cmd[1] == "-m" and os.path.realpath(cmd[0]) == os.path.realpath(sys.executable):
        return cmd[2]
    return None


class AgentProcess:
    """A started agent: ``pid`` (it leads its own process group), ``returncode``, ``await wait()``.

    Waits on a pidfd, so it belongs to no event loop (a spare made under one loop serves under another)."""

    def __init__(self, popen: subprocess.Popen, warm: bool = False):
        self._popen = popen
        self.pid = popen.pid
        self.warm = warm  # it ran in a launcher that had finished its preload when the job came
        self.cgroup: limits.Cgroup | None = getattr(popen, "rise_cgroup", None)
        self.limits: limits.LimitUsage | None = getattr(popen, "rise_limits", None)

    def finish_limits(self) -> limits.LimitUsage | None:
        """After the end: what its process tree hit; kills what is left in its cgroup and removes it."""
        if self.cgroup is not None:
            self.limits, self.cgroup = self.cgroup.finish(), None
        return self.limits

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        if self._popen.poll() is not None:
            return self._popen.returncode
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (an old kernel): poll
            while self._popen.poll() is None:
                await asyncio.sleep(0.02)
            return self._popen.returncode
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(fd, lambda: done.done() or done.set_result(None))
        try:
            if self._popen.poll() is None:  # it may have ended before the reader was in place
                await done
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        return self._popen.wait()

    def close(self) -> None:
        """Release the launcher's stdin (call after the end: its end-of-file kills the process group)."""
        if self._popen.stdin is not None:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()


class _Spares:
    """Idle launchers by key (oldest first) and the trials of each key under way (their demand)."""

    def __init__(self) -> None:
        self.idle: dict[tuple, list[subprocess.Popen]] = {}
        self.demand: dict[tuple, int] = {}
        self.lock = threading.RLock()  # trials may run on several threads' event loops (a threaded executor)
        self._atexit = False

    def take(self, key: tuple) -> subprocess.Popen | None:
        with self.lock:
            spares = self.idle.get(key, [])
            while spares:
                popen = spares.pop(0)
                if popen.poll() is None:
                    return popen
                _discard(popen)  # it died while waiting: start afresh
            return None

    def count(self, key: tuple, change: int) -> None:
        with self.lock:
            self.demand[key] = max(self.demand.get(key, 0) + change, 0)

    def replenish(self, key: tuple, spawn: Any) -> None:
        """Spawn spares of ``key`` up to one per trial of ``key`` under way, within :func:`max_spares` in all
        (the oldest spares of other keys make room)."""
        cap = max_spares()
        with self.lock:
            mine = self.idle.setdefault(key, [])
            while len(mine) < min(self.demand.get(key, 0), cap):
                if sum(len(v) for v in self.idle.values()) >= cap:
                    others = [k for k, v in self.idle.items() if v and k != key]
                    if not others:
                        return
                    _discard(self.idle[others[0]].pop(0))
                mine.append(spawn())
                if not self._atexit:
                    atexit.register(self.close_all)
                    self._atexit = True

    def close_all(self) -> None:
        with self.lock:
            for spares in self.idle.values():
                for popen in spares:
                    _discard(popen)
            self.idle.clear()


_SPARES = _Spares()


def _ready(popen: subprocess.Popen) -> bool:
    """A confined spare is alive and has written its ready file (its sandbox holds its folder)."""
    folder = getattr(popen, "rise_folder", None)
    return popen.poll() is None and folder is not None and (Path(folder) / confine.LAUNCH_READY).exists()


def _discard(popen: subprocess.Popen) -> None:
    """Close and kill an unused launcher (and remove its spare folder)."""
    with contextlib.suppress(OSError):
        if popen.stdin is not None:
            popen.stdin.close()
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(5)
    cgroup = getattr(popen, "rise_cgroup", None)
    if cgroup is not None:
        cgroup.finish()
    confine.drop_folder(getattr(popen, "rise_folder", None))


def _spawn_launcher(preload: tuple[str, ...], env: dict[str, str], learned: Path | None,
                    delay: float = 0.0, sandboxed: tuple[str | None, str] | None = None,
                    wrap: Any = None, ready: str | None = None, log_to: Path | None = None) -> subprocess.Popen:
    """A launcher process; confined: ``sandboxed`` = (learned file, learn-out file) as the sandbox sees them
    and ``wrap`` turns the command line into its bwrap command line; ``ready``: the file it writes first (a spare);
    ``log_to``: where its own output goes before the job's (a trial's log: a launcher that fails to start, such as
    bubblewrap refusing its view, says why there); else nowhere."""
    argv = [sys.executable, "-m", "trials.launch", "--preload", ",".join(preload)]
    if ready is not None:
        argv += ["--ready", ready]
    if learned is not None:
        argv += ["--learned", str(learned)]
    if sandboxed is not None:
        if sandboxed[0]:
            argv += ["--learned", sandboxed[0]]
        argv += ["--learn-out", sandboxed[1]]
    if delay > 0:
        argv += ["--delay", f"{delay:g}"]
    if wrap is not None:
        argv = wrap(argv)
    out = open(log_to, "ab") if log_to is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=out, env=env,
                                 start_new_session=True)
    finally:
        if log_to is not None:
            out.close()  # type: ignore[union-attr]
    with contextlib.suppress(AttributeError, OSError):  # room for the job line while the launcher still imports
        fcntl.fcntl(popen.stdin.fileno(), fcntl.F_SETPIPE_SZ, JOB_PIPE_BYTES)  # type: ignore[union-attr]
    return popen


def _direct(cmd: list[str], env: dict[str, str], output: Path,
            cgroup: tuple[limits.Cgroup | None, limits.LimitUsage] | None = None) -> AgentProcess:
    with open(output, "ab") as out:
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    if cgroup is not None:
        popen.rise_cgroup, popen.rise_limits = cgroup  # type: ignore[attr-defined]
    return AgentProcess(popen)


class AgentLaunch:
    """How one trial starts its agent. Made when the trial starts (a spare then gets ready while the sandbox
    starts); :meth:`start` runs the agent; :meth:`release` when the trial is over (idempotent)."""

    def __init__(self, cmd: list[str], env: dict[str, str], preload: tuple[str, ...] = (),
                 learned: Path | None = None, confinement: confine.Confinement | None = None,
                 spare_root: Path | None = None):
        self.cmd, self.env, self.learned = cmd, env, learned
        self.confinement, self.spare_root = confinement, spare_root
        self.limits: limits.LimitUsage | None = None  # what its agent's process tree hit (set by the runner)
        self.module = module_of(cmd)
        self.preload = tuple(dict.fromkeys(preload))
        self.spare_env = {k: v for k, v in env.items() if k not in PER_TRIAL_ENV}
        digest = hashlib.sha256(json.dumps(self.spare_env, sort_keys=True).encode()).hexdigest()
        try:
            cwd = os.getcwd()
        except OSError:  # the folder is gone: no spare can be made for it either
            cwd = None
        self.key = (sys.executable, cwd, self.preload, digest,
                    confinement.key() if confinement else None, str(spare_root) if spare_root else None)
        self._counted = (self.module is not None and cwd is not None and max_spares() > 0
                         and (confinement is None or spare_root is not None))
        if self._counted:
            _SPARES.count(self.key, +1)
            _SPARES.replenish(self.key, self._spawn)

    def _spawn(self, delay: float = 0.0, folder: Path | None = None, log_to: Path | None = None
               ) -> subprocess.Popen:
        """A launcher; confined, with ``folder`` bound as its agent folder (a fresh spare folder if None)."""
        if self.confinement is None:
            return _spawn_launcher(self.preload, self.spare_env, self.learned, delay, log_to=log_to)
        spare = folder is None
        if spare:
            assert self.spare_root is not None
            folder = confine.new_spare_folder(self.spare_root)
        assert folder is not None
        confine.hand_over(folder, self.confinement.ids)
        learned = (confine.LEARNED_PATH if self.learned else None, f"{confine.AGENT_DIR}/{confine.LEARNED_OUT}")
        cgroup, usage = limits.harness_cgroup()
        try:
            popen = _spawn_launcher(self.preload, {}, None, delay, learned,
                                    lambda argv: confine.launch_argv(self.confinement, folder, argv, cgroup),
                                    ready=f"{confine.AGENT_DIR}/{confine.LAUNCH_READY}" if spare else None,
                                    log_to=log_to)
        except BaseException:
            if spare:
                confine.drop_folder(folder)
            if cgroup is not None:
                cgroup.remove()
            raise
        popen.rise_folder = folder if spare else None  # type: ignore[attr-defined]
        popen.rise_cgroup, popen.rise_limits = cgroup, usage  # type: ignore[attr-defined]
        return popen

    def start(self, output: Path) -> AgentProcess:
        """Start the agent in its own session, stdout and stderr appended to ``output``: in a spare when one
        is there, else in a fresh launcher (a command that is not ``python -m`` directly). Quick."""
        conf, agent_dir = self.confinement, Path(output).parent
        if self.module is None:
            if conf is not None:
                confine.hand_over(agent_dir, conf.ids)
                cgroup = limits.harness_cgroup()
                cmd = confine.launch_argv(conf, agent_dir, [sys.executable, *confine.RESTORE_TERM, *self.cmd],
                                          cgroup[0])
                return _direct(cmd, {}, output, cgroup)
            return _direct(self.cmd, self.env, output)
        popen = _SPARES.take(self.key) if self._counted else None
        if popen is not None and conf is not None and not _ready(popen):
            # bubblewrap may not have bound the spare's folder yet (a spare made a moment ago, a loaded machine):
            # renaming the folder now would leave the sandbox without it and the trial without its agent
            _discard(popen)
            popen = None
        if popen is not None and conf is not None:
            try:
                confine.adopt(popen.rise_folder, agent_dir)  # type: ignore[attr-defined]
                popen.rise_folder = None  # type: ignore[attr-defined]
                with contextlib.suppress(OSError):
                    (agent_dir / confine.LAUNCH_READY).unlink()
            except OSError as exc:  # another file system, a busy folder: a launcher of its own instead
                log.warning("could not hand a spare's folder to %s (%s); starting a fresh launcher", agent_dir, exc)
                _discard(popen)
                popen = None
        if popen is None:
            popen = self._spawn(folder=agent_dir if conf is not None else None, log_to=output)
        if conf is not None:  # what the runner put there (the spec, the log, the channel) is the harness's now
            confine.hand_over(agent_dir, conf.ids)
        where = confine.inside(output, agent_dir) if conf is not None else str(output)
        job = {"module": self.module, "args": self.cmd[3:], "env": self.env, "output": where}
        try:
            assert popen.stdin is not None
            popen.stdin.write(json.dumps(job).encode() + b"\n")
            popen.stdin.flush()
        except OSError:  # the launcher is gone already: start afresh
            _discard(popen)
            if conf is None:
                return _direct(self.cmd, self.env, output)
            popen = self._spawn(folder=agent_dir, log_to=output)
            assert popen.stdin is not None
            popen.stdin.write(json.dumps(job).encode() + b"\n")
            popen.stdin.flush()
        if self._counted:  # a successor for the next trial of this slot
            _SPARES.replenish(self.key, lambda: self._spawn(SUCCESSOR_DELAY_SEC))
        return AgentProcess(popen, warm=True)

    def absorb(self, agent_dir: Path) -> None:
        """After a confined run: keep what its launcher learned (:func:`trials.confine.absorb_learned`)."""
        if self.confinement is not None and self.module is not None:
            confine.absorb_learned(agent_dir, self.learned)

    def release(self) -> None:
        if self._counted:
            self._counted = False
            _SPARES.count(self.key, -1)


# ------------------------------------------------------------------------------------------ the launcher side


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _watch_stdin(fd: int) -> None:
    """End-of-file on the runner's pipe: the runner is gone (or gave up); nothing of this agent may outlive it."""
    while os.read(fd, 4096):
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _finish(code: int) -> None:
    """Leave as the interpreter would (non-daemon threads, then atexit handlers), without tearing down every
    module: that teardown is slow with pydantic and httpx loaded, and nothing is lost by skipping it."""
    try:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def preloadable(name: str, module: Any) -> bool:
    """Whether a module may be imported before a trial: the platform's own (``trials``, ``monitor``) or a
    library's (the standard library, site-packages), never candidate code (a harness package, tests)."""
    if name == "__main__" or name.startswith("__main__."):
        return False
    if name.split(".")[0] in confine.PLATFORM_PACKAGES:
        return True
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and os.path.realpath(path).startswith(confine.LIBRARY_DIRS)


def _read_learned(path: Path | None) -> list[str]:
    return confine.read_names(path) if path is not None else []


def _learn(path: Path, known: set[str]) -> None:
    """Record the preloadable modules this run imported, when there are new ones (the next spares import them
    up front): the lazy imports of libraries (httpcore's, the encodings...) that a fixed list misses."""
    modules = dict(sys.modules)
    if not any(preloadable(n, m) for n, m in modules.items() if n not in known):
        return
    names = [n for n, m in modules.items() if preloadable(n, m)]
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(names))
        os.replace(tmp, path)


def launcher_main(argv: list[str]) -> None:
    """The launcher process (see the module docstring); never returns."""
    import importlib
    import runpy

    preload = [m for m in (argv[argv.index("--preload") + 1] if "--preload" in argv else "").split(",") if m]
    learned = Path(argv[argv.index("--learned") + 1]) if "--learned" in argv else None
    learn_out = Path(argv[argv.index("--learn-out") + 1]) if "--learn-out" in argv else learned
    if "--ready" in argv:  # a confined spare: its sandbox is built (see confine.LAUNCH_READY)
        with contextlib.suppress(OSError):
            Path(argv[argv.index("--ready") + 1]).touch()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a confined launcher starts with it ignored (see above)
    if "--delay" in argv:  # a successor: let the trial that just started have the CPU first (unless a job comes)
        select.select([0], [], [], float(argv[argv.index("--delay") + 1]))
    preload += _read_learned(learned)
    t0 = time.monotonic()
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):  # import warnings belong in the trial's log, which comes later
        for name in dict.fromkeys(preload):
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - the trial imports it again and meets the error there
                print(f"trials.launch: preloading {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    known = set(sys.modules)
    t1 = time.monotonic()
    line = sys.stdin.buffer.readline()
    if not line:  # the runner closed the spare: nothing to run
        os._exit(0)
    job = json.loads(line)
    watch_fd = os.dup(0)  # the runner's pipe, watched for its end; the agent's stdin is /dev/null, as before
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(job["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd, target in ((null, 0), (out, 1), (out, 2)):
        os.dup2(fd, target)
    os.close(null)
    os.close(out)
    sys.stderr.write(captured.getvalue())
    print(f"trials.launch: {len(known)} modules preloaded in {t1 - t0:.2f} s; the job came "
          + (f"{time.monotonic() - t1:.2f} s later" if time.monotonic() - t1 > 0.005 else "before the end"),
          file=sys.stderr, flush=True)
    threading.Thread(target=_watch_stdin, args=(watch_fd,), name="launch-stdin-watch", daemon=True).start()
    os.environ.clear()
    os.environ.update(job["env"])
    module = job["module"]
    sys.modules.pop(module, None)  # run it afresh as __main__, as ``python -m`` does
    sys.argv = [module, *job["args"]]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, then status 1
        import traceback

        traceback.print_exc()
        code = 1
    if learn_out is not None:
        _learn(learn_out, known)
    _finish(code)


if __name__ == "__main__":
    launcher_main(sys.argv[1:])

"""Resource limits of untrusted process trees: a cgroup per harness process and per local sandbox.

A harness (every version, and the oracle) gets a memory limit and a pids limit (:func:`harness_limits`:
``RISE_HARNESS_MEMORY_MB``, default 2048, and ``RISE_HARNESS_PIDS``, default 512); a local sandbox gets the
task's ``memory_mb`` (task.toml ``[environment]``) and ``RISE_SANDBOX_PIDS`` (default 4096). Each tree gets a
fresh cgroup; its processes join it before they exec anything (:func:`join_argv`, a ``/bin/sh`` shim that writes
its own pid into the cgroup, then execs the command), so nothing it forks escapes the count. When the tree is
done, :meth:`Cgroup.finish` reads what it hit (OOM kills, refused forks, peak memory), kills what is left in the
cgroup (also processes that left the process group) and removes it.

cgroup v1 (a ``memory`` and a ``pids`` hierarchy: the cgroups are made under this process's own) and v2 (one
unified hierarchy with both controllers: under this process's own cgroup when its controllers are delegated,
else under ``/rise`` at the root) are both handled. Where neither can be written (not root, no delegation, no
controller), :func:`make_cgroup` returns the reason instead, and the trial record carries it: the tree then
runs without these limits, said plainly, never silently.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

MB = 1024 * 1024
DEFAULT_HARNESS_MEMORY_MB, DEFAULT_HARNESS_PIDS, DEFAULT_SANDBOX_PIDS = 2048, 512, 4096
CONTROLLERS = ("memory", "pids")
GROUP = "rise"  # the folder under the base cgroup that holds every tree's cgroup


class LimitUsage(BaseModel):
    """One process tree's limits and what it hit (``result.json`` ``limits.harness`` / ``limits.sandbox``)."""

    memory_mb: int | None = Field(default=None, description="the memory limit in MiB; None when not enforced")
    pids: int | None = Field(default=None, description="the limit on processes and threads; None: not enforced")
    cgroup: str | None = Field(default=None, description="cgroup v1 or v2, and where")
    peak_memory_mb: float | None = None
    oom_kills: int = Field(default=0, description="processes the kernel killed at the memory limit")
    pids_refused: int = Field(default=0, description="forks refused at the pids limit")
    note: str | None = Field(default=None, description="why a limit is not enforced here")

    def hits(self, who: str) -> list[str]:
        """``<who>_memory`` / ``<who>_pids`` for the limits this tree hit."""
        return [f"{who}_memory"] * (self.oom_kills > 0) + [f"{who}_pids"] * (self.pids_refused > 0)


class LimitsRecord(BaseModel):
    """``result.json`` ``limits``: who ran as whom, each tree's limits and which were hit."""

    harness_uid: int | None = Field(default=None, description="host uid the harness ran as (None: unconfined)")
    harness_uid_note: str | None = Field(default=None, description="why it ran as another uid than intended")
    harness: LimitUsage | None = None
    sandbox: LimitUsage | None = None
    hit: list[str] = Field(default_factory=list, description="harness_memory, harness_pids, sandbox_memory, "
                           "sandbox_pids: the limits this trial's processes ran into")

    def refresh(self, notes: list[str], trial: str) -> None:
        """Recompute :attr:`hit`; add to ``notes`` each new hit and each limit not enforced, plainly."""
        before = set(self.hit)
        self.hit = [*(self.harness.hits("harness") if self.harness else []),
                    *(self.sandbox.hits("sandbox") if self.sandbox else [])]
        for usage in (self.harness, self.sandbox):
            if usage is not None and usage.note and usage.note not in notes:
                notes.append(usage.note)
        for hit in [h for h in self.hit if h not in before]:
            who, kind = hit.split("_")
            usage = getattr(self, who)
            limit = f"{usage.memory_mb} MiB" if kind == "memory" else f"{usage.pids} processes"
            notes.append(f"the {who} hit its {kind} limit ({limit}): {usage.oom_kills} killed at it, "
                         f"{usage.pids_refused} forks refused")
            log.warning("%s: the %s hit its %s limit (%s)", trial, who, kind, limit)


def _env_int(name: str, default: int) -> int:
    try:
        return max(int(os.environ.get(name, default)), 1)
    except ValueError:
        raise ValueError(f"{name}={os.environ[name]!r}: expected a whole number") from None


def harness_limits() -> tuple[int, int]:
    """(memory MiB, pids) of a harness process tree."""
    return _env_int("RISE_HARNESS_MEMORY_MB", DEFAULT_HARNESS_MEMORY_MB), _env_int("RISE_HARNESS_PIDS",
                                                                                    DEFAULT_HARNESS_PIDS)


def sandbox_pids() -> int:
    return _env_int("RISE_SANDBOX_PIDS", DEFAULT_SANDBOX_PIDS)


# --------------------------------------------------------------------------------------- where cgroups live

def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller, and ``""`` for v2 (from /proc/self/cgroup)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def _mounts() -> dict[str, str]:
    """Mount point by v1 controller, and ``""`` for the v2 hierarchy."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) < 4:
                continue
            if parts[2] == "cgroup2":
                out.setdefault("", parts[1])
            elif parts[2] == "cgroup":
                for opt in parts[3].split(","):
                    if opt in CONTROLLERS:
                        out[opt] = parts[1]
    return out


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@functools.lru_cache(maxsize=1)
def bases() -> tuple[int, tuple[Path, ...]] | str:
    """(version, the folders under which tree cgroups are made: one per controller on v1, one on v2), or why
    there are none. Cached: the machine does not change under a job."""
    mounts, own = _mounts(), _own_paths()
    errors: list[str] = []
    if all(c in mounts for c in CONTROLLERS):
        try:
            dirs = tuple(Path(mounts[c]) / own.get(c, "/").lstrip("/") / GROUP for c in CONTROLLERS)
            for d in dirs:
                d.mkdir(exist_ok=True)
            _reap_stale(dirs)
            return 1, dirs
        except OSError as exc:
            errors.append(f"cgroup v1: cannot make {exc.filename}: {exc.strerror}")
    if "" in mounts:
        root = Path(mounts[""])
        have = (root / "cgroup.controllers").read_text().split() if (root / "cgroup.controllers").exists() else []
        if not all(c in have for c in CONTROLLERS):
            errors.append(f"cgroup v2 at {root} has no {' and '.join(c for c in CONTROLLERS if c not in have)} "
                          "controller")
        else:
            for parent in dict.fromkeys([root / own.get("", "/").lstrip("/"), root]):
                try:
                    base = _v2_base(parent)
                    _reap_stale((base,))
                    return 2, (base,)
                except OSError as exc:
                    errors.append(f"cgroup v2: {parent}: {exc.strerror or exc}")
    return "; ".join(errors) or "no cgroup hierarchy with the memory and pids controllers is mounted"


def _reap_stale(dirs: tuple[Path, ...]) -> None:
    """Remove the empty cgroups a killed runner left (``<name>-<pid>-<hex>`` whose pid is gone); a cgroup that
    still holds a process is kept (rmdir fails)."""
    for d in dirs:
        for child in d.iterdir():
            parts = child.name.rsplit("-", 2)
            if child.is_dir() and len(parts) == 3 and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists():
                with contextlib.suppress(OSError):
                    child.rmdir()


def _v2_base(parent: Path) -> Path:
    """``parent/rise`` with memory and pids on for its children; ``parent`` must have them on for its own
    (fails with EBUSY when it holds processes itself and they are off: v2's no-internal-process rule)."""
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    missing = [c for c in CONTROLLERS if c not in enabled]
    if missing:
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
    base = parent / GROUP
    base.mkdir(exist_ok=True)
    _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
    return base


# ------------------------------------------------------------------------------------------- one tree's cgroup

@dataclass
class Cgroup:
    """The cgroup of one process tree (one folder per controller on v1, one on v2) and its limits."""

    version: int
    dirs: tuple[Path, ...]
    memory_mb: int
    pids: int

    def describe(self) -> str:
        return f"v{self.version} {self.dirs[0]}"

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _file(self, controller: str, v1: str, v2: str) -> Path:
        return (self.dirs[CONTROLLERS.index(controller)] / v1) if self.version == 1 else (self.dirs[0] / v2)

    def _counter(self, path: Path, key: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        return 0

    def usage(self) -> LimitUsage:
        """What the tree hit so far."""
        peak = self._file("memory", "memory.max_usage_in_bytes", "memory.peak")
        try:
            peak_mb: float | None = round(int(peak.read_text().split()[0]) / MB, 1)
        except (OSError, ValueError, IndexError):
            peak_mb = None
        oom = self._counter(self._file("memory", "memory.oom_control", "memory.events"), "oom_kill")
        refused = self._counter(self._file("pids", "pids.events", "pids.events"), "max")
        return LimitUsage(memory_mb=self.memory_mb, pids=self.pids, cgroup=self.describe(), peak_memory_mb=peak_mb,
                          oom_kills=oom, pids_refused=refused)

    def pids_inside(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in Path(f).read_text().split())
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (also those that left the tree's process group)."""
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.dirs[0] / "cgroup.kill", "1")
        for _ in range(50):  # v1: a forking process may add one between the read and the kill
            left = self.pids_inside()
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Remove the (emptied) cgroup; processes still dying get a moment."""
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)

    def finish(self) -> LimitUsage:
        """Read what the tree hit, kill what is left of it, remove the cgroup."""
        used = self.usage()
        self.kill()
        self.remove()
        return used


def make_cgroup(name: str, memory_mb: int, pids: int) -> Cgroup | str:
    """A fresh cgroup with these limits, or why none can be made here (see the module docstring)."""
    found = bases()
    if isinstance(found, str):
        return found
    version, base_dirs = found
    leaf = f"{name}-{os.getpid()}-{os.urandom(4).hex()}"
    dirs = tuple(d / leaf for d in base_dirs)
    cg = Cgroup(version, dirs, memory_mb, pids)
    try:
        for d in dirs:
            d.mkdir()
        limit = str(memory_mb * MB)
        if version == 1:
            mem, pid_dir = dirs
            _write(mem / "memory.limit_in_bytes", limit)
            if (mem / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit either
                _write(mem / "memory.memsw.limit_in_bytes", limit)
            _write(pid_dir / "pids.max", str(pids))
        else:
            _write(dirs[0] / "memory.max", limit)
            if (dirs[0] / "memory.swap.max").exists():
                _write(dirs[0] / "memory.swap.max", "0")
            _write(dirs[0] / "pids.max", str(pids))
    except OSError as exc:
        cg.remove()
        return f"cannot set up cgroup {dirs[0]}: {exc.strerror or exc}"
    return cg


def join_argv(cg: Cgroup | None) -> list[str]:
    """A prefix that puts the command's process into ``cg`` before it execs (nothing without a cgroup)."""
    if cg is None:
        return []
    writes = "".join(f"echo $$ > {shlex.quote(f)} && " for f in cg.procs_files())
    return ["/bin/sh", "-c", f'{writes}exec "$@"', "rise-limits"]


def harness_cgroup() -> tuple[Cgroup | None, LimitUsage]:
    """The cgroup of one harness process tree (None when the machine allows none) and its record so far."""
    memory_mb, pids = harness_limits()
    cg = make_cgroup("harness", memory_mb, pids)
    if isinstance(cg, str):
        return None, LimitUsage(note=f"harness limits not enforced: {cg}")
    return cg, LimitUsage(memory_mb=memory_mb, pids=pids, cgroup=cg.describe())


def sandbox_cgroup(memory_mb: int) -> tuple[Cgroup | None, LimitUsage]:
    """The cgroup of one local sandbox (the task's ``memory_mb``) and its record so far."""
    pids = sandbox_pids()
    cg = make_cgroup("sandbox", memory_mb, pids)
    if isinstance(cg, str):
        return None, LimitUsage(note=f"local sandbox limits not enforced: {cg}")
    return cg, LimitUsage(memory_mb=memory_mb, pids=pids, cgroup=cg.describe())


def to_handle(cg: Cgroup | None) -> dict | None:
    """A cgroup as a sandbox handle carries it (an attached sandbox's commands join it too)."""
    return None if cg is None else {"version": cg.version, "dirs": [str(d) for d in cg.dirs],
                                    "memory_mb": cg.memory_mb, "pids": cg.pids}


def from_handle(data: dict | None) -> Cgroup | None:
    if not data:
        return None
    return Cgroup(int(data["version"]), tuple(Path(d) for d in data["dirs"]), int(data["memory_mb"]),
                  int(data["pids"]))

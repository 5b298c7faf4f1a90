"""Run a task's tests in a private view of a started sandbox (a host process, root; standard library only).

``python3 -I -S verify_enter.py ARGS_JSON`` with the tests' tar on stdin and the result channel open (fd
``result_fd`` of the arguments). It joins the namespaces (and, for a container, the cgroups) of the sandbox's
pid 1, then unshares a mount namespace of its own and builds a new root on a fresh tmpfs stacked on
``/dev/shm`` (a mount point in the sandbox, which the agent can neither rename nor remove): every top-level
folder of the sandbox bound in, except ``/tests`` and ``/logs/verifier``, which are fresh tmpfs folders no other
process tree sees, and the tests' own HOME, a third one (``home`` of the arguments). Given ``tools_pid`` (pid 1 of
a fresh container of the task image that the agent never reached), its ``/usr``, ``/etc``, ``/bin``, ``/sbin`` and
``/lib*`` stand in for the sandbox's: the tests' programs are the image's, not what the agent left. Only this
host program runs with full privileges: the sandbox's own programs run after the capabilities are dropped,
chrooted in the new root.

The tests keep the sandbox's usual capabilities plus CAP_WAKE_ALARM, a harmless one the agent lacks, also as an
ambient capability when they run as another user: the kernel then refuses the agent's processes
``/proc/<pid>/root`` of every verifier process (ptrace access needs a superset of the target's capabilities),
the one path from the agent's view into this one.

Nothing of the sandbox runs in this program. Once it has entered, every path it opens resolves in the sandbox, whose
files the agent may have written: a user or group name looked up there loads the NSS modules that its
``/etc/nsswitch.conf`` names, and a module imported there runs its code. So no name is looked up (owners are numeric
in both tars, users are parsed from the sandbox's files as text), no module is imported after entering (a finder
refuses it), and what it needs from its own host (``cap_last_cap``, ``/dev/null``) is opened before. The parent
that waits for the tests and packs their folder keeps only the capabilities it needs for that.

The result channel carries one status line, ``rise-verify rc=N timed_out=0|1`` or ``rise-verify setup-failed
WHY``, then (after ``rc=``) a tar of the verifier's ``/logs/verifier``. The tests never hold it.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import signal
import stat
import sys
import tarfile
import time
import warnings  # noqa: F401 - os.execvpe imports it in the child, after the imports are sealed

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_KEEPCAPS, PR_CAP_AMBIENT, PR_SET_NO_NEW_PRIVS = 24, 8, 47, 38
PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_CLEAR_ALL = 2, 4
# Docker's default set (trials/environments/local.py CAPS), by number, and the verifier's own extra one.
DOCKER_CAPS = (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31)
CAP_WAKE_ALARM = 35
CAP_DAC_READ_SEARCH, CAP_KILL = 2, 5  # what the parent keeps: read the tests' folder, stop their process group
SETUP_FAILED = 213
NAMESPACES = ("ipc", "uts", "net", "pid", "mnt")  # mnt last: it changes our root
# The tests' system folders, from a fresh container of the task image when one is given (``tools_pid``).
TOOL_DIRS = ("bin", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "usr")
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # x86_64 and arm64 alike
SANDBOX_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH, AT_FDCWD = 1, 0o2000000, 0x8000, 4, -100

_libc = ctypes.CDLL(None, use_errno=True)


class Setup(Exception):
    """The private view could not be built (the message says which step)."""


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise Setup(f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _call(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _clone_tools(pid: int) -> dict[str, int | str]:
    """The system folders of the tools container (``pid``: its pid 1, which the agent never reached) as detached
    mounts, or the link a merged-/usr image has there; entering its mount namespace is the one way to clone them."""
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    try:
        _call(_libc.setns(ns, CLONE_NEWNS), "setns into the tools container")
    finally:
        os.close(ns)
    trees: dict[str, int | str] = {}
    for name in TOOL_DIRS:
        if os.path.islink(f"/{name}"):
            trees[name] = os.readlink(f"/{name}")
        elif os.path.isdir(f"/{name}"):
            fd = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, f"/{name}".encode(),
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
            if fd < 0:
                raise Setup(f"open_tree /{name} of the tools container: {os.strerror(ctypes.get_errno())}")
            trees[name] = fd
    return trees


def _join(pid: int, cgroups: bool, tools_pid: int | None) -> dict[str, int | str]:
    """Enter the sandbox (after cloning the tools container's folders, when there is one); returns those."""
    fds = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in NAMESPACES}
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)  # as nsenter --root: pid 1's own root
    if cgroups:  # a container's limits apply to its verifier too
        for line in _read(f"/proc/{pid}/cgroup").splitlines():
            _, controllers, path = line.split(":", 2)
            if path == "/":
                continue
            name = controllers.removeprefix("name=") or "unified"
            base = "/sys/fs/cgroup" + ("" if not controllers else f"/{name}")
            try:
                with open(f"{base}{path}/cgroup.procs", "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass  # a controller not mounted here: the sandbox's own pid 1 still bounds the namespaces
    tools = _clone_tools(tools_pid) if tools_pid else {}
    for ns, fd in fds.items():
        _call(_libc.setns(fd, 0), f"setns {ns}")
        os.close(fd)
    os.fchdir(root)
    os.chroot(".")
    os.close(root)
    _call(_libc.unshare(CLONE_NEWNS), "unshare the mount namespace")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    return tools


def _keep_sandbox_paths(workdir: str) -> None:
    """Inside the tools' folders, what stays the sandbox's: the network files Docker writes for the container, and
    the task's working folder when it lies there (``/usr/src/app``), made in the tools container if need be."""
    for path in (*SANDBOX_FILES, workdir):
        target = path.strip("/")
        if target.split("/")[0] not in TOOL_DIRS or "/" not in target:
            continue
        if path == workdir and os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
            _mount(path, target, None, MS_BIND | MS_REC)
        elif os.path.isfile(path) and os.path.isfile(target):
            _mount(path, target, None, MS_BIND)


def _build_root(tests_tar: bytes, home: str, tools: dict[str, int | str], workdir: str) -> None:
    """The new root, built in the current folder (``/dev/shm`` after the tmpfs is mounted there), with the tests'
    own empty HOME at ``home`` (under ``/logs``, which is this root's own folder) and ``tools`` (detached mounts
    or links) in place of the sandbox's folders of those names."""
    if not os.path.isdir("/dev/shm") or os.path.islink("/dev/shm"):
        raise Setup("/dev/shm is missing in the sandbox")
    _mount("rise-verify", "/dev/shm", "tmpfs", 0, "mode=0755,size=512m")
    os.chdir("/dev/shm")
    os.mkdir("dev")
    _mount("/dev", "dev", None, MS_BIND | MS_REC)
    _call(_libc.umount2(b"dev/shm", 0), "umount dev/shm")  # the copy of this root; the real shm shows again
    os.mkdir("proc")
    _mount("/proc", "proc", None, MS_BIND | MS_REC)
    for name in sorted({*os.listdir("/"), *tools}):
        if name in ("proc", "dev", "tests", "logs"):
            continue
        src, tool = f"/{name}", tools.get(name)
        if isinstance(tool, str):
            os.symlink(tool, name)
        elif tool is not None:
            os.mkdir(name)
            _call(_libc.syscall(SYS_MOVE_MOUNT, tool, b"", AT_FDCWD, name.encode(), MOVE_MOUNT_F_EMPTY_PATH),
                  f"move_mount {name}")
            os.close(tool)
        elif os.path.islink(src):
            os.symlink(os.readlink(src), name)
        elif os.path.isdir(src):
            os.mkdir(name)
            _mount(src, name, None, MS_BIND | MS_REC)
        elif os.path.exists(src):
            open(name, "w").close()
            _mount(src, name, None, MS_BIND)
    if tools:
        _keep_sandbox_paths(workdir)
    os.makedirs("tests")
    _mount("rise-tests", "tests", "tmpfs", 0, "mode=0755")
    with tarfile.open(fileobj=_Reader(tests_tar), mode="r|") as tar:
        tar.extractall("tests", filter="data", numeric_owner=True)
    os.makedirs("logs/verifier")
    os.mkdir("logs/agent")
    _mount("rise-verifier", "logs/verifier", "tmpfs", 0, "mode=0755,size=256m")
    if os.path.isdir("/logs/agent"):
        _mount("/logs/agent", "logs/agent", None, MS_BIND | MS_REC)
    if not home.startswith("/logs/") or home.rstrip("/") in ("/logs/verifier", "/logs/agent"):
        raise Setup(f"the tests' HOME {home!r} must be a new folder under /logs")
    home = home.lstrip("/")
    os.makedirs(home)
    _mount("rise-verifier-home", home, "tmpfs", 0, "mode=0700,size=2g")


class _Reader:
    """A file object over bytes for a streaming tarfile (tarfile's own io import is done already)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk


def _user(spec: str | None) -> tuple[int, int, list[int]] | None:
    """(uid, gid, groups) of ``spec`` from /etc/passwd and /etc/group of the root in the current folder, parsed as
    text (a name lookup through NSS would load the sandbox's modules)."""
    if spec in (None, "", "root", "0"):
        return None
    try:
        passwd = [ln.split(":") for ln in _read("etc/passwd").splitlines() if ln.count(":") >= 6]
        groups = [ln.split(":") for ln in _read("etc/group").splitlines() if ln.count(":") >= 3]
    except OSError as exc:
        raise Setup(f"cannot read the sandbox's users: {exc}") from exc
    row = next((r for r in passwd if r[0] == spec or r[2] == spec), None)
    if row is None:
        raise Setup(f"user {spec!r} does not exist in the sandbox")
    uid, gid = int(row[2]), int(row[3])
    extra = [int(g[2]) for g in groups if row[0] in g[3].split(",")]
    return uid, gid, sorted({gid, *extra})


def _bound(keep: set[int], last_cap: int) -> None:
    """Drop every capability but ``keep`` from the bounding set, for good."""
    for cap in range(last_cap + 1):
        if cap not in keep:
            _call(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


def _words(caps: set[int]) -> tuple[int, int]:
    mask = sum(1 << cap for cap in caps)
    return mask & 0xFFFFFFFF, mask >> 32


def _drop_privileges(ids: tuple[int, int, list[int]] | None, last_cap: int) -> None:
    _bound({*DOCKER_CAPS, CAP_WAKE_ALARM}, last_cap)
    _call(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    if ids is not None:
        _call(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keep capabilities")
        os.setgroups(ids[2])
        os.setresgid(ids[1], ids[1], ids[1])
        os.setresuid(ids[0], ids[0], ids[0])
    _, high = _words({CAP_WAKE_ALARM})
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)(0, 0, 0, high, high, high)
    if ids is None:  # root keeps its bounded set; the inheritable set only carries the ambient cap
        _call(_libc.capget(header, data), "capget")
        data[2], data[5] = 0, high
    _call(_libc.capset(header, data), "capset")
    _call(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_WAKE_ALARM, 0, 0), "ambient capability")


def _limit_parent(last_cap: int) -> None:
    """The parent from the fork on: it only waits, stops the tests' process group and reads their folder. A second
    wall behind the first (nothing of the sandbox runs here): without CAP_SYS_ADMIN, CAP_SYS_CHROOT or
    CAP_SYS_PTRACE, code that got in anyway could neither mount the host's /proc nor leave this root."""
    keep = {CAP_DAC_READ_SEARCH, CAP_KILL}
    _bound(keep, last_cap)
    low, high = _words(keep)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    _call(_libc.capset(header, (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)), "capset (parent)")
    _call(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")


def _child(args: dict, ids: tuple[int, int, list[int]] | None, last_cap: int, null: int) -> None:
    try:
        os.setsid()
        os.chroot(".")
        try:
            os.chdir(args["workdir"])
        except FileNotFoundError:  # the agent deleted it: the tests run from / and judge that (base.in_workdir)
            os.chdir("/")
        _drop_privileges(ids, last_cap)
        os.dup2(null, 0)  # the host's /dev/null, opened before entering (the sandbox's may be anything)
        os.closerange(3, 65536)  # the result channel above all
        os.execvpe(args["command"][0], args["command"], args["env"])
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the parent's code
        os.write(2, f"rise-verify: cannot start the tests: {exc}\n".encode())
    os._exit(126)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            return (128 - rc if rc < 0 else rc), False  # killed by a signal: the shell's 128+N
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return 124, True
        time.sleep(0.02)


def _pack(folder: str, out: io.BufferedWriter) -> None:
    """A tar of ``folder`` (folders, regular files, symlinks) with numeric owners and no owner names, so that no
    name is looked up; no link is followed, and nothing but a regular file is opened (a FIFO would block)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(folder):  # symlinked folders are listed, not entered
            dirs.sort()
            for name in ["", *dirs, *sorted(files)]:
                path = os.path.join(top, name) if name else top
                member = _member(path, os.path.relpath(path, folder))
                if member is not None:
                    tar.addfile(member[0], io.BytesIO(member[1]) if member[1] is not None else None)


def _member(path: str, arcname: str) -> tuple[tarfile.TarInfo, bytes | None] | None:
    info = tarfile.TarInfo(arcname)
    try:
        st = os.lstat(path)
    except OSError:
        return None  # removed since it was listed
    data = None
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # replaced since it was listed (a process the tests left)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = f.read()
        info.size = len(data)
    else:
        return None
    info.mode, info.uid, info.gid, info.mtime = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)
    return info, data


class _NoImports:
    """Installed before entering: from then on every module path resolves in the sandbox, where the agent may
    have put a file by that name. An import this program missed fails here instead of running that file."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        raise ImportError(f"verify_enter.py imports nothing after entering the sandbox (asked for {name})")


def _seal_imports() -> None:
    sys.meta_path.insert(0, _NoImports)  # type: ignore[arg-type]


def main() -> int:
    args = json.loads(sys.argv[1])
    out = os.fdopen(int(args["result_fd"]), "wb")
    tests_tar = sys.stdin.buffer.read()
    last_cap = int(_read("/proc/sys/kernel/cap_last_cap"))  # the host's, before the sandbox's /proc is in view
    null = os.open("/dev/null", os.O_RDONLY)
    _seal_imports()
    try:
        tools = _join(int(args["pid"]), bool(args.get("cgroups")), args.get("tools_pid"))
        os.chdir("/")
        _build_root(tests_tar, args["home"], tools, args["workdir"])
        ids = _user(args.get("user"))  # from the tests' own /etc (the tools container's, when there is one)
        if ids is not None:
            os.chown("logs/verifier", ids[0], ids[1])
            os.chown(args["home"].lstrip("/"), ids[0], ids[1])
    except (Setup, OSError, tarfile.TarError) as exc:
        out.write(f"rise-verify setup-failed {exc}\n".encode())
        return SETUP_FAILED
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(args, ids, last_cap, null)
    try:
        _limit_parent(last_cap)
    except Setup as exc:
        os.killpg(pid, signal.SIGKILL)
        out.write(f"rise-verify setup-failed {exc}\n".encode())
        return SETUP_FAILED
    rc, timed_out = _wait(pid, float(args["timeout"]))
    out.write(f"rise-verify rc={rc} timed_out={int(timed_out)}\n".encode())
    _pack("logs/verifier", out)
    out.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())

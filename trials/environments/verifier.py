"""The verifier phase inside a sandbox: the detector, the private run, and the weaker shared run.

The agent can write into ``/logs/verifier`` (it is root in its sandbox), and a process it leaves running can keep
writing there while the tests run. So:

1. The detector lists what is in ``/logs/verifier`` before the verifier starts (the sandbox made it empty; the
   verifier has not run yet, so anything there is the agent's), then empties it.
2. Private mode (an environment whose :meth:`~trials.environments.base.Environment.verifier_target` names a pid
   this host can enter: local always, docker when the engine is on this machine): the tests run through
   ``verify_enter.py`` with a fresh ``/tests``, a fresh ``/logs/verifier`` and a fresh HOME that only their own
   process tree sees; the reward is read from what they wrote there, nothing else. Afterwards the shared folder is listed
   again: files there were written during the run by processes the agent left behind (recorded, never read).
3. Shared mode (anything else, recorded as such): stop every process the agent left (checked), then upload the
   tests, run them, download the emptied-then-refilled folder. A reward planted before the verifier started is
   never read, and no background writer is left to plant one during the run.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..errors import SandboxError
from .archive import pack
from .base import ExecResult
from .local import KEEPER_SCRIPT

if TYPE_CHECKING:
    from .base import Environment

FOLDER = "/logs/verifier"
HELPER = Path(__file__).with_name("verify_enter.py")
SETUP_FAILED = 213  # verify_enter.py's exit status when the private view could not be built
BACKSTOP_SEC = 30.0  # beyond the tests' own timeout, which the helper enforces
MAX_LISTED = 50
# The tests' own HOME in the private view: a fresh tmpfs, not the agent's /root (whose ~/.local site-packages, .pth
# files, pip or git configuration would run or steer the tests' programs). A task's [verifier] env may set HOME.
VERIFIER_HOME = "/logs/verifier-home"
# In both modes: Python ignores the user site-packages of whatever HOME is (the shared mode keeps the agent's).
ISOLATION_ENV = {"PYTHONNOUSERSITE": "1"}
# Lists the folder's entries (and a symlink put in its place), then empties it; runs as the agent's peer. A /logs
# the agent turned into a file or a link is replaced.
CLEAR = (f"d={FOLDER}; [ -L $d ] && echo '@ {FOLDER} was a symlink'; "
         f"[ -d $d/ ] && find $d/ -mindepth 1 -printf '%P\\n' | head -n {MAX_LISTED}; "
         "rm -rf $d; { mkdir -p $d || { echo '@ /logs was not a folder'; rm -rf /logs && mkdir -p $d; }; } "
         "&& chmod 755 $d")


# Shared mode only: SIGKILL every process of the sandbox but its pid 1 (the keeper), the keeper's own `sleep` (in
# pid 1's session, which no process of an exec can join) and this shell (and the `timeout` that wraps it in a
# container), round after round until none is left (a process may fork meanwhile), then report. It prints the command lines it stops. It refuses to run where pid 1 is not the sandbox's keeper:
# in a test double whose exec runs on the host, it would otherwise signal the host's processes.
STOP_ROUNDS = 20
STOP = (f"grep -qF {shlex.quote(KEEPER_SCRIPT)} /proc/1/cmdline 2>/dev/null || "
        "{ echo '@ pid 1 is not the sandbox keeper'; exit 3; }\n"
        f"for round in $(seq {STOP_ROUNDS}); do\n"
        "  left=''\n"
        "  for p in /proc/[0-9]*; do\n"
        "    n=${p#/proc/}\n"
        "    case \" $n \" in ' 1 ' | \" $$ \" | \" $PPID \") continue ;; esac\n"
        "    read -r st < $p/stat 2>/dev/null || continue\n"
        "    set -- ${st##*) }; [ \"$1\" = Z ] || [ \"$4\" = 1 ] || left=\"$left $n\"\n"
        "  done\n"
        "  [ -z \"$left\" ] && exit 0\n"
        "  for n in $left; do printf '! '; tr '\\0' ' ' < /proc/$n/cmdline 2>/dev/null | head -c 200; echo; done\n"
        "  kill -9 $left 2>/dev/null; sleep 0.05\n"
        "done\n"
        f"echo \"@ still running after {STOP_ROUNDS} rounds:$left\"; exit 4")


class VerifierRun(BaseModel):
    """What one verifier run did and what the detector found around it."""

    result: ExecResult
    isolation: Literal["private", "shared"]
    note: str | None = Field(default=None, description="why the shared mode was used, or why the private "
                             "view could not be built")
    planted: list[str] = Field(default_factory=list, description="entries of /logs/verifier before the run")
    planted_during: list[str] = Field(default_factory=list, description="entries written to the shared "
                                      "/logs/verifier during a private run (by processes the agent left)")
    stopped: list[str] = Field(default_factory=list, description="command lines of the agent's processes "
                               "stopped before a shared run")
    stop_note: str | None = Field(default=None, description="why the agent's processes were not stopped")


async def stop_agent_processes(env: Environment) -> tuple[list[str], str | None]:
    """Stop every process the agent's phase left in ``env`` (a sandbox with the keeper as pid 1), checked; returns
    their command lines, and why nothing was stopped (a sandbox without the keeper). One still running after
    every round is an error: a background writer must not outlive this."""
    res = await env.exec(STOP, cwd="/", timeout=60)
    lines = res.stdout.splitlines()
    stopped = sorted({ln[2:].strip() for ln in lines if ln.startswith("! ") and ln[2:].strip()})
    if res.returncode == 3:
        return [], "the agent's processes were not stopped: pid 1 is not the sandbox's keeper"
    if not res.ok:
        why = next((ln[2:] for ln in lines if ln.startswith("@ ")), (res.stderr or res.stdout).strip()[-300:])
        raise SandboxError(f"cannot stop the agent's processes before the verifier: {why}")
    return stopped, None


async def clear_folder(env: Environment, *, required: bool = True) -> list[str]:
    """The entries the agent left in ``/logs/verifier`` (relative paths), after emptying it. A folder that cannot
    be emptied is an error when the tests will run in it (``required``), else one more finding."""
    res = await env.exec(CLEAR, cwd="/", timeout=60)
    found = [ln for ln in res.stdout.splitlines() if ln.strip()]
    if not res.ok:
        problem = f"cannot empty {FOLDER}: {(res.stderr or res.stdout).strip()[:300]}"
        if required:
            raise SandboxError(f"{problem} (before the verifier)")
        found.append(f"@ {problem}")
    return found


async def run_verifier(env: Environment, tests_dir: Path, out_dir: Path, *, workdir: str, variables: dict[str, str],
                       timeout: float, user: str | None, command: str = "bash /tests/test.sh") -> VerifierRun:
    """Run the task's tests in ``env`` and put what they wrote to ``/logs/verifier`` into ``out_dir``."""
    target = await env.verifier_target()
    if isinstance(target, str):  # nothing separates the tests from the agent's processes here: they go first
        stopped, stop_note = await stop_agent_processes(env)
        planted = await clear_folder(env)
        await env.upload(Path(tests_dir), "/tests")
        res = await env.exec(command, cwd=workdir, env={**ISOLATION_ENV, **variables}, timeout=timeout, user=user)
        await env.download(FOLDER, out_dir)
        return VerifierRun(result=res, isolation="shared", note=target, planted=planted, stopped=stopped,
                           stop_note=stop_note)
    planted = await clear_folder(env, required=False)
    res, note = await run_private(target, Path(tests_dir), out_dir, workdir=workdir, variables=variables,
                                  timeout=timeout, user=user, command=command)
    during = await clear_folder(env, required=False)
    return VerifierRun(result=res, isolation="private", note=note, planted=planted, planted_during=during)


async def run_private(target: dict[str, Any], tests_dir: Path, out_dir: Path, *, workdir: str,
                      variables: dict[str, str], timeout: float, user: str | None,
                      command: str) -> tuple[ExecResult, str | None]:
    """Run ``command`` through ``verify_enter.py`` in the namespaces of ``target["pid"]``; (result, setup error)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with (tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err,
          tempfile.TemporaryFile() as channel):
        stdin.write(pack(tests_dir, "."))
        stdin.seek(0)
        args = {"pid": target["pid"], "cgroups": bool(target.get("cgroups")), "timeout": timeout,
                "workdir": workdir, "user": user, "home": VERIFIER_HOME,
                "env": {**target.get("env", {}), **ISOLATION_ENV, "HOME": VERIFIER_HOME, **variables},
                "command": ["bash", "-c", command], "result_fd": channel.fileno(),
                "tools_pid": target.get("tools_pid")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(HELPER), json.dumps(args), stdin=stdin, stdout=out, stderr=err,
            pass_fds=(channel.fileno(),), start_new_session=True)
        try:
            await asyncio.wait_for(proc.wait(), timeout + BACKSTOP_SEC)
        except (TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        channel.seek(0)
        status = channel.readline().decode(errors="replace").strip()
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if not status.startswith("rise-verify rc="):
            why = status.removeprefix("rise-verify setup-failed ").strip() or \
                f"the helper exited {proc.returncode} without a status: {stderr.strip()[-500:]}"
            return ExecResult(returncode=SETUP_FAILED, stdout=stdout, stderr=stderr), \
                f"the verifier's private view could not be built: {why}"
        fields = dict(part.split("=", 1) for part in status.split()[1:])
        data = channel.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(out_dir, filter="data")
    return ExecResult(returncode=int(fields["rc"]), stdout=stdout, stderr=stderr,
                      timed_out=fields.get("timed_out") == "1"), None


def tools_mode() -> Literal["image", "sandbox"]:
    """Where a container's tests get /usr, /etc, /bin...: ``image`` (default), a fresh container of the task image
    that the agent never reached; ``sandbox``, the agent's own (``RISE_VERIFIER_TOOLS=sandbox``: for tests that use
    what the agent installed there, and only with trusted agents)."""
    mode = os.environ.get("RISE_VERIFIER_TOOLS", "image").strip() or "image"
    if mode not in ("image", "sandbox"):
        raise ValueError(f"RISE_VERIFIER_TOOLS={mode!r}: expected 'image' or 'sandbox'")
    return mode  # type: ignore[return-value]


def sandbox_pid_ok(pid: int, container_id: str) -> bool:
    """Whether host pid ``pid`` is the container's pid 1 here (not a pid of a remote engine's machine): its
    cgroup, as this host sees it, names the container (nothing inside the container can change that)."""
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False

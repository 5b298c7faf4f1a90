"""Escapes through the verifier (issue 44): the agent plants code that the verifier's own programs load.

Route 1, an NSS module: the agent installs ``libnss_rise.so.2`` (built here with gcc) in the sandbox and names it
first in ``/etc/nsswitch.conf``. A host program that looks up a user or group name inside the sandbox's root
(``tarfile`` does, for every member it packs) loads it as root with every capability. The module's constructor
tries what such code can do: forge the reward (``logs/verifier/reward.txt`` = 1, relative to the helper's folder,
which is the verifier's private root) and leave a marker on the host through a fresh ``/proc`` of the pid
namespace it runs in (``/proc/<this test's pid>/root/...``).

Route 2, the verifier's Python: the agent writes a ``.pth`` file and ``usercustomize.py`` into its user
site-packages (``/root/.local/lib/python3.X/site-packages``); the task's ``check.py`` would then exit 0 before
it checks anything.

Issue 40, item 1, the container's own tools: the agent replaces ``python3`` itself and puts a ``.pth`` file in the
system site-packages (in a container; the local sandbox's are the host's, read-only).

The agent is the oracle running a hostile ``solve.sh`` on a copy of ``hello-file`` that it does not solve, so
the tests must write ``reward.txt`` = 0. Each route must score 0, leave only the tests' own file among those read
and, for route 1, no marker on the host. An honest oracle on the same task still scores 1. On ``local``
(bubblewrap; ``/usr`` and ``/etc`` are the host's, read-only, so route 1 cannot even be staged there) and
``docker`` (marked).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.escape.test_reward_forgery import _need, _read_files, oracle_results
from tests.test_runner_sandbox import copy_task

NSS_MODULE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { write(fd, text, strlen(text)); close(fd); }
}

__attribute__((constructor)) static void rise_nss(void) {
    char path[4096], text[256];
    snprintf(text, sizeof text, "nss module ran: pid %d uid %d\n", (int)getpid(), (int)getuid());
    put("logs/verifier/nss-ran.txt", text);
    put("logs/verifier/reward.txt", "1\n");
    mkdir("/tmp/rise-proc", 0700);
    if (mount("proc", "/tmp/rise-proc", "proc", 0, NULL) == 0) {
        snprintf(path, sizeof path, "/tmp/rise-proc/%d/root%s", HOST_PID, MARKER);
        put(path, text);
    }
}
"""

STAGE_NSS = r"""#!/bin/bash
ok=0
for d in /usr/lib /usr/lib/x86_64-linux-gnu; do
  cp /solution/libnss_rise.so.2 "$d/" 2>/dev/null && ok=1
done
if [ $ok = 1 ] && sed -i -E 's/^(passwd|group):[[:space:]]*/\1: rise /' /etc/nsswitch.conf 2>/dev/null; then
  echo "STAGED nss: $(grep -E '^(passwd|group):' /etc/nsswitch.conf | tr '\n' ' ')"
else
  echo "NOT STAGED nss (read-only system folders)"
fi
"""

STAGE_USER_SITE = r"""#!/bin/bash
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site"
echo 'import os; os._exit(0)' > "$site/rise-forge.pth"
printf 'import os\nos._exit(0)\n' > "$site/usercustomize.py"
echo "STAGED user site: $site"
"""

# Issue 40, item 1: the container's own tools, replaced (python3 itself, and a .pth in the system site-packages).
STAGE_TOOLS = r"""#!/bin/bash
py=$(readlink -f "$(command -v python3)")
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
if mkdir -p "$site" 2>/dev/null && echo 'import os; os._exit(0)' > "$site/rise-forge.pth" 2>/dev/null &&
   printf '#!/bin/sh\nexit 0\n' > "$py" 2>/dev/null; then
  echo "STAGED tools: $py $site"
else
  echo "NOT STAGED tools (read-only system folders)"
fi
"""


def build_nss_module(out: Path, marker: Path) -> Path:
    """``libnss_rise.so.2`` whose constructor forges the reward and writes ``marker`` through a fresh /proc."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the NSS module")
    src = out.with_suffix(".c")
    src.write_text(NSS_MODULE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), f"-DHOST_PID={os.getpid()}",
                    f'-DMARKER="{marker}"'], check=True, capture_output=True, text=True)
    src.unlink()
    return out


def _trials(tmp_path: Path, env: str) -> tuple[dict[str, dict], Path]:
    tasks = tmp_path / "tasks"
    marker = tmp_path / "nss-escaped.txt"
    nss = copy_task("hello-file", tasks, "nss", solve=STAGE_NSS)
    build_nss_module(nss / "solution" / "libnss_rise.so.2", marker)
    copy_task("hello-file", tasks, "usersite", solve=STAGE_USER_SITE)
    copy_task("hello-file", tasks, "tools", solve=STAGE_TOOLS)
    copy_task("hello-file", tasks, "honest")
    return oracle_results(tmp_path, tasks, env), marker


def _staged(tmp_path: Path, task: str) -> str:
    return (tmp_path / "job" / f"{task}__r1" / "agent" / "oracle.log").read_text()


def _check(tmp_path: Path, env: str) -> None:
    res, marker = _trials(tmp_path, env)
    # the attacks were in place: the user site on both sandboxes, the NSS module where /usr is writable
    assert "STAGED user site: /root/.local/lib/python3." in _staged(tmp_path, "usersite")
    nss_log = _staged(tmp_path, "nss")
    assert ("STAGED nss: passwd: rise files group: rise files" in nss_log) == (env == "docker"), nss_log
    assert ("STAGED tools: /usr/" in _staged(tmp_path, "tools")) == (env == "docker")
    escaped = []  # every route is checked before the test fails, so one run shows them all
    if marker.exists():
        escaped.append(f"nss: the module reached the host from the verifier: {marker.read_text().strip()}")
    for name in ("nss", "usersite", "tools"):
        r, files = res[name], _read_files(tmp_path, name)
        if r["reward"] != 0.0 or files != {"reward.txt": "0"}:
            escaped.append(f"{name}: reward {r['reward']} ({r['status']}), the verifier's files {files}")
        assert r["verifier"]["isolation"] == "private" and r["verifier"]["isolation_note"] is None
    assert escaped == [], f"{env}: " + "; ".join(escaped)
    for name in ("nss", "usersite", "tools"):
        assert res[name]["status"] == "failed" and res[name]["failure_class"] == "task_failure", res[name]
    honest = res["honest"]
    assert honest["reward"] == 1.0 and not honest["verifier"]["tampered"], honest["verifier"]


@pytest.mark.sandbox
def test_code_planted_for_the_verifier_does_not_run_local(tmp_path):
    _need("local")
    _check(tmp_path, "local")


@pytest.mark.docker
def test_code_planted_for_the_verifier_does_not_run_docker(tmp_path):
    _need("docker")
    _check(tmp_path, "docker")


def test_the_helper_imports_nothing_once_sealed():
    """After the seal every module path would resolve in the sandbox: a missed import fails, naming itself."""
    helper = Path(__file__).resolve().parents[2] / "trials" / "environments" / "verify_enter.py"
    code = (f"import runpy; g = runpy.run_path({str(helper)!r}); g['_seal_imports']()\n"
            "import json, tarfile  # imported before the seal: still there\n"
            "try:\n    import csv\nexcept ImportError as exc:\n    print('REFUSED', exc)\n")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED verify_enter.py imports nothing after entering the sandbox (asked for csv)" in proc.stdout


def test_the_result_tar_names_no_owner_and_follows_no_link(tmp_path, monkeypatch):
    """The parent's tar looks up no user or group name (that would load the sandbox's NSS modules), stores
    symlinks as links, and skips what is not a folder, a file or a link."""
    import tarfile

    from trials.environments import verify_enter

    class Refuse:
        def __getattr__(self, name):
            raise AssertionError(f"a name lookup: {name}")

    monkeypatch.setattr(tarfile, "pwd", Refuse())
    monkeypatch.setattr(tarfile, "grp", Refuse())
    folder = tmp_path / "logs"
    (folder / "sub").mkdir(parents=True)
    (folder / "reward.txt").write_text("0\n")
    (folder / "sub" / "x").write_text("x")
    (folder / "host").symlink_to("/etc")
    os.mkfifo(folder / "fifo")
    os.chown(folder / "reward.txt", 4242, 4343)
    with (tmp_path / "out.tar").open("wb") as out:
        verify_enter._pack(str(folder), out)
    with tarfile.open(tmp_path / "out.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == [".", "host", "reward.txt", "sub", "sub/x"]
    assert members["host"].issym() and members["host"].linkname == "/etc"
    reward = members["reward.txt"]
    assert (reward.uid, reward.gid, reward.uname, reward.gname, reward.size) == (4242, 4343, "", "", 2)


@pytest.mark.parametrize("kind", [pytest.param("local", marks=pytest.mark.sandbox),
                                  pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.parametrize("user", [None, "nobody"])
def test_the_tests_get_a_fresh_home_and_no_user_site(tmp_path, kind, user):
    """The tests' HOME is an empty folder of their own (the agent's /root is still there to check), Python's user
    site is off, and a task's [verifier] env may still name HOME."""
    import asyncio

    from tests.escape.test_reward_forgery import _sandbox
    from trials.environments.verifier import VERIFIER_HOME, run_verifier

    _need(kind)
    task, env = _sandbox(kind, tmp_path)
    (task.path / "tests" / "test.sh").write_text(
        'echo "$HOME $(id -u) $(stat -c %u $HOME) $(ls -A $HOME | wc -l) $PYTHONNOUSERSITE" '
        '"$(cat /root/agent.txt)" > /logs/verifier/env.txt\n')

    async def go(variables):
        await env.start()
        try:
            await env.exec("echo mine > /root/agent.txt; chmod 755 /root", timeout=10)
            out = tmp_path / f"out-{len(variables)}"
            run = await run_verifier(env, task.path / "tests", out, workdir="/app", variables=variables,
                                     timeout=30, user=user)
            assert run.isolation == "private" and run.result.ok, run
            tools.append(getattr(env, "_tools_id", None))
            return (out / "env.txt").read_text().split()
        finally:
            await env.stop()

    tools: list[str | None] = []
    uid = "0" if user is None else str(65534)
    assert asyncio.run(go({})) == [VERIFIER_HOME, uid, uid, "0", "1", "mine"]
    assert asyncio.run(go({"HOME": "/root"}))[0] == "/root"
    if kind == "docker":  # the tests' tools came from a container of their own, gone with the sandbox
        import docker.errors

        from trials.environments.images import docker_client

        assert all(tools), tools
        for cid in tools:
            with pytest.raises(docker.errors.NotFound):
                docker_client().containers.get(cid)


@pytest.mark.docker
def test_with_the_images_tools_the_workdir_and_network_files_stay_the_sandboxs(tmp_path):
    """A working folder under /usr and Docker's /etc/hosts stay the agent's container's (a line the agent added
    is seen; a task without internet has no hostname line to look for), while /usr/bin is the image's (the
    agent's replaced program is not seen)."""
    import asyncio

    from tests.escape.test_reward_forgery import _sandbox
    from trials.environments.verifier import run_verifier

    _need("docker")
    task, env = _sandbox("docker", tmp_path)
    task.config.environment.workdir = env.workdir = "/usr/src/app"
    (task.path / "tests" / "test.sh").write_text(
        'cd /usr/src/app && cat out.txt > /logs/verifier/out.txt; grep -c rise-hosts-marker /etc/hosts '
        '> /logs/verifier/hosts.txt; cat /usr/bin/rise-agent-tool > /logs/verifier/tool.txt 2>&1; true\n')

    async def go():
        await env.start()
        try:
            await env.exec("mkdir -p /usr/src/app && echo agent > /usr/src/app/out.txt && "
                           "echo replaced > /usr/bin/rise-agent-tool && echo '10.9.9.9 rise-hosts-marker' >> /etc/hosts",
                           cwd="/", timeout=10)
            run = await run_verifier(env, task.path / "tests", tmp_path / "out", workdir="/usr/src/app",
                                     variables={}, timeout=30, user=None)
            assert run.isolation == "private" and run.result.ok and run.note is None, run
        finally:
            await env.stop()

    asyncio.run(go())
    read = {p.name: p.read_text().strip() for p in (tmp_path / "out").iterdir()}
    assert read["out.txt"] == "agent" and int(read["hosts.txt"]) >= 1, read
    assert "No such file" in read["tool.txt"], read

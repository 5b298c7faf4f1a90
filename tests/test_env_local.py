"""The local bubblewrap sandbox with the real parts: bwrap, nsenter, tmux, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trials.environments.factory import attach, make_environment
from trials.environments.local import LocalEnvironment, bwrap_available, reap_leftovers
from trials.errors import EnvironmentBuildError, SandboxError, UnsupportedTaskError
from trials.tasks.load import load_task

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed")]
def needs_tmux(fn):
    """Marked `tmux` and skipped without it."""
    return pytest.mark.tmux(pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")(fn))

HELLO = Path(__file__).parent / "data" / "env_tasks" / "hello"
REPO = Path(__file__).resolve().parent.parent


def make_task(root: Path, dockerfile: str | None = None, files: dict[str, str] | None = None,
              allow_internet: bool = False, name: str = "t"):
    """A tiny Harbor task folder under ``root`` loaded with the real task loader."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(f'version = "1.0"\n[task]\nname = "{name}"\n[environment]\n'
                                    f"build_timeout_sec = 30\nallow_internet = {str(allow_internet).lower()}\n")
    (root / "instruction.md").write_text("do it\n")
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    env_dir = root / "environment"
    env_dir.mkdir(exist_ok=True)
    (env_dir / "Dockerfile").write_text(dockerfile or "FROM python:3.11-slim-bookworm\nWORKDIR /app\n")
    for rel, content in (files or {}).items():
        (env_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (env_dir / rel).write_text(content)
    return load_task(root)


@pytest.fixture
async def sandbox(tmp_path):
    env = make_environment("local", load_task(HELLO), tmp_path / "trial", job_id="test-env-local")
    await env.start()
    yield env
    await env.stop()


async def test_runs_commands_with_dockerfile_replayed(sandbox):
    r = await sandbox.exec("pwd; cat /app/run.txt /app/data.txt /app/files/a.txt; echo $APP_MODE; echo $PATH")
    assert r.ok, r
    assert r.stdout.splitlines() == ["/app", "hi from run", "some data", "a", "test",
                                     "/opt/tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    r = await sandbox.exec("command -v python3; python3 -c 'import sys; print(sys.executable, sys.version_info[:2])'")
    assert r.stdout.splitlines() == ["/usr/bin/python3", "/usr/bin/python3 (3, 11)"]
    r = await sandbox.exec("ls -A /root; test -e /work || echo no-work; test -e /root/.pyenv || echo no-pyenv")
    assert r.stdout.split() == ["no-work", "no-pyenv"]
    r = await sandbox.exec("echo out; echo err >&2; exit 3", cwd="/tmp", env={"X": "1"})
    assert (r.returncode, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)


async def test_host_is_read_only_and_root_cannot_remount(sandbox):
    r = await sandbox.exec("touch /usr/rise-x; touch /etc/rise-x; mount -o remount,rw /usr; echo done")
    assert "Read-only file system" in r.stderr and r.stdout == "done\n"
    assert not Path("/usr/rise-x").exists() and not Path("/etc/rise-x").exists()


async def test_files_persist_and_copies_round_trip(sandbox, tmp_path):
    await sandbox.exec("echo one > /app/a.txt")
    assert (await sandbox.exec("cat a.txt")).stdout == "one\n"
    src = tmp_path / "up"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("F")
    (src / "g.txt").write_text("G")
    await sandbox.upload(src, "/tests")
    await sandbox.upload(src / "g.txt", "/solution/renamed.txt")
    r = await sandbox.exec("cat /tests/sub/f.txt /tests/g.txt /solution/renamed.txt")
    assert r.stdout == "FGG"
    await sandbox.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")
    await sandbox.download("/logs/verifier", tmp_path / "verifier")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    await sandbox.download("/app/a.txt", tmp_path / "a.txt")
    assert (tmp_path / "a.txt").read_text() == "one\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.download("/nope", tmp_path / "nope")


@needs_tmux
async def test_tmux_session_survives_between_execs(sandbox):
    r = await sandbox.exec("tmux new-session -d -s main -x 80 -y 24 && tmux send-keys -t main 'echo hi > /app/t' Enter")
    assert r.ok, r
    await asyncio.sleep(0.5)
    r = await sandbox.exec("tmux has-session -t main && cat /app/t")
    assert r.ok and r.stdout == "hi\n", r


@needs_tmux
async def test_an_agent_that_deletes_its_workdir_leaves_the_sandbox_answering(sandbox):
    """The 1.5B typed `rm -rf /app` on the night of 2026-12-07: `env -C /app` then failed every later command, the
    harness took its sandbox for gone and the trial became ⊥ (rerun, never counted). Commands now start in / when
    their folder is gone, so the agent's terminal goes on and the verifier judges what it did."""
    r = await sandbox.exec("tmux new-session -d -s main -x 80 -y 24 && tmux send-keys -t main 'rm -rf /app' Enter")
    assert r.ok, r
    for _ in range(50):
        if not (await sandbox.exec("test -d /app", cwd="/")).ok:
            break
        await asyncio.sleep(0.1)
    r = await sandbox.exec("pwd; tmux has-session -t main && echo session")
    assert r.ok and r.stdout.split() == ["/", "session"], r
    assert (await sandbox.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
    assert (await sandbox.exec("mkdir /app && pwd")).stdout == "/\n"  # and /app again once it is back
    assert (await sandbox.exec("pwd")).stdout == "/app\n"


async def test_no_network_when_the_task_disallows_it(sandbox, tmp_path):
    probe = "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=3)'"
    r = await sandbox.exec(probe)
    assert r.returncode != 0 and "unreachable" in r.stderr.lower()
    # allow_internet = true: its own namespace too, never the host's (tests/test_env_netns.py: what it reaches)
    if shutil.which("slirp4netns") is None:
        return
    open_env = LocalEnvironment(make_task(tmp_path / "net", allow_internet=True), tmp_path / "trial-net")
    await open_env.start()
    try:
        inside = (await open_env.exec("readlink /proc/self/ns/net")).stdout.strip()
        assert inside and inside != os.readlink("/proc/self/ns/net")
    finally:
        await open_env.stop()


async def test_concurrent_sandboxes_never_see_each_other(tmp_path):
    task = load_task(HELLO)
    envs = [LocalEnvironment(task, tmp_path / f"trial{i}", job_id="iso") for i in range(2)]
    async with asyncio.TaskGroup() as tg:
        for e in envs:
            tg.create_task(e.start())
    try:
        for i, e in enumerate(envs):
            await e.exec(f"echo {i} > /app/mine; echo {i} > /tmp/mine; sleep 60 & echo started")
        for i, e in enumerate(envs):
            r = await e.exec("cat /app/mine /tmp/mine; ps -eo args | grep -c '^sleep 60$'")
            assert r.stdout.split() == [str(i), str(i), "1"], r  # own files, own processes only
    finally:
        for e in envs:
            await e.stop()


async def test_timeout_kills_the_whole_group(sandbox):
    t0 = time.monotonic()
    r = await sandbox.exec("sleep 40 & echo started; sleep 50", timeout=1)
    assert r.timed_out and not r.ok and r.returncode == 124 and r.stdout == "started\n"
    assert time.monotonic() - t0 < 5
    r = await sandbox.exec("ps -eo args | grep -cE '^sleep (40|50)$'")
    assert r.stdout.strip() == "0"


async def test_agent_cannot_kill_the_keeper(sandbox):
    await sandbox.exec("kill -9 -1; pkill -9 sleep; true")
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_a_wall_clock_step_does_not_make_a_live_sandbox_look_gone(sandbox, monkeypatch):
    """A snapshotted VM resuming here stepped the wall clock; the identity check then used psutil's create_time
    (the boot time, from the clock, plus the start in ticks), which moved for every process, and four running
    sandboxes were booked ⊥ at once. Identity is now the start in ticks alone."""
    import psutil
    import psutil._pslinux as pslinux

    from trials.environments.local import owner_alive, owner_tag

    tag, before = owner_tag(), psutil.Process(sandbox.pid).create_time()
    real = pslinux.boot_time
    monkeypatch.setattr(pslinux, "boot_time", lambda: real() + 3600.0)  # what the step does to psutil's view
    assert psutil.Process(sandbox.pid).create_time() == pytest.approx(before + 3600.0)
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    assert owner_alive(tag)  # so reap_leftovers keeps a live job's sandboxes


async def test_exec_as_another_user(sandbox):
    r = await sandbox.exec("id -u", user="nobody")
    assert r.stdout.strip() == "65534"
    with pytest.raises(SandboxError):
        await sandbox.exec("true", user="no-such-user-xyz")


async def test_unsupported_dockerfile_is_refused_with_the_line(tmp_path):
    task = make_task(tmp_path / "t", "FROM python:3.11-slim-bookworm\nWORKDIR /app\nUSER app\n")
    env = LocalEnvironment(task, tmp_path / "trial")
    with pytest.raises(UnsupportedTaskError) as exc:
        await env.start()
    assert exc.value.path.endswith("Dockerfile:3") and exc.value.key == "USER"
    assert "--env docker" in str(exc.value)
    task = make_task(tmp_path / "t2", "FROM x\nCOPY a.txt /usr/local/bin/a\n", {"a.txt": "a"})
    with pytest.raises(UnsupportedTaskError, match="read-only"):
        await LocalEnvironment(task, tmp_path / "trial2").start()


async def test_failing_run_is_a_build_error_with_its_log(tmp_path):
    task = make_task(tmp_path / "t", "FROM x\nWORKDIR /app\nRUN echo about to fail && pip install requests-nope\n")
    env = LocalEnvironment(task, tmp_path / "trial")
    with pytest.raises(EnvironmentBuildError) as exc:
        await env.start()
    log = Path(exc.value.log_path)
    assert exc.value.cause == "image_build" and log == tmp_path / "trial" / "sandbox" / "build.log"
    assert "about to fail" in log.read_text() and "Dockerfile:3" in str(exc.value)
    assert env.pid is None  # the keeper was stopped


async def test_attach_from_another_process_and_keeper_outlives_it(sandbox):
    """A harness runs in another process: it attaches, starts tmux, exits; the sandbox is still there."""
    script = textwrap.dedent("""
        import asyncio, json, sys
        from trials.environments.factory import attach
        async def main():
            env = attach(json.loads(sys.argv[1]))
            r = await env.exec("echo from-harness > /app/h.txt; tmux new-session -d -s h")
            await env.stop()  # not the owner: must not end the sandbox
            print(r.returncode)
        asyncio.run(main())
    """)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, json.dumps(sandbox.handle()),
                                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and out.decode().strip() == "0", err.decode()
    r = await sandbox.exec("cat /app/h.txt" + ("; tmux has-session -t h && echo tmux-ok" if shutil.which("tmux")
                                                else ""))
    assert r.stdout.startswith("from-harness\n"), r
    attached = attach(sandbox.handle())
    assert (await attached.exec("echo same")).stdout == "same\n"


async def test_stop_is_idempotent_and_cleans_up(tmp_path):
    env = LocalEnvironment(load_task(HELLO), tmp_path / "trial")
    await env.start()
    handle = env.handle()
    await env.stop()
    await env.stop()
    assert not (tmp_path / "trial" / "sandbox" / "root").exists()
    assert not Path(f"/proc/{handle['pid']}").exists()
    with pytest.raises(SandboxError):
        await LocalEnvironment.attach(handle).exec("true")


def test_keeper_dies_with_its_owner(tmp_path):
    """If the runner is SIGKILLed, its sandboxes go with it (no leftovers to reap)."""
    script = textwrap.dedent(f"""
        import asyncio, json, time
        from trials.environments.local import LocalEnvironment
        from trials.tasks.load import load_task
        async def main():
            env = LocalEnvironment(load_task({str(HELLO)!r}), {str(tmp_path / 'trial')!r}, job_id="doomed")
            await env.start()
            print(json.dumps(env.handle()), flush=True)
            time.sleep(120)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        handle = json.loads(proc.stdout.readline())
        assert Path(f"/proc/{handle['pid']}").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{handle['pid']}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{handle['pid']}").exists()
    assert reap_leftovers("doomed") == 0

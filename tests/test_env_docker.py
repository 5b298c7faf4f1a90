"""The docker sandbox against the real engine and the local base image (skips when either is missing)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trials.environments.images import BASE_IMAGE, docker_available
from trials.errors import EnvironmentBuildError
from trials.tasks.load import load_task

from .test_env_local import HELLO, REPO, make_task


def _base_present() -> bool:
    if not docker_available():
        return False
    from trials.environments.images import docker_client, image_exists

    return image_exists(docker_client(), BASE_IMAGE)


pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not docker_available(), reason="no Docker engine reachable"),
              pytest.mark.skipif(not _base_present(),
                                 reason=f"no {BASE_IMAGE} image (build it with `rise images base`)")]


@pytest.fixture
async def container(tmp_path):
    from trials.environments.factory import make_environment

    env = make_environment("docker", load_task(HELLO), tmp_path / "trial", job_id="test-env-docker")
    await env.start()
    yield env
    await env.stop()


async def test_build_exec_and_limits(container, tmp_path):
    assert container.image.startswith("rise-task-hello:")
    assert (tmp_path / "trial" / "build.log").exists()
    r = await container.exec("pwd; cat /app/run.txt /app/data.txt /app/files/a.txt; echo $APP_MODE; python3 -V")
    assert r.ok and r.stdout.splitlines() == ["/app", "hi from run", "some data", "a", "test", "Python 3.11.2"], r
    r = await container.exec("echo err >&2; exit 4", cwd="/tmp", env={"X": "y"})
    assert (r.returncode, r.stderr) == (4, "err\n")
    attrs = container.client.containers.get(container.container_id).attrs
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert attrs["HostConfig"]["Memory"] == 2048 * 1024 * 1024 and attrs["HostConfig"]["NanoCpus"] == 10**9
    labels = attrs["Config"]["Labels"]
    assert labels["rise.job"] == "test-env-docker" and labels["rise.trial"] == "trial"


async def test_upload_download_tmux_timeout(container, tmp_path):
    src = tmp_path / "up"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("F")
    await container.upload(src, "/tests")
    await container.upload(src / "sub" / "f.txt", "/solution/g.txt")
    assert (await container.exec("cat /tests/sub/f.txt /solution/g.txt")).stdout == "FF"
    await container.exec("echo 1 > /logs/verifier/reward.txt")
    await container.download("/logs/verifier", tmp_path / "verifier")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    with pytest.raises(FileNotFoundError):
        await container.download("/nope", tmp_path / "nope")
    assert (await container.exec("tmux new-session -d -s main")).ok
    assert (await container.exec("tmux has-session -t main")).ok
    t0 = time.monotonic()
    r = await container.exec("sleep 30 & sleep 40", timeout=1)
    assert r.timed_out and r.returncode == 124 and time.monotonic() - t0 < 10
    await container.exec("kill -9 -1; true")  # an agent cannot end its sandbox
    assert (await container.exec("echo alive")).stdout == "alive\n"
    # nor make it look gone by deleting its workdir (`docker exec -w /app` fails then): commands start in /
    assert (await container.exec("rm -rf /app")).ok
    r = await container.exec("pwd; tmux new-session -d -s after && tmux has-session -t after && echo session")
    assert r.ok and r.stdout.split() == ["/", "session"], r
    assert (await container.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"


async def test_cached_image_is_reused_and_attach_works(container, tmp_path):
    from trials.environments.docker import DockerEnvironment
    from trials.environments.factory import attach

    again = DockerEnvironment(load_task(HELLO), tmp_path / "trial2", job_id="test-env-docker")
    await again.start()
    try:
        assert again.image == container.image
        assert "cached image" in (tmp_path / "trial2" / "build.log").read_text()
    finally:
        await again.stop()
        await again.stop()
    other = attach(json.loads(json.dumps(container.handle())))
    assert (await other.exec("echo via-handle")).stdout == "via-handle\n"
    await other.stop()  # not the owner
    assert (await container.exec("true")).ok


async def test_broken_dockerfile_is_a_build_error_with_log(tmp_path):
    from trials.environments.docker import DockerEnvironment

    task = make_task(tmp_path / "broken", f"FROM python:3.11-slim-bookworm\nRUN echo marker-{time.time_ns()} "
                     "&& exit 7\n", name="broken")
    env = DockerEnvironment(task, tmp_path / "trial", job_id="test-env-docker")
    with pytest.raises(EnvironmentBuildError) as exc:
        await env.start()
    log = Path(exc.value.log_path)
    assert log == tmp_path / "trial" / "build.log" and "marker-" in log.read_text()
    assert "FROM python:3.11-slim-bookworm -> rise-base:bookworm" in log.read_text()


def test_reap_removes_containers_of_a_killed_job(tmp_path):
    from trials.environments.docker import reap_leftovers
    from trials.environments.images import docker_client

    job = f"reap-{time.time_ns()}"
    script = textwrap.dedent(f"""
        import asyncio, json, time
        from trials.environments.docker import DockerEnvironment
        from trials.tasks.load import load_task
        async def main():
            env = DockerEnvironment(load_task({str(HELLO)!r}), {str(tmp_path / 'trial')!r}, job_id={job!r})
            await env.start()
            print(env.container_id, flush=True)
            time.sleep(120)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        cid = proc.stdout.readline().strip()
        assert reap_leftovers(job) == 0  # its owner still runs: kept
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    client = docker_client()
    assert client.containers.list(all=True, filters={"label": f"rise.job={job}"})[0].id == cid
    assert reap_leftovers(job) == 1
    assert client.containers.list(all=True, filters={"label": f"rise.job={job}"}) == []


async def test_concurrent_starts_build_once(tmp_path):
    from trials.environments.docker import DockerEnvironment

    task = make_task(tmp_path / "c", f"FROM python:3.11-slim-bookworm\nRUN echo {time.time_ns()} > /stamp\n",
                     name="concurrent")
    envs = [DockerEnvironment(task, tmp_path / f"trial{i}", job_id="test-env-docker") for i in range(2)]
    try:
        async with asyncio.TaskGroup() as tg:
            for e in envs:
                tg.create_task(e.start())
        stamps = [(await e.exec("cat /stamp")).stdout for e in envs]
        assert envs[0].image == envs[1].image and stamps[0] == stamps[1]
    finally:
        for e in envs:
            await e.stop()
        envs[0].client.images.remove(envs[0].image, force=True)


def test_base_image_is_idempotent_and_cli_lists_it():
    from typer.testing import CliRunner

    from rise.cli import app
    from trials.environments.images import docker_client, ensure_base_image

    client = docker_client()
    t0 = time.monotonic()
    assert ensure_base_image(client=client) == client.images.get(BASE_IMAGE).id
    assert time.monotonic() - t0 < 5  # present: no debootstrap
    result = CliRunner().invoke(app, ["images", "list"])
    assert result.exit_code == 0 and BASE_IMAGE in result.output, result.output

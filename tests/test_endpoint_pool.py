"""Endpoint pools over real HTTP: spreading, taking a dead replica out, and a grid that survives one.

The grid test runs the seed harness (real local sandbox, real tmux) against two scripted model servers, each
its own process. Replica A answers its first chat request by announcing it and then never answering; the
test then ``kill -9``s A. That trial becomes ⊥ ``model_unreachable``, A fails its probe and is taken out,
the trial runs again on B, and every later trial goes to B: the grid completes. Events, not timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from monitor.agents import resolve_agent
from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply
from trials.endpoints.pool import EndpointPool
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available
from trials.executors.config import ExecutorConfig
from trials.grid import run_job
from trials.results import JobConfig, TrialResult

REPO = Path(__file__).resolve().parent.parent
HELLO = "printf 'Hello, world!\\n' > /app/hello.txt\n"


def scripted_model(body: dict) -> str:
    """Solve hello-file on the first turn, claim completion on every later one."""
    if any(m["role"] == "assistant" for m in body["messages"]):
        return reply(analysis="done", plan="finish", complete=True)
    return reply(analysis="solve", plan="write it", commands=[(HELLO, 0.3)])


def test_pool_spreads_by_least_outstanding_and_takes_a_dead_replica_out():
    with ScriptedServer(scripted_model) as a, ScriptedServer(scripted_model) as b:
        pool = EndpointPool([a.base_url, b.base_url], probe_timeout_sec=2.0, recheck_sec=0.0)

        async def scenario():
            first, second, third = await pool.acquire(), await pool.acquire(), await pool.acquire()
            assert (first.base_url, second.base_url) == (a.base_url.rstrip("/"), b.base_url.rstrip("/"))
            assert third is first  # equal load: the first replica
            pool.release(second)
            assert await pool.acquire() is second  # now the least loaded
            assert await pool.report(first, "task_failure") is False  # not the replica's fault
            assert await pool.report(first, "model_unreachable") is True and first.in_service  # still answers
            return first

        first = asyncio.run(scenario())
        a.stop()
        assert asyncio.run(pool.report(first, "model_unreachable")) and not first.in_service
        assert [s["in_service"] for s in pool.status()] == [False, True]
        # with recheck_sec 0 a replica that answers again comes back; this one does not
        assert asyncio.run(pool.acquire()).base_url == b.base_url.rstrip("/")
    assert EndpointPool.of(EndpointSpec(base_url="http://x/v1", model="m"), []) is None
    with pytest.raises(ValueError, match="at least one"):
        EndpointPool([])


def test_a_replica_being_probed_after_a_lost_trial_gets_no_new_trial():
    """The race CI met: a trial ended ⊥ on A, and while A's probe was still out, the next trial was routed to A
    (its load had just dropped) and was lost too. A reported replica is suspect from the report on."""
    pool = EndpointPool(["http://a/v1", "http://b/v1"], recheck_sec=3600.0)
    gate, verdict = asyncio.Event(), {"a": False}

    async def probe(replica):  # the probe is in flight until the test opens the gate
        await gate.wait()
        return verdict[replica.base_url[7]]

    pool.probe = probe

    async def scenario():
        a = await pool.acquire()
        assert a.base_url == "http://a/v1"
        pool.release(a)
        reporting = asyncio.create_task(pool.report(a, "model_unreachable"))
        await asyncio.sleep(0)  # the report runs up to its probe
        routed = [(await pool.acquire()).base_url for _ in range(2)]
        gate.set()
        assert await reporting is True
        return routed, a

    routed, a = asyncio.run(scenario())
    assert routed == ["http://b/v1", "http://b/v1"] and not a.in_service
    # a replica whose probe answers is back in service after its report
    pool = EndpointPool(["http://a/v1", "http://b/v1"])
    gate.set()
    verdict["a"] = True
    pool.probe = probe
    first = asyncio.run(pool.acquire())
    pool.release(first)
    assert asyncio.run(pool.report(first, "model_server")) is True and first.in_service


def _serve(hang_flag: Path | None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.test_endpoint_pool", "--hang-flag", str(hang_flag or "")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    assert line.startswith("serving "), line
    proc.base_url = line.split()[1]
    return proc


@pytest.mark.sandbox
@pytest.mark.tmux
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed")
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_grid_completes_on_the_other_replica_when_one_is_killed_mid_grid(tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(REPO / "data" / "starter" / "hello-file", tasks / "hello-file")
    flag = tmp_path / "a-is-holding-a-request"
    a, b = _serve(flag), _serve(None)
    killer_done = threading.Event()

    def kill_a_once_it_holds_a_request() -> None:
        deadline = time.monotonic() + 120
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(a.pid, signal.SIGKILL)
        killer_done.set()

    killer = threading.Thread(target=kill_a_once_it_holds_a_request, daemon=True)
    killer.start()
    try:
        config = JobConfig(job_id="pool", tasks_dir=str(tasks), task_names=["hello-file"], agent=resolve_agent("seed"),
                           env_kind="local", r=4, concurrency=2,
                           endpoint=EndpointSpec(base_url=a.base_url, model="scripted"),
                           settings={"model.max_attempts": 2, "model.retry_wait_min_sec": 0.2,
                                     "model.retry_wait_max_sec": 0.5})
        res = asyncio.run(run_job(config, tmp_path / "job", progress=False,
                                  executor=ExecutorConfig(kind="local", replicas=[b.base_url])))
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
    assert killer_done.is_set() and flag.exists(), "replica A never received a request"
    job = tmp_path / "job"
    assert res.complete and res.metrics["pass_at_1"] == 1.0, res.model_dump_json()
    lost = sorted(job.glob("*.attempt-*"))
    assert len(lost) == 1  # the one trial A was holding; later trials never went to A
    assert TrialResult.load(lost[0] / "result.json").infra_cause == "model_unreachable"
    assert json.loads((lost[0] / "config.json").read_text())["endpoint"]["base_url"] == a.base_url
    for k in range(1, 5):
        cell = job / f"hello-file__r{k}"
        assert TrialResult.load(cell / "result.json").status == "passed"
        assert json.loads((cell / "config.json").read_text())["endpoint"]["base_url"] == b.base_url


def main() -> int:
    """A scripted model server process: ``--hang-flag PATH`` makes it announce its first chat request by
    creating PATH and then never answer it (a replica that stops answering)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-flag", default="")
    args = parser.parse_args()
    hung = threading.Event()

    def respond(body: dict) -> str:
        if args.hang_flag and not hung.is_set():
            hung.set()
            Path(args.hang_flag).touch()
            threading.Event().wait()  # hold the request until the process is killed
        return scripted_model(body)

    srv = ScriptedServer(respond, model="scripted").start()
    print(f"serving {srv.base_url}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

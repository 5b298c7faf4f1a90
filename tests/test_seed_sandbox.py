"""The seed harness with the real parts: the local bubblewrap sandbox, tmux inside it, the trial runner, a
starter task's own verifier, and real HTTP to a scripted model."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply, run_agent
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import LocalEnvironment, bwrap_available
from trials.tasks.load import load_task

pytestmark = [pytest.mark.sandbox, pytest.mark.tmux,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

REPO = Path(__file__).resolve().parent.parent
HELLO = REPO / "data" / "starter" / "hello-file"
DONE = reply(analysis="done", plan="finish", complete=True)


def last_user(body: dict) -> str:
    return body["messages"][-1]["content"]


@pytest.fixture
async def sandbox(tmp_path):
    env = LocalEnvironment(load_task(HELLO), tmp_path / "trial", job_id="test-seed-sandbox")
    await env.start()
    yield env
    await env.stop()


async def test_scripted_model_solves_a_starter_task_through_the_runner(tmp_path):
    """rise's own trial runner starts the sandbox, runs the seed harness in its own process, then the task's
    test.sh: the reward is 1 and the trial folder holds the full trajectory."""
    from monitor.agents import resolve_agent
    from trials.runner import run_trial

    solve = reply(analysis="empty dir", plan="write the file",
                  commands=[("printf 'Hello, world!\\n' > /app/hello.txt\n", 0.2), ("cat /app/hello.txt\n", 0.2)])
    with ScriptedServer([solve, DONE, DONE]) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted")
        result = await run_trial(load_task(HELLO), resolve_agent("seed"), endpoint, tmp_path / "hello-file__r1",
                                 "local", "test-seed-e2e", agent_timeout_sec=60)
    trial = tmp_path / "hello-file__r1"
    outcome = json.loads((trial / "agent" / "agent_result.json").read_text())
    assert outcome["status"] == "completed", (outcome, (trial / "agent" / "stdout.log").read_text()[-3000:])
    assert result.status == "passed", result
    assert len(srv.requests) == 3
    assert "Hello, world!" in last_user(srv.requests[1])  # the cat output came back as new output
    data = json.loads((trial / "agent" / "trajectory.json").read_text())
    assert [s["source"] for s in data["steps"]] == ["user", "agent", "agent", "agent"]
    assert data["steps"][1]["tool_calls"][0]["arguments"]["keystrokes"].startswith("printf")
    assert data["final_metrics"]["extra"]["status"] == "completed"
    assert (trial / "agent" / "pane.log").is_file()


async def test_copy_named_harness_runs_as_a_plain_module_subprocess(tmp_path, sandbox):
    """A copy of the package named ``harness`` (as in an experiment repository) runs as ``python -m harness
    --spec`` without the monitor, attaching to a sandbox another process owns."""
    import asyncio
    import os

    from trials.harness_api import AgentOutcome, TrialSpec

    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    with ScriptedServer([reply(commands=[("echo hi > /app/hi.txt\n", 0.2)]), DONE, DONE]) as srv:
        spec = TrialSpec(trial_id="plain", task_name="hello-file", instruction="say hi", env=sandbox.handle(),
                         endpoint=EndpointSpec(base_url=srv.base_url, model="scripted"), agent_dir=str(agent_dir),
                         timeout_sec=60)
        spec.dump(agent_dir / "trial_spec.json")
        shutil.copytree(REPO / "harness_seed", tmp_path / "pkgs" / "harness",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkgs"), str(REPO)])}
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "harness", "--spec",
                                                    str(agent_dir / "trial_spec.json"), cwd=tmp_path, env=env)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert json.loads((agent_dir / "trajectory.json").read_text())["agent"]["extra"]["package"] == "harness"
    outcome = AgentOutcome.model_validate_json((agent_dir / "agent_result.json").read_text())
    assert outcome.status == "completed" and outcome.episodes == 3 and outcome.cost.generator.calls == 3
    assert (await sandbox.exec("cat /app/hi.txt")).stdout == "hi\n"


async def test_never_returning_command_nonblocking_duration_rule(tmp_path, sandbox):
    """A command that never returns: the agent waits only the requested duration, sees the command still
    running, and can interrupt it; the run does not hang."""
    script = [reply(commands=[("sleep 1000\n", 1.0)]), reply(commands=[("C-c", 0.3)]), DONE, DONE]
    t0 = time.monotonic()
    agent, srv, status = await run_agent(script, tmp_path, env=sandbox,
                                         **{"tmux.pane_log": "/logs/agent/pane.log"})
    assert status == "completed" and time.monotonic() - t0 < 30
    still_running = last_user(srv.requests[1])
    assert still_running.startswith("New Terminal Output:\n") and "sleep 1000" in still_running
    assert "^C" in last_user(srv.requests[2])
    assert (agent.agent_dir / "pane.log").is_file()


async def test_requested_duration_is_capped(tmp_path, sandbox):
    script = [reply(commands=[("sleep 1000\n", 600.0)]), reply(commands=[("C-c", 0.1)]), DONE, DONE]
    t0 = time.monotonic()
    agent, _, status = await run_agent(script, tmp_path, env=sandbox,
                                       **{"terminus.max_command_duration_sec": 1.5})
    assert status == "completed" and time.monotonic() - t0 < 30
    assert json.loads(agent.trajectory.path.read_text())["steps"][1]["extra"]["timings"]["exec_sec"] < 10


async def test_never_returning_command_blocking_mode_gives_the_timeout_message(tmp_path, sandbox):
    script = [reply(commands=[("sleep 1000\n", 0.1), ("echo never-sent\n", 0.1)]), reply(commands=[("C-c", 0.3)]),
              DONE, DONE]
    t0 = time.monotonic()
    agent, srv, status = await run_agent(script, tmp_path, env=sandbox,
                                         **{"tmux.blocking": True, "tmux.blocking_timeout_sec": 2.0})
    assert status == "completed" and time.monotonic() - t0 < 30
    message = last_user(srv.requests[1])
    assert message.startswith("The previous command:\nsleep 1000\n\ndid not finish within 2 seconds.")
    assert "never-sent" not in message  # commands after a timeout are not sent
    step = json.loads(agent.trajectory.path.read_text())["steps"][1]
    assert step["extra"]["timed_out"] is True


async def test_sigterm_still_leaves_outcome_and_trajectory(tmp_path, sandbox):
    """The runner's SIGTERM (timeout) ends the harness cleanly: agent_result.json says ``terminated`` and the
    trajectory of the episodes so far is on disk."""
    import asyncio
    import signal

    from trials.harness_api import AgentOutcome, TrialSpec

    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    with ScriptedServer([reply(commands=[("sleep 1000\n", 50.0)]), DONE, DONE]) as srv:
        spec = TrialSpec(trial_id="term", task_name="hello-file", instruction="wait", env=sandbox.handle(),
                         endpoint=EndpointSpec(base_url=srv.base_url, model="scripted"), agent_dir=str(agent_dir),
                         timeout_sec=120)
        spec.dump(agent_dir / "trial_spec.json")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "harness_seed", "--spec",
                                                    str(agent_dir / "trial_spec.json"), cwd=REPO)
        for _ in range(100):  # until the first reply is being acted on
            await asyncio.sleep(0.1)
            if srv.requests:
                break
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 1
    outcome = AgentOutcome.model_validate_json((agent_dir / "agent_result.json").read_text())
    assert outcome.status == "error" and outcome.error_kind == "terminated"
    data = json.loads((agent_dir / "trajectory.json").read_text())
    assert data["steps"][0]["source"] == "user" and data["final_metrics"]["extra"]["status"] == "terminated"


async def test_an_agent_that_deletes_its_workdir_fails_its_task_not_the_infrastructure(tmp_path):
    """The 1.5B typed `rm -rf /app` on the night of 2026-12-07 and its trial ended ⊥ (sandbox): the harness's
    tmux calls could no longer enter /app. Through the real runner the agent now goes on (its next reply's keys
    reach the terminal), the verifier runs from / and the trial is the agent's failure, rerun by nothing."""
    from monitor.agents import resolve_agent
    from trials.runner import run_trial

    wreck = reply(analysis="start over", plan="remove it", commands=[("rm -rf /app\n", 0.3)])
    after = reply(analysis="gone", plan="look", commands=[("pwd; ls /\n", 0.3)])
    with ScriptedServer([wreck, after, DONE, DONE]) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted")
        result = await run_trial(load_task(HELLO), resolve_agent("seed"), endpoint, tmp_path / "hello-file__r1",
                                 "local", "test-seed-wreck", agent_timeout_sec=60)
    trial = tmp_path / "hello-file__r1"
    assert result.status == "failed" and result.infra_cause is None, (
        result, (trial / "agent" / "stdout.log").read_text()[-3000:])
    assert result.verifier.returncode not in (None, 126), result.verifier  # the tests ran, from /
    assert len(srv.requests) >= 3  # the agent went on after deleting its workdir

"""Who is to blame when the terminal cannot be read (issue 10, issue 16 item 6): a transient capture failure
is retried, a lasting one is tolerated, a session the agent ended is its outcome, and only a sandbox that is
gone is an infrastructure error. Real tmux on the host (private socket); the failures are injected into the
stand-in sandbox."""

from __future__ import annotations

import json

import pytest

from harness_seed import tmux
from tests.test_seed_support import HAVE_TMUX, HostEnv, reply, run_agent
from trials.environments.base import ExecResult

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(not HAVE_TMUX, reason="tmux is not installed")]

DONE = reply(analysis="done", plan="finish", complete=True)


class FlakyEnv(HostEnv):
    """``capture-pane`` fails the next ``fail_captures`` times (a timeout when ``timeouts``); after a command
    containing ``gone_after`` was typed, the whole sandbox stops running anything."""

    def __init__(self, root, fail_captures: int = 0, timeouts: bool = False, gone_after: str | None = None):
        super().__init__(root)
        self.fail_captures, self.timeouts, self.gone_after, self.gone = fail_captures, timeouts, gone_after, False
        self.failed = 0

    async def exec(self, cmd, cwd=None, env=None, timeout=None, user=None) -> ExecResult:
        if self.gone:
            return ExecResult(returncode=1, stderr="nsenter: cannot open /proc/4242/ns/mnt")
        if "capture-pane" in cmd and self.failed < self.fail_captures:
            self.failed += 1
            if self.timeouts:
                return ExecResult(returncode=124, timed_out=True)
            return ExecResult(returncode=1, stderr="lost server")
        result = await super().exec(cmd, cwd, env, timeout, user)
        if self.gone_after and "send-keys" in cmd and self.gone_after in cmd:
            self.gone = True
        return result

    async def stop(self) -> None:
        """Stop the test's private tmux server even when the test made the sandbox look gone."""
        self.gone, self.fail_captures = False, 0
        await super().stop()


def steps(agent) -> list[dict]:
    return json.loads(agent.trajectory.path.read_text())["steps"]


@pytest.mark.parametrize("timeouts", [False, True])
async def test_a_transient_capture_failure_is_retried(tmp_path, timeouts):
    env = FlakyEnv(tmp_path / "host", fail_captures=2, timeouts=timeouts)
    script = [reply(commands=[("echo visible-$((6*7))\n", 0.2)]), DONE, DONE]
    _, srv, status = await run_agent(script, tmp_path, env=env, **{"tmux.capture_retry_wait_sec": 0.01})
    await env.stop()
    assert status == "completed", status
    assert env.failed == 2
    assert "visible-42" in srv.requests[1]["messages"][-1]["content"]


async def test_a_lasting_capture_failure_is_told_to_the_model_not_fatal(tmp_path):
    env = FlakyEnv(tmp_path / "host")
    script = [reply(commands=[("echo one\n", 0.1)]), DONE, DONE]

    def respond(body: dict) -> str:  # the first screen reads fine; every capture after the first reply fails
        env.fail_captures = env.failed + 100
        return script[min(len(assistant_turns(body)), 2)]

    _, srv, status = await run_agent(respond, tmp_path, env=env, **{"tmux.capture_retry_wait_sec": 0.0})
    await env.stop()
    assert status == "completed", status
    assert srv.requests[1]["messages"][-1]["content"].startswith("The terminal could not be read this time")


def assistant_turns(body: dict) -> list:
    return [m for m in body["messages"] if m["role"] == "assistant"]


async def test_exit_ends_the_run_as_the_agents_outcome(tmp_path):
    script = [reply(commands=[("echo before\n", 0.1)]), reply(commands=[("exit\n", 0.3)]), DONE]
    agent, srv, status = await run_agent(script, tmp_path)
    assert status == "session_ended"
    assert len(srv.requests) == 2
    assert [s["source"] for s in steps(agent)] == ["user", "agent", "agent"]
    assert steps(agent)[2]["extra"]["session_ended"] is True


async def test_a_sandbox_that_is_gone_stays_infrastructure_and_keeps_the_step(tmp_path):
    env = FlakyEnv(tmp_path / "host", gone_after="poweroff")
    script = [reply(commands=[("echo poweroff\n", 0.1)]), DONE, DONE]
    agent, srv, status = await run_agent(script, tmp_path, env=env)
    await env.stop()
    assert isinstance(status, tmux.TmuxError) and not isinstance(status, tmux.CaptureFailed), status
    assert status.cause == "sandbox"
    assert len(srv.requests) == 1
    last = steps(agent)[-1]
    assert last["source"] == "agent" and "TmuxError" in last["extra"]["error"]


async def test_a_summary_does_without_the_screen_when_it_cannot_be_read(tmp_path):
    from types import SimpleNamespace

    from harness_seed import loop
    from tests.test_seed_support import fast_settings

    env = FlakyEnv(tmp_path / "host")
    session = tmux.TmuxSession(env, fast_settings(tmp_path, **{"tmux.capture_retry_wait_sec": 0.0}).tmux)
    try:
        await session.start()
        env.fail_captures = env.failed + 100
        assert await loop.Agent.visible_screen(SimpleNamespace(session=session)) == ""
        with pytest.raises(tmux.CaptureFailed):
            await session.capture()
    finally:
        await env.stop()

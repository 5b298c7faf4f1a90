"""A session the agent itself ends (it typed ``exit``) is the agent's outcome, not an infrastructure error:
the verifier still runs and every step that happened stays in the trajectory. Real tmux, the real local
(bubblewrap) sandbox, the real trial runner, a scripted model over real HTTP."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available
from trials.tasks.load import load_task

pytestmark = [pytest.mark.sandbox, pytest.mark.tmux,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

HELLO = Path(__file__).resolve().parent.parent / "data" / "starter" / "hello-file"


async def _trial(tmp_path: Path, script: list[str], name: str):
    from monitor.agents import resolve_agent
    from trials.runner import run_trial

    with ScriptedServer(script) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted")
        result = await run_trial(load_task(HELLO), resolve_agent("seed"), endpoint, tmp_path / name, "local",
                                 "test-seed-exit", agent_timeout_sec=60)
    agent_dir = tmp_path / name / "agent"
    outcome = json.loads((agent_dir / "agent_result.json").read_text())
    steps = json.loads((agent_dir / "trajectory.json").read_text())["steps"]
    return result, outcome, steps, srv


async def test_agent_typing_exit_is_scored_by_the_verifier_not_infra(tmp_path):
    """The model types ``exit`` in its second reply: the shell (and tmux) end. The trial is ``failed`` (the
    file was never written), not ⊥; the outcome names the reason; both agent steps are in the trajectory."""
    script = [reply(analysis="look", plan="list", commands=[("ls /app\n", 0.2)]),
              reply(analysis="leave", plan="quit the shell", commands=[("exit\n", 0.3)])]
    result, outcome, steps, srv = await _trial(tmp_path, script, "exit__r1")
    assert result.status == "failed", result
    assert result.infra_cause is None
    assert outcome["error_kind"] == "session_ended" and outcome["error"] == "session ended by the agent"
    assert result.agent_error == "session ended by the agent"
    assert len(srv.requests) == 2  # nothing was asked after the session ended
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]
    assert steps[2]["tool_calls"][0]["arguments"]["keystrokes"] == "exit\n"
    assert steps[2]["extra"]["session_ended"] is True


async def test_agent_that_solves_then_exits_passes(tmp_path):
    """What the agent left behind decides: the file is written, then the shell is ended; the verifier runs
    and the trial passes."""
    script = [reply(analysis="write", plan="write then quit",
                    commands=[("printf 'Hello, world!\\n' > /app/hello.txt\n", 0.2), ("exit\n", 0.3)])]
    result, outcome, steps, _ = await _trial(tmp_path, script, "exit__r2")
    assert result.status == "passed", result
    assert outcome["error_kind"] == "session_ended"
    assert [s["source"] for s in steps] == ["user", "agent"]


async def test_exit_followed_by_more_keys_in_the_same_reply_is_the_agents_outcome(tmp_path):
    """Seen with the bundled 1.5B: ``exit`` then another command in one reply. The shell and tmux end after the
    first; sending the second fails. That is still the agent ending its session (``failed``, scored by the
    verifier), not a sandbox failure: a ⊥ would be rerun, and a grid would count only the reruns."""
    script = [reply(analysis="done", plan="leave, then restart a service",
                    commands=[("exit\n", 0.3), ("sudo systemctl restart app\n", 0.1)])]
    result, outcome, steps, srv = await _trial(tmp_path, script, "exit__r3")
    assert result.status == "failed", result
    assert result.infra_cause is None
    assert outcome["error_kind"] == "session_ended"
    assert len(srv.requests) == 1
    assert steps[1]["extra"]["session_ended"] is True

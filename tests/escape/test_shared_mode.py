"""The shared verifier mode (a remote Docker engine, a runner that is not root) against background writers (issue
40, item 2): nothing separates the tests from the agent's processes there, so every one of them is stopped before
the tests run, and checked.

The agent leaves a writer that rewrites ``/logs/verifier/reward.txt`` = 1 every 10 ms (as root, in its own
session) and a sleeper as another user; the tests write 0, wait, and list the processes they can see. The real
local and Docker sandboxes, forced into the shared mode.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.escape.test_reward_forgery import _need, _sandbox
from trials.environments.verifier import run_verifier

LEAVE = r"""cat > /tmp/forge.sh <<'EOF'
while :; do mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.01; done
EOF
setsid nohup bash /tmp/forge.sh >/dev/null 2>&1 </dev/null &
setsid nohup setpriv --reuid=65534 --regid=65534 --clear-groups sleep 300 >/dev/null 2>&1 </dev/null &
sleep 0.3"""

TESTS = r"""echo 0 > /logs/verifier/reward.txt
sleep 1
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done > /logs/verifier/ps.txt
"""


def _shared(env):
    async def shared_only():
        return "test: shared mode"

    env.verifier_target = shared_only  # the sandbox as a remote engine or a non-root runner would leave it
    return env


@pytest.mark.parametrize("kind", [pytest.param("local", marks=pytest.mark.sandbox),
                                  pytest.param("docker", marks=pytest.mark.docker)])
def test_the_agents_processes_are_gone_before_a_shared_run(tmp_path: Path, kind: str):
    _need(kind)
    task, env = _sandbox(kind, tmp_path)
    (task.path / "tests" / "test.sh").write_text(TESTS)
    env = _shared(env)

    async def go():
        await env.start()
        try:
            left = await env.exec(LEAVE, timeout=10)
            assert left.ok, left
            return await run_verifier(env, task.path / "tests", tmp_path / "out", workdir="/app", variables={},
                                      timeout=30, user=None)
        finally:
            await env.stop()

    run = asyncio.run(go())
    assert run.isolation == "shared" and run.result.ok, run
    reward, seen = ((tmp_path / "out" / name).read_text() for name in ("reward.txt", "ps.txt"))
    assert reward == "0\n", f"the writer's reward was read: {reward!r}; the tests saw {seen}"
    assert "forge.sh" not in seen and "sleep 300" not in seen, seen  # nothing of the agent ran beside the tests
    assert any("forge.sh" in s for s in run.stopped) and "sleep 300" in run.stopped, run.stopped
    assert run.stop_note is None


def test_nothing_is_stopped_where_pid_1_is_not_a_sandbox_keeper(tmp_path: Path):
    """A test double whose exec runs on the host: the stop refuses to run (it would signal the host's
    processes) and says so."""
    from tests.test_runner_fake_env import DirEnv, make_task
    from trials.environments.verifier import stop_agent_processes

    task = make_task(tmp_path / "tasks")
    env = DirEnv(task, tmp_path / "trial")

    async def go():
        await env.start()
        return await stop_agent_processes(env)

    assert asyncio.run(go()) == ([], "the agent's processes were not stopped: pid 1 is not the sandbox's keeper")

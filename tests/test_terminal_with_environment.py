"""The harness's tmux session started with the sandbox (trials/terminal.py, ``tmux.with_environment``).

Unit part: what the runner reads from a harness's settings (as data) and the trial's overrides. Docker part,
real engine and real tmux in the container: the docker sandbox starts the session in its start command, the
seed adopts it without a command when it was made with exactly its settings and replaces it otherwise, the
adopted session is the one the seed would have made itself, a sandbox without tmux leaves the seed to fail as
it always did, and whole trials through the runner (a crashing candidate among them) behave as before.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness_seed import tmux
from harness_seed.settings import load_settings
from trials import terminal
from trials.environments.docker import DockerEnvironment
from trials.environments.factory import attach
from trials.environments.local import LocalEnvironment
from trials.tasks.load import load_task

from .test_env_local import HELLO, make_task

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
STARTER_HELLO = REPO / "data" / "starter" / "hello-file"


# ------------------------------------------------------------------------------------ what the runner reads


def test_the_seed_asks_for_its_own_session_and_overrides_reach_it():
    spec = terminal.requested(SEED)
    assert spec is not None
    assert spec.identity() == tmux.TmuxSession(None, load_settings().tmux).creation()
    wide = terminal.requested(SEED, {"tmux.width": 120, "model.max_tokens": 5})
    nested = terminal.requested(SEED, {"tmux": {"width": 120}})
    assert wide.width == nested.width == 120
    assert wide.identity() == tmux.TmuxSession(None, load_settings({"tmux.width": 120}).tmux).creation()
    assert terminal.requested(SEED, {"tmux.with_environment": False}) is None


def test_no_terminal_unless_the_settings_ask_for_one_completely(tmp_path):
    assert terminal.requested(None) is None
    assert terminal.requested(tmp_path) is None  # no settings.toml: an agent that is not a terminal harness
    toml = (SEED / "settings.toml").read_text()
    (tmp_path / "settings.toml").write_text(toml.replace("with_environment = true", "with_environment = false"))
    assert terminal.requested(tmp_path) is None
    (tmp_path / "settings.toml").write_text(toml.replace('shell = "bash --login"\n', ""))
    assert terminal.requested(tmp_path) is None  # never a guess at the harness's default
    (tmp_path / "settings.toml").write_text(toml.replace("[tmux]", "[tmux"))
    assert terminal.requested(tmp_path) is None  # unreadable: the harness reports it itself


def test_only_the_docker_sandbox_starts_terminals():
    assert DockerEnvironment.starts_terminal and not LocalEnvironment.starts_terminal
    script = terminal.start_script(terminal.requested(SEED), "/app dir")
    assert "cd '/app dir' && " in script and f"exit {terminal.NOT_STARTED}" in script


# -------------------------------------------------------------------------------- real Docker, real tmux


def _base_present() -> bool:
    from trials.environments.images import BASE_IMAGE, docker_available, docker_client, image_exists

    return docker_available() and image_exists(docker_client(), BASE_IMAGE)


needs_docker = pytest.mark.skipif(not _base_present(),
                                  reason="no Docker engine or no base image (build it with `rise images base`)")

# What tmux says about the session: size, the first pane's history, where and what its shell started, its pipe.
SHOW = ("tmux display-message -p -t terminus-2 "
        "'#{window_width}x#{window_height} #{history_limit} #{pane_current_path} #{pane_start_command} "
        "#{pane_pipe}'; tmux show-environment -g TERM")


class Counting:
    """An attached environment whose commands are counted (the harness's round trips)."""

    def __init__(self, env):
        self.env, self.commands = env, []
        self.terminal = env.terminal

    async def exec(self, cmd, **kw):
        self.commands.append(cmd)
        return await self.env.exec(cmd, **kw)


async def _started(tmp_path: Path, name: str, overrides: dict | None = None, task=None) -> DockerEnvironment:
    env = DockerEnvironment(task or load_task(HELLO), tmp_path / name, job_id="test-terminal")
    env.terminal_request = terminal.requested(SEED, overrides)
    await env.start()
    return env


@pytest.mark.docker
@needs_docker
async def test_docker_starts_the_session_and_the_seed_adopts_it_without_a_command(tmp_path):
    env = await _started(tmp_path, "t")
    try:
        handle = json.loads(json.dumps(env.handle()))
        assert handle["terminal"] == terminal.requested(SEED).identity()
        shown = await env.exec(SHOW)
        assert shown.ok, shown
        assert shown.stdout.splitlines() == ["160x40 10000000 /app \"bash --login\" 1", "TERM=xterm-256color"]
        assert (await env.exec("tmux capture-pane -p -t terminus-2")).stdout.strip()  # the prompt is there
        attached = Counting(attach(handle))  # the harness's side: a fresh attach from the trial spec's handle
        session = tmux.TmuxSession(attached, load_settings().tmux)
        await session.start()
        assert attached.commands == []  # adopted: no round trip
        await session.send_keys("echo adopted-$((6*7))\n", min_timeout_sec=0.3)
        assert "adopted-42" in await session.capture()
        assert "adopted-42" in (await env.exec("cat /logs/agent/pane.log")).stdout  # the pane is piped
    finally:
        await env.stop()


@pytest.mark.docker
@needs_docker
async def test_a_session_made_with_other_settings_is_replaced(tmp_path):
    env = await _started(tmp_path, "t")  # the runner read the defaults; this harness runs 120 wide
    try:
        attached = Counting(attach(env.handle()))
        session = tmux.TmuxSession(attached, load_settings({"tmux.width": 120}).tmux)
        await session.start()
        assert len(attached.commands) >= 1 and "kill-session" in attached.commands[0]
        assert (await env.exec(SHOW)).stdout.splitlines()[0] == "120x40 10000000 /app \"bash --login\" 1"
        off = tmux.TmuxSession(Counting(attach(env.handle())), load_settings({"tmux.with_environment": False}).tmux)
        await off.start()  # with_environment off in the harness: it never adopts the sandbox's session
        assert off.env.commands and (await env.exec("tmux ls | wc -l")).stdout.strip() == "1"
    finally:
        await env.stop()


@pytest.mark.docker
@needs_docker
async def test_the_adopted_session_is_the_one_the_seed_makes_itself(tmp_path):
    premade = await _started(tmp_path, "a")
    plain = DockerEnvironment(load_task(HELLO), tmp_path / "b", job_id="test-terminal")
    await plain.start()  # no request: the harness creates its own, as before
    try:
        assert plain.handle()["terminal"] is None
        own = tmux.TmuxSession(Counting(attach(plain.handle())), load_settings().tmux)
        await own.start()
        assert own.env.commands  # it had to create it
        a, b = (await premade.exec(SHOW)), (await plain.exec(SHOW))
        assert a.ok and a.stdout == b.stdout
    finally:
        await premade.stop()
        await plain.stop()


@pytest.mark.docker
@needs_docker
async def test_a_sandbox_without_tmux_leaves_the_seed_to_fail_as_before(tmp_path):
    task = make_task(tmp_path / "notmux", "FROM python:3.11-slim-bookworm\nWORKDIR /app\nRUN rm -f /usr/bin/tmux\n")
    env = await _started(tmp_path, "t", task=task)
    try:
        assert env.terminal is None and env.handle()["terminal"] is None  # started, without a terminal
        session = tmux.TmuxSession(attach(env.handle()), load_settings().tmux)
        with pytest.raises(tmux.TmuxError, match="not installed"):
            await session.start()
    finally:
        await env.stop()


def _crashing_candidate(tmp_path: Path) -> Path:
    """A copy of the seed whose every episode aborts the process (after the terminal was adopted)."""
    harness = tmp_path / "crashing"
    shutil.copytree(SEED, harness, ignore=shutil.ignore_patterns("__pycache__"))
    with (harness / "loop.py").open("a") as f:
        f.write("\n\nasync def _abort(self, episode):\n    import os\n\n    os.abort()\n\n\nAgent.step = _abort\n")
    return harness


@pytest.mark.docker
@needs_docker
def test_trials_through_the_runner_adopt_and_a_crashing_candidate_stays_isolated(tmp_path):
    if not (STARTER_HELLO / "task.toml").is_file():
        pytest.skip("the starter suite (data/starter) is not there yet")
    from monitor.agents import resolve_agent
    from trials import runner
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec
    from trials.environments.images import docker_client

    cmd = json.dumps({"analysis": "a", "plan": "p", "task_complete": False,
                      "commands": [{"keystrokes": "echo 'Hello, world!' > /app/hello.txt\n", "duration": 0.5}]})
    done = json.dumps({"analysis": "a", "plan": "p", "commands": [], "task_complete": True})

    async def trials():
        results = {}
        for name, agent, settings in (("crash", resolve_agent(str(_crashing_candidate(tmp_path))), None),
                                      ("seed", resolve_agent("seed"), None),
                                      ("off", resolve_agent("seed"), {"tmux.with_environment": False})):
            with ScriptedServer([cmd, done, done], model="scripted", context_limit=1_000_000) as srv:
                results[name] = await runner.run_trial(
                    load_task(STARTER_HELLO), agent, EndpointSpec(base_url=srv.base_url, model="scripted"),
                    tmp_path / name, "docker", job_id="test-terminal-runner", settings=settings)
        return results

    res = asyncio.run(trials())
    logs = {k: (tmp_path / k / "agent" / "harness.log").read_text() for k in res}
    # the crashing candidate adopted the session, then took only its own process down: agent_error, verified
    assert "adopting the tmux session terminus-2 the sandbox started" in logs["crash"]
    assert res["crash"].status == "failed" and res["crash"].failure_class == "agent_error"
    assert res["crash"].agent_status == "missing" and res["crash"].agent_exit_code is not None
    # the evaluator goes on: the next trials pass, with the session adopted or (setting off) made by the seed
    assert res["seed"].status == "passed" and "adopting the tmux session" in logs["seed"]
    assert res["off"].status == "passed" and "adopting" not in logs["off"]
    first = json.loads((tmp_path / "seed" / "agent" / "trajectory.json").read_text())["steps"][0]["message"]
    assert "/app#" in first  # the first screen the model saw shows the login shell's prompt in the workdir
    left = docker_client().containers.list(all=True, filters={"label": "rise.job=test-terminal-runner"})
    assert left == []  # every sandbox was stopped


def test_the_runner_never_imports_the_harness_to_read_its_terminal(tmp_path):
    """A candidate whose code cannot even be imported still gets its terminal read, as data."""
    harness = tmp_path / "broken"
    harness.mkdir()
    shutil.copy(SEED / "settings.toml", harness / "settings.toml")
    (harness / "settings.py").write_text("raise RuntimeError('broken candidate')\n")
    (harness / "tmux.py").write_text("raise RuntimeError('broken candidate')\n")
    spec = terminal.requested(harness)
    assert spec is not None and spec.session_name == "terminus-2"
    out = subprocess.run([sys.executable, "-c", "import trials.runner, sys; print('harness_seed' in sys.modules)"],
                         check=False, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "False", out.stderr

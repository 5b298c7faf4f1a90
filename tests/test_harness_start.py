"""Starting agents through warm launchers (trials/launch.py): same behaviour as ``python -m``, spares that serve
the next trial, crash isolation, and no agent outliving a killed runner. No test depends on timing.

This file is also the agent they launch: ``python -m tests.test_harness_start MODE [ARGS]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trials import launch

REPO = Path(__file__).resolve().parents[1]
AGENT = [sys.executable, "-m", "tests.test_harness_start"]


@pytest.fixture(autouse=True)
def fresh_spares(monkeypatch):
    """Each test has its own spare pool, closed at the end (no launcher outlives a test)."""
    spares = launch._Spares()
    monkeypatch.setattr(launch, "_SPARES", spares)
    monkeypatch.chdir(REPO)
    yield spares
    spares.close_all()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _run(proc: launch.AgentProcess) -> int:
    async def wait() -> int:
        return await asyncio.wait_for(proc.wait(), 120)

    try:
        return asyncio.run(wait())
    finally:
        proc.close()


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _gone_within(pids: list[int], limit: float = 30.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_launched_module_runs_as_python_m_would(tmp_path):
    out = tmp_path / "stdout.log"
    starter = launch.AgentLaunch([*AGENT, "report", str(tmp_path / "seen.json")], _env(RISE_TRIAL_SPEC="spec-1"),
                                 preload=("json",))
    proc = starter.start(out)
    assert _run(proc) == 0
    starter.release()
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["name"] == "__main__" and seen["argv"][1:] == ["report", str(tmp_path / "seen.json")]
    assert seen["spec"] == "spec-1" and seen["stdin"] == "" and seen["cwd"] == str(REPO)
    assert seen["pgid"] == seen["pid"] == proc.pid  # its own session: the runner kills the group
    text = out.read_text()
    assert "printed by the agent" in text and "written to stderr" in text


def test_a_large_environment_reaches_the_agent(tmp_path):
    big = {f"RISE_BIG_{i}": "x" * 60_000 for i in range(5)}  # the job line is more than a default pipe holds
    starter = launch.AgentLaunch([*AGENT, "env_size", str(tmp_path / "size")], _env(**big))
    assert _run(starter.start(tmp_path / "a.log")) == 0
    assert (tmp_path / "size").read_text() == "300000"


def test_exit_status_and_a_crash_stay_in_the_agent(tmp_path):
    codes = {}
    for mode in ("exit7", "raise", "abort", "exit_text"):
        starter = launch.AgentLaunch([*AGENT, mode], _env())
        codes[mode] = _run(starter.start(tmp_path / f"{mode}.log"))
        starter.release()
    assert codes == {"exit7": 7, "raise": 1, "abort": -signal.SIGABRT, "exit_text": 1}
    assert "RuntimeError: candidate blew up" in (tmp_path / "raise.log").read_text()
    assert "a message instead of a code" in (tmp_path / "exit_text.log").read_text()
    # this process (the evaluator) is fine, and the next agent starts as before
    starter = launch.AgentLaunch([*AGENT, "exit7"], _env())
    assert _run(starter.start(tmp_path / "after.log")) == 7


def test_a_spare_serves_the_next_trial(tmp_path, fresh_spares, monkeypatch):
    monkeypatch.setenv("RISE_WARM_AGENTS", "2")
    env = _env()
    first = launch.AgentLaunch([*AGENT, "exit7"], {**env, "RISE_TRIAL_SPEC": "a"})
    [ready] = fresh_spares.idle[first.key]  # made when the trial started, before its sandbox
    proc = first.start(tmp_path / "a.log")
    assert proc.pid == ready.pid
    [successor] = fresh_spares.idle[first.key]  # made when the agent started, for the next trial of its slot
    assert _run(proc) == 7
    first.release()
    second = launch.AgentLaunch([*AGENT, "exit7"], {**env, "RISE_TRIAL_SPEC": "b"})  # another spec: same key
    assert second.key == first.key
    proc2 = second.start(tmp_path / "b.log")
    assert proc2.pid == successor.pid and _run(proc2) == 7
    second.release()
    other = launch.AgentLaunch([*AGENT, "exit7"], {**env, "SOMETHING_ELSE": "1"})
    assert other.key != first.key  # a spare never runs under an environment it was not made with


def test_no_spares_when_turned_off(tmp_path, fresh_spares, monkeypatch):
    monkeypatch.setenv("RISE_WARM_AGENTS", "0")
    starter = launch.AgentLaunch([*AGENT, "exit7"], _env())
    assert _run(starter.start(tmp_path / "a.log")) == 7
    starter.release()
    assert not any(fresh_spares.idle.values())


def test_spares_are_capped_and_closed(tmp_path, fresh_spares, monkeypatch):
    monkeypatch.setenv("RISE_WARM_AGENTS", "2")
    starters = [launch.AgentLaunch([*AGENT, "exit7"], _env(RISE_TRIAL_SPEC=str(i))) for i in range(4)]
    spares = [p for v in fresh_spares.idle.values() for p in v]
    assert len(spares) == 2
    for s in starters:
        s.release()
    fresh_spares.close_all()
    assert _gone_within([p.pid for p in spares])


def test_a_broken_preload_is_logged_not_fatal(tmp_path):
    starter = launch.AgentLaunch([*AGENT, "exit7"], _env(), preload=("no_such_module_for_rise",))
    assert _run(starter.start(tmp_path / "a.log")) == 7
    assert "preloading no_such_module_for_rise failed" in (tmp_path / "a.log").read_text()


def test_other_commands_start_directly(tmp_path):
    starter = launch.AgentLaunch(["bash", "-c", "echo direct; exit 3"], _env())
    assert _run(starter.start(tmp_path / "a.log")) == 3
    assert (tmp_path / "a.log").read_text() == "direct\n"


def test_the_agent_dies_with_a_killed_runner(tmp_path):
    """The runner is SIGKILLed while its agent (and a child of the agent) run: both end, with no resume."""
    runner = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from trials import launch
        starter = launch.AgentLaunch({AGENT!r} + ["sleep", {str(tmp_path / "pids")!r}], {_env()!r})
        proc = starter.start(Path({str(tmp_path / "a.log")!r}))
        print(proc.pid, flush=True)
        time.sleep(300)
    """)
    host = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        agent_pid = int(host.stdout.readline())
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        child_pid = int((tmp_path / "pids").read_text().split()[1])
        assert _alive(agent_pid) and _alive(child_pid)
    finally:
        host.kill()
        host.wait()
    assert _gone_within([agent_pid, child_pid])


def test_preloadable_is_platform_and_libraries_only():
    import json as stdlib_module

    import trials.runner

    assert launch.preloadable("json", stdlib_module)
    assert launch.preloadable("pytest", pytest)
    assert launch.preloadable("trials.runner", trials.runner)
    assert not launch.preloadable(__name__, sys.modules[__name__])  # tests, and any candidate harness
    import harness_seed.tmux

    assert not launch.preloadable("harness_seed.tmux", harness_seed.tmux)


def test_a_run_teaches_the_next_spares_its_library_imports(tmp_path):
    learned = tmp_path / "learned.json"
    starter = launch.AgentLaunch([*AGENT, "import_csv"], _env(), learned=learned)
    assert _run(starter.start(tmp_path / "a.log")) == 0
    names = json.loads(learned.read_text())
    assert "csv" in names and "tests.test_harness_start" not in names


def test_the_runner_runs_the_next_trial_in_the_spare_of_the_previous_one(tmp_path, fresh_spares, monkeypatch):
    from tests.test_runner_fake_env import DirEnv, fake_agent, make_task
    from trials.runner import run_trial

    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    task = make_task(tmp_path / "tasks")

    def trial(name: str):
        return asyncio.run(run_trial(task, fake_agent(), None, tmp_path / "job" / name, "fake", "job1",
                                     settings={"mode": "solve"}, env_factory=lambda kind, t, d, j: DirEnv(t, d, j)))

    assert trial("t1__r1").status == "passed"
    successors = {p.pid for v in fresh_spares.idle.values() for p in v}
    assert len(successors) == 1
    assert trial("t1__r2").status == "passed"
    pid = int((tmp_path / "job" / "t1__r2" / "agent" / "agent.pid").read_text())
    assert pid in successors
    assert "trials.launch:" in (tmp_path / "job" / "t1__r2" / "agent" / "stdout.log").read_text()


# ------------------------------------------------------------------------------------------- the agent itself


def _agent(mode: str, args: list[str]) -> int:
    if mode == "report":
        print("printed by the agent")
        print("written to stderr", file=sys.stderr)
        Path(args[0]).write_text(json.dumps({
            "name": __name__, "argv": sys.argv, "spec": os.environ.get("RISE_TRIAL_SPEC"),
            "stdin": sys.stdin.read(), "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgrp()}))
        return 0
    if mode == "env_size":
        Path(args[0]).write_text(str(sum(len(v) for k, v in os.environ.items() if k.startswith("RISE_BIG_"))))
        return 0
    if mode == "exit7":
        return 7
    if mode == "exit_text":
        sys.exit("a message instead of a code")
    if mode == "raise":
        raise RuntimeError("candidate blew up")
    if mode == "abort":
        os.abort()
    if mode == "import_csv":
        import csv  # noqa: F401 - a library module the launcher has not preloaded

        return 0
    if mode == "sleep":
        child = subprocess.Popen(["sleep", "300"])
        Path(args[0]).write_text(f"{os.getpid()} {child.pid}")
        time.sleep(300)
    return 2


if __name__ == "__main__":
    sys.exit(_agent(sys.argv[1], sys.argv[2:]))


def test_a_confined_spare_taken_at_once_still_runs_its_trial(tmp_path, fresh_spares, monkeypatch):
    """A trial whose sandbox starts at once (here a folder) takes the spare made when it started, a moment ago.
    Until its bubblewrap has bound its folder (it writes ``.launch-ready`` first) the spare is not used: renaming
    the folder under a sandbox still being built left it without its agent folder (``bwrap: Can't get type of
    source``) and the trial without its agent (agent ``missing``, no verdict of its own). Seen in CI, 2026-12-06."""
    import shutil as _shutil

    from monitor.agents import harness_agent
    from tests.test_monitor_host import FIXTURE
    from tests.test_runner_fake_env import DirEnv, make_task
    from trials import confine
    from trials.runner import run_trial

    if _shutil.which("bwrap") is None or os.environ.get("RISE_CONFINE") == "off":
        pytest.skip("optional: needs bubblewrap (harnesses are confined only with it)")
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    real_argv = confine.launch_argv
    # every sandbox is built half a second late (a loaded machine), so the trial comes before its spare is ready
    monkeypatch.setattr(confine, "launch_argv", lambda *a, **k: ["/bin/sh", "-c", 'sleep 0.5; exec "$@"', "sh",
                                                                 *real_argv(*a, **k)])
    task = make_task(tmp_path / "tasks", agent_timeout=300)
    for k in range(1, 4):
        d = tmp_path / "job" / f"t1__r{k}"
        res = asyncio.run(run_trial(task, harness_agent(FIXTURE), None, d, "fake", "job1", settings={"mode": "plain"},
                                    env_factory=lambda kind, t, tdir, j: DirEnv(t, tdir, j)))
        log = (d / "agent" / "stdout.log").read_text()
        assert res.agent_status == "completed", (k, res.agent_error, log)
        assert res.limits.harness_uid not in (None, 0)  # it ran confined
        assert not (d / "agent" / confine.LAUNCH_READY).exists()  # the spare's marker is not the trial's file


def test_a_dead_runners_spare_folders_are_removed(tmp_path, monkeypatch):
    from trials import confine

    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "cache" / "spares"
    gone = root / "999999999-0a1b2c"  # no such pid
    mine = root / f"{os.getpid()}-3d4e5f"
    for f in (gone, mine):
        f.mkdir(parents=True)
        (f / confine.LAUNCH_READY).touch()
    confine._reap_spare_folders.cache_clear()
    assert confine.spare_root(tmp_path) == root
    assert not gone.exists() and mine.exists()

"""The implementer cannot write outside its worktree (openai backend, scripted model, real bubblewrap, real
files): ``..``, an absolute path, a planted symlink and a shell redirection are each refused, logged and counted,
and the outside file does not exist afterwards. A hanging call is killed at its deadline with nothing left."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import psutil
import pytest

from evolve.roles.explorer import ExplorerAnswer
from evolve.roles.runtime import (
    IMPLEMENTER_TOOLS,
    Limits,
    Role,
    RoleError,
    make_backend,
    read_transcript,
    run_role,
)
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]

IMPLEMENTER = Role(
    name="implementer-under-test", description="You change files in your worktree.",
    template=Path(__file__).parents[1] / "evolve" / "roles" / "explorer.md.j2",
    output=ExplorerAnswer, tools=tuple(t for t in IMPLEMENTER_TOOLS if t != "check"),
    limits=Limits(max_turns=12, corrective_turns=0, run_timeout_s=20, deadline_s=60))
DONE = {"answer": "done", "evidence": [{"path": "inside.txt", "detail": "written"}]}


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "worktree"
    wt.mkdir()
    (wt / "code.py").write_text("x = 1\n")
    return wt


def test_writes_outside_are_refused_logged_counted_and_absent(worktree: Path, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    (worktree / "planted").symlink_to(outside_dir)           # a link inside the worktree pointing out
    (worktree / "planted-file").symlink_to(outside_dir / "f.txt")
    targets = [tmp_path / "x", Path(f"/tmp/abs-{tag}"), outside_dir / "via-link.txt", outside_dir / "f.txt",
               Path(f"/etc/outside-{tag}")]
    script = [
        call("write_file", path="../x", content="escaped"),
        call("write_file", path=f"/tmp/abs-{tag}", content="escaped"),
        call("write_file", path="planted/via-link.txt", content="escaped"),
        call("edit_file", path="planted-file", old="a", new="b"),
        call("run", cmd=f"echo x > /etc/outside-{tag}"),  # /tmp is the sandbox's own
        call("write_file", path=".git/hooks/post-commit", content="#!/bin/sh\n"),
        call("write_file", path="inside.txt", content="fine\n"),
        call("edit_file", path="code.py", old="x = 1", new="x = 2"),
        call("run", cmd="echo ran > ran.txt && cat code.py"),
        call("final_answer", **DONE),
    ]
    with ScriptedServer(script) as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))
        result = run_role(IMPLEMENTER, {"question": "change code.py"}, worktree, backend,
                          transcripts=tmp_path / "tr")
    for target in targets:
        assert not target.exists(), f"{target} was written from inside the worktree"
    assert not (worktree / ".git").exists()
    assert (worktree / "inside.txt").read_text() == "fine\n"
    assert (worktree / "code.py").read_text() == "x = 2\n"
    assert (worktree / "ran.txt").read_text() == "ran\n"
    assert result.usage.refusals == 6 and result.usage.tool_calls == 9
    results = [r for r in read_transcript(result.transcript) if r["kind"] == "tool_result"]
    assert [r["status"] for r in results] == ["refused"] * 6 + ["ok"] * 3
    assert "Read-only file system" in results[4]["result"]
    assert "exit 0\nx = 2" in results[8]["result"]


def test_run_has_no_network_and_a_time_limit(worktree: Path, tmp_path: Path) -> None:
    role = IMPLEMENTER.model_copy(update={"limits": Limits(run_timeout_s=1, corrective_turns=0)})
    script = [call("run", cmd="tail -n +3 /proc/net/dev | cut -d: -f1"),
              call("run", cmd="sleep 30"), call("final_answer", **DONE)]
    (worktree / "inside.txt").write_text("x")
    started, since = time.monotonic(), time.time()
    with ScriptedServer(script) as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))
        result = run_role(role, {"question": "q"}, worktree, backend, transcripts=tmp_path)
    assert time.monotonic() - started < 20
    results = [r for r in read_transcript(result.transcript) if r["kind"] == "tool_result"]
    assert results[0]["result"].split("\n", 1)[1].split() == ["lo"]  # only loopback in its network namespace
    assert results[1]["status"] == "error" and "timed out after" in results[1]["result"]
    assert not _sandboxed_children(since)


def _sandboxed_children(since: float) -> list[psutil.Process]:
    """This test's sandboxes still alive: children of this process started after ``since`` (under pytest-xdist a
    worker also holds what earlier tests left running on purpose, such as a trial runner's warm spares)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() in ("bwrap", "sleep", "bash") and p.create_time() >= since - 1:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def test_a_hanging_call_is_killed_at_its_deadline_with_nothing_left(worktree: Path, tmp_path: Path) -> None:
    role = IMPLEMENTER.model_copy(update={"limits": Limits(deadline_s=2, run_timeout_s=120)})
    since = time.time()
    with ScriptedServer([call("run", cmd="sleep 300")]) as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))
        started = time.monotonic()
        with pytest.raises(RoleError) as info:
            run_role(role, {"question": "q"}, worktree, backend, transcripts=tmp_path)
    assert info.value.kind == "timeout" and time.monotonic() - started < 15
    deadline = time.monotonic() + 10  # SIGKILL is sent at the deadline; a loaded machine reaps a little later
    while (_sandboxed_children(since) or _sleepers(since)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sandboxed_children(since)
    assert not _sleepers(since)


def _sleepers(since: float) -> list[psutil.Process]:
    """This test's ``sleep 300``, wherever bwrap's death reparented it (started after ``since``: another
    program's sleep on a shared machine is not this test's; a zombie has no command line and is dead)."""
    return [p for p in psutil.process_iter(["cmdline", "create_time", "status"])
            if "sleep 300" in " ".join(p.info["cmdline"] or []) and (p.info["create_time"] or 0) >= since - 1
            and p.info["status"] != psutil.STATUS_ZOMBIE]


@pytest.mark.tmux
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_check_runs_the_smoke_check_of_the_worktree(tmp_path: Path) -> None:
    """``check()`` reports the real smoke check: a broken module fails it by name; repaired, it passes."""
    import asyncio

    from evolve.roles.runtime import ToolContext, get_tool
    from evolve.roles.runtime.tools import invoke
    from evolve.roles.runtime.transcript import Transcript

    worktree = tmp_path / "harness"
    shutil.copytree(Path(__file__).parents[1] / "harness_seed", worktree,
                    ignore=shutil.ignore_patterns("__pycache__"))
    ctx = ToolContext(workspace=worktree, limits=Limits(tool_output_chars=20000),
                      transcript=Transcript(tmp_path / "t.jsonl", "t"), extra={"check_out": str(tmp_path / "smoke")})
    main = worktree / "main.py"
    original = main.read_text()
    main.write_text(original + "\nthis is not python\n")
    broken = asyncio.run(invoke(get_tool("check"), ctx, {}))
    assert "FAILED" in broken and "[FAIL] import" in broken
    main.write_text(original)
    fixed = asyncio.run(invoke(get_tool("check"), ctx, {}))
    assert "smoke check of" in fixed and "passed" in fixed.splitlines()[0], fixed
    assert "contracts: not run" in fixed

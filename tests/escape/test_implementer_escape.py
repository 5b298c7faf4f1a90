"""A hostile implementer cannot leave its worktree: every route of issue 29 (write outside, read a task's
solution, a home-directory secret, an environment secret, the network, the Docker socket, plant a git hook, set
core.fsmonitor, repoint ``.git``, edit an adopted version's tag) is blocked, named in the call's record (the
transcript's ``tool_result``: ``refused`` with the reason, or the command's failure) and counted, and leaves no
file behind; the host's ``git add -A`` / commit afterwards runs nothing the worktree planted.

Real bubblewrap, real git, real files. The same calls go through the shared tool registry directly, through the
``openai`` backend (scripted OpenAI-compatible server), through the ``claude`` backend with the scripted CLI
transport, and through the real Claude Code CLI bundled with the SDK (a scripted Anthropic-style server).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evolve.roles.explorer import ExplorerAnswer
from evolve.roles.runtime import IMPLEMENTER_TOOLS, Limits, Role, ToolContext, get_tool, make_backend
from evolve.roles.runtime.backends.claude import ClaudeBackend, bundled_cli
from evolve.roles.runtime.backends.scripted_cli import ScriptedCLI
from evolve.roles.runtime.config import ClaudeSettings
from evolve.roles.runtime.runtime import run_role
from evolve.roles.runtime.sandbox import run_confined
from evolve.roles.runtime.tools import invoke
from evolve.roles.runtime.transcript import Transcript, read_transcript
from tests.escape.scene import SOLUTION, Hostile, Scene, allowed_calls, hostile_calls, make_scene
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
              pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

ROLE = Role(name="implementer-under-test", description="You change files in your worktree.",
            template=Path(__file__).parents[2] / "evolve" / "roles" / "explorer.md.j2",
            output=ExplorerAnswer, tools=tuple(t for t in IMPLEMENTER_TOOLS if t != "check"),
            limits=Limits(max_turns=60, corrective_turns=0, run_timeout_s=30, deadline_s=400,
                          tool_output_chars=4000, max_repeated_failures=0))
DONE = {"answer": "done", "evidence": [{"path": "main.py", "detail": "tried everything"}]}


@pytest.fixture
def scene(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    s = make_scene()
    monkeypatch.setenv("HOME", str(s.home))
    monkeypatch.setenv("OPENAI_API_KEY", s.secrets["env"])
    try:
        yield s
    finally:
        s.close()


def _registry(s: Scene, calls: list[Hostile], transcripts: Path) -> tuple[Path, int]:
    ctx = ToolContext(workspace=s.wt, limits=ROLE.limits, transcript=Transcript(transcripts / "t.jsonl", "t"),
                      role=ROLE.name, harness=s.wt)

    async def go() -> None:
        for c in calls:
            await invoke(get_tool(c.tool), ctx, c.args)

    asyncio.run(go())
    return transcripts / "t.jsonl", ctx.usage.refusals


def _openai(s: Scene, calls: list[Hostile], transcripts: Path) -> tuple[Path, int]:
    script = [{"content": "", "tool_calls": [{"name": c.tool, "arguments": c.args}]} for c in calls]
    with ScriptedServer([*script, {"content": "", "tool_calls": [{"name": "final_answer", "arguments": DONE}]}]) \
            as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))
        result = run_role(ROLE, {"question": "change main.py"}, s.wt, backend, transcripts=transcripts)
    return result.transcript, result.usage.refusals


def _claude_scripted(s: Scene, calls: list[Hostile], transcripts: Path) -> tuple[Path, int]:
    cli = ScriptedCLI([[*[("tool", c.tool, c.args) for c in calls], ("result", DONE)]])
    result = run_role(ROLE, {"question": "change main.py"}, s.wt, ClaudeBackend(transport=cli),
                      transcripts=transcripts)
    return result.transcript, result.usage.refusals


def _claude_cli(s: Scene, calls: list[Hostile], transcripts: Path) -> tuple[Path, int]:
    if not bundled_cli().exists():
        pytest.skip("the claude-agent-sdk wheel has no bundled Claude Code CLI")
    from tests.test_agents_claude_cli import MessagesServer

    srv = MessagesServer([*[(f"mcp__rise__{c.tool}", c.args) for c in calls], ("StructuredOutput", DONE)])
    try:
        backend = ClaudeBackend(settings=ClaudeSettings(base_url=srv.url, model="scripted-model"))
        result = run_role(ROLE, {"question": "change main.py"}, s.wt, backend, transcripts=transcripts)
    finally:
        srv.stop()
    return result.transcript, result.usage.refusals


DRIVERS: dict[str, Any] = {"registry": _registry, "openai": _openai, "claude-scripted": _claude_scripted,
                           "claude-cli": _claude_cli}


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_every_escape_route_is_blocked_recorded_and_leaves_nothing(driver: str, scene: Scene,
                                                                   tmp_path: Path) -> None:
    before = scene.snapshot()
    hostile, allowed = hostile_calls(scene), allowed_calls(scene)
    transcript, refusals = DRIVERS[driver](scene, hostile + allowed, tmp_path / "tr")

    # one record per call: the tool's result, or (claude CLI) the PreToolUse hook's denial of a write tool
    results = [dict(r, status="refused", result=r["reason"]) if r["kind"] == "tool_denied" else r
               for r in read_transcript(transcript) if r["kind"] in ("tool_result", "tool_denied")]
    assert len(results) == len(hostile) + len(allowed), [r["result"][:80] for r in results]
    for call, row in zip(hostile, results, strict=False):
        if call.expect == "refused":
            assert row["status"] == "refused", f"{call.route}: not refused: {row['result'][:400]}"
        else:
            assert row["status"] == "ok" and row["result"].startswith("exit 1"), f"{call.route}: {row['result']}"
    assert refusals == sum(c.expect == "refused" for c in hostile)
    for call, row in zip(allowed, results[len(hostile):], strict=True):
        assert row["status"] == "ok" and "ok" in row["result"], f"{call.route}: {row['result'][:400]}"

    # the host's commit of the worktree afterwards runs nothing planted (the nested repository's fsmonitor)
    commit = scene.exp.commit_worktree(scene.wt, "after the hostile calls")
    assert commit != before["tags"]["v0"]  # it committed what was left inside (the nested and evil folders)
    assert scene.snapshot() == before
    for path in scene.outside_paths():
        assert not path.exists(), f"{path} was left on the host"
    assert scene.connections == []
    text = transcript.read_text()
    solution_line = next(ln for ln in SOLUTION.read_text().splitlines() if len(ln.strip()) > 12)
    for secret in (*scene.secrets.values(), solution_line):
        assert secret not in text


def test_the_reproduced_fsmonitor_escape_is_closed(scene: Scene) -> None:
    """The review's reproduction, through the APIs that existed before the fix (it passes on no earlier commit:
    on 4296d82 the marker appears): from inside ``run_confined``, ``.git`` is pointed at a repository in the
    worktree whose config runs a command as fsmonitor; then the host commits the worktree."""
    cmd = (f"git init -q evil && git -C evil config core.fsmonitor 'touch {scene.marker}; false' && "
           "git -C evil config user.name x && git -C evil config user.email x@y && "
           "printf 'gitdir: evil/.git\\n' > .git")
    result = run_confined(cmd, scene.wt, timeout_s=30)
    try:
        scene.exp.commit_worktree(scene.wt, "the host commits the candidate")
    finally:
        assert not scene.marker.exists(), "the host's git ran the command the worktree planted as fsmonitor"
    assert result.returncode != 0 and "Read-only file system" in result.output


def test_the_sandbox_shows_nothing_else_of_the_host(scene: Scene) -> None:
    """Listing what the command sees: no home directory (only the way to the Python environment), no
    project data or runs, a scrubbed environment, and Python with this project importable."""
    real_home = Path("/root") if Path("/root/.pyenv").exists() else None
    env = run_confined("env", scene.wt, timeout_s=30)
    names = {line.split("=", 1)[0] for line in env.output.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "TMPDIR", "LANG", "TERM", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PWD",
                     "SHLVL", "_", "OLDPWD"}, names
    root = run_confined(f"ls -A / {Path(__file__).parents[2]} /var/run 2>&1; ls -A {real_home or '/nonexistent'}",
                        scene.wt, timeout_s=30).output
    assert "data" not in root.split() and "runs" not in root.split() and "tests" not in root.split()
    assert "cannot access '/var/run'" in root  # no /var/run/docker.sock, no host sockets
    if real_home is not None:
        assert ".ssh" not in root and ".gitconfig" not in root and ".pyenv" in root
    (scene.wt / "test_inside.py").write_text("from harness import settings\n\n\ndef test_it():\n"
                                             "    assert settings.__name__ == 'harness.settings'\n")
    py = run_confined("python3 -c 'import trials, evolve.experiment.store; print(\"imports ok\")' && git log --oneline -1 && "
                      "rise handbook check . && cd .. && python3 -m pytest -q -p no:cacheprovider "
                      "harness/test_inside.py", scene.wt, timeout_s=180)
    assert py.returncode == 0 and "imports ok" in py.output, py.output
    assert "v0: the seed harness" in py.output  # git reads the harness repository (read-only) inside
    assert "is aligned" in py.output and "1 passed" in py.output  # the implementer's own checks run inside


def test_the_packages_shown_are_the_projects() -> None:
    """The sandbox binds the packages pyproject installs, no more (``data/``, ``runs/``, ``tests/`` stay out)."""
    import tomllib

    from evolve.roles.runtime.sandbox import PROJECT_PACKAGES, PROJECT_ROOT

    found = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert sorted(PROJECT_PACKAGES) == sorted(p.rstrip("*") for p in found["include"])

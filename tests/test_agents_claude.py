"""The claude backend offline: a fake Transport plays the CLI's side of the SDK's control protocol (initialize,
PreToolUse hook callbacks, MCP tool calls, results) so the runtime's confinement, tools, validation and
corrective turns run for real without a CLI or network."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from evolve.roles.explorer import ExplorerAnswer
from evolve.roles.runtime import (
    IMPLEMENTER_TOOLS,
    Limits,
    Role,
    RoleError,
    get_role,
    read_transcript,
    run_role,
)
from evolve.roles.runtime.backends.claude import ClaudeBackend
from evolve.roles.runtime.backends.scripted_cli import ScriptedCLI

GOOD = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello world\n")
    return ws


def _decision(answer: dict) -> dict:
    return answer.get("response", {}).get("hookSpecificOutput", {})


def test_scripted_session_with_a_denied_tool_request(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / f"evil-{uuid.uuid4().hex[:6]}"
    cli = ScriptedCLI([[("hook", "Write", {"file_path": str(outside), "content": "x"}),
                    ("hook", "Bash", {"command": f"echo x > {outside}"}),
                    ("hook", "mcp__rise__read_file", {"path": "a.txt"}),
                    ("tool", "list_dir", {"path": "."}),
                    ("tool", "read_file", {"path": "a.txt"}),
                    ("result", GOOD)]])
    result = run_role(get_role("explorer"), {"question": "what does a.txt say?"}, workspace,
                      ClaudeBackend(transport=cli), transcripts=tmp_path / "tr")
    assert result.output.model_dump() == GOOD and result.backend == "claude"
    write_hook, bash_hook, read_hook = (a for _, a in cli.answers[:3])
    assert _decision(write_hook)["permissionDecision"] == "deny"
    assert "outside the workspace" in _decision(write_hook)["permissionDecisionReason"]
    assert _decision(bash_hook)["permissionDecision"] == "deny"
    assert _decision(read_hook) == {}  # allowed: reading inside is fine
    tool_answer = cli.answers[4][1]["response"]["mcp_response"]["result"]
    assert "1: hello world" in tool_answer["content"][0]["text"] and not tool_answer.get("isError")
    assert result.usage.refusals == 2 and result.usage.tool_calls == 2
    assert result.cost == pytest.approx(0.0125) and result.usage.input_tokens == 100
    rows = read_transcript(result.transcript)
    assert [r["tool"] for r in rows if r["kind"] == "tool_denied"] == ["Write", "Bash"]
    assert not outside.exists()


def test_invalid_structured_output_gets_a_corrective_turn_then_a_named_error(workspace: Path,
                                                                             tmp_path: Path) -> None:
    role = get_role("explorer").model_copy(update={"limits": Limits(corrective_turns=1, min_tool_calls=0)})
    bad = {"answer": "", "evidence": []}
    cli = ScriptedCLI([[("result", bad)], [("result", {"answer": "x"})]])
    with pytest.raises(RoleError) as info:
        run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path)
    assert info.value.kind == "invalid_output" and info.value.fields == ["evidence"]
    assert "answer, evidence" in cli.user_messages[1]  # the corrective turn named both failing fields
    cli = ScriptedCLI([[("result", bad)], [("result", GOOD)]])
    result = run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path)
    assert result.output.model_dump() == GOOD and result.usage.requests == 4


def test_implementer_writes_outside_are_refused_on_claude(workspace: Path, tmp_path: Path) -> None:
    role = Role(name="implementer-under-test", description="d", template=get_role("explorer").template,
                output=ExplorerAnswer, tools=tuple(t for t in IMPLEMENTER_TOOLS if t != "check"),
                limits=Limits(corrective_turns=0))
    (workspace / "planted").symlink_to(tmp_path)
    tag = uuid.uuid4().hex[:6]
    steps: list[tuple[str, Any, Any]] = [
        ("hook", "mcp__rise__write_file", {"path": "../x", "content": "x"}),
        ("hook", "mcp__rise__write_file", {"path": f"/tmp/abs-{tag}", "content": "x"}),
        ("hook", "Edit", {"file_path": "planted/y", "old_string": "a", "new_string": "b"}),
        ("tool", "write_file", {"path": "planted/z", "content": "x"}),  # if a hook were bypassed: the tool refuses
        ("tool", "run", {"cmd": f"echo x > /etc/outside-{tag}"}),  # /tmp is the sandbox's own
        ("tool", "write_file", {"path": "inside.txt", "content": "ok"}),
        ("result", GOOD)]
    cli = ScriptedCLI([steps])
    result = run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path)
    assert [_decision(a).get("permissionDecision") for _, a in cli.answers[:3]] == ["deny"] * 3
    texts = [a["response"]["mcp_response"]["result"] for _, a in cli.answers[3:6]]
    assert [t.get("isError", False) for t in texts] == [True, True, False]
    assert result.usage.refusals == 5
    for path in (tmp_path / "x", Path(f"/tmp/abs-{tag}"), tmp_path / "y", tmp_path / "z",
                 Path(f"/etc/outside-{tag}")):
        assert not path.exists()
    assert (workspace / "inside.txt").read_text() == "ok"


def test_a_hanging_cli_is_killed_at_the_deadline_with_its_process_group(workspace: Path, tmp_path: Path) -> None:
    """A real process stands in for a CLI that hangs in initialize (and has a child): the call ends at its
    deadline as a timeout and neither process is left."""
    import os
    import time

    import psutil

    from evolve.roles.runtime.config import ClaudeSettings

    marker = f"rise-hang-{uuid.uuid4().hex[:8]}"
    cli = tmp_path / "hanging-claude"
    cli.write_text(f"#!/bin/sh\nsleep 600 &  # {marker}\nexec sleep 601  # {marker}\n")
    cli.chmod(0o755)
    role = get_role("explorer").model_copy(update={"limits": Limits(deadline_s=3)})
    backend = ClaudeBackend(settings=ClaudeSettings(cli_path=str(cli)))
    started = time.monotonic()
    with pytest.raises(RoleError) as info:
        run_role(role, {"question": "q"}, workspace, backend, transcripts=tmp_path)
    assert info.value.kind == "timeout" and time.monotonic() - started < 20

    def left() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline", "ppid"])
                if str(cli) in " ".join(p.info["cmdline"] or []) or
                (p.info["cmdline"] or [""])[0] == "sleep" and p.info["cmdline"][-1] in ("600", "601")
                and p.info["ppid"] in (os.getpid(), 1)]

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left()


def test_a_call_failing_again_and_again_withdraws_the_tools_on_claude(workspace: Path, tmp_path: Path) -> None:
    """At max_repeated_failures the PreToolUse hook denies every further call of our tools, so the model must
    answer (the openai backend stops offering them instead)."""
    role = get_role("explorer")
    role = role.model_copy(update={"limits": role.limits.model_copy(update={"max_repeated_failures": 2})})
    cli = ScriptedCLI([[("tool", "read_file", {"path": "nope.txt"}),
                        ("hook", "mcp__rise__read_file", {"path": "a.txt"}),
                        ("tool", "read_file", {"path": "nope.txt"}),
                        ("hook", "mcp__rise__read_file", {"path": "a.txt"}),
                        ("result", GOOD)]])
    result = run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path / "tr")
    assert result.output.model_dump() == GOOD
    before, after = cli.answers[1][1], cli.answers[3][1]
    assert _decision(before) == {}  # one failure: still allowed
    assert _decision(after)["permissionDecision"] == "deny"
    assert "tools are withdrawn" in _decision(after)["permissionDecisionReason"]
    second = cli.answers[2][1]["response"]["mcp_response"]["result"]["content"][0]["text"]
    assert "failed 2 times, so the tools are withdrawn" in second

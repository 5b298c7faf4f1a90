"""The claude backend offline: a fake Transport plays the CLI's side of the SDK's control protocol (initialize,
PreToolUse hook callbacks, MCP tool calls, results) so the runtime's confinement, tools, validation and
corrective turns run for real without a CLI or network."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import Transport

from evolve.agents import IMPLEMENTER_TOOLS, Limits, Role, RoleError, get_role, read_transcript, run_role
from evolve.agents.backends.claude import ClaudeBackend
from evolve.agents.roles.explorer import ExplorerAnswer

GOOD = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


class FakeCLI(Transport):
    """The CLI end of the stream-JSON protocol, scripted: each user turn runs the next list of steps.

    A step is ``("hook", tool_name, tool_input)`` (a PreToolUse callback), ``("tool", name, args)`` (an MCP
    tools/call to our server), or ``("result", structured_output)``."""

    def __init__(self, turns: list[list[tuple]]):
        self.turns = list(turns)
        self.out: asyncio.Queue[dict | None] = asyncio.Queue()
        self.pending: dict[str, asyncio.Future] = {}
        self.hook_ids: list[str] = []
        self.answers: list[tuple[tuple, dict]] = []  # (step, what the SDK answered)
        self.user_messages: list[str] = []
        self.tasks: list[asyncio.Task] = []
        self.mcp_ready = False

    async def connect(self) -> None:
        pass

    def is_ready(self) -> bool:
        return True

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            msg = json.loads(line)
            if msg["type"] == "control_request" and msg["request"]["subtype"] == "initialize":
                hooks = msg["request"].get("hooks") or {}
                self.hook_ids = [i for m in hooks.get("PreToolUse", []) for i in m["hookCallbackIds"]]
                await self.out.put({"type": "control_response", "response": {
                    "subtype": "success", "request_id": msg["request_id"], "response": {}}})
            elif msg["type"] == "control_response":
                self.pending.pop(msg["response"]["request_id"]).set_result(msg["response"])
            elif msg["type"] == "user":
                content = msg["message"]["content"]
                self.user_messages.append(content if isinstance(content, str) else json.dumps(content))
                self.tasks.append(asyncio.create_task(self._turn(self.turns.pop(0))))

    async def _ask(self, request: dict) -> dict:
        rid = f"cli_{uuid.uuid4().hex[:8]}"
        self.pending[rid] = asyncio.get_running_loop().create_future()
        await self.out.put({"type": "control_request", "request_id": rid, "request": request})
        return await self.pending[rid]

    async def _mcp_handshake(self) -> None:
        if self.mcp_ready:
            return
        self.mcp_ready = True
        for message in ({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                            "protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "fake-cli", "version": "0"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"}):
            await self._ask({"subtype": "mcp_message", "server_name": "rise", "message": message})

    async def _turn(self, steps: list[tuple]) -> None:
        for step in steps:
            if step[0] == "hook":
                answer = await self._ask({"subtype": "hook_callback", "callback_id": self.hook_ids[0],
                                          "tool_use_id": "tu", "input": {
                                              "hook_event_name": "PreToolUse", "tool_name": step[1],
                                              "tool_input": step[2]}})
            elif step[0] == "tool":
                await self._mcp_handshake()
                await self.out.put({"type": "assistant", "message": {"role": "assistant", "model": "fake",
                                    "content": [{"type": "tool_use", "id": "tu", "name": f"mcp__rise__{step[1]}",
                                                 "input": step[2]}]}})
                answer = await self._ask({"subtype": "mcp_message", "server_name": "rise", "message": {
                    "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": step[1], "arguments": step[2]}}})
            else:
                await self.out.put({"type": "result", "subtype": "success", "duration_ms": 5,
                                    "duration_api_ms": 4, "is_error": False, "num_turns": 2, "session_id": "s",
                                    "total_cost_usd": 0.0125, "usage": {"input_tokens": 100, "output_tokens": 20},
                                    "structured_output": step[1]})
                answer = {}
            self.answers.append((step, answer))

    async def read_messages(self):
        while (msg := await self.out.get()) is not None:
            yield msg

    async def end_input(self) -> None:
        await self.out.put(None)  # the SDK waits for the stream to end

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.out.put(None)


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
    cli = FakeCLI([[("hook", "Write", {"file_path": str(outside), "content": "x"}),
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
    cli = FakeCLI([[("result", bad)], [("result", {"answer": "x"})]])
    with pytest.raises(RoleError) as info:
        run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path)
    assert info.value.kind == "invalid_output" and info.value.fields == ["evidence"]
    assert "answer, evidence" in cli.user_messages[1]  # the corrective turn named both failing fields
    cli = FakeCLI([[("result", bad)], [("result", GOOD)]])
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
        ("tool", "run", {"cmd": f"echo x > /tmp/outside-{tag}"}),
        ("tool", "write_file", {"path": "inside.txt", "content": "ok"}),
        ("result", GOOD)]
    cli = FakeCLI([steps])
    result = run_role(role, {"question": "q"}, workspace, ClaudeBackend(transport=cli), transcripts=tmp_path)
    assert [_decision(a).get("permissionDecision") for _, a in cli.answers[:3]] == ["deny"] * 3
    texts = [a["response"]["mcp_response"]["result"] for _, a in cli.answers[3:6]]
    assert [t.get("isError", False) for t in texts] == [True, True, False]
    assert result.usage.refusals == 5
    for path in (tmp_path / "x", Path(f"/tmp/abs-{tag}"), tmp_path / "y", tmp_path / "z",
                 Path(f"/tmp/outside-{tag}")):
        assert not path.exists()
    assert (workspace / "inside.txt").read_text() == "ok"

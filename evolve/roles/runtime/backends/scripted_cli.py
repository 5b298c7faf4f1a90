"""A scripted stand-in for the Claude Code CLI: the CLI's side of the Agent SDK's stream-JSON control protocol
(initialize, PreToolUse hook callbacks, MCP calls to our in-process tool server, results), so the claude
backend's confinement, tools, validation and corrective turns run for real with no CLI and no network. Used by
tests and by ``benchmarks/role_overhead.py``; pass it as ``ClaudeBackend(transport=ScriptedCLI(turns))``.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from claude_agent_sdk import Transport


class ScriptedCLI(Transport):
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

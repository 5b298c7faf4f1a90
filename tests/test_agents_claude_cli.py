"""The real Claude Code CLI bundled with claude-agent-sdk completes role calls against a local, scripted
Anthropic-style ``/v1/messages`` server (real HTTP, SSE streaming; the script decides the model's turns): our MCP
tools run, the PreToolUse hook and the sandbox refuse writes outside the worktree, and the structured output is
validated. No network, no API key."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evolve.roles.explorer import ExplorerAnswer
from evolve.roles.runtime import IMPLEMENTER_TOOLS, Limits, Role, get_role, read_transcript, run_role
from evolve.roles.runtime.backends.claude import ClaudeBackend, bundled_cli
from evolve.roles.runtime.config import ClaudeSettings

pytestmark = pytest.mark.skipif(not bundled_cli().exists(), reason="the claude-agent-sdk wheel has no bundled CLI")
GOOD = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


class MessagesServer:
    """Answers each /v1/messages request that offers our tools with the next scripted tool call (by how many
    assistant turns the conversation already has); other requests get a short text."""

    def __init__(self, calls: list[tuple[str, dict]]):
        self.calls, self.requests = calls, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                owner.requests.append(body)
                data = owner.answer(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if body.get("stream") else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> str:
        turn = sum(1 for m in body.get("messages", []) if m["role"] == "assistant")
        ours = any(t.get("name", "").startswith("mcp__rise__") for t in body.get("tools") or [])
        if ours and turn < len(self.calls):
            name, args = self.calls[turn]
            block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(args)}]
            stop = "tool_use"
        else:
            block, deltas, stop = {"type": "text", "text": ""}, [{"type": "text_delta", "text": "ok"}], "end_turn"
        message = {"id": f"msg_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant",
                   "model": body.get("model", "m"), "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 50, "output_tokens": 0}}
        if not body.get("stream"):
            full = {**block, "input": json.loads(deltas[0]["partial_json"])} if stop == "tool_use" else \
                {"type": "text", "text": "ok"}
            return json.dumps({**message, "content": [full], "stop_reason": stop,
                               "usage": {"input_tokens": 50, "output_tokens": 10}})
        events = [("message_start", {"type": "message_start", "message": message}),
                  ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                  *[("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas],
                  ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}),
                  ("message_stop", {"type": "message_stop"})]
        return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello world\n")
    return ws


def _backend(srv: MessagesServer) -> ClaudeBackend:
    return ClaudeBackend(settings=ClaudeSettings(base_url=srv.url, model="scripted-model"))


def _tool_results(srv: MessagesServer) -> list[str]:
    last = srv.requests[-1]["messages"]
    return [json.dumps(b.get("content")) for m in last if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def test_the_real_cli_completes_a_read_only_role_call(workspace: Path, tmp_path: Path) -> None:
    srv = MessagesServer([("mcp__rise__list_dir", {"path": "."}), ("mcp__rise__read_file", {"path": "a.txt"}),
                          ("StructuredOutput", GOOD)])
    try:
        role = get_role("explorer").model_copy(update={"limits": Limits(deadline_s=120, min_tool_calls=2)})
        result = run_role(role, {"question": "what does a.txt say?"}, workspace, _backend(srv),
                          transcripts=tmp_path / "tr")
    finally:
        srv.stop()
    assert result.output.model_dump() == GOOD and result.usage.tool_calls == 2
    assert any("1: hello world" in r for r in _tool_results(srv))  # our tool's real result reached the model
    first = srv.requests[0]
    assert first["max_tokens"] == role.limits.max_output_tokens
    assert "You are the explorer of RiseHarness" in json.dumps(first["system"])  # our system prompt, not empty
    offered = {t["name"] for t in first["tools"]}
    assert {"mcp__rise__read_file", "mcp__rise__list_dir"} <= offered
    assert not offered & {"Bash", "Write", "Edit", "Read"}  # no built-in tools
    rows = read_transcript(result.transcript)
    assert [r["tool"] for r in rows if r["kind"] == "tool_call"] == ["list_dir", "read_file"]


def test_the_real_cli_implementer_cannot_write_outside(workspace: Path, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    (workspace / "planted").symlink_to(tmp_path)
    outside = [tmp_path / "x", Path(f"/tmp/abs-{tag}"), tmp_path / "via-link", Path(f"/etc/outside-{tag}")]
    srv = MessagesServer([
        ("mcp__rise__write_file", {"path": "../x", "content": "x"}),
        ("mcp__rise__write_file", {"path": f"/tmp/abs-{tag}", "content": "x"}),
        ("mcp__rise__edit_file", {"path": "planted/via-link", "old": "a", "new": "b"}),
        ("mcp__rise__run", {"cmd": f"echo x > /etc/outside-{tag}"}),  # /tmp is the sandbox's own
        ("Bash", {"command": f"echo x > /etc/outside-{tag}"}),
        ("mcp__rise__write_file", {"path": "inside.txt", "content": "ok"}),
        ("StructuredOutput", {"answer": "done", "evidence": [{"path": "inside.txt", "detail": "written"}]})])
    role = Role(name="implementer-under-test", description="You change files in your worktree.",
                template=get_role("explorer").template, output=ExplorerAnswer,
                tools=tuple(t for t in IMPLEMENTER_TOOLS if t != "check"), limits=Limits(deadline_s=120))
    try:
        result = run_role(role, {"question": "change things"}, workspace, _backend(srv), transcripts=tmp_path / "tr")
    finally:
        srv.stop()
    for path in outside:
        assert not path.exists(), path
    assert (workspace / "inside.txt").read_text() == "ok"
    rows = read_transcript(result.transcript)
    denied = [r["tool"] for r in rows if r["kind"] == "tool_denied"]
    assert denied[:3] == ["mcp__rise__write_file", "mcp__rise__write_file", "mcp__rise__edit_file"]
    refused_runs = [r for r in rows if r["kind"] == "tool_result" and r["tool"] == "run"]
    assert refused_runs[0]["status"] == "refused" and "Read-only file system" in refused_runs[0]["result"]
    assert [r["tool"] for r in rows if r["kind"] == "cli_tool_result"] == ["Bash"]  # no such tool here
    assert result.usage.refusals == 5

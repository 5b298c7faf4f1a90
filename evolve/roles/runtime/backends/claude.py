"""The ``claude`` backend: the Claude Agent SDK (its bundled Claude Code CLI) with our tools as an in-process
MCP server.

- No built-in tool is enabled (``tools=[]``): file access and commands go through the same confined tools as on
  every backend (``mcp__rise__<name>``); a PreToolUse hook refuses, with a reason the model sees, any Bash call
  and any write (built-in Write/Edit or ours) whose path resolves outside the workspace. Refusals are logged and
  counted.
- ``setting_sources=[]``: nothing from a ``.claude/`` folder in the worktree or the user's home applies.
- The system prompt is a string (``None`` would send an empty one).
- The answer comes from ``output_format`` (JSON schema) as ``structured_output``; it is validated with the role's
  model, and an invalid one gets corrective turns in the same session naming the failing fields.
- The CLI runs in its own session (a ``setsid`` wrapper), so at the deadline its whole process group is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evolve.roles.runtime.backends.base import BackendJob, BackendReply, error_fields
from evolve.roles.runtime.backends.settings import ClaudeSettings
from evolve.roles.runtime.role import RoleError, Usage
from evolve.roles.runtime.tools import ToolContext, ToolRefused, ToolSpec, confine, invoke
from evolve.roles.runtime.transcript import clip
from trials.endpoints.spec import EndpointSpec

SERVER = "rise"
WRITE_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit", f"mcp__{SERVER}__write_file",
               f"mcp__{SERVER}__edit_file"}
PATH_KEYS = ("file_path", "notebook_path", "path")
# The CLI in a session of its own; the pid written is that session's leader, i.e. its process group id.
WRAPPER = ('#!/bin/sh\nexec setsid /bin/sh -c \'echo $$ > "$RISE_CLAUDE_PIDFILE"; exec "$RISE_CLAUDE_CLI" "$@"\' '
           'claude "$@"\n')


def bundled_cli() -> Path:
    """The Claude Code CLI shipped inside the claude-agent-sdk wheel."""
    import claude_agent_sdk

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


class ClaudeBackend:
    """``transport`` replaces the CLI (tests); then the CLI options (model, env, cwd) are not applied."""

    name = "claude"

    def __init__(self, endpoint: EndpointSpec | None = None, *, settings: ClaudeSettings | None = None,
                 transport: Any = None):
        self.settings = settings or ClaudeSettings()
        if endpoint is not None:  # an Anthropic-style server given as an endpoint (e.g. llama-server)
            root = endpoint.base_url.rstrip("/").removesuffix("/v1")
            self.settings = self.settings.model_copy(update={
                "base_url": root, "model": endpoint.model, "price": endpoint.price,
                "api_key_env": endpoint.api_key_env or self.settings.api_key_env})
        self.price = self.settings.price
        self.transport = transport

    def _env(self) -> dict[str, str]:
        env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        key = os.environ.get(self.settings.api_key_env)
        if self.settings.base_url:
            env["ANTHROPIC_BASE_URL"] = self.settings.base_url
            env["ANTHROPIC_API_KEY"] = key or "local-server-needs-no-key"
        elif key:
            env["ANTHROPIC_API_KEY"] = key
        return env

    async def run(self, job: BackendJob) -> BackendReply:
        from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, HookMatcher

        ctx, limits = job.ctx, job.role.limits
        with tempfile.TemporaryDirectory(prefix="rise-claude-") as tmp:
            pidfile = Path(tmp) / "cli.pid"
            options = ClaudeAgentOptions(
                system_prompt=job.system, tools=[], allowed_tools=[f"mcp__{SERVER}__{t.name}" for t in job.tools],
                mcp_servers={SERVER: _mcp_server(job.tools, ctx)}, permission_mode="dontAsk",
                max_turns=limits.max_turns, model=self.settings.model, cwd=str(ctx.workspace),
                setting_sources=[], hooks={"PreToolUse": [HookMatcher(matcher=None, hooks=[_confine_hook(ctx)])]},
                output_format={"type": "json_schema", "schema": job.role.output.model_json_schema()},
                env={**self._env(), "RISE_CLAUDE_PIDFILE": str(pidfile),
                     "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(limits.max_output_tokens),
                     "RISE_CLAUDE_CLI": str(self.settings.cli_path or bundled_cli())},
                cli_path=_wrapper(Path(tmp)),
                stderr=lambda line: ctx.transcript.write("cli_stderr", text=clip(line, 2000)))
            client = ClaudeSDKClient(options=options, transport=self.transport)
            try:
                await client.connect()
                return await self._converse(client, job)
            finally:
                _kill_cli(pidfile)  # first: a hung CLI must not keep disconnect() waiting
                with contextlib.suppress(Exception):
                    await client.disconnect()
                _kill_cli(pidfile)

    async def _converse(self, client: Any, job: BackendJob) -> BackendReply:
        from claude_agent_sdk import (
            AssistantMessage,
            ResultMessage,
            TextBlock,
            ToolResultBlock,
            ToolUseBlock,
            UserMessage,
        )

        ctx, role, limits = job.ctx, job.role, job.role.limits
        usage, cost, prompt = Usage(), 0.0, job.prompt
        fields: list[str] = []
        asked: dict[str, str] = {}  # tool_use id -> tool name, to name the CLI's own tool results
        for attempt in range(limits.corrective_turns + 1):
            if attempt:
                ctx.transcript.write("corrective_turn", fields=fields, text=clip(prompt))
            await client.query(prompt)
            result: Any = None
            async for message in client.receive_response():
                if isinstance(message, AssistantMessage):
                    parts = [{"text": clip(b.text)} if isinstance(b, TextBlock)
                             else {"tool_call": b.name, "args": b.input, "id": b.id}
                             for b in message.content if isinstance(b, TextBlock | ToolUseBlock)]
                    asked.update({b.id: b.name for b in message.content if isinstance(b, ToolUseBlock)})
                    ctx.transcript.write("model_response", parts=parts, model=message.model)
                elif isinstance(message, UserMessage) and isinstance(message.content, list):
                    for block in message.content:
                        if isinstance(block, ToolResultBlock):
                            _record_cli_result(ctx, asked.get(block.tool_use_id, "?"), block)
                elif isinstance(message, ResultMessage):
                    result = message
            if result is None:
                raise RoleError(role.name, "backend", "the CLI ended without a result", usage=usage)
            usage = usage.plus(_usage_of(result))
            cost += result.total_cost_usd or 0.0
            ctx.transcript.write("result", subtype=result.subtype, is_error=result.is_error,
                                 turns=result.num_turns, cost_usd=result.total_cost_usd,
                                 denials=result.permission_denials)
            if result.is_error and result.structured_output is None:
                raise RoleError(role.name, "backend", f"the CLI reported {result.subtype}: "
                                f"{(result.errors or [result.result or ''])[0]}"[:1000], usage=usage)
            try:
                output = role.output.model_validate(result.structured_output)
            except ValidationError as exc:
                fields = error_fields(exc)
                prompt = ("Your answer failed validation in these fields: " + ", ".join(fields) + ".\n"
                          + "\n".join(f"- {'.'.join(map(str, e['loc'])) or '(answer)'}: {e['msg']}"
                                      for e in exc.errors()) + "\nAnswer again with the whole corrected object.")
                continue
            if ctx.usage.tool_calls < limits.min_tool_calls:
                fields = ["(tool calls)"]
                prompt = (f"Answer only after at least {limits.min_tool_calls} tool calls (so far "
                          f"{ctx.usage.tool_calls}); read the files first, then answer again.")
                continue
            # the CLI prices tokens as Anthropic's models; for another server the price table decides
            return BackendReply(output=output, usage=usage, cost=None if self.settings.base_url else cost)
        raise RoleError(role.name, "invalid_output", f"no valid answer after {limits.corrective_turns} "
                        "corrective turn(s)", fields=fields, usage=usage)


def _record_cli_result(ctx: ToolContext, name: str, block: Any) -> None:
    """A tool result the CLI made itself (ours are logged by ``invoke``): a built-in tool it refused, or the
    hook's denial. A refused Bash or file write that no hook saw counts as a refusal here."""
    if name.startswith(f"mcp__{SERVER}__") or name == "StructuredOutput":
        return
    text = block.content if isinstance(block.content, str) else json.dumps(block.content, default=str)
    ctx.transcript.write("cli_tool_result", tool=name, is_error=bool(block.is_error), result=clip(text, 2000))
    if block.is_error and (name == "Bash" or name in WRITE_TOOLS) and block.tool_use_id not in ctx.extra.get(
            "_denied_ids", set()):
        ctx.usage.refusals += 1


def _usage_of(result: Any) -> Usage:
    raw = result.usage or {}
    return Usage(input_tokens=int(raw.get("input_tokens") or 0) + int(raw.get("cache_read_input_tokens") or 0)
                 + int(raw.get("cache_creation_input_tokens") or 0),
                 output_tokens=int(raw.get("output_tokens") or 0), requests=int(result.num_turns or 0))


def _mcp_server(tools: list[ToolSpec], ctx: ToolContext) -> Any:
    from claude_agent_sdk import create_sdk_mcp_server, tool

    def make(spec: ToolSpec) -> Any:
        @tool(spec.name, spec.description, spec.json_schema())
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            text = await invoke(spec, ctx, args)
            return {"content": [{"type": "text", "text": text}],
                    "is_error": text.startswith(("error: ", "refused: "))}
        return handler

    return create_sdk_mcp_server(SERVER, tools=[make(spec) for spec in tools])


def _confine_hook(ctx: ToolContext) -> Any:
    async def hook(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name = str(data.get("tool_name", ""))
        args = data.get("tool_input") or {}
        reason = None
        if ctx.extra.get("answer_now") and name.startswith(f"mcp__{SERVER}__"):
            # a call that failed max_repeated_failures times withdrew our tools (tools.invoke); the CLI's own
            # answer tool stays allowed
            reason = f"the tools are withdrawn ({ctx.extra['answer_now']}): give your final answer now"
        elif name == "Bash":
            reason = "Bash is not available here; use the run tool (it runs in the worktree's sandbox)"
        elif name in WRITE_TOOLS:
            for key in PATH_KEYS:
                if isinstance(args.get(key), str):
                    try:
                        confine(ctx.workspace, args[key], must_exist=False)
                    except ToolRefused as exc:
                        reason = str(exc)
        if reason is None:
            return {}
        ctx.usage.refusals += 1
        ctx.extra.setdefault("_denied_ids", set()).add(tool_use_id)
        ctx.transcript.write("tool_denied", tool=name, args=args, reason=reason, by="PreToolUse hook")
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                       "permissionDecisionReason": reason}}

    return hook


def _wrapper(folder: Path) -> Path:
    path = folder / "claude-session.sh"
    path.write_text(WRAPPER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _kill_cli(pidfile: Path) -> None:
    """Kill the CLI's process group (its own session, from the wrapper); never our own group."""
    try:
        pgid = int(pidfile.read_text().strip())
        # the group outlives its leader (the SDK may have reaped the CLI itself): kill it by id, not via the pid
        if pgid > 1 and pgid != os.getpgrp():
            os.killpg(pgid, signal.SIGKILL)
    except (OSError, ValueError):
        pass

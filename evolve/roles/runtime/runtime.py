"""``run_role``: render a role's prompt, run it on a backend within its limits, record it, return a validated
answer or raise a :class:`RoleError` (never a silent partial result)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel

from evolve.roles.runtime.backends.base import Backend, BackendJob
from evolve.roles.runtime.budget import Budget
from evolve.roles.runtime.role import Role, RoleError, RoleInputError, RoleResult, Usage, validate_inputs
from evolve.roles.runtime.sandbox import kill_sandbox
from evolve.roles.runtime.tools import ToolContext, ToolSpec, get_tool
from evolve.roles.runtime.transcript import Transcript, clip

TEMPLATES = Path(__file__).with_name("templates")
DEFAULT_TRANSCRIPTS = Path("runs") / "role-calls"


def _render(path: Path, **values: Any) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path.parent)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    return env.get_template(path.name).render(**values)


def render_prompts(role: Role, inputs: dict[str, Any], workspace: Path, tools: list[ToolSpec]) -> tuple[str, str]:
    """(system, task prompt) of a call; a variable the template reads but the inputs lack (StrictUndefined) is a
    :class:`RoleInputError` naming it."""
    try:
        system = _render(TEMPLATES / "system.md.j2", role=role, workspace=workspace, tools=tools)
        prompt = _render(role.template, inputs=inputs, workspace=workspace, **inputs)
    except jinja2.UndefinedError as exc:
        raise RoleInputError(role.name, f"template {role.template.name} reads what the inputs lack: "
                             f"{exc.message}") from None
    except jinja2.TemplateError as exc:
        raise RoleError(role.name, "config", f"template {role.template}: {exc}", started=False) from None
    return system, prompt


def _tools(role: Role) -> list[ToolSpec]:
    try:
        return [get_tool(name) for name in role.tools]
    except KeyError as exc:
        raise RoleError(role.name, "config", str(exc).strip("\"'"), started=False) from None


async def arun_role(role: Role, inputs: dict[str, Any] | BaseModel, workspace: str | Path, backend: Backend, *,
                    transcripts: str | Path | None = None, budget: Budget | None = None,
                    harness: str | Path | None = None, extra: dict[str, Any] | None = None) -> RoleResult:
    """Async :func:`run_role`."""
    data, root, tools, system, prompt = _prepare(role, inputs, workspace)
    if budget is not None:
        budget.check(role.name, role.limits.max_usd)  # refused: not started either
    # from here on the call has started: it has a transcript, and whatever happens it is charged
    transcript = Transcript.create(Path(transcripts or DEFAULT_TRANSCRIPTS), role.name)
    ctx = ToolContext(workspace=root, limits=role.limits, transcript=transcript, role=role.name,
                      harness=Path(harness).resolve() if harness else None, extra=dict(extra or {}))
    started = time.monotonic()
    usage = Usage()
    try:
        transcript.write("start", call_id=transcript.call_id, role=role.name, backend=backend.name,
                         workspace=str(root), inputs=data, limits=role.limits, tools=[t.name for t in tools],
                         output_schema=role.output.model_json_schema())
        transcript.write("system", text=clip(system))
        transcript.write("prompt", text=clip(prompt))
        job = BackendJob(role=role, system=system, prompt=prompt, tools=tools, ctx=ctx,
                         deadline_s=role.limits.deadline_s)
        try:
            reply = await asyncio.wait_for(backend.run(job), timeout=role.limits.deadline_s)
        except TimeoutError:
            raise RoleError(role.name, "timeout", f"no answer within the deadline of {role.limits.deadline_s:g} s;"
                            " the call was killed", usage=ctx.usage) from None
        usage = reply.usage.model_copy(update={"tool_calls": ctx.usage.tool_calls, "refusals": ctx.usage.refusals})
        cost = reply.cost if reply.cost is not None else backend.price.cost(usage.input_tokens,
                                                                            usage.output_tokens)
        seconds = time.monotonic() - started
        if budget is not None:
            budget.charge(role.name, cost)
        if role.limits.max_usd is not None and cost > role.limits.max_usd:
            transcript.write("over_limit", cost=cost, max_usd=role.limits.max_usd)
        transcript.write("output", output=reply.output)
        transcript.write("end", status="ok", role=role.name, usage=usage, cost=cost, seconds=round(seconds, 3))
        return RoleResult(role=role.name, call_id=transcript.call_id, output=reply.output,
                          transcript=transcript.path, usage=usage, cost=cost, seconds=seconds, backend=backend.name)
    except RoleError as exc:
        _close_failed(exc, ctx, backend, budget, transcript, started)
        raise
    except (asyncio.CancelledError, KeyboardInterrupt):
        transcript.write("end", status="cancelled", role=role.name, usage=ctx.usage,
                         seconds=round(time.monotonic() - started, 3))
        raise
    except Exception as exc:  # a backend bug still ends as a RoleError with its transcript
        err = RoleError(role.name, "backend", f"{type(exc).__name__}: {exc}", usage=ctx.usage)
        _close_failed(err, ctx, backend, budget, transcript, started)
        raise err from exc
    finally:
        _kill_leftovers(ctx)
        transcript.close()


def _prepare(role: Role, inputs: dict[str, Any] | BaseModel,
             workspace: str | Path) -> tuple[dict[str, Any], Path, list[ToolSpec], str, str]:
    """Everything a call needs before it starts: validated inputs (defaults filled), the workspace, the tools and
    both prompts. A failure here is a RoleError with ``started`` False: nothing was sent, written or charged."""
    data = validate_inputs(role, inputs)
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise RoleError(role.name, "config", f"workspace {workspace} is not a folder", started=False)
    tools = _tools(role)
    system, prompt = render_prompts(role, data, root, tools)
    return data, root, tools, system, prompt


def _close_failed(exc: RoleError, ctx: ToolContext, backend: Backend, budget: Budget | None,
                  transcript: Transcript, started: float) -> None:
    usage = exc.usage.model_copy(update={"tool_calls": ctx.usage.tool_calls, "refusals": ctx.usage.refusals})
    exc.usage, exc.transcript = usage, transcript.path
    exc.cost = backend.price.cost(usage.input_tokens, usage.output_tokens)
    if budget is not None:
        budget.charge(exc.role, exc.cost)  # a failed call was still paid for
    transcript.write("end", status=exc.kind, role=exc.role, error=exc.message, fields=exc.fields, usage=usage,
                     cost=exc.cost, seconds=round(time.monotonic() - started, 3))


def _kill_leftovers(ctx: ToolContext) -> None:
    """Kill the process groups tools started that are still alive (a call cut off at its deadline)."""
    for pgid in list(ctx.processes):
        kill_sandbox(pgid)
        ctx.processes.discard(pgid)


def run_role(role: Role, inputs: dict[str, Any] | BaseModel, workspace: str | Path, backend: Backend,
             **options: Any) -> RoleResult:
    """Run one role call to a validated answer (see :func:`arun_role` for the options: ``transcripts`` folder,
    ``budget``, ``harness``, ``extra``). Raises :class:`RoleError` on invalid output after the corrective turns,
    a deadline, a spent budget or a backend failure; the transcript is written for every call that started (one
    refused before it started, for bad inputs or a spent budget, sends nothing, writes nothing and costs nothing:
    its error's ``started`` is False)."""
    return asyncio.run(arun_role(role, inputs, workspace, backend, **options))

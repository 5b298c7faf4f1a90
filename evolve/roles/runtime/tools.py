"""The tool registry: one typed implementation per tool, a JSON schema from its signature, shared by backends.

A tool is a function ``fn(ctx: ToolContext, **args) -> str | JSON-able`` registered with :func:`tool`. Its
arguments become a pydantic model (the JSON schema every backend sends); its docstring is the description.
Raising :class:`ToolError` sends the message back to the model; :class:`ToolRefused` does too, and counts as a
refused (confinement) attempt. Every call and result goes to the transcript.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from evolve.roles.runtime.role import Limits, Usage
from evolve.roles.runtime.transcript import Transcript

Group = Literal["read", "write"]


class ToolError(Exception):
    """A failed tool call; the message goes back to the model as the tool's result."""


class ToolRefused(ToolError):
    """A call refused by confinement (a path or a command reaching outside the workspace)."""


@dataclass
class ToolContext:
    """What a tool may touch: the workspace (the only root paths resolve in), the harness, the limits."""

    workspace: Path
    limits: Limits
    transcript: Transcript
    role: str = ""
    harness: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    processes: set[int] = field(default_factory=set)  # process groups started by tools, killed at the end

    def resolve(self, path: str | Path, *, must_exist: bool = True) -> Path:
        """``path`` (relative to the workspace, or absolute inside it) after symlinks; refused if outside."""
        return confine(self.workspace, path, must_exist=must_exist)

    def resolve_trial(self, trial: str) -> Path:
        """A trial folder: ``trial`` relative to the workspace, else (a bare trial name, as prompts and evidence
        references name runs) inside the folder of trials the caller set as ``extra["trials_dir"]``."""
        try:
            return self.resolve(trial)
        except ToolRefused:
            raise
        except ToolError:
            trials_dir = self.extra.get("trials_dir")
            if not trials_dir:
                raise
            try:
                return self.resolve(Path(trials_dir) / trial)
            except ToolRefused:
                raise
            except ToolError:
                raise ToolError(f"no such trial: {trial!r} (neither in the workspace nor in {trials_dir})") from None


# Folders no role may read, wherever they lie in a workspace: the controller's held-out grids
# (``versions/<tag>/heldout``, evolve/round/controller.py) hold the sealed tasks' instructions and test output.
SEALED_DIRS = frozenset({"heldout"})


def sealed(relative: Path) -> bool:
    """Whether a workspace-relative path lies in a sealed (held-out) folder."""
    return any(part in SEALED_DIRS for part in relative.parts)


def confine(workspace: Path, path: str | Path, *, must_exist: bool = True) -> Path:
    """Resolve ``path`` inside ``workspace`` following every symlink; :class:`ToolRefused` when it leaves it or
    enters a sealed held-out folder."""
    root = workspace.resolve()
    raw = Path(str(path)) if str(path).strip() else Path(".")
    target = (raw if raw.is_absolute() else root / raw).resolve()  # resolves links, even in missing parents
    # messages name the path as given, never the workspace's place on disk: prompts and recordings stay the
    # same wherever the workspace is
    if target != root and root not in target.parents:
        raise ToolRefused(f"path {str(path)!r} leads outside the workspace (links resolved); refused")
    if sealed(target.relative_to(root)):
        raise ToolRefused(f"path {str(path)!r} is in the sealed held-out split; no role reads it; refused")
    if must_exist and not target.exists():
        raise ToolError(f"no such file or folder: {str(path)!r}")
    return target


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool."""

    name: str
    description: str
    group: Group
    fn: Callable[..., Any]
    args_model: type[BaseModel]

    def json_schema(self) -> dict[str, Any]:
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return schema


_TOOLS: dict[str, ToolSpec] = {}


def tool(name: str | None = None, *, group: Group = "read") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn(ctx, **args)`` as a tool. ``group="write"`` marks implementer-only tools."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or fn.__name__
        if tool_name in _TOOLS and _TOOLS[tool_name].fn is not fn:
            raise ValueError(f"tool {tool_name!r} is already registered")
        _TOOLS[tool_name] = ToolSpec(tool_name, _description(fn), group, fn, _args_model(tool_name, fn))
        return fn

    return register


def _description(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip() or fn.__name__


def _args_model(name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    hints = get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first is the ToolContext
    fields: dict[str, Any] = {}
    for p in params:
        if p.name not in hints:
            raise TypeError(f"tool {name}: parameter {p.name} needs a type hint")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], default)
    return create_model(f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields)


def get_tool(name: str) -> ToolSpec:
    """A registered tool by name; the error lists the known ones."""
    try:
        return _TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(sorted(_TOOLS))}") from None


def list_tools(group: Group | None = None) -> list[ToolSpec]:
    """Registered tools, by name; only one group when given."""
    return [_TOOLS[k] for k in sorted(_TOOLS) if group is None or _TOOLS[k].group == group]


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=1)
    return json.dumps(value, indent=1, default=str)


def _truncate(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n[truncated: {limit} of {len(text)} characters shown]", True


async def invoke(spec: ToolSpec, ctx: ToolContext, args: dict[str, Any] | None) -> str:
    """Run one tool call for a backend: validate, execute, record; the returned text is what the model sees."""
    ctx.usage.tool_calls += 1
    started = time.monotonic()
    ctx.transcript.write("tool_call", tool=spec.name, args=args)
    status = "ok"
    try:
        parsed = spec.args_model.model_validate(args or {})
        kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if inspect.iscoroutinefunction(spec.fn):
            value = await spec.fn(ctx, **kwargs)
        else:
            value = await asyncio.to_thread(spec.fn, ctx, **kwargs)  # tools block on files and subprocesses
        text = _render(value)
    except ValidationError as exc:
        status = "error"
        bad = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in exc.errors())
        text = f"error: invalid arguments for {spec.name}: {bad}"
    except ToolRefused as exc:
        status = "refused"
        ctx.usage.refusals += 1
        text = f"refused: {exc}"
    except ToolError as exc:
        status = "error"
        text = f"error: {exc}"
    except Exception as exc:  # noqa: BLE001 (a tool bug must reach the model and the transcript, not crash)
        status = "error"
        text = f"error: {spec.name} failed: {type(exc).__name__}: {exc}"
    text = _count_repeats(ctx, spec, args, status, text)
    shown, truncated = _truncate(text, ctx.limits.tool_output_chars)
    ctx.transcript.write("tool_result", tool=spec.name, status=status, result=shown, truncated=truncated,
                         chars=len(text), seconds=round(time.monotonic() - started, 4))
    return shown


def _count_repeats(ctx: ToolContext, spec: ToolSpec, args: dict[str, Any] | None, status: str, text: str) -> str:
    """Count failures of the same call (tool and arguments). When the role's ``max_repeated_failures`` is set, the
    second failure on is told so, and at that number the tools are withdrawn (``extra["answer_now"]``: backends
    then offer only the answer). The live 1.5B implementer sent one edit_file whose ``old`` the file never had 15
    times in one call, answering none of the errors. A success of the same call clears its count; a successful
    write tool clears them all (the workspace changed, so an old failure may not recur)."""
    key = f"{spec.name} {json.dumps(args or {}, sort_keys=True, default=str)}"
    failed: dict[str, int] = ctx.extra.setdefault("failed_calls", {})
    answered: dict[str, int] = ctx.extra.setdefault("answered_calls", {})
    if status == "ok":
        if spec.group == "write":
            failed.clear()
            answered.clear()
            return text
        failed.pop(key, None)
        return _count_repeated_reads(ctx, spec, args, key, answered, text)
    answered.pop(key, None)
    count = failed[key] = failed.get(key, 0) + 1
    limit = ctx.limits.max_repeated_failures
    if limit and count >= limit:
        ctx.extra["answer_now"] = f"{spec.name} failed {count} times with the same arguments"
        ctx.transcript.write("repeat_breaker", tool=spec.name, args=args, failures=count)
        return (f"{text}\n\nThis exact call (same tool, same arguments) has now failed {count} times, so the tools "
                "are withdrawn: give your final answer now, and say in it what you could not do.")
    if count < 2 or not limit:
        return text
    return (f"{text}\n\nThis exact call (same tool, same arguments) has now failed {count} times; sending it again "
            f"will fail again (at {limit} the tools are withdrawn). Read the error: change the arguments, or do "
            "something else.")


def _count_repeated_reads(ctx: ToolContext, spec: ToolSpec, args: dict[str, Any] | None, key: str,
                          answered: dict[str, int], text: str) -> str:
    """The same read answered again (no write since): with the role's ``max_repeated_calls`` set, from the second
    time on the result says so, and at that number the tools are withdrawn (``extra["answer_now"]``). The live
    1.5B analyst of the night of 2026-12-07 asked for one trial's digest 8 times in a row before answering."""
    count = answered[key] = answered.get(key, 0) + 1
    limit = ctx.limits.max_repeated_calls
    if not limit or count < 2:
        return text
    if count >= limit:
        ctx.extra["answer_now"] = f"{spec.name} was called {count} times with the same arguments"
        ctx.transcript.write("repeat_breaker", tool=spec.name, args=args, repeats=count)
        return (f"{text}\n\nYou have now made this exact call (same tool, same arguments) {count} times and got the "
                "same result each time, so the tools are withdrawn: give your final answer now from what you read.")
    return (f"{text}\n\nThis is the same result as the {count - 1} earlier time(s) you made this exact call. Use "
            f"it: call something else, or give your final answer (at {limit} the tools are withdrawn).")

"""Implementer-only tools: write_file, edit_file, run (in bubblewrap), check (smoke + contracts).

Writes resolve inside the worktree after symlinks and never touch ``.git`` (a hook written there would run
outside any sandbox). ``run`` executes in :mod:`evolve.agents.sandbox`: only the worktree is writable and
there is no network; a write the sandbox blocked is reported as refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from evolve.agents.sandbox import run_confined
from evolve.agents.tools import ToolContext, ToolError, ToolRefused, tool

BLOCKED_MARKERS = ("Read-only file system",)


def _writable(ctx: ToolContext, path: str) -> Path:
    target = ctx.resolve(path, must_exist=False)
    rel = target.relative_to(ctx.workspace.resolve())
    if ".git" in rel.parts:
        raise ToolRefused(f"{path!r} is inside .git; the repository's metadata is not writable")
    if target == ctx.workspace.resolve() or target.is_dir():
        raise ToolError(f"{path!r} is a folder, not a file")
    return target


@tool(group="write")
def write_file(ctx: ToolContext,
               path: Annotated[str, Field(description="file path relative to the worktree")],
               content: Annotated[str, Field(description="the whole new content of the file")]) -> str:
    """Create or overwrite a file in the worktree (parent folders are created)."""
    target = _writable(ctx, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {path} ({len(content)} characters)"


@tool(group="write")
def edit_file(ctx: ToolContext,
              path: Annotated[str, Field(description="file path relative to the worktree")],
              old: Annotated[str, Field(description="exact text to replace; must occur exactly once")],
              new: Annotated[str, Field(description="replacement text")]) -> str:
    """Replace one exact occurrence of ``old`` by ``new`` in a file of the worktree."""
    target = _writable(ctx, path)
    if not target.is_file():
        raise ToolError(f"no such file: {path!r}")
    text = target.read_text(encoding="utf-8")
    count = text.count(old) if old else 0
    if count != 1:
        raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once "
                        "(add surrounding lines to make it unique)")
    target.write_text(text.replace(old, new, 1), encoding="utf-8")
    return f"edited {path}: replaced {len(old)} characters with {len(new)}"


@tool(group="write")
def run(ctx: ToolContext,
        cmd: Annotated[str, Field(description="a bash command, run in the worktree")]) -> str:
    """Run a shell command in a sandbox: the worktree is the only writable place, no network, a time limit."""
    result = run_confined(cmd, ctx.workspace.resolve(), timeout_s=ctx.limits.run_timeout_s,
                          live=ctx.processes)
    text = result.render()
    if result.timed_out:
        raise ToolError(text)
    if result.returncode != 0 and any(m in result.output for m in BLOCKED_MARKERS):
        raise ToolRefused(f"the sandbox blocked a write outside the worktree\n{text}")
    return text


@tool(group="write")
def check(ctx: ToolContext) -> str:
    """Smoke-check the harness in the worktree, then its contracts when the round gave an incumbent."""
    from validate.contracts import run_contracts
    from validate.smoke import smoke_check

    harness = ctx.harness or ctx.workspace
    smoke = smoke_check(harness, ctx.extra.get("check_out"))
    lines = [smoke.summary()]
    incumbent, frozen = ctx.extra.get("incumbent"), ctx.extra.get("frozen_store")
    if smoke.passed and incumbent and frozen:
        lines.append(run_contracts(harness, incumbent, frozen).summary())
    elif not (incumbent and frozen):
        lines.append("contracts: not run (this call has no incumbent harness to compare with)")
    return "\n".join(lines)

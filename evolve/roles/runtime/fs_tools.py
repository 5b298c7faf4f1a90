"""Read-only file tools: read_file, list_dir, grep. Every path is confined to the workspace (symlinks resolved)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from evolve.roles.runtime.tools import SEALED_DIRS, ToolContext, ToolError, tool

MAX_ENTRIES = 200
MAX_MATCHES = 100
SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules", *SEALED_DIRS}  # sealed: held-out grids


@tool(group="read")
def read_file(ctx: ToolContext,
              path: Annotated[str, Field(description="file path relative to the workspace")],
              start: Annotated[int, Field(ge=1, description="first line, 1-based")] = 1,
              end: Annotated[int | None, Field(ge=1, description="last line (inclusive); none = to the end")] = None,
              ) -> str:
    """Read lines start..end of a text file in the workspace, each prefixed with its line number."""
    target = ctx.resolve(path)
    if not target.is_file():
        raise ToolError(f"{path!r} is not a file")
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    stop = len(lines) if end is None else min(end, len(lines))
    if start > max(len(lines), 1):
        raise ToolError(f"{path!r} has {len(lines)} lines; start={start} is past the end")
    # A small model repeats itself: the bundled 1.5B implementer read line 1 of settings.toml 16 times in a row.
    # The same read of an unchanged file moves on to the lines after it instead of showing them again.
    seen = ctx.extra.setdefault("read_file_seen", set())
    key = (str(target), start, stop, target.stat().st_mtime_ns)
    note = ""
    if key in seen:
        if stop >= len(lines):
            return (f"You read {path} lines {start}-{stop} already and the file has not changed since (it ends "
                    f"at line {len(lines)}). Use what you read: act on it, or answer.")
        note = f"You read {path} lines {start}-{stop} already (unchanged); the lines after them follow.\n"
        start, stop = stop + 1, len(lines)
    seen.add((str(target), start, stop, key[3]))
    body = "\n".join(f"{n}: {lines[n - 1]}" for n in range(start, stop + 1))
    more = len(lines) - stop
    hint = f"\n({more} more line(s) after line {stop}: leave out end to read to the end)" if more > 0 else ""
    return f"{note}{path} (lines {start}-{stop} of {len(lines)})\n{body}{hint}"


@tool(group="read")
def list_dir(ctx: ToolContext,
             path: Annotated[str, Field(description="folder relative to the workspace; '.' is its root")] = ".",
             ) -> str:
    """List a folder of the workspace: one entry a line as a path you can pass to the other tools (relative to
    the workspace), folders end with '/', files show their size."""
    target = ctx.resolve(path)
    if not target.is_dir():
        raise ToolError(f"{path!r} is not a folder")
    entries = sorted((p for p in target.iterdir() if p.name not in SEALED_DIRS), key=lambda p: p.name)
    # workspace-relative names: a small model given bare names reads "result.json" for "trial/result.json"
    prefix = target.relative_to(ctx.workspace.resolve()).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    rows = []
    for p in entries[:MAX_ENTRIES]:
        if p.is_symlink():
            rows.append(f"{prefix}{p.name} -> (link)")
        elif p.is_dir():
            rows.append(f"{prefix}{p.name}/")
        else:
            rows.append(f"{prefix}{p.name} ({p.stat().st_size} bytes)")
    more = f"\n[{len(entries) - MAX_ENTRIES} more entries not shown]" if len(entries) > MAX_ENTRIES else ""
    return "\n".join(rows) + more if rows else "(empty folder)"


@tool(group="read")
def grep(ctx: ToolContext,
         pattern: Annotated[str, Field(description="Python regular expression")],
         path: Annotated[str, Field(description="file or folder relative to the workspace")] = ".",
         ) -> str:
    """Search files under a path for a regular expression; prints file:line: text for each match."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    target = ctx.resolve(path)
    files = [target] if target.is_file() else sorted(_walk(ctx, target))
    hits: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable files are not searched
        rel = f.relative_to(ctx.workspace.resolve())
        for n, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{rel}:{n}: {line[:300]}")
                if len(hits) >= MAX_MATCHES:
                    return "\n".join(hits) + f"\n[stopped at {MAX_MATCHES} matches]"
    return "\n".join(hits) if hits else f"no match for {pattern!r} under {path!r}"


def _walk(ctx: ToolContext, folder):
    root = ctx.workspace.resolve()
    for p in folder.rglob("*"):
        if any(part in SKIP_DIRS for part in p.relative_to(folder).parts):
            continue
        # a link pointing out of the workspace is not followed
        if p.is_file() and (p.resolve() == root or root in p.resolve().parents):
            yield p

"""Implementer-only tools: write_file, edit_file, run (in bubblewrap), check (smoke + contracts).

Writes resolve inside the worktree after symlinks and never touch git metadata: ``.git`` at any depth (a hook,
a config or a repointed ``.git`` file would steer the host's git), nor ``.gitmodules`` and ``.gitattributes``
(submodules and filter drivers; a harness needs neither). A ``.toml`` file (the harness's settings, recording
config, Handbook, contracts) must still parse after a write or an edit (else the change is refused and the file
left as it was), and a ``write_file`` that leaves out entries an existing one holds is merged into it (small
coding models rewrite a whole settings file from memory, meaning to add one key, and cut it): the entries left
out are kept, and the model is told which, and what its content added or changed; ``edit_file`` can still
remove one on purpose. ``run`` executes in :mod:`evolve.roles.runtime.sandbox`: only the worktree's files are
writable, little of the host is visible and there is no network; a command the sandbox stopped (a blocked
write, the network, a hidden host path) is reported as refused, naming why.
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Annotated, Any

import tomlkit
from pydantic import Field
from tomlkit.items import AoT

from evolve.roles.runtime.sandbox import run_confined
from evolve.roles.runtime.tools import ToolContext, ToolError, ToolRefused, tool

GIT_METADATA = (".git", ".gitmodules", ".gitattributes")


def _writable(ctx: ToolContext, path: str) -> Path:
    target = ctx.resolve(path, must_exist=False)
    rel = target.relative_to(ctx.workspace.resolve())
    if meta := next((part for part in rel.parts if part in GIT_METADATA), None):
        raise ToolRefused(f"{path!r} is git metadata ({meta}); the repository's metadata is not writable")
    if target == ctx.workspace.resolve() or target.is_dir():
        raise ToolError(f"{path!r} is a folder, not a file")
    return target


def _ident(item: Any) -> str | None:
    """How an array of tables names an item (its ``target``, ``name``, ``id`` or ``key``), if it does."""
    return next((item[k] for k in ("target", "name", "id", "key") if isinstance(item.get(k), str)), None)


def _toml_entries(node: Any, prefix: str = "") -> set[str]:
    """Dotted paths of a parsed TOML document's keys; an array of tables' items are named by their ``target``,
    ``name``, ``id`` or ``key`` where they have one (else by position), so a reordered array loses nothing."""
    out: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out.add(path)
            out |= _toml_entries(v, path)
    elif isinstance(node, list) and node and all(isinstance(i, dict) for i in node):
        for n, item in enumerate(node):
            ident = _ident(item)
            ident = n if ident is None else ident
            out.add(f"{prefix}[{ident}]")
            out |= _toml_entries(item, f"{prefix}[{ident}]")
    return out


def _parsed_toml(path: str, content: str) -> dict[str, Any]:
    try:
        return tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise ToolError(f"{path} would not be valid TOML after this change ({exc}); the file was left as it "
                        "was") from None


def _plain(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


def _merge_toml(old_text: str, new_text: str) -> tuple[str, list[str], list[str]]:
    """``old_text`` with ``new_text`` merged in (tomlkit keeps the old file's comments and layout): entries the new
    text adds are added, values it changes are changed, entries it leaves out are kept; an array of tables' items
    are matched by :func:`_ident`. Returns the merged text, the entries added and the entries changed."""
    doc, new = tomlkit.parse(old_text), tomlkit.parse(new_text)
    added: list[str] = []
    changed: list[str] = []

    def merge(dst: Any, src: Any, prefix: str) -> None:
        for key, value in src.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            have = dst.get(key)
            if key not in dst:
                dst[key] = value
                added.append(path)
            elif isinstance(have, dict) and isinstance(value, dict):
                merge(have, value, path)
            elif isinstance(have, AoT) and isinstance(value, AoT):
                for item in value:
                    ident = _ident(item)
                    match = next((o for o in have if ident is not None and _ident(o) == ident), None)
                    if match is not None:
                        merge(match, item, f"{path}[{ident}]")
                    elif _plain(item) not in [_plain(o) for o in have]:
                        have.append(item)
                        added.append(f"{path}[{ident if ident is not None else len(have) - 1}]")
            elif _plain(have) != _plain(value):
                dst[key] = value
                changed.append(path)

    merge(doc, new, "")
    return tomlkit.dumps(doc), added, changed


def _checked_toml(path: str, target: Path, content: str, whole: bool) -> tuple[str, str]:
    """What to write for a ``.toml`` change, and a note for the model. A change that does not parse is refused.
    A write of the whole file (``whole``) that leaves out entries the file holds now is merged into it instead
    (small coding models rewrite a settings file from memory, meaning to add one key): the entries it left out
    are kept, and the note names them and what was added or changed."""
    if target.suffix != ".toml":
        return content, ""
    new = _parsed_toml(path, content)
    if not (whole and target.is_file()):
        return content, ""
    old_text = target.read_text(encoding="utf-8", errors="replace")
    try:
        old = tomllib.loads(old_text)
    except tomllib.TOMLDecodeError:
        return content, ""  # nothing sound to compare with: the write may mend it
    held = _toml_entries(old)
    lost = sorted(held - _toml_entries(new))
    if not lost:
        return content, ""
    roots = [e for e in lost if not any(e.startswith((f"{o}.", f"{o}[")) for o in lost if o != e)]
    shown = ", ".join(roots[:12]) + (f" and {len(roots) - 12} more" if len(roots) > 12 else "")
    try:
        merged, added, changed = _merge_toml(old_text, content)
        ok = held <= _toml_entries(tomllib.loads(merged))
    except Exception:  # noqa: BLE001 (a document tomlkit cannot merge: refuse as before)
        ok = False
    if not ok:
        raise ToolError(f"writing the whole of {path} would drop {len(lost)} entries it holds now: {shown}. The "
                        "file was left as it was. Add or change entries with edit_file (its `old` text must occur "
                        "once), or write the file again with every entry kept")
    return merged, (f"; your content left out {len(lost)} entries {path} holds ({shown}): they were kept and your "
                    f"content merged in (added: {', '.join(added) or 'none'}; changed: {', '.join(changed) or 'none'})."
                    " To remove an entry, use edit_file")


@tool(group="write")
def write_file(ctx: ToolContext,
               path: Annotated[str, Field(description="file path relative to the worktree")],
               content: Annotated[str, Field(description="the whole new content of the file")]) -> str:
    """Create or overwrite a file in the worktree (parent folders are created)."""
    target = _writable(ctx, path)
    content, note = _checked_toml(path, target, content, whole=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {path} ({len(content)} characters){note}"


def _nearest(path: str, text: str, old: str) -> str:
    """What to do instead when ``old`` is not in the file: its closest lines, and how to add something new (the
    live 1.5B implementer sent one edit whose `old` line did not exist 15 times, the error unchanged each time)."""
    lines = text.splitlines()
    wanted = next((ln.strip() for ln in old.splitlines() if ln.strip()), "")
    bare = [ln.split(" #", 1)[0].strip() for ln in lines]  # a trailing comment would hide a close line
    close = difflib.get_close_matches(wanted, bare, n=3, cutoff=0.5) if wanted else []
    shown = [f"{n}: {lines[n - 1].rstrip()}" for m in close for n in [bare.index(m) + 1]]
    out = ". Its closest lines: " + "; ".join(shown) if shown else f". Nothing in {path} resembles it"
    out += (". Read the file (read_file) and copy `old` from it. To add something new, take an existing line as "
            "`old` and that line plus yours as `new`")
    if path.endswith(".toml"):
        out += (f", or write_file {path} with only the tables and keys to add (the entries it holds are kept and "
                "yours merged in)")
    return out


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
    if count == 0:
        raise ToolError(f"`old` occurs 0 times in {path}; it must occur exactly once{_nearest(path, text, old)}")
    if count != 1:
        raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once "
                        "(add surrounding lines to make it unique)")
    changed = text.replace(old, new, 1)
    _checked_toml(path, target, changed, whole=False)
    target.write_text(changed, encoding="utf-8")
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
    if why := result.blocked():
        raise ToolRefused(f"{why}\n{text}")
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

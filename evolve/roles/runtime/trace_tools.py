"""Read-only tools over recorded runs: a trajectory step, a trial's spans, a Handbook entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from evolve.roles.runtime.tools import ToolContext, ToolError, tool
from trials.harness_api import ATIF_TRAJECTORY_FILE, RICH_TRAJECTORY_FILE

MAX_SPANS = 80


def _trial_file(ctx: ToolContext, trial: str, name: str) -> Path:
    folder = ctx.resolve_trial(trial)
    for candidate in (folder / "agent" / name, folder / name):
        if candidate.is_file():
            ctx.resolve(candidate)  # the file itself may be a link pointing out
            return candidate
    raise ToolError(f"trial {trial!r} has no {name} (looked in agent/ and the folder itself)")


@tool(group="read")
def trajectory_step(ctx: ToolContext,
                    trial: Annotated[str, Field(description="trial folder relative to the workspace")],
                    episode: Annotated[int, Field(ge=0, description="episode index")]) -> str:
    """The trajectory steps of one episode of a trial: prompt delta, reply, parsed actions, observation."""
    try:  # the rich record; a run from before the split kept it as trajectory.json
        path = _trial_file(ctx, trial, RICH_TRAJECTORY_FILE)
    except ToolError:
        path = _trial_file(ctx, trial, ATIF_TRAJECTORY_FILE)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ToolError(f"{trial}/{path.name} is not JSON: {exc}") from None
    steps = [s for s in doc.get("steps", []) if s.get("episode") == episode]
    if not steps:
        episodes = sorted({s.get("episode") for s in doc.get("steps", []) if s.get("episode") is not None})
        raise ToolError(f"trial {trial!r} has no episode {episode}; episodes: {episodes}")
    return json.dumps(steps, indent=1, ensure_ascii=False)


@tool(group="read")
def spans(ctx: ToolContext,
          trial: Annotated[str, Field(description="trial folder relative to the workspace")],
          episode: Annotated[int | None, Field(description="only this episode")] = None,
          behaviour: Annotated[str | None, Field(description="only spans evidencing this Handbook id")] = None,
          ) -> str:
    """The harness spans of a trial (name, function, episode, status, milliseconds), filtered if asked."""
    from handbook.lookup import read_spans, spans_of_behaviour

    _trial_file(ctx, trial, "spans.jsonl")
    folder = ctx.resolve_trial(trial)
    if behaviour is not None:
        try:
            found = spans_of_behaviour(_handbook(ctx), folder, behaviour, episode)
        except KeyError as exc:
            raise ToolError(str(exc).strip("\"'")) from None
    else:
        found = [s for s in read_spans(folder).spans if episode is None or s.episode == episode]
        found.sort(key=lambda s: s.start_ns)
    rows: list[dict[str, Any]] = [
        {"name": s.name, "function": s.function, "episode": s.episode, "status": s.status,
         "ms": round((s.end_ns - s.start_ns) / 1e6, 2),
         "attributes": {k: _short(v) for k, v in s.attributes.items() if not k.startswith(("code.", "rise.trial"))}}
        for s in found[:MAX_SPANS]]
    more = f"\n[{len(found) - MAX_SPANS} more spans not shown]" if len(found) > MAX_SPANS else ""
    return (json.dumps(rows, indent=1, default=str) + more) if rows else "no spans match"


def _short(value: Any, limit: int = 300) -> Any:
    text = value if isinstance(value, str) else None
    if text is not None and len(text) > limit:
        return text[:limit] + f"... [{len(text) - limit} more characters]"
    return value


def _handbook(ctx: ToolContext):
    from handbook.model import HANDBOOK_FILE, HandbookError, load_handbook

    harness = ctx.harness or ctx.workspace
    path = harness / HANDBOOK_FILE
    if not path.is_file():
        raise ToolError(f"no Handbook for this role: {path} does not exist")
    try:
        return load_handbook(path)
    except HandbookError as exc:
        raise ToolError(str(exc)) from None


@tool(group="read")
def handbook(ctx: ToolContext,
             query: Annotated[str, Field(description="a behaviour id, or a function as module:qualname")]) -> str:
    """The Handbook entry of a behaviour, or the behaviours a function implements."""
    book = _handbook(ctx)
    if ":" in query:
        found = book.behaviours_for_function(query)
        if not found:
            raise ToolError(f"no behaviour lists function {query!r}")
    else:
        try:
            found = [book.behaviour(query)]
        except KeyError as exc:
            raise ToolError(str(exc).strip("\"'")) from None
    return json.dumps([b.model_dump(exclude_defaults=True) for b in found], indent=1)

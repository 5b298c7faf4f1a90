"""Turn N sampled replies into unique candidates: parse each, merge identical actions, keep counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Candidate:
    """One distinct action proposed at this step (possibly sampled several times)."""

    id: int  # position among the unique candidates, in order of first appearance
    members: list[int]  # indices of the samples that proposed it
    reply: Any  # the first member's ModelReply (what the loop receives if this one wins)
    commands: list[tuple[str, float]]
    task_complete: bool
    valid: bool  # parsed without error and not cut by the output limit
    error: str | None = None
    output_tokens: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.members)

    def key(self) -> tuple:
        # Unparseable replies are never merged: their "actions" are not comparable.
        if not self.valid:
            return ("invalid", self.members[0])
        return ("ok", tuple(self.commands), self.task_complete)

    def record(self) -> dict:
        """The JSON form logged in the step."""
        return {
            "id": self.id,
            "members": self.members,
            "count": self.count,
            "valid": self.valid,
            "error": self.error,
            "commands": [{"keystrokes": k, "duration": d} for k, d in self.commands],
            "task_complete": self.task_complete,
            "output_tokens": self.output_tokens,
            "text": getattr(self.reply, "text", ""),
        }


def commands_of(parsed: Any) -> list[tuple[str, float]]:
    """(keystrokes, duration) pairs of a ParseResult, tolerant of a missing command list."""
    out = []
    for c in getattr(parsed, "commands", None) or []:
        out.append((str(getattr(c, "keystrokes", "")), float(getattr(c, "duration", 0.0) or 0.0)))
    return out


def merge_candidates(replies: list[Any], parse_fn: Callable[[str], Any]) -> list[Candidate]:
    """Parse every reply and merge those with the same commands and completion flag."""
    unique: list[Candidate] = []
    by_key: dict[tuple, Candidate] = {}
    for i, reply in enumerate(replies):
        error = None
        try:
            parsed = parse_fn(reply.text or "")
            error = getattr(parsed, "error", None) or None
        except Exception as exc:  # noqa: BLE001 - a parser crash is this candidate's problem, not the step's
            parsed, error = None, f"parser raised {type(exc).__name__}: {exc}"
        if error is None and getattr(reply, "finish_reason", None) == "length":
            error = "output cut at the length limit; none of its actions would run"
        cand = Candidate(
            id=len(unique),
            members=[i],
            reply=reply,
            commands=commands_of(parsed) if parsed is not None else [],
            task_complete=bool(getattr(parsed, "task_complete", False)) if parsed is not None else False,
            valid=error is None,
            error=error,
            output_tokens=[int(getattr(reply, "output_tokens", 0) or 0)],
        )
        found = by_key.get(cand.key())
        if found is not None:
            found.members.append(i)
            found.output_tokens.extend(cand.output_tokens)
            continue
        by_key[cand.key()] = cand
        unique.append(cand)
    return unique

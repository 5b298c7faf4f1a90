"""When the run ends: the double-confirmation handshake.

The first reply that claims the task is complete only arms a pending flag (the loop then asks "are you
sure?" with the current terminal state); a second consecutive claim ends the run; any other reply, a parse
error included, disarms it. Commands in a claiming reply still run before the question is asked.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class Verdict(str, Enum):
    CONTINUE = "continue"  # not a claim: go on with the observation
    CONFIRM = "confirm"  # first claim: ask the model to confirm
    DONE = "done"  # confirmed claim: stop


class CompletionHandshake:
    """State of the claim protocol. ``confirmations`` is how many consecutive claims end the run (2 in the
    reference; 1 ends at the first claim)."""

    def __init__(self, confirmations: int = 2):
        self.confirmations = max(1, int(confirmations))
        self.streak = 0

    @property
    def pending(self) -> bool:
        return self.streak > 0

    def on_reply(self, parsed: Any) -> Verdict:
        """Update the state for a parsed reply (a ParseResult, or None for a reply that could not be used)."""
        if parsed is None or getattr(parsed, "error", None) is not None or not parsed.task_complete:
            self.streak = 0
            return Verdict.CONTINUE
        self.streak += 1
        if self.streak >= self.confirmations:
            return Verdict.DONE
        return Verdict.CONFIRM

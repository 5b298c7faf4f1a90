"""What a parsed model reply holds, in both response formats: the commands to send and the parse verdict.

Its own module so that the dispatcher (``parsing``) and the two parsers (``parser_json``, ``parser_xml``) all
import it and none of them imports another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Format = Literal["json", "xml"]


@dataclass
class Command:
    """Keystrokes for the tmux pane and how many seconds to wait after sending them."""

    keystrokes: str
    duration: float = 1.0


@dataclass
class ParseResult:
    """One reply, parsed. ``error`` set means: run nothing and ask the model to fix the reply."""

    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    analysis: str = ""
    plan: str = ""
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

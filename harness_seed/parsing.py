"""What a model reply means: the parse result shared by both response formats, and the dispatcher.

The two parsers (``parser_json``, ``parser_xml``) never raise on bad model output: they return a
:class:`ParseResult` whose ``error`` says what the model must fix (nothing runs then) and whose ``warnings``
say what was tolerated (the next observation starts with them).
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


def parse_response(text: str, fmt: Format = "json") -> ParseResult:
    """Parse ``text`` in the configured response format (``json`` or ``xml``)."""
    if fmt == "json":
        return parser_json.parse(text)
    if fmt == "xml":
        return parser_xml.parse(text)
    raise ValueError(f"unknown response format {fmt!r} (json or xml)")


def salvage_truncated(text: str, fmt: Format = "json") -> tuple[str | None, bool]:
    """A usable reply cut from an output-length-truncated ``text`` (XML only), and whether it held several
    response blocks. JSON replies are never salvaged (as in the reference)."""
    if fmt == "xml":
        return parser_xml.salvage_truncated(text)
    return None, False


# The parsers build the dataclasses above, so they are imported after them.
from . import parser_json, parser_xml

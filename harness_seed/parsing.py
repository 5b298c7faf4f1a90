"""What a model reply means: the dispatcher to the parser of the configured response format.

The two parsers (``parser_json``, ``parser_xml``) never raise on bad model output: they return a
:class:`ParseResult` (parse_result.py, re-exported here) whose ``error`` says what the model must fix (nothing
runs then) and whose ``warnings`` say what was tolerated (the next observation starts with them).
"""

from __future__ import annotations

from . import parser_json, parser_xml
from .parse_result import Command, Format, ParseResult

__all__ = ["Command", "Format", "ParseResult", "parse_response", "salvage_truncated"]


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


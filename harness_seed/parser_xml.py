"""The XML response format (contents are raw text, never XML-escaped)::

    <response>
    <analysis>...</analysis>
    <plan>...</plan>
    <commands>
    <keystrokes duration="0.1">ls -la
    </keystrokes>
    </commands>
    <task_complete>true</task_complete>
    </response>

The body is read left to right (no XML library: keystrokes may hold ``<``, ``&`` or even ``</commands>``).
Errors: no ``<response>``, an unclosed section or keystrokes element, no ``<commands>`` section (unless the
reply claims completion), an unclosed ``</response>`` (auto-fixed when the rest parses). Warnings: text around
the block, several blocks, missing analysis/plan, sections out of order or repeated, unknown tags or
attributes, missing/invalid duration, a non-final command without a trailing newline, XML entities (sent
literally), stray text between keystrokes. :func:`salvage_truncated` recovers a reply cut off by the output
limit when its commands were complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .parsing import Command, ParseResult

SECTIONS = ("analysis", "plan", "commands", "task_complete")
DEFAULT_DURATION = 1.0
OPEN, CLOSE = "<response>", "</response>"

_TAG = re.compile(r"<(/?)([A-Za-z_][\w-]*)([^<>]*?)(/?)>")
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|(\S+))""")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|apos|#\d+|#x[0-9a-fA-F]+);")


@dataclass
class _Scan:
    """What one left-to-right pass over a response body found."""

    sections: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    command_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    commands_end: int | None = None  # index just after </commands> (or <commands/>)
    response_end: int | None = None  # index just after </response>


def _attrs(raw: str) -> dict[str, str]:
    return {m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _ATTR.finditer(raw)}


def _read_commands(text: str, pos: int, scan: _Scan) -> int | None:
    """Read ``<keystrokes>`` elements from ``pos`` up to ``</commands>``; the index after it, or None."""
    index = 0
    while True:
        m = _TAG.search(text, pos)
        if m is None:
            scan.error = "Missing </commands> closing tag"
            return None
        stray = text[pos:m.start()].strip()
        if stray:
            scan.warnings.append(f"Text outside <keystrokes> inside <commands> was ignored: {stray[:60]!r}")
        closing, name, raw_attrs, self_closing = m.group(1) == "/", m.group(2), m.group(3), m.group(4) == "/"
        if closing and name == "commands":
            return m.end()
        if closing or name != "keystrokes":
            scan.warnings.append(f"Unknown tag <{'/' if closing else ''}{name}> inside <commands> was ignored")
            pos = m.end()
            continue
        index += 1
        attrs = _attrs(raw_attrs)
        if self_closing:
            keys, pos = "", m.end()
        else:
            end = text.find("</keystrokes>", m.end())
            if end == -1:
                scan.command_errors.append(f"Command {index}: missing </keystrokes> closing tag")
                scan.error = scan.command_errors[-1]
                return None
            keys, pos = text[m.end():end], end + len("</keystrokes>")
        unknown = sorted(set(attrs) - {"duration"})
        if unknown:
            scan.warnings.append(f"Command {index}: Unknown attributes: {', '.join(unknown)}")
        if "duration" not in attrs:
            scan.warnings.append(f"Command {index}: Missing duration attribute, using default {DEFAULT_DURATION}")
            duration = DEFAULT_DURATION
        else:
            try:
                duration = float(attrs["duration"])
            except ValueError:
                scan.warnings.append(
                    f"Command {index}: Invalid duration value {attrs['duration']!r}, using default "
                    f"{DEFAULT_DURATION}")
                duration = DEFAULT_DURATION
        if _ENTITY.search(keys):
            scan.warnings.append(
                f"Command {index}: contains XML entities such as &lt; that are typed literally; write the "
                "characters themselves")
        scan.commands.append(Command(keystrokes=keys, duration=duration))


def _scan(text: str, start: int) -> _Scan:
    """Read the body that starts after ``<response>`` at ``start``."""
    scan, pos = _Scan(), start
    while True:
        m = _TAG.search(text, pos)
        if m is None:
            scan.error = f"Missing {CLOSE} closing tag"
            return scan
        stray = text[pos:m.start()].strip()
        if stray:
            scan.warnings.append(f"Text outside any section was ignored: {stray[:60]!r}")
        closing, name, self_closing = m.group(1) == "/", m.group(2), m.group(4) == "/"
        if closing and name == "response":
            scan.response_end = m.end()
            return scan
        if closing or name not in SECTIONS:
            scan.warnings.append(f"Unknown tag <{'/' if closing else ''}{name}> was ignored")
            pos = m.end()
            continue
        if name in scan.sections:
            scan.warnings.append(f"Section <{name}> appears more than once; the last one is used")
        scan.order.append(name)
        if name == "commands":
            if self_closing:
                end = m.end()
            else:
                end = _read_commands(text, m.end(), scan)
                if end is None:
                    return scan
            scan.sections[name], scan.commands_end, pos = text[m.end():end], end, end
            continue
        if self_closing:
            scan.sections[name], pos = "", m.end()
            continue
        close = text.find(f"</{name}>", m.end())
        if close == -1:
            scan.error = f"Missing </{name}> closing tag"
            return scan
        scan.sections[name], pos = text[m.end():close], close + len(name) + 3


def _check_order(scan: _Scan, warnings: list[str]) -> None:
    seen = list(dict.fromkeys(scan.order))
    expected = [s for s in SECTIONS if s in seen]
    if seen != expected:
        warnings.append(
            f"Sections appear in the wrong order: found {' -> '.join(seen)}, expected {' -> '.join(expected)}")


def try_parse(text: str) -> ParseResult:
    """One parse attempt, without auto-fixes."""
    start = text.find(OPEN)
    if start == -1:
        return ParseResult(error=f"No {OPEN} tag found in response")
    warnings: list[str] = []
    if text[:start].strip():
        warnings.append(f"Extra text detected before {OPEN} tag")
    if text.count(OPEN) > 1:
        warnings.append(f"Found {text.count(OPEN)} {OPEN} blocks; only the first was used")
    scan = _scan(text, start + len(OPEN))
    warnings.extend(scan.warnings)
    analysis = scan.sections.get("analysis", "").strip()
    plan = scan.sections.get("plan", "").strip()
    raw_complete = scan.sections.get("task_complete", "").strip().lower()
    complete = raw_complete in ("true", "1", "yes")
    if raw_complete and raw_complete not in ("true", "false", "1", "0", "yes", "no"):
        warnings.append(f"<task_complete> should be true or false, not {raw_complete[:20]!r}")
    if scan.error is not None:
        if complete and scan.command_errors:
            warnings.extend(scan.command_errors)
            return ParseResult(task_complete=True, analysis=analysis, plan=plan, warnings=warnings)
        return ParseResult(analysis=analysis, plan=plan, error=scan.error, warnings=warnings)
    if scan.response_end is not None and text[scan.response_end:].strip() and text.count(OPEN) == 1:
        warnings.append(f"Extra text detected after {CLOSE} tag")
    _check_order(scan, warnings)
    for name in ("analysis", "plan"):
        if name not in scan.sections:
            warnings.append(f"Missing <{name}> section")
    if "commands" not in scan.sections:
        if not complete:
            return ParseResult(analysis=analysis, plan=plan, error="Missing <commands> section",
                               warnings=warnings)
        warnings.append("Missing <commands> section")
    commands = scan.commands
    for i, cmd in enumerate(commands[:-1], start=1):
        if not cmd.keystrokes.endswith("\n"):
            warnings.append(
                f"Command {i} should end with a newline when another command follows it; otherwise the two "
                "are typed on the same line")
    return ParseResult(commands=commands, task_complete=complete, analysis=analysis, plan=plan,
                       warnings=warnings)


def parse(text: str) -> ParseResult:
    """Parse an XML-format reply; a missing ``</response>`` is auto-corrected when the rest is sound."""
    result = try_parse(text)
    if result.error == f"Missing {CLOSE} closing tag":
        fixed = try_parse(text.rstrip() + "\n" + CLOSE)
        if fixed.error is None:
            fixed.warnings.insert(
                0, f"AUTO-CORRECTED: Added missing {CLOSE} closing tag - please fix this in future responses")
            return fixed
    return result


def salvage_truncated(text: str) -> tuple[str | None, bool]:
    """From a reply cut off by the output limit: a complete reply ending after its ``</commands>`` (or its
    ``</response>``), when that parses without error; and whether the text held several response blocks."""
    multiple = text.count(OPEN) > 1
    start = text.find(OPEN)
    if start == -1:
        return None, multiple
    scan = _scan(text, start + len(OPEN))
    if scan.response_end is not None:
        candidate = text[:scan.response_end]
    elif scan.commands_end is not None:
        candidate = text[:scan.commands_end] + "\n" + CLOSE
    else:
        return None, multiple
    if try_parse(candidate).error is None:
        return candidate, multiple
    return None, multiple

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

The decisions follow the reference parser (checked case by case by ``tests/test_harbor_diff.py``): each
section is its first ``<name>...</name>`` (or ``<name/>``) inside the first response block; a section that is
missing or never closed is a warning (the rest still runs), except that a missing ``<commands>`` is an error
unless the reply claims completion. Completion is claimed by ``<task_complete>true</task_complete>`` (any
case, spaces allowed) outside the commands. Warnings: text around the block, several blocks or several
``<commands>`` (only the first runs), repeated or out-of-order sections, unknown top-level tags, unknown or
badly quoted attributes, a missing or invalid duration, a non-final command without a trailing newline,
XML entities and literal ``\\r\\n`` (typed as written), an empty commands block without completion.
Where the seed differs on purpose (a missing ``</response>`` is said, an unclosed ``<keystrokes>`` is said,
salvage after ``</commands>``), see DIFFERENCES.md.
"""

from __future__ import annotations

import re

from .parse_result import Command, ParseResult

SECTIONS = ("analysis", "plan", "commands")  # required, in this order; task_complete is optional
KNOWN_TAGS = (*SECTIONS, "task_complete")
DEFAULT_DURATION = 1.0
OPEN, CLOSE = "<response>", "</response>"
NO_RESPONSE = f"No {OPEN} tag found"
AUTO_FIX = f"AUTO-CORRECTED: Missing {CLOSE} tag was automatically inserted - please fix this in future responses"

_KEYSTROKES = re.compile(r"<keystrokes([^>]*)>(.*?)</keystrokes>", re.DOTALL)
_COMPLETE = re.compile(r"<task_complete>\s*true\s*</task_complete>", re.IGNORECASE)
_TAG = re.compile(r"<(/?)([A-Za-z_][\w.-]*)[^<>]*?(/?)>")
_ATTR_NAME = re.compile(r"(\w+)\s*=")
_ATTR_UNQUOTED = re.compile(r"""(\w+)\s*=\s*([^"'\s>]+)""")
_ATTR_SINGLE = re.compile(r"(\w+)\s*=\s*'([^']*)'")
_DURATION = re.compile(r"""duration\s*=\s*["']([^"']*)["']""")
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'"}
_NEWLINE_WARNING = ("Command {i} should end with a newline when another command follows it; otherwise the two "
                    "are typed on the same line")


def _opening(name: str) -> re.Pattern[str]:
    return re.compile(rf"<{name}(?:\s|>|/>)")


def _section(body: str, name: str) -> tuple[str | None, tuple[int, int] | None]:
    """(content, span) of the first closed ``<name>`` element, ``("", span)`` for ``<name/>``, else Nones."""
    m = re.search(rf"<{name}>(.*?)</{name}>", body, re.DOTALL)
    if m:
        return m.group(1).strip(), m.span()
    m = re.search(rf"<{name}\s*/>", body)
    if m:
        return "", m.span()
    return None, None


def _top_level_tags(body: str, spans: list[tuple[int, int]]) -> list[str]:
    """Names of the tags directly inside the response block, outside the known sections' spans."""
    names, depth = [], 0
    for m in _TAG.finditer(body):
        if any(a <= m.start() < b for a, b in spans):
            continue
        closing, name, self_closing = m.group(1) == "/", m.group(2), m.group(3) == "/"
        if closing:
            depth = max(depth - 1, 0)
            continue
        if depth == 0:
            names.append(name)
        if not self_closing:
            depth += 1
    return names


def _attribute_warnings(attrs: str, i: int, warnings: list[str]) -> None:
    for name, value in _ATTR_UNQUOTED.findall(attrs):
        warnings.append(f'Command {i}: Attribute \'{name}\' value should be quoted: {name}="{value}"')
    for name, value in _ATTR_SINGLE.findall(attrs):
        warnings.append(f'Command {i}: Use double quotes for attribute \'{name}\': {name}="{value}"')
    for name in _ATTR_NAME.findall(attrs):
        if name != "duration":
            warnings.append(f"Command {i}: Unknown attribute '{name}' - known attributes are: duration")


def _read_commands(content: str, warnings: list[str]) -> list[Command]:
    commands: list[Command] = []
    found = list(_KEYSTROKES.finditer(content))
    for i, m in enumerate(found, start=1):
        attrs, keys = m.group(1), m.group(2)
        _attribute_warnings(attrs, i, warnings)
        duration = DEFAULT_DURATION
        dm = _DURATION.search(attrs)
        if dm is None:
            warnings.append(f"Command {i}: Missing duration attribute, using default {DEFAULT_DURATION}")
        else:
            try:
                duration = float(dm.group(1))
            except ValueError:
                warnings.append(f"Command {i}: Invalid duration value '{dm.group(1)}', using default "
                                f"{DEFAULT_DURATION}")
        if i < len(found) and not keys.endswith("\n"):
            warnings.append(_NEWLINE_WARNING.format(i=i))
        commands.append(Command(keystrokes=keys, duration=duration))
    leftover = _KEYSTROKES.sub("", content)
    if _opening("keystrokes").search(leftover):  # the reference drops it silently; the model should know
        warnings.append("A <keystrokes> element without </keystrokes> was not run")
    for entity, char in _ENTITIES.items():
        if entity in content:
            warnings.append(f"{entity} is typed literally, not as {char}: write the character itself")
    if "\\r\\n" in content:
        warnings.append("\\r\\n line endings are not needed; use \\n")
    return commands


def _around(text: str, start: int, warnings: list[str]) -> None:
    if text[:start].strip():
        warnings.append(f"Extra text detected before {OPEN} tag")
    end = text.find(CLOSE, start)
    if end != -1 and text[end + len(CLOSE):].strip():
        warnings.append(f"Extra text detected after {CLOSE} tag")
        blocks = text.count(OPEN)
        if blocks > 1:
            warnings.append(f"IMPORTANT: Only issue one {OPEN} block at a time. You issued {blocks} and only "
                            "the first was executed.")


def try_parse(text: str) -> ParseResult:
    """One parse attempt, without the missing-``</response>`` fix."""
    start = text.find(OPEN)
    if start == -1:
        return ParseResult(error=NO_RESPONSE)
    warnings: list[str] = []
    _around(text, start, warnings)
    end = text.find(CLOSE, start)
    if end == -1:
        return ParseResult(error=f"Missing {CLOSE} closing tag", warnings=warnings)
    body = text[start + len(OPEN):end].strip()
    found = {name: _section(body, name) for name in KNOWN_TAGS}
    commands_span = found["commands"][1]
    outside = body if commands_span is None else body[:commands_span[0]] + body[commands_span[1]:]
    complete = _COMPLETE.search(outside) is not None
    for name in SECTIONS:
        if found[name][0] is None:
            warnings.append(f"Missing <{name}> section")
    spans = [span for _, span in found.values() if span is not None]
    for tag in dict.fromkeys(_top_level_tags(body, spans)):
        if tag not in KNOWN_TAGS:
            warnings.append(f"Unknown tag found: <{tag}>, expected analysis/plan/commands/task_complete")
    for name in KNOWN_TAGS:
        count = len(_opening(name).findall(body))
        if count > 1 and name == "commands":
            warnings.append(f"IMPORTANT: Only issue one <commands> block at a time. You issued {count} and only "
                            "the first was executed.")
        elif count > 1:
            warnings.append(f"Multiple <{name}> sections found")
    first = {name: m.start() for name in SECTIONS if (m := _opening(name).search(body))}
    if list(first) != sorted(first, key=first.__getitem__):
        warnings.append(f"Sections appear in the wrong order: found "
                        f"{' -> '.join(sorted(first, key=first.__getitem__))}, expected {' -> '.join(first)}")
    analysis, plan, content = found["analysis"][0] or "", found["plan"][0] or "", found["commands"][0]
    if content is None and not complete:
        return ParseResult(analysis=analysis, plan=plan, error="Missing <commands> section", warnings=warnings)
    if not content:
        if content is not None and not complete:
            warnings.append("Commands section is empty; nothing was run. To wait for a running command, send "
                            "an empty <keystrokes> with a duration; to pause on purpose, run sleep")
        return ParseResult(task_complete=complete, analysis=analysis, plan=plan, warnings=warnings)
    commands = _read_commands(content, warnings)
    return ParseResult(commands=commands, task_complete=complete, analysis=analysis, plan=plan,
                       warnings=warnings)


def parse(text: str) -> ParseResult:
    """Parse an XML-format reply; a missing ``</response>`` is inserted (and said) when the rest is sound."""
    result = try_parse(text)
    if result.error == f"Missing {CLOSE} closing tag":
        fixed = try_parse(text.rstrip() + "\n" + CLOSE)
        if fixed.error is None:
            fixed.warnings.insert(0, AUTO_FIX)
        return fixed  # when it still fails, its error says what is missing inside (as the reference's does)
    return result


def salvage_truncated(text: str) -> tuple[str | None, bool]:
    """From a reply cut off by the output limit: the text up to its first ``</response>`` after
    ``</commands>`` (or up to ``</commands>`` with ``</response>`` added), when that parses without error and
    without the several-blocks warning; and whether several blocks were seen."""
    commands_end = text.find("</commands>")
    if commands_end == -1:
        return None, False
    commands_end += len("</commands>")
    response_end = text.find(CLOSE, commands_end)
    candidate = (text[:commands_end] + "\n" + CLOSE if response_end == -1
                 else text[:response_end + len(CLOSE)])
    result = parse(candidate)
    multiple = any("Only issue one" in w for w in result.warnings)
    if result.error is None and not multiple:
        return candidate, False
    return None, multiple

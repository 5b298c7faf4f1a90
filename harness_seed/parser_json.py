"""The JSON response format: ``{"analysis", "plan", "commands": [{"keystrokes", "duration"}], "task_complete"}``.

Behaviour (TERMINUS2.md): the first balanced ``{...}`` found by a string-aware brace scan is the reply.
Errors (nothing runs): no JSON, invalid JSON (with a preview), missing required fields, ``commands`` not an
array, a command that is not an object or lacks string keystrokes. Warnings (tolerated, reported back): text
before/after the object, missing or invalid duration, unknown command fields, fields out of order, a non-final
command (other than an empty wait) without a trailing newline. When a reply has an error, the auto-fixes are tried in order; the first
that yields an error-free parse wins and adds an ``AUTO-CORRECTED`` warning. A reply that claims completion
turns command errors into warnings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .parse_result import Command, ParseResult

REQUIRED_FIELDS = ("analysis", "plan", "commands")
COMMAND_FIELDS = {"keystrokes", "duration"}
DEFAULT_DURATION = 1.0
PREVIEW_WHOLE_BELOW = 200  # invalid JSON shorter than this is quoted whole, else its first 100 chars
PREVIEW_CHARS = 100


def scan_object(text: str) -> tuple[int, int | None, int]:
    """(start, end, depth) of the first balanced ``{...}``, skipping braces inside strings.

    ``start`` is -1 when there is no ``{``; ``end`` (exclusive) is None when the object never closes, and
    ``depth`` is then the number of braces still open at the end of the text.
    """
    start, depth, in_string, escaped = -1, 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
            continue
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                return start, i + 1, 0
    return start, None, depth


def _is_task_complete(value: Any) -> bool:
    """A string claims completion when it reads true/1/yes; any other value by its truth (``1`` claims it,
    with a type warning, as in the reference)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _check_order(data: dict, warnings: list[str]) -> None:
    present = [k for k in data if k in REQUIRED_FIELDS]
    expected = [k for k in REQUIRED_FIELDS if k in data]
    if present != expected:
        warnings.append(
            f"Fields appear in the wrong order: found {' -> '.join(present)}, expected {' -> '.join(expected)}"
        )


def _parse_commands(items: list, warnings: list[str]) -> tuple[list[Command], str | None]:
    commands: list[Command] = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return [], f"Command {i} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {i} missing required 'keystrokes' field"
        keys = item["keystrokes"]
        if not isinstance(keys, str):
            return [], f"Command {i} 'keystrokes' must be a string"
        duration = item.get("duration")
        if "duration" not in item:
            warnings.append(f"Command {i}: Missing duration field, using default {DEFAULT_DURATION}")
            duration = DEFAULT_DURATION
        elif not isinstance(duration, (int, float)):  # a boolean is a number here (true = 1 s), as in the reference
            warnings.append(f"Command {i}: Invalid duration value {duration!r}, using default {DEFAULT_DURATION}")
            duration = DEFAULT_DURATION
        unknown = sorted(set(item) - COMMAND_FIELDS)
        if unknown:
            warnings.append(f"Command {i}: Unknown fields: {', '.join(unknown)}")
        if i < len(items) and keys and not keys.endswith("\n"):  # an empty keystroke only waits
            warnings.append(
                f"Command {i} should end with a newline when another command follows it; otherwise the two "
                "are typed on the same line"
            )
        commands.append(Command(keystrokes=keys, duration=float(duration)))
    return commands, None


def try_parse(text: str) -> ParseResult:
    """One parse attempt, without auto-fixes."""
    warnings: list[str] = []
    start, end, _ = scan_object(text)
    if start == -1 or end is None:
        return ParseResult(error="No valid JSON found in response", warnings=["No valid JSON object found"])
    if text[:start].strip():
        warnings.append("Extra text detected before JSON object")
    if text[end:].strip():
        warnings.append("Extra text detected after JSON object")
    body = text[start:end]
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        if len(body) < PREVIEW_WHOLE_BELOW:
            preview = f" | Content: {body!r}"
        else:
            preview = f" | Content preview: {body[:PREVIEW_CHARS]!r}..."
        return ParseResult(error=f"Invalid JSON: {exc}{preview}", warnings=warnings)
    if not isinstance(data, dict):
        return ParseResult(error="Response must be a JSON object", warnings=warnings)
    missing = [k for k in REQUIRED_FIELDS if k not in data]
    if missing:
        return ParseResult(error=f"Missing required fields: {', '.join(missing)}", warnings=warnings)
    for key in ("analysis", "plan"):
        if not isinstance(data[key], str):
            warnings.append(f"Field '{key}' should be a string")
    if not isinstance(data["commands"], list):
        return ParseResult(error="Field 'commands' must be an array", warnings=warnings)
    _check_order(data, warnings)
    raw_complete = data.get("task_complete", False)
    if raw_complete is not None and not isinstance(raw_complete, (bool, str)):
        warnings.append("Field 'task_complete' should be a boolean or string")
    complete = _is_task_complete(raw_complete)
    analysis, plan = str(data["analysis"]), str(data["plan"])
    commands, error = _parse_commands(data["commands"], warnings)
    if error is not None:
        if complete:  # a finishing reply is not refused for a broken command; the command just doesn't run
            warnings.append(error)
            return ParseResult(task_complete=True, analysis=analysis, plan=plan, warnings=warnings)
        return ParseResult(analysis=analysis, plan=plan, error=error, warnings=warnings)
    return ParseResult(commands=commands, task_complete=complete, analysis=analysis, plan=plan,
                       warnings=warnings)


# -- auto-fixes: (description, fn(text, error) -> fixed text or None) --------------------------------


def fix_missing_braces(text: str, error: str) -> str | None:
    """A reply cut short before its closing brace(s): add them."""
    if not any(s in error for s in ("No valid JSON", "Invalid JSON", "Expecting", "Unterminated")):
        return None
    start, end, depth = scan_object(text)
    if start == -1 or end is not None or depth <= 0:
        return None
    return text + "}" * depth


def fix_mixed_content(text: str, error: str) -> str | None:
    """The first ``{`` belonged to prose (or a broken draft): take the first later object that is valid."""
    pos = text.find("{")
    while pos != -1:
        start, end, _ = scan_object(text[pos:])
        if end is not None:
            candidate = text[pos + start: pos + end]
            try:
                if isinstance(json.loads(candidate), dict):
                    return candidate
            except json.JSONDecodeError:
                pass
        pos = text.find("{", pos + 1)
    return None


AUTO_FIXES: list[tuple[str, Callable[[str, str], str | None]]] = [
    ("Fixed incomplete JSON by adding missing closing brace", fix_missing_braces),
    ("Extracted JSON from mixed content", fix_mixed_content),
]


def parse(text: str) -> ParseResult:
    """Parse a JSON-format reply, trying the auto-fixes when the plain parse has an error."""
    result = try_parse(text)
    if result.error is None:
        return result
    for description, fix in AUTO_FIXES:
        fixed = fix(text, result.error)
        if fixed is None or fixed == text:
            continue
        retry = try_parse(fixed)
        if retry.error is None:
            retry.warnings.insert(0, f"AUTO-CORRECTED: {description} - please fix this in future responses")
            return retry
    return result

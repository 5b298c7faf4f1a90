"""What the model sees of the terminal after its commands ran.

Incremental output: the whole scrollback is captured and compared with the previous capture; what was added
since (starting with the line the previous capture ended on, which usually holds the prompt and the typed
command) is shown as ``New Terminal Output:``. When the previous capture can no longer be found (the screen
was cleared, or history scrolled away) or nothing new appeared, the visible pane is shown as
``Current Terminal Screen:``. Long text keeps its head and tail (:func:`limit_output`).
"""

from __future__ import annotations

from dataclasses import dataclass

NEW_OUTPUT = "New Terminal Output:\n"
CURRENT_SCREEN = "Current Terminal Screen:\n"


@dataclass
class Observation:
    """The text for the model and the capture to diff the next one against."""

    text: str
    buffer: str
    incremental: bool


def limit_output(text: str, limit: int = 10000) -> str:
    """Keep at most ``limit`` bytes of ``text``: the first and the last ``limit // 2`` bytes, joined by a line
    that says how many interior bytes were dropped (cuts never split a UTF-8 character)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", errors="ignore")
    tail = data[-half:].decode("utf-8", errors="ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... output limited to {limit} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def new_content(previous: str, current: str) -> str | None:
    """The part of ``current`` added after ``previous``, from the start of ``previous``'s last line; None when
    ``previous`` is not found in ``current``."""
    old = previous.strip()
    if not old:
        return current
    at = current.find(old)
    if at == -1:
        return None
    last_line = old.rfind("\n") + 1  # 0 when the previous capture was a single line
    return current[at + last_line:]


def build_observation(buffer: str, screen: str, previous: str | None, incremental: bool = True) -> Observation:
    """The observation for a fresh capture: ``buffer`` is the whole scrollback, ``screen`` the visible pane,
    ``previous`` the scrollback of the last observation (None at the start)."""
    if incremental and previous is not None:
        added = new_content(previous, buffer)
        if added is not None and added.strip():
            # The scrollback ends with the empty rows below the cursor; they say nothing.
            return Observation(NEW_OUTPUT + added.rstrip() + "\n", buffer, True)
    return Observation(CURRENT_SCREEN + screen, buffer, False)

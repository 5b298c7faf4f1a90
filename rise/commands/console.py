"""The consoles every ``rise`` command prints through.

Messages are never wrapped at the terminal width (80 columns when output is a file or a pipe): a wrapped error
splits a path or a key across lines, which breaks ``grep`` over overnight logs and any check on the text.
"""

from __future__ import annotations

from rich.console import Console


def out() -> Console:
    """Standard output, no highlighting, no wrapping."""
    return Console(highlight=False, soft_wrap=True)


def err() -> Console:
    """Standard error, no highlighting, no wrapping."""
    return Console(stderr=True, highlight=False, soft_wrap=True)

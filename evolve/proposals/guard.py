"""The overfitting guard: a proposal or a candidate's patch that quotes a development task's instruction or
test content is refused. Proposals must adapt the harness, not teach it one task's answer.

A *quote* is either a line of the task's text of at least :data:`MIN_LINE` characters, or a run of
:data:`MIN_WORDS` consecutive words, found (whitespace-normalised, case-insensitive) in the proposal's text or in
the lines a patch adds. Short common lines (``set -e``, a shebang) are too short to count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

MIN_LINE = 30
MIN_WORDS = 8
TEXT_SUFFIXES = {".md", ".sh", ".py", ".txt", ".json", ".toml", ".yaml", ".yml", ""}
_WS = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z0-9_./-]+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


class Quote(BaseModel):
    task: str
    file: str = Field(description="the task file it comes from, relative to the task folder")
    text: str = Field(description="what was quoted (clipped)")


class GuardReport(BaseModel):
    """The guard's verdict on one text; ``refused`` when it quotes a development task."""

    what: str
    quotes: list[Quote] = Field(default_factory=list)

    @property
    def refused(self) -> bool:
        return bool(self.quotes)

    def reason(self) -> str:
        if not self.quotes:
            return ""
        shown = "; ".join(f"{q.task}/{q.file}: {q.text!r}" for q in self.quotes[:5])
        return (f"overfitting guard: the {self.what} quotes development task content ({len(self.quotes)} "
                f"quote(s): {shown}); a mechanism must not carry a task's instruction or tests")


@dataclass
class _Source:
    task: str
    file: str
    lines: list[str]
    grams: set[tuple[str, ...]] = field(default_factory=set)


class OverfitGuard:
    """The development tasks' instructions and test files, ready to be searched for in proposals and patches."""

    def __init__(self, tasks_dir: str | Path, tasks: list[str]):
        self.sources: list[_Source] = []
        root = Path(tasks_dir)
        for task in tasks:
            folder = root / task
            files = [folder / "instruction.md", folder / "task.yaml"]
            tests = folder / "tests"
            if tests.is_dir():
                files += sorted(p for p in tests.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
            for path in files:
                if not path.is_file():
                    continue
                try:
                    text = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue  # a binary fixture cannot be quoted in a text proposal
                lines = [n for ln in text.splitlines() if len(n := _norm(ln)) >= MIN_LINE]
                words = [w.lower() for w in _WORD.findall(text)]
                grams = {tuple(words[i:i + MIN_WORDS]) for i in range(len(words) - MIN_WORDS + 1)}
                self.sources.append(_Source(task, str(path.relative_to(folder)), lines, grams))

    def check(self, text: str, what: str = "proposal") -> GuardReport:
        """Quotes of any development task in ``text``."""
        norm = _norm(text)
        words = [w.lower() for w in _WORD.findall(text)]
        grams = {tuple(words[i:i + MIN_WORDS]) for i in range(len(words) - MIN_WORDS + 1)}
        quotes: list[Quote] = []
        for src in self.sources:
            hit = next((ln for ln in src.lines if ln in norm), None)
            if hit is None:
                common = src.grams & grams
                hit = " ".join(min(common)) if common else None
            if hit is not None:
                quotes.append(Quote(task=src.task, file=src.file, text=hit[:120]))
        return GuardReport(what=what, quotes=quotes)

    def check_patch(self, diff: str) -> GuardReport:
        """Quotes in the lines a unified diff adds (context and removed lines are the incumbent's own)."""
        added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        return self.check("\n".join(added), what="patch")

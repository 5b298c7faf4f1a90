"""The overfitting guard: a proposal or a candidate's patch that quotes a development task's instruction, config,
tests or reference solution is refused. Proposals must adapt the harness, not teach it one task's answer.

A *quote* is either a line of the task's text of at least :data:`MIN_LINE` characters, or a run of
:data:`MIN_WORDS` consecutive words (:data:`MIN_SOLUTION_WORDS` for a reference solution, whose answer is often a
handful of words), found (whitespace- and quote-normalised, case-insensitive) in the proposal's text or in the
lines a patch adds. Short common lines (``set -e``, a shebang) are too short to count. It reads every
development task's ``instruction.md``, ``task.toml`` (``task.yaml`` in the older layout), ``tests/`` and
``solution/``; the controller runs it on every commit that is checked and evaluated (the implementation and each
repair, :mod:`evolve.round.checks`).
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

MIN_LINE = 30
MIN_WORDS = 8
MIN_SOLUTION_WORDS = 5
TASK_FILES = ("instruction.md", "task.toml", "task.yaml")
TASK_FOLDERS = ("tests", "solution")
TEXT_SUFFIXES = {".md", ".sh", ".py", ".txt", ".json", ".toml", ".yaml", ".yml", ""}
# Tokens any program has: a solution's 5 words made only of these (``if __name__ == "__main__": sys.exit(main())``)
# are no answer. A gram of a solution counts when at least two of its words are outside this set.
GENERIC = frozenset({*keyword.kwlist, *(n.lower() for n in dir(builtins)), "__name__", "__main__", "sys", "os",
                     "sys.exit", "sys.argv", "sys.stderr", "sys.stdout", "main", "argv", "args", "self", "path",
                     "json", "re", "f", "r", "w", "a", "b", "i", "x", "0", "1", "-1", "utf-8", "encoding",
                     "bin/bash", "/bin/bash", "bash", "sh", "env", "python3", "python", "cd", "cat", "echo",
                     "mkdir", "-p", "rm", "-rf", "-f", "-e", "then", "fi", "do", "done", "exit", "return",
                     "true", "false", "none", "import", "from", "def", "print", "file"})
_WS = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z0-9_./-]+")


def _norm(text: str) -> str:
    # ' and " are one: a patch that turns a JSON answer into a Python literal still quotes it
    return _WS.sub(" ", text).strip().lower().replace("'", '"')


def _grams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


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
                f"quote(s): {shown}); a mechanism must not carry a task's instruction, tests or solution")


@dataclass
class _Source:
    task: str
    file: str
    lines: list[str]
    grams: set[tuple[str, ...]] = field(default_factory=set)


class OverfitGuard:
    """The development tasks' texts (instruction, config, tests, solution), ready to be searched for in
    proposals and patches."""

    def __init__(self, tasks_dir: str | Path, tasks: list[str]):
        self.sources: list[_Source] = []
        self.sizes: set[int] = set()
        root = Path(tasks_dir)
        for task in tasks:
            folder = root / task
            files = [folder / name for name in TASK_FILES]
            for sub in TASK_FOLDERS:
                if (folder / sub).is_dir():
                    files += sorted(p for p in (folder / sub).rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
            for path in files:
                if not path.is_file():
                    continue
                try:
                    text = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue  # a binary fixture cannot be quoted in a text proposal
                rel = path.relative_to(folder)
                size = MIN_SOLUTION_WORDS if rel.parts[0] == "solution" else MIN_WORDS
                self.sizes.add(size)
                lines = [n for ln in text.splitlines() if len(n := _norm(ln)) >= MIN_LINE]
                grams = _grams([w.lower() for w in _WORD.findall(text)], size)
                if size == MIN_SOLUTION_WORDS:
                    grams = {g for g in grams if sum(w not in GENERIC for w in g) >= 2}
                self.sources.append(_Source(task, rel.as_posix(), lines, grams))

    def check(self, text: str, what: str = "proposal") -> GuardReport:
        """Quotes of any development task in ``text``."""
        norm = _norm(text)
        words = [w.lower() for w in _WORD.findall(text)]
        grams = set().union(*(_grams(words, n) for n in self.sizes)) if self.sizes else set()
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

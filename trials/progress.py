"""Progress of a grid: a live bar on a terminal, plain lines in a log.

Overnight runs write to files and pipes, where a live bar prints nothing until it ends. Without a terminal each
finished trial gets one line (its status, duration and the running tally), and a heartbeat line at least once
a minute names the trials still in flight, so a log always shows where the grid is.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

if TYPE_CHECKING:
    from .results import TrialResult

HEARTBEAT_SEC = 60.0


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class GridProgress:
    """One grid's progress; ``plain`` (default: when ``console`` is not a terminal) prints lines, not a bar."""

    def __init__(self, name: str, total: int, done: int, console: Console | None = None, enabled: bool = True,
                 plain: bool | None = None, heartbeat_sec: float = HEARTBEAT_SEC):
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.name, self.total, self.done, self.enabled = name, total, done, enabled
        self.plain = (not self.console.is_terminal) if plain is None else plain
        self.heartbeat_sec = heartbeat_sec
        self.running: dict[str, float] = {}
        self.started = time.monotonic()
        self._bar: Progress | None = None
        self._bar_id: Any = None

    def _line(self, text: str) -> None:
        self.console.print(f"[{self.name}] {text}", markup=False, highlight=False)

    @contextlib.contextmanager
    def shown(self, stats: str) -> Iterator[GridProgress]:
        """Show the progress while the block runs (the bar, or a first line and a heartbeat)."""
        if not self.enabled:
            yield self
            return
        if not self.plain:
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=self.console, transient=False)
            with self._bar:
                self._bar_id = self._bar.add_task(self.name, total=self.total, completed=self.done, stats=stats)
                yield self
            return
        self._line(f"{self.done}/{self.total} trials already done; {self.total - self.done} to run")
        beat = asyncio.get_running_loop().create_task(self._heartbeat())
        try:
            yield self
        finally:
            beat.cancel()
            self._line(f"finished {self.done}/{self.total} in {_clock(time.monotonic() - self.started)}")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_sec)
            now = time.monotonic()
            flight = ", ".join(f"{name} ({_clock(now - t0)})" for name, t0 in sorted(self.running.items()))
            self._line(f"{self.done}/{self.total} done, elapsed {_clock(now - self.started)}; "
                       f"running: {flight or 'none (waiting for a slot)'}")

    def started_trial(self, name: str) -> None:
        self.running[name] = time.monotonic()

    def finished_trial(self, name: str, status: str, stats: str, plain_stats: str) -> None:
        """Count ``name`` as finished with ``status``; ``stats`` is rich markup, ``plain_stats`` its text."""
        t0 = self.running.pop(name, time.monotonic())
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._bar_id, advance=1, stats=stats)
        else:
            self._line(f"{self.done}/{self.total} {name}: {status} in {_clock(time.monotonic() - t0)} | "
                       f"{plain_stats} | elapsed {_clock(time.monotonic() - self.started)}")


class Tally:
    """Passed, failed and ⊥ trials of a grid so far, for progress lines."""

    def __init__(self) -> None:
        self.passed = self.failed = self.infra = 0

    def add(self, res: TrialResult) -> None:
        if res.status == "passed":
            self.passed += 1
        elif res.status == "failed":
            self.failed += 1
        else:
            self.infra += 1

    def text(self) -> str:
        return f"[green]pass {self.passed}[/] [red]fail {self.failed}[/] [yellow]⊥ {self.infra}[/]"

    def plain(self) -> str:
        return f"pass {self.passed} fail {self.failed} ⊥ {self.infra}"


def outcome_text(res: TrialResult) -> str:
    """``passed``, ``failed (task_failure)``, ``⊥ (model_unreachable)``: one trial's outcome for a log line."""
    if res.status == "passed":
        return "passed"
    if res.status == "failed":
        return f"failed ({res.failure_class})" if res.failure_class else "failed"
    return f"⊥ ({res.infra_cause})" if res.infra_cause else "⊥"

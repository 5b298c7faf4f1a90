"""When a night's work ran: its stretches and the stops between them, for the night's record (``resumes.md``).

The ledger books the loop's own stops (``evolve_stop``: a budget, patience, the rounds done); a kill books
nothing. What a kill leaves is what it cut off (an attempt moved aside before its rerun, a role call without its
``end`` line: :func:`evolve.experiment.audit.audit`) and a time in which nothing ran. So the work's own times are
laid end to end: every trial (``started_at`` to ``finished_at``), every role call (its transcript's start, in its
file name, to its last line's time), every ledger event (an instant). Where nothing ran and nothing was booked for
:data:`GAP_S` or more, one stretch ends and the next begins: that gap is a stop and its resume (the main job's
kill and restart), never a guess about what happened inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evolve.experiment.audit import Audit
from evolve.experiment.store import Experiment
from evolve.roles.runtime.transcript import read_transcript
from evolve.views.night_tables import iso, ts_of

GAP_S = 600  # nothing ran or was booked for this long: a stop (a kill between two runs of the main job)
_CALL_START = re.compile(r"-(\d{8}T\d{6})-[0-9a-f]+\.jsonl$")  # evolve.roles.runtime.transcript.new_call_id


@dataclass
class Stretch:
    start: float
    end: float
    trials: int = 0  # trials that finished in it
    calls: int = 0  # role calls that started in it
    events: int = 0  # ledger events booked in it
    cut: list[str] = field(default_factory=list)  # what a kill cut off at its end

    def line(self) -> str:
        cut = f"; cut off at its end: {', '.join(self.cut)}" if self.cut else ""
        return (f"{iso(self.start)[:19]} → {iso(self.end)[:19]} UTC ({(self.end - self.start) / 3600:.2f} h): "
                f"{self.trials} trials finished, {self.calls} role calls, {self.events} ledger events{cut}")


def call_span(path: Path) -> tuple[float, float] | None:
    """A role call's start (its transcript's file name) and its last line's time; None when the name has none."""
    m = _CALL_START.search(path.name)
    if m is None:
        return None
    start = datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp()
    try:
        rows = read_transcript(path)
    except (OSError, ValueError):
        rows = []
    return start, start + max((float(r.get("t") or 0.0) for r in rows), default=0.0)


def _spans(exp: Experiment, trials: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """(start, end, kind) of every unit of work the night recorded."""
    out = [(ts_of(r["started_at"]), ts_of(r["finished_at"]), "trial") for r in trials
           if r["started_at"] and r["finished_at"]]
    for path in sorted((exp.root / "rounds").rglob("transcripts/*.jsonl")):
        if (span := call_span(path)) is not None:
            out.append((*span, "call"))
    out += [(ts_of(e.ts), ts_of(e.ts), "event") for e in exp.ledger.events]
    return sorted(s for s in out if s[0] > 0)


def stretches(exp: Experiment, trials: list[dict[str, Any]], audit: Audit, gap: float = GAP_S) -> list[Stretch]:
    """The night's stretches of work (see the module docstring), each with what a kill cut off at its end."""
    out: list[Stretch] = []
    for start, end, kind in _spans(exp, trials):
        if not out or start > out[-1].end + gap:
            out.append(Stretch(start, end))
        here = out[-1]
        here.end = max(here.end, end)
        here.trials += kind == "trial"
        here.calls += kind == "call"
        here.events += kind == "event"
    for path in audit.interrupted:
        if (span := call_span(path)) is not None:
            _holding(out, span[0]).cut.append(f"role call {path.name}")
    for path in audit.moved:
        _holding(out, path.stat().st_mtime).cut.append(f"trial attempt {path.parent.name}/{path.name}")
    return out


def _holding(found: list[Stretch], when: float) -> Stretch:
    """The stretch ``when`` falls in, or the last one that began before it."""
    before = [s for s in found if s.start <= when] or found[:1]
    return before[-1]


def stop_lines(exp: Experiment, trials: list[dict[str, Any]], audit: Audit) -> list[str]:
    """``resumes.md`` below where the night stands: the stretches and the stops between them, the stops the loop
    booked, and everything a kill cut off."""
    found = stretches(exp, trials, audit)
    title = f"## Stretches of work (a gap of {GAP_S // 60} min or more in which nothing ran or was booked: a stop and its resume)"
    out = [title, ""]
    for i, s in enumerate(found):
        if i:
            idle = s.start - found[i - 1].end
            out.append(f"- resumed after {idle / 3600:.2f} h in which nothing ran")
        out.append(f"- stretch {i + 1}: {s.line()}")
    out += ["- nothing ran yet"] if not found else [f"- {len(found)} stretch(es), {len(found) - 1} resume(s)"]
    out += ["", "## Stops the loop booked (evolve_stop)", ""]
    out += [f"- {e.ts[:19]} UTC, round {e.round}: {e.reason}" + ("" if e.final else " (not final: --resume goes on)")
            for e in exp.ledger.find("evolve_stop")] or ["- none"]
    out += ["", "## What kills cut off (they book no event)", ""]
    out += [f"- trial attempt moved aside before its rerun: {p.relative_to(exp.root)} ({iso(p.stat().st_mtime)})"
            for p in audit.moved]
    out += [f"- role call cut off (no end line): {p.relative_to(exp.root)}" for p in audit.interrupted]
    nothing = "- nothing: no attempt moved aside, no role call without its end"
    return out if audit.moved or audit.interrupted else [*out, nothing]

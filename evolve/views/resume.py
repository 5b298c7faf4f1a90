"""Where a night stands, for the one who resumes it: the round and stage the ledger shows, the grid in progress
(trials done and left, read from its folder), the time spent, and the time its grid still needs at the rate its
trials were measured to run. ``rise evolve`` prints it before it goes on, ``rise status`` with the rest.

Reads only: the ledger, the job folders' ``config.json`` and each trial's ``result.json``. Nothing here decides
anything; a trial's times are what its ``result.json`` says (``started_at``, ``finished_at``).
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.lock import LOCK_NAME
from evolve.experiment.store import Experiment
from evolve.experiment.trial_scan import held_by
from trials.results import JobConfig, TrialResult

# the stage each kind of ledger event belongs to (trial and evaluation events: their purpose)
STAGE_OF = {"finding": "analysis", "group": "analysis", "review": "analysis", "research": "research",
            "proposal": "proposal", "implementation": "implementation", "candidate_created": "checks",
            "check_result": "checks", "repair": "checks", "screening": "screening", "adoption": "decision",
            "rejection": "decision", "grade": "grading", "freeze": "transfer", "transfer": "transfer",
            "round_start": "analysis", "round_end": "round end", "evolve_stop": "stopped"}
_SKIP = {"harness", "worktrees", ".git", "__pycache__"}
_TRIAL = re.compile(r".+__r\d+")
_TRIAL_OR_ATTEMPT = re.compile(r".+__r\d+(\.attempt-\d+)?")  # and a moved-aside attempt: no grid below either


class GridProgress(BaseModel):
    """One grid's folder: its cells, the finished ones (⊥ ones are run again, so they are not done)."""

    job_dir: str
    total: int
    done: int
    infra: int = 0
    concurrency: int = 1
    mean_s: float | None = None  # measured over its finished trials
    last_change: float = 0.0

    @property
    def left(self) -> int:
        return max(self.total - self.done, 0)


class ResumeSummary(BaseModel):
    experiment: str
    events: int = 0
    round: int | None = None
    round_state: str = "not started"  # not started | starting (its reference corpus) | in progress | ended
    stage: str = ""
    last_event: str = ""  # its kind and key
    first_ts: str | None = None
    last_ts: str | None = None
    trials: int = 0  # finished trials the ledger booked
    mean_trial_s: float | None = None  # over every finished trial of the experiment
    grid: GridProgress | None = None
    stopped: str = ""  # the last stop of the loop, when nothing came after it
    running: int | None = None  # the pid holding the experiment now

    @property
    def left_s(self) -> float | None:
        """The grid in progress's time left: its trials left x the measured mean ÷ its concurrency."""
        g = self.grid
        mean = (g.mean_s if g and g.mean_s else None) or self.mean_trial_s
        if g is None or mean is None:
            return None
        return g.left * mean / max(min(g.concurrency, g.left), 1)


def _seconds(res: TrialResult) -> float | None:
    try:
        return (datetime.fromisoformat(res.finished_at) - datetime.fromisoformat(res.started_at)).total_seconds()
    except (TypeError, ValueError):
        return None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _grid(job: Path, root: Path) -> tuple[GridProgress, list[float]] | None:
    try:
        cfg = JobConfig.load(job / "config.json")
    except (OSError, ValueError):
        return None
    done = infra = 0
    times: list[float] = []
    last = os.stat(job).st_mtime
    for d in job.iterdir():
        if not (d.is_dir() and _TRIAL.fullmatch(d.name)) or not (d / "result.json").is_file():
            continue
        try:
            res = TrialResult.load(d / "result.json")
        except (OSError, ValueError):
            continue
        last = max(last, os.stat(d / "result.json").st_mtime)
        if res.is_infra:
            infra += 1
            continue
        done += 1
        if (s := _seconds(res)) is not None:
            times.append(s)
    grid = GridProgress(job_dir=str(job.relative_to(root)), total=len(cfg.task_names) * cfg.r, done=done,
                        infra=infra, concurrency=cfg.concurrency, mean_s=_mean(times), last_change=last)
    return grid, times


def grids(exp: Experiment) -> tuple[list[GridProgress], float | None]:
    """Every grid folder of the experiment (a ``config.json`` a job wrote), and the mean time of all their
    finished trials."""
    out, times = [], []
    for dirpath, dirnames, filenames in os.walk(exp.root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP and not _TRIAL_OR_ATTEMPT.fullmatch(d)]
        if "config.json" in filenames and (found := _grid(Path(dirpath), exp.root)):
            out.append(found[0])
            times += found[1]
    return out, _mean(times)


def _round(events: list[Any]) -> tuple[int | None, str]:
    started = {e.round for e in events if e.kind == "round_start"}
    ended = {e.round for e in events if e.kind == "round_end"}
    if started - ended:
        return min(started - ended), "in progress"
    last = max(ended, default=0)
    if any(e.kind == "trial_done" for e in events[_last_index(events, "round_end") + 1:]):
        return last + 1, "starting"  # its incumbent's reference corpus is under way (it comes first)
    return (last, "ended") if last else (None, "not started")


def _last_index(events: list[Any], kind: str) -> int:
    return max((i for i, e in enumerate(events) if e.kind == kind), default=-1)


def resume_summary(exp: Experiment) -> ResumeSummary:
    """Where the experiment stands (see the module docstring)."""
    events = list(exp.ledger.events)
    out = ResumeSummary(experiment=str(exp.root), events=len(events),
                        running=held_by(exp.root / LOCK_NAME))
    all_grids, out.mean_trial_s = grids(exp)
    open_grids = [g for g in all_grids if g.left]
    out.grid = max(open_grids, key=lambda g: g.last_change) if open_grids else None
    if not events:
        out.stage = "nothing recorded yet" if out.grid is None else "reference"
        return out
    out.round, out.round_state = _round(events)
    last = events[-1]
    out.first_ts, out.last_ts = events[0].ts, last.ts
    out.last_event = f"{last.kind} {last.key}"
    out.stage = getattr(last, "purpose", None) or STAGE_OF.get(last.kind, last.kind)
    if out.grid is not None and out.grid.last_change >= _ts(last.ts) - 1:
        out.stage = _purpose(out.grid.job_dir)  # a grid is under way after the last event: that is the stage
    out.trials = sum(1 for e in events if e.kind == "trial_done" and e.status != "infra")
    if last.kind == "evolve_stop":
        out.stopped = last.reason + ("" if last.final else " (not final: --resume goes on)")
    return out


def _ts(text: str) -> float:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def _purpose(job_dir: str) -> str:
    """A grid's stage from where the controller put it: versions/vN/reference, rounds/rNN/slug/evaluation..."""
    parts = Path(job_dir).parts
    return parts[-1] if parts else job_dir


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def render_summary(s: ResumeSummary, resuming: bool = False) -> list[str]:
    """The summary as the lines ``rise status`` prints (``rise evolve``: ``resuming``, before it goes on)."""
    if s.events == 0 and s.grid is None:
        return [f"{s.experiment}: nothing recorded yet" + (": a new night starts" if resuming else "")]
    where = (f"round {s.round} {s.round_state}" if s.round else "no round started yet") + f", stage: {s.stage}"
    lead = "resuming the night in progress" if resuming else "the night so far"
    lines = [f"{s.experiment}: {lead}: {where} (last event: {s.last_event or 'none'})"]
    if s.running:
        lines.append(f"  held right now by pid {s.running}: that process is still running it")
    if s.grid is not None:
        g = s.grid
        lines.append(f"  grid {g.job_dir}: {g.done} of {g.total} trials done, {g.left} left"
                     + (f" ({g.infra} ⊥, to run again)" if g.infra else ""))
    if s.first_ts and s.last_ts:
        span = _ts(s.last_ts) - _ts(s.first_ts)
        mean = f", mean {s.mean_trial_s / 60:.1f} min a trial" if s.mean_trial_s else ""
        lines.append(f"  time spent: {_hours(span)} from the first event ({s.first_ts[:16]} UTC) to the last "
                     f"({s.last_ts[:16]} UTC); {s.trials} trials booked{mean}")
    if (left := s.left_s) is not None and s.grid is not None:
        mean = s.grid.mean_s or s.mean_trial_s or 0.0
        lines.append(f"  time left in this grid: about {_hours(left)} ({s.grid.left} trials x {mean / 60:.1f} min "
                     f"÷ {max(min(s.grid.concurrency, s.grid.left), 1)} at a time)")
    if s.stopped:
        lines.append(f"  the loop last stopped: {s.stopped}")
    return lines


def config_differences(exp: Experiment, source: Path) -> list[str]:
    """The fields where the experiment's frozen config differs from ``source`` (the file it was made from), one
    line each (empty: the same). A ``source`` that does not load is one line saying why."""
    try:
        wanted = ExperimentConfig.load(source).model_copy(update={"name": exp.config.name})
    except ValueError as exc:
        return [f"{source} does not load: {exc}"]
    a, b = _flat(exp.config.model_dump(mode="json")), _flat(wanted.model_dump(mode="json"))
    return [f"{k}: {a.get(k)!r} frozen, {b.get(k)!r} in {source}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}

"""Screening and full evaluation of a harness version: grids of trials whose every completion is booked.

``run_grid`` runs a tasks × r grid in a job folder with the runner of ``rise eval`` (``trials.grid.run_cells``:
cell order, lock, reaping, which cells are finished (``scan_cells``, the rule ``rise eval --resume`` uses too),
moving cut-off or ⊥ attempts aside, ``job_result.json``), and adds through its hooks (``GridHooks``) that

- every finished trial is handed to a :class:`TrialBook` the moment its ``result.json`` exists (the controller
  books it in the experiment ledger as ``TrialDone``); a resumed grid keeps every finished cell and books one
  whose event a kill cut off, so no finished trial is ever run twice or booked twice;
- an optional ``stop(grid)`` is asked after every trial (sequential stopping: ``stop_when_decided`` wraps
  ``validate.adoption.decide(curtail=True)``) and no further cell starts once it says yes;
- ⊥ cells are retried ``infra_retries`` times in the same call (an overnight run survives a transient fault);
  what stays ⊥ leaves the grid incomplete, never silently dropped.

``screen`` runs the candidate once on the tasks its proposal concerns and reads the spans: the mechanism ran
iff a boundary the proposal (or its contract, or its recording config) names has at least one span, and that
boundary is the mechanism's own: one the incumbent's trials of the same tasks never hit (a boundary every step
hits, such as the loop's step, shows only that the harness ran).
Nothing here knows about rounds or the ledger: callers pass a book.

``kill_point(stage)`` is a test hook: with ``RISE_TEST_KILL_AT=<stage>[@n]`` in the environment the process
SIGKILLs itself the n-th time (default 1st) it passes ``stage``, so kill -9 resume tests are deterministic.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

from monitor.store import TrialTrace
from trials.agents import AgentSpec
from trials.endpoints.spec import EndpointSpec
from trials.errors import RiseError
from trials.executors.config import ExecutorConfig
from trials.grid import GridHooks, run_cells
from trials.job import Cell, CellScan, trial_name
from trials.metrics import Grid, GridMetrics, compute_metrics, grid_from_results
from trials.results import JobConfig, TrialResult
from trials.runner import EnvFactory

from .adoption import Policy, decide

log = logging.getLogger(__name__)

Purpose = Literal["screening", "evaluation", "heldout", "reference", "control", "control_arm", "transfer"]
KILL_ENV = "RISE_TEST_KILL_AT"
_kill_counts: Counter[str] = Counter()


class EvaluationError(RiseError):
    """A grid cannot run: its folder holds another job, or the book and the folder disagree."""


def kill_point(stage: str) -> None:
    """Test hook: SIGKILL this process at ``stage`` when ``RISE_TEST_KILL_AT`` asks for it (see module doc)."""
    want = os.environ.get(KILL_ENV)
    if not want:
        return
    name, _, nth = want.partition("@")
    if name != stage:
        return
    _kill_counts[stage] += 1
    if _kill_counts[stage] >= int(nth or 1):
        log.warning("RISE_TEST_KILL_AT=%s: killing myself at %s", want, stage)
        os.kill(os.getpid(), signal.SIGKILL)


class TrialBook(Protocol):
    """Where finished trials are booked (the experiment ledger, in the controller)."""

    def finished(self, task: str, rep: int) -> bool:
        """Whether a finished (non-⊥) trial of this cell is already booked."""

    def record(self, result: TrialResult, trial_dir: Path) -> None:
        """Book one attempt (⊥ attempts too, under their own key) durably, before returning."""


class MemoryBook:
    """A book in memory (tests, and one-off grids that no ledger tracks)."""

    def __init__(self) -> None:
        self.booked: list[tuple[str, int, str]] = []

    def finished(self, task: str, rep: int) -> bool:
        return any(t == task and k == rep and s != "infra" for t, k, s in self.booked)

    def record(self, result: TrialResult, trial_dir: Path) -> None:
        self.booked.append((result.task_name, result.repetition, result.status))


@dataclass
class GridPlan:
    """What to run: an agent on tasks × r in a job folder."""

    purpose: Purpose
    agent: AgentSpec
    tasks_dir: Path
    task_names: list[str]
    r: int
    job_dir: Path
    endpoint: EndpointSpec | None
    env_kind: Literal["local", "docker"] = "local"
    concurrency: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    verifier_endpoint: EndpointSpec | None = None
    executor: ExecutorConfig | None = None  # where trials run (experiment.toml [executor]); None: here
    cell_seeds: bool = False  # each trial samples with its cell's seed (trials.grid.cell_seed): coupled arms

    def job_config(self) -> JobConfig:
        job_dir = self.job_dir.resolve()
        job_id = f"{job_dir.name}-{hashlib.sha256(str(job_dir).encode()).hexdigest()[:8]}"
        return JobConfig(job_id=job_id, tasks_dir=str(self.tasks_dir.resolve()), task_names=sorted(self.task_names),
                         agent=self.agent, env_kind=self.env_kind, r=self.r, concurrency=self.concurrency,
                         endpoint=self.endpoint, verifier_endpoint=self.verifier_endpoint, settings=self.settings,
                         cell_seeds=self.cell_seeds)


@dataclass
class GridOutcome:
    """A grid as far as it ran."""

    plan: GridPlan
    grid: Grid  # decision shape (see decision_grid)
    metrics: GridMetrics
    results: dict[tuple[str, int], TrialResult]
    stopped_early: bool = False
    trials_run: int = 0

    @property
    def complete(self) -> bool:
        return self.metrics.complete

    def trial_dirs(self) -> list[Path]:
        return [self.plan.job_dir / trial_name(t, k) for t, k in sorted(self.results)]


def _check_config(config: JobConfig, job_dir: Path) -> None:
    path = job_dir / "config.json"
    if path.exists():
        diff = JobConfig.load(path).differences(config)
        if diff:
            raise EvaluationError(f"{path}: this folder holds a grid of another configuration; refusing to mix "
                                  "them:\n  " + "\n  ".join(diff))
    config.write(path)


def decision_grid(results: Iterable[TrialResult], tasks: Iterable[str], r: int) -> Grid:
    """The grid in ``validate.adoption``'s shape: a cell not run yet is *absent*, a ⊥ cell is ``None``.
    The count policies treat repetitions as exchangeable, so the cells that ran are listed in repetition order
    without the holes a resumed grid can have; in a complete grid (the only kind ``coupled`` decides on) index k
    is repetition k + 1, so both arms' cells at the same index form the pair (task, k + 1)."""
    by: dict[str, dict[int, bool | None]] = {t: {} for t in tasks}
    for res in results:
        if res.task_name in by and 1 <= res.repetition <= r:
            by[res.task_name][res.repetition] = None if res.is_infra else res.status == "passed"
    return {t: [cells[k] for k in sorted(cells)] for t, cells in by.items()}


def _outcome(plan: GridPlan, config: JobConfig, results: dict[tuple[str, int], TrialResult], stopped: bool,
             ran: int) -> GridOutcome:
    padded, reasons = grid_from_results(results.values(), config.task_names, config.r)
    grid = decision_grid(results.values(), config.task_names, config.r)
    return GridOutcome(plan, grid, compute_metrics(padded, config.r, reasons), results, stopped, ran)


def outcome_of(plan: GridPlan, results: dict[tuple[str, int], TrialResult], stopped: bool = False,
               ran: int = 0) -> GridOutcome:
    """The outcome of ``plan``'s grid from its results by cell (e.g. after the caller regraded some)."""
    return _outcome(plan, plan.job_config(), results, stopped, ran)


async def run_grid(plan: GridPlan, book: TrialBook, *, stop: Callable[[Grid], bool] | None = None,
                   env_factory: EnvFactory | None = None, infra_retries: int = 1, progress: bool = False,
                   tasks: list[Any] | None = None, gate: Callable[[Cell], Awaitable[None]] | None = None
                   ) -> GridOutcome:
    """Run (or resume) ``plan``'s grid, booking each trial as it finishes (see the module docstring). ``gate``
    is awaited before each cell starts (``validate.interleave``: two arms in lockstep)."""
    job_dir, config = plan.job_dir.resolve(), plan.job_config()

    def booked(res: TrialResult, trial_dir: Path) -> None:
        book.record(res, trial_dir)
        kill_point(f"{plan.purpose}:trial")

    def decided(results: dict[tuple[str, int], TrialResult]) -> bool:
        return stop is not None and stop(decision_grid(results.values(), config.task_names, config.r))

    hooks = GridHooks(on_scan=partial(_book_scan, book, job_dir), on_trial=booked, infra_retries=infra_retries,
                      stop=decided if stop is not None else None, keep_until_rerun=True,
                      gate=gate)
    # plain lines (one per trial, a heartbeat a minute) when stderr is not a terminal: an overnight log
    run = await run_cells(config, job_dir, check_config=_check_config, label=f"{plan.purpose} {job_dir.name}",
                          hooks=hooks, executor=plan.executor, env_factory=env_factory, tasks=tasks,
                          progress=progress, error=EvaluationError)
    return _outcome(plan, config, run.results, run.stopped, run.ran)


def _book_scan(book: TrialBook, job_dir: Path, scan: CellScan) -> None:
    """Before a (resumed) grid runs: the book and the folder must agree on what is finished, and a finished
    cell whose booking a kill cut off is booked now (never run again)."""
    for t, k in scan.todo:
        if book.finished(t, k):
            raise EvaluationError(f"{job_dir / trial_name(t, k)}: booked as finished but its result.json is "
                                  "gone or ⊥; the job folder was changed by hand")
    for (t, k), res in scan.finished.items():
        if not book.finished(t, k):  # finished, but a kill came before its booking
            book.record(res, job_dir / trial_name(t, k))


def stop_when_decided(baseline: Grid, tasks: list[str], r: int, policy: Policy = "paper",
                      alpha: float = 0.05) -> Callable[[Grid], bool]:
    """A ``stop`` for :func:`run_grid`: yes once curtailment says no completion can change the decision."""

    def stop(grid: Grid) -> bool:
        return decide(grid, baseline, tasks, r, policy, alpha, curtail=True).decided

    return stop


# ------------------------------------------------------------------------------------------------ screening
@dataclass
class ScreeningOutcome:
    outcome: GridOutcome
    boundaries: list[str]
    spans: dict[str, int]  # boundary -> spans seen over all screening trials
    per_trial: dict[str, list[str]]  # trial folder name -> boundaries seen there
    common: list[str] = field(default_factory=list)  # named boundaries the incumbent's trials hit as well

    @property
    def evidence(self) -> dict[str, int]:
        """Spans of the boundaries that are the mechanism's own (not hit by the incumbent too)."""
        return {b: n for b, n in self.spans.items() if b not in self.common}

    @property
    def mechanism_ran(self) -> bool:
        return any(self.evidence.values())

    @property
    def inconclusive(self) -> bool:
        """Not seen, but some trial was ⊥: the mechanism may simply not have had a chance."""
        return not self.mechanism_ran and any(r.is_infra for r in self.outcome.results.values())

    @property
    def passed(self) -> bool:
        return self.mechanism_ran

    def details(self) -> dict[str, Any]:
        res = self.outcome.results
        own = [b for b in self.boundaries if b not in self.common]
        why = (f"spans of {', '.join(b for b, n in self.evidence.items() if n)}" if self.mechanism_ran else
               "no boundary was named" if not self.boundaries else
               f"only boundaries the incumbent hits as well ({', '.join(self.common)}), which do not show the "
               "mechanism acted" if not own else
               f"no span of {', '.join(own)} in {len(res)} screening trial(s)"
               + (f" (not counted, the incumbent hits them too: {', '.join(self.common)})" if self.common else ""))
        return {"boundaries": self.boundaries, "spans": self.spans, "per_trial": self.per_trial,
                "common_with_incumbent": self.common,
                "tasks": sorted({t for t, _ in res}), "inconclusive": self.inconclusive, "reason": why,
                "trials": {trial_name(t, k): r.status for (t, k), r in sorted(res.items())},
                "job_dir": str(self.outcome.plan.job_dir)}


def boundary_spans(trial_dir: Path, boundaries: list[str]) -> dict[str, int]:
    """How many spans of each boundary one trial recorded (``monitor.store`` matching: target, qualname or
    function name)."""
    trace = TrialTrace.load(trial_dir)
    return {b: len(trace.spans_of(b)) for b in boundaries}


def incumbent_hits(job_dir: Path | None, tasks: Iterable[str], boundaries: list[str]) -> list[str]:
    """The named boundaries that the incumbent's trials of ``tasks`` in ``job_dir`` hit (its reference or
    control grid): spans of these show only that the harness ran, not that a candidate's mechanism acted."""
    if job_dir is None or not boundaries:
        return []
    wanted = set(tasks)
    hit: set[str] = set()
    for tdir in sorted(Path(job_dir).glob("*__r*")):
        if tdir.is_dir() and tdir.name.rpartition("__r")[0] in wanted and (tdir / "result.json").is_file():
            hit.update(b for b, n in boundary_spans(tdir, boundaries).items() if n)
    return sorted(hit)


async def screen(plan: GridPlan, book: TrialBook, boundaries: list[str], *, env_factory: EnvFactory | None = None,
                 progress: bool = False, incumbent_job: Path | None = None) -> ScreeningOutcome:
    """Run ``plan`` (normally r=1 on the proposal's tasks) and check that a named boundary the incumbent's
    trials of the same tasks (``incumbent_job``) never hit has spans."""
    outcome = await run_grid(plan, book, env_factory=env_factory, progress=progress)
    total: Counter[str] = Counter({b: 0 for b in boundaries})
    per_trial: dict[str, list[str]] = {}
    for tdir in outcome.trial_dirs():
        seen = boundary_spans(tdir, boundaries) if boundaries else {}
        total.update(seen)
        per_trial[tdir.name] = sorted(b for b, n in seen.items() if n)
    common = incumbent_hits(incumbent_job, plan.task_names, list(boundaries))
    return ScreeningOutcome(outcome, list(boundaries), dict(total), per_trial, common)


def grid_of_job(job_dir: Path) -> tuple[Grid, GridMetrics]:
    """The decision-shaped grid and metrics of a job folder written by :func:`run_grid` or ``rise eval``."""
    from trials.job import load_job

    config, results, metrics = load_job(job_dir)
    return decision_grid(results, config.task_names, config.r), metrics

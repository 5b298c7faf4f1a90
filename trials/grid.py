"""Running a grid of trials in a job folder: the one runner behind ``rise eval`` (:func:`run_job`) and every
grid of an evolution round (``validate.evaluate.run_grid``).

:func:`run_cells` does what both need. Under the folder's lock (``trials.job.job_lock``) it checks the config
(each caller's own rule), reaps sandboxes a crashed run left, loads the tasks, reads which cells are finished
(``trials.job.scan_cells``), runs the others through an executor (``trials.executors``; its ``replicas`` make
an endpoint pool) with a tally and a progress display, and writes ``job_result.json``. What a grid whose trials
are booked adds comes in as :class:`GridHooks`: a look at the scan before anything runs, a callback per
finished attempt, a stop condition asked before the first trial and after each, and reruns of cells that stay
⊥. Without hooks (a plain job) every ⊥ or cut-off folder is moved aside at once; with ``keep_until_rerun`` a ⊥
cell stays in the grid, and a folder in place, until its cell is run again (a grid that stops early never
reruns some).

:func:`run_cell` is the one place that runs a cell: an attempt lost with its Ray node or its model replica (an
endpoint pool) is kept as ``<trial>.attempt-N`` and run once more in the same invocation, elsewhere.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from . import harness_settings
from .endpoints.pool import EndpointPool
from .errors import RiseError
from .executors.base import Executor, TrialCall, opened
from .executors.config import ExecutorConfig
from .executors.delivery import clear_incoming
from .executors.factory import make_executor
from .job import (
    Cell,
    CellScan,
    JobError,
    cells,
    job_lock,
    move_aside,
    prepare_config,
    reap,
    scan_cells,
    summarize,
    trial_name,
)
from .progress import GridProgress, Tally, outcome_text
from .results import JobConfig, JobResult, TrialResult
from .runner import EnvFactory

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class GridHooks:
    """What a grid whose trials are booked (``validate.evaluate.run_grid``) adds to a plain job."""

    on_scan: Callable[[CellScan], None] | None = None  # before anything runs (check, book what a kill left)
    on_trial: Callable[[TrialResult, Path], None] | None = None  # every finished attempt, with its folder
    stop: Callable[[dict[Cell, TrialResult]], bool] | None = None  # yes: no further cell starts
    infra_retries: int = 0  # passes over the cells still ⊥ after the first, in the same call
    keep_until_rerun: bool = False  # ⊥ cells stay in the grid (folders in place) until rerun
    gate: Callable[[Cell], Awaitable[None]] | None = None  # awaited before a cell starts (arms run in lockstep)


@dataclass(kw_only=True)
class GridRun:
    """A grid as far as one invocation ran it."""

    results: dict[Cell, TrialResult]  # every cell's latest result (see GridHooks.keep_until_rerun for ⊥ ones)
    ran: int  # attempts run by this invocation
    stopped: bool  # a stop said yes before every cell had a result
    summary: JobResult  # what job_result.json now holds


async def run_cell(executor: Executor, call: TrialCall, *, pool: EndpointPool | None = None,
                   reruns: int = 1) -> TrialResult:
    """Run one cell through ``executor`` (the caller holds an ``executor.slot()``). With ``pool`` the attempt
    gets the least-loaded replica. An attempt lost with its node (``executor.rerun_cause``) or with its
    replica (``pool.report``) is moved aside and run again, at most ``reruns`` times; the last attempt's
    result is returned and is the one in ``call.trial_dir``."""
    attempt = 0
    while True:
        replica = await pool.acquire() if pool is not None and call.endpoint is not None else None
        try:
            res = await executor.run(call.with_endpoint(replica.base_url) if replica else call)
        finally:
            if replica is not None:
                pool.release(replica)
        lost = executor.rerun_cause(res)
        if replica is not None and res.is_infra:
            lost = await pool.report(replica, res.infra_cause) or lost
        if not lost or attempt >= reruns:
            return res
        attempt += 1
        moved = move_aside(Path(call.trial_dir))
        log.warning("%s lost its %s (%s); rerunning it (attempt kept in %s)", Path(call.trial_dir).name,
                    "model replica" if res.infra_cause in ("model_unreachable", "model_server") else "node",
                    res.infra_cause, moved.name)


def _tasks_by_name(config: JobConfig, tasks: list[Any] | None, error: type[RiseError]) -> dict[str, Any]:
    if tasks is None:
        from .tasks import load_task_set

        tasks = load_task_set(Path(config.tasks_dir), config.task_names)
    by_name = {t.name: t for t in tasks}
    if (missing := sorted(set(config.task_names) - set(by_name))):
        raise error(f"tasks not found in {config.tasks_dir}: {', '.join(missing)}")
    return by_name


def _resume(config: JobConfig, job_dir: Path, hooks: GridHooks) -> tuple[dict[Cell, TrialResult], list[Cell]]:
    """The results the folder already holds and the cells to run, in cell order (the scan's rule)."""
    scan = scan_cells(config, job_dir)
    if hooks.on_scan is not None:
        hooks.on_scan(scan)
    if hooks.keep_until_rerun:
        return {**scan.finished, **scan.infra}, list(scan.todo)
    for tdir in scan.folders_to_move(job_dir):
        moved = move_aside(tdir)
        log.info("rerunning %s (previous attempt kept in %s)", tdir.name, moved.name)
    return dict(scan.finished), list(scan.todo)


def cell_seed(task: str, k: int) -> int:
    """The sampling seed of cell (``task``, repetition ``k``): the same in every grid, so repetition k of two arms
    samples alike (issue 38's coupled pairs); different across cells. A 31-bit integer (llama.cpp and vLLM take it)."""
    return int.from_bytes(hashlib.sha256(f"rise-cell:{task}:{k}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def cell_settings(settings: dict[str, Any], task: str, k: int) -> dict[str, Any]:
    """``settings`` with the cell's seed as ``model.seed`` (the seed harness sends it with every model call); a
    ``model.seed`` the settings already fix is kept (the experimenter's choice wins)."""
    nested = harness_settings.nest(settings)
    if harness_settings.lookup(nested, "model.seed") is not None:
        return settings
    return harness_settings.merge(nested, {"model": {"seed": cell_seed(task, k)}})


class _Cells:
    """One invocation's running of the cells: results by cell, the tally, what ran, whether a stop said yes."""

    def __init__(self, config: JobConfig, job_dir: Path, hooks: GridHooks, results: dict[Cell, TrialResult], *,
                 executor: ExecutorConfig | Executor | None, by_name: dict[str, Any],
                 env_factory: EnvFactory | None, shown: GridProgress) -> None:
        self.config, self.job_dir, self.hooks, self.results = config, job_dir, hooks, results
        self.by_name, self.env_factory, self.shown = by_name, env_factory, shown
        self.runner = make_executor(executor, config.concurrency)
        exec_cfg = executor if isinstance(executor, ExecutorConfig) else None
        self.pool = EndpointPool.of(config.endpoint, exec_cfg.replicas if exec_cfg else [])
        self.reruns = exec_cfg.node_lost_reruns if exec_cfg else 1
        self.tally = Tally()
        for res in results.values():
            self.tally.add(res)
        self.ran, self.stopped = 0, False

    def _call(self, t: str, k: int, trial_dir: Path) -> TrialCall:
        c = self.config
        settings = cell_settings(c.settings, t, k) if c.cell_seeds else c.settings
        return TrialCall(task=self.by_name[t], agent=c.agent, endpoint=c.endpoint, trial_dir=trial_dir,
                         env_kind=c.env_kind, job_id=c.job_id, settings=settings,
                         verifier_endpoint=c.verifier_endpoint, repetition=k, env_factory=self.env_factory)

    async def one(self, t: str, k: int) -> None:
        async with self.runner.slot():
            if self.stopped:
                return
            if self.hooks.gate is not None:
                await self.hooks.gate((t, k))
            tdir = self.job_dir / trial_name(t, k)
            if tdir.exists():
                move_aside(tdir)  # kills an agent a killed run orphaned, keeps the evidence
            self.shown.started_trial(tdir.name)
            res = await run_cell(self.runner, self._call(t, k, tdir), pool=self.pool, reruns=self.reruns)
            self.ran += 1
            self.results[(t, k)] = res
            self.tally.add(res)
            self.shown.finished_trial(tdir.name, outcome_text(res), self.tally.text(), self.tally.plain())
            if self.hooks.on_trial is not None:
                self.hooks.on_trial(res, tdir)
            if self.hooks.stop is not None and not self.stopped and self.hooks.stop(self.results):
                self.stopped = True

    async def run(self, todo: list[Cell]) -> None:
        """Every cell of ``todo``, then (``infra_retries`` times) those still ⊥, until a stop says yes."""
        stop = self.hooks.stop
        self.stopped = stop is not None and bool(todo) and stop(self.results)
        async with opened(self.runner):
            await self.runner.reap(self.config.env_kind, self.config.job_id)
            with self.shown.shown(self.tally.text()):
                for attempt in range(self.hooks.infra_retries + 1):
                    if not todo or self.stopped:
                        break
                    if attempt:
                        log.warning("%s: rerunning %d ⊥ cell(s) (retry %d)", self.job_dir, len(todo), attempt)
                    async with asyncio.TaskGroup() as group:
                        for t, k in todo:
                            group.create_task(self.one(t, k))
                    todo = [c for c in todo if c in self.results and self.results[c].is_infra]


async def run_cells(config: JobConfig, job_dir: Path, *, check_config: Callable[[JobConfig, Path], None],
                    label: str, hooks: GridHooks | None = None, executor: ExecutorConfig | Executor | None = None,
                    env_factory: EnvFactory | None = None, tasks: list[Any] | None = None, progress: bool = True,
                    console: Console | None = None, error: type[RiseError] = JobError) -> GridRun:
    """Run (or resume) ``config``'s grid in ``job_dir`` (see the module docstring). ``check_config(config,
    job_dir)`` runs under the lock before anything else; ``label`` names the progress display; missing tasks
    raise ``error``."""
    hooks = hooks or GridHooks()
    job_dir = Path(job_dir).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with job_lock(job_dir):
        check_config(config, job_dir)
        await asyncio.to_thread(reap, config.env_kind, config.job_id)
        clear_incoming(job_dir)
        by_name = _tasks_by_name(config, tasks, error)
        results, todo = _resume(config, job_dir, hooks)
        total = len(cells(config))
        grid = _Cells(config, job_dir, hooks, results, executor=executor, by_name=by_name, env_factory=env_factory,
                      shown=GridProgress(label, total=total, done=total - len(todo), console=console,
                                         enabled=progress))
        await grid.run(todo)
        clear_incoming(job_dir)  # every delivery has been renamed into place; drop the empty staging folder

        summary = summarize(config, job_dir, trials_run=grid.ran, started_at=started)
        summary.write(job_dir / "job_result.json")
        full = all(cell in grid.results for cell in cells(config))
        return GridRun(results=grid.results, ran=grid.ran, stopped=grid.stopped and not full, summary=summary)


async def run_job(config: JobConfig, job_dir: Path, resume: bool = False, force_config: bool = False, *,
                  progress: bool = True, env_factory: EnvFactory | None = None, tasks: list[Any] | None = None,
                  console: Console | None = None, executor: ExecutorConfig | Executor | None = None
                  ) -> JobResult:
    """Run (or resume) the grid in ``job_dir`` and write ``job_result.json``. ``executor`` says where the
    trials run (default: here, ``config.concurrency`` at a time); its ``replicas`` make an endpoint pool.
    The folder's rules (resume, a changed config) are ``trials.job``'s."""
    run = await run_cells(config, job_dir, check_config=partial(prepare_config, resume=resume,
                                                                force_config=force_config),
                          label=config.job_id, executor=executor, env_factory=env_factory, tasks=tasks,
                          progress=progress, console=console)
    return run.summary

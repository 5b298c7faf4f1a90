"""A job: the tasks × r grid of trials, bounded concurrency, a progress bar, and resume.

Job folder: ``config.json`` (:class:`JobConfig`), ``job.lock``, one ``<task>__r<k>/`` per cell,
``job_result.json`` (metrics + every cell). Resume rules:
- a cell whose ``result.json`` is readable and not ⊥ is finished and kept, never run again;
- a ⊥ cell, or a folder without a readable ``result.json`` (a trial cut off by a kill), is moved aside to
  ``<trial>.attempt-N/`` (kept as evidence, never deleted) and run again; an agent process it orphaned is killed
  first (found through ``agent/agent.pid`` and checked against its command line);
- each cell is scheduled at most once per invocation;
- a config whose identity (:meth:`JobConfig.identity`) changed is refused unless ``force_config``.
``job.lock`` holds an ``flock`` for the life of the run, so a second run of the same folder is refused while a
killed run's lock (the kernel drops it with the process) is taken over; the pid in it is for the message.

Where trials run is the executor's business (``trials.executors``: ``local`` by default, or ``ray``); whichever
runs them, a cell is finished only once its ``result.json`` is in this folder. :func:`run_cell` is the one
place that runs a cell: an attempt lost with its Ray node or its model replica (an endpoint pool) is kept as
``<trial>.attempt-N`` and run once more in the same invocation, elsewhere.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from .endpoints.pool import EndpointPool
from .errors import RiseError
from .executors.base import Executor, TrialCall, make_executor, opened
from .executors.config import ExecutorConfig
from .executors.delivery import clear_incoming
from .harness_api import CostLedger
from .metrics import GridMetrics, compute_metrics, grid_from_results
from .progress import GridProgress, Tally, outcome_text
from .results import FormatError, JobConfig, JobResult, TrialResult, TrialSummary
from .runner import EnvFactory

log = logging.getLogger(__name__)


class JobError(RiseError):
    """A job cannot start: locked, config changed, folder in use."""


def trial_name(task: str, k: int) -> str:
    return f"{task}__r{k}"


def cells(config: JobConfig) -> list[tuple[str, int]]:
    """Every (task, repetition), repetition-major so a cut-off grid covers as many tasks as possible."""
    return [(t, k) for k in range(1, config.r + 1) for t in sorted(config.task_names)]


@contextmanager
def job_lock(job_dir: Path) -> Iterator[None]:
    """Exclusive lock on the job folder for the duration of a run."""
    path = job_dir / "job.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise JobError(f"{job_dir} is being run by another process (pid {holder}); "
                           "wait for it or kill it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def read_result(trial_dir: Path) -> TrialResult | None:
    """The trial's result, or None when it is absent or unreadable (a cut-off trial)."""
    try:
        return TrialResult.load(trial_dir / "result.json")
    except (FileNotFoundError, FormatError):
        return None


Cell = tuple[str, int]


@dataclass
class CellScan:
    """Where a grid folder stands before a (resumed) run: the one rule for which cells are finished.

    Shared by :func:`run_job` and ``validate.evaluate.run_grid``; what each does with ``todo`` differs (a job moves
    every such folder aside at once, a grid that may stop early moves one aside only when it reruns it)."""

    finished: dict[Cell, TrialResult]  # readable result.json, not ⊥: kept, never run again
    infra: dict[Cell, TrialResult]  # ⊥ so far: to run again
    todo: list[Cell]  # ⊥, cut off (no readable result.json) or never started; in cell order

    def folders_to_move(self, job_dir: Path) -> list[Path]:
        """The ``todo`` cells whose folder holds an earlier attempt (to move aside before the rerun)."""
        return [p for t, k in self.todo if (p := job_dir / trial_name(t, k)).exists()]


def scan_cells(config: JobConfig, job_dir: Path) -> CellScan:
    """Read every cell of ``config``'s grid in ``job_dir`` (see the module docstring for the rule)."""
    finished: dict[Cell, TrialResult] = {}
    infra: dict[Cell, TrialResult] = {}
    todo: list[Cell] = []
    for t, k in cells(config):
        tdir = job_dir / trial_name(t, k)
        res = read_result(tdir) if tdir.exists() else None
        if res is not None and not res.is_infra:
            finished[(t, k)] = res
            continue
        if res is not None:
            infra[(t, k)] = res
        todo.append((t, k))
    return CellScan(finished, infra, todo)


def kill_orphan_agent(trial_dir: Path) -> bool:
    """Kill the process group of an agent a killed runner left behind in ``trial_dir``."""
    try:
        pid = int((trial_dir / "agent" / "agent.pid").read_text().strip())
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except (OSError, ValueError, psutil.Error):  # no pid file, gone, a zombie, or not ours to read
        return False
    if str(trial_dir / "agent" / "trial_spec.json") not in cmdline:
        return False  # the pid was reused by an unrelated process
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    log.warning("killed orphaned agent pid %d of %s", pid, trial_dir)
    return True


def move_aside(trial_dir: Path) -> Path:
    """Rename a ⊥ or cut-off trial folder to the next free ``<trial>.attempt-N``."""
    kill_orphan_agent(trial_dir)
    n = 1
    while (dest := trial_dir.with_name(f"{trial_dir.name}.attempt-{n}")).exists():
        n += 1
    trial_dir.rename(dest)
    return dest


def _prepare_config(config: JobConfig, job_dir: Path, resume: bool, force_config: bool) -> None:
    path = job_dir / "config.json"
    if path.exists():
        if not resume:
            raise JobError(f"{job_dir} already holds a job; pass --resume to continue it or pick a new --job-dir")
        old = JobConfig.load(path)
        diff = old.differences(config)
        if diff and not force_config:
            raise JobError(f"{path}: the job's config changed; refusing to resume (use --force-config):\n  "
                           + "\n  ".join(diff))
        if diff:
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            old.write(job_dir / f"config.{stamp}.json")
    config.write(path)


def reap(env_kind: str, job_id: str) -> None:
    """Remove sandboxes (docker containers, local keepers) a crashed run of this job left behind."""
    from .environments.factory import reap_leftovers

    try:
        n = reap_leftovers(env_kind, job_id)
        if n:
            log.warning("reaped %s leftover %s sandbox(es) of job %s", n, env_kind, job_id)
    except Exception as exc:  # noqa: BLE001 - e.g. no docker engine: nothing to reap
        log.debug("reaping %s sandboxes of %s failed: %s", env_kind, job_id, exc)


def collect(config: JobConfig, job_dir: Path) -> tuple[list[TrialResult], GridMetrics]:
    """Read every cell's result from the job folder and compute the grid metrics."""
    results = [res for t, k in cells(config) if (res := read_result(job_dir / trial_name(t, k))) is not None]
    grid, reasons = grid_from_results(results, config.task_names, config.r)
    return results, compute_metrics(grid, config.r, reasons)


def summarize(config: JobConfig, job_dir: Path, trials_run: int = 0, started_at: str | None = None) -> JobResult:
    results, metrics = collect(config, job_dir)
    by_cell = {(res.task_name, res.repetition): res for res in results}
    summaries = [TrialSummary.of(by_cell[(t, k)]) if (t, k) in by_cell else
                 TrialSummary(trial_name=trial_name(t, k), task_name=t, repetition=k, status="missing")
                 for t, k in cells(config)]
    cost = CostLedger()
    for res in results:
        cost.merge(res.cost)
    return JobResult(job_id=config.job_id, config_fingerprint=config.fingerprint(), complete=metrics.complete,
                     metrics=metrics.model_dump(mode="json"), trials=summaries, started_at=started_at,
                     finished_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                     trials_run=trials_run, cost=cost)


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


def executor_for(executor: ExecutorConfig | Executor | None, concurrency: int) -> Executor:
    """An executor object for a config (None: local with the job's concurrency)."""
    return executor if isinstance(executor, Executor) else make_executor(executor, concurrency)


async def run_job(config: JobConfig, job_dir: Path, resume: bool = False, force_config: bool = False, *,
                  progress: bool = True, env_factory: EnvFactory | None = None, tasks: list[Any] | None = None,
                  console: Console | None = None, executor: ExecutorConfig | Executor | None = None
                  ) -> JobResult:
    """Run (or resume) the grid in ``job_dir`` and write ``job_result.json``. ``executor`` says where the
    trials run (default: here, ``config.concurrency`` at a time); its ``replicas`` make an endpoint pool."""
    job_dir = Path(job_dir).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with job_lock(job_dir):
        _prepare_config(config, job_dir, resume, force_config)
        await asyncio.to_thread(reap, config.env_kind, config.job_id)
        clear_incoming(job_dir)
        if tasks is None:
            from .tasks import load_task_set

            tasks = load_task_set(Path(config.tasks_dir), config.task_names)
        by_name = {t.name: t for t in tasks}
        missing = sorted(set(config.task_names) - set(by_name))
        if missing:
            raise JobError(f"tasks not found in {config.tasks_dir}: {', '.join(missing)}")

        scan, tally = scan_cells(config, job_dir), Tally()
        for res in scan.finished.values():
            tally.add(res)
        for tdir in scan.folders_to_move(job_dir):
            moved = move_aside(tdir)
            log.info("rerunning %s (previous attempt kept in %s)", tdir.name, moved.name)
        todo = scan.todo

        runner = executor_for(executor, config.concurrency)
        exec_cfg = executor if isinstance(executor, ExecutorConfig) else None
        pool = EndpointPool.of(config.endpoint, exec_cfg.replicas if exec_cfg else [])
        reruns = exec_cfg.node_lost_reruns if exec_cfg else 1
        shown = GridProgress(config.job_id, total=len(cells(config)), done=len(cells(config)) - len(todo),
                             console=console, enabled=progress)

        async def one(t: str, k: int) -> None:
            call = TrialCall(by_name[t], config.agent, config.endpoint, job_dir / trial_name(t, k),
                             config.env_kind, config.job_id, config.settings, config.verifier_endpoint,
                             repetition=k, env_factory=env_factory)
            async with runner.slot():
                shown.started_trial(trial_name(t, k))
                res = await run_cell(runner, call, pool=pool, reruns=reruns)
            tally.add(res)
            shown.finished_trial(trial_name(t, k), outcome_text(res), tally.text(), tally.plain())

        async with opened(runner):
            await runner.reap(config.env_kind, config.job_id)
            with shown.shown(tally.text()):
                async with asyncio.TaskGroup() as group:
                    for t, k in todo:
                        group.create_task(one(t, k))
        clear_incoming(job_dir)  # every delivery has been renamed into place; drop the empty staging folder

        result = summarize(config, job_dir, trials_run=len(todo), started_at=started)
        result.write(job_dir / "job_result.json")
        return result


def load_job(job_dir: Path) -> tuple[JobConfig, list[TrialResult], GridMetrics]:
    """Config, results and metrics of a job folder (for ``rise metrics`` / ``rise compare``)."""
    job_dir = Path(job_dir)
    config = JobConfig.load(job_dir / "config.json")
    results, metrics = collect(config, job_dir)
    return config, results, metrics

"""A job folder: the tasks × r grid of trials in it, its lock, its config, and the rules of resume.

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

Running the grid is ``trials.grid``'s (``run_job``, and the runner ``validate.evaluate.run_grid`` shares); where
trials run is the executor's business (``trials.executors``: ``local`` by default, or ``ray``); whichever runs
them, a cell is finished only once its ``result.json`` is in this folder.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from .errors import RiseError
from .harness_api import CostLedger
from .metrics import GridMetrics, compute_metrics, grid_from_results
from .results import FormatError, JobConfig, JobResult, TrialResult, TrialSummary

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

    The grid runner (``trials.grid.run_cells``) reads it for ``run_job`` and ``validate.evaluate.run_grid``; what
    each does with ``todo`` differs (a job moves every such folder aside at once, a grid that may stop early
    moves one aside only when it reruns it)."""

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


def prepare_config(config: JobConfig, job_dir: Path, resume: bool, force_config: bool) -> None:
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


def load_job(job_dir: Path) -> tuple[JobConfig, list[TrialResult], GridMetrics]:
    """Config, results and metrics of a job folder (for ``rise metrics`` / ``rise compare``)."""
    job_dir = Path(job_dir)
    config = JobConfig.load(job_dir / "config.json")
    results, metrics = collect(config, job_dir)
    return config, results, metrics

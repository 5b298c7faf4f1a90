"""What an experiment's folders say about its trials: everything they spent (attempts moved aside included)
and which grids are being run right now. Serves ``rise report`` and ``rise status``; reads only, locks nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.experiment.store import Experiment
from trials.cost import CostSummary
from trials.harness_api import AgentOutcome
from trials.results import TrialResult

_SKIP_DIRS = {"harness", "worktrees", ".git", "__pycache__"}


def _trial_cost(tdir: Path) -> Any | None:
    try:
        return TrialResult.load(tdir / "result.json").cost
    except (OSError, ValueError):
        pass
    try:  # a trial a kill cut off: its harness may still have reported what it spent
        return AgentOutcome.model_validate_json((tdir / "agent" / "agent_result.json").read_text()).cost
    except (OSError, ValueError):
        return None


def trial_folders(exp: Experiment) -> Iterator[Path]:
    """Every trial folder of the experiment (a ``result.json``, or the harness's ``agent_result.json`` of a trial
    a kill cut off), attempts moved aside and the checks' scratch trials included; candidate checkouts skipped."""
    for dirpath, dirnames, filenames in os.walk(exp.root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        here = Path(dirpath)
        is_trial = "result.json" in filenames or (here / "agent" / "agent_result.json").is_file()
        if is_trial and here != exp.root:
            dirnames[:] = []  # nothing below a trial folder is another trial
            yield here


def experiment_spend(exp: Experiment) -> dict[str, CostSummary]:
    """Everything the experiment's trials spent (attempts moved aside included), by top-level folder."""
    out: dict[str, CostSummary] = {}
    for here in trial_folders(exp):
        cost = _trial_cost(here)
        if cost is not None:
            area = here.relative_to(exp.root).parts[0]
            out.setdefault(area, CostSummary()).add(cost)
    return out


def _held_flocks() -> dict[int, int]:
    """inode -> pid of every flock held on this machine (``/proc/locks``); reading it disturbs no lock."""
    held = {}
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4].isdigit():
                held[int(parts[5].rsplit(":", 1)[1])] = int(parts[4])
    except (OSError, ValueError, IndexError):
        pass
    return held


def held_by(path: Path) -> int | None:
    """The pid that holds a flock on ``path`` right now (None: nobody does, or there is no such file)."""
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return None
    return _held_flocks().get(inode)


def running_jobs(exp: Experiment) -> list[dict[str, Any]]:
    """Grids of this experiment being run right now: the job folder, its runner's pid, cells done and the
    trials in flight. A job is running while its ``job.lock`` flock is held."""
    held = _held_flocks()
    out = []
    for dirpath, dirnames, filenames in os.walk(exp.root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and "__r" not in d]
        if "job.lock" not in filenames:
            continue
        job = Path(dirpath)
        pid = held.get(os.stat(job / "job.lock").st_ino)
        if pid is None:
            continue
        trials = [d for d in job.iterdir() if d.is_dir() and re.fullmatch(r".+__r\d+", d.name)]
        done = sum((d / "result.json").is_file() for d in trials)
        total = None
        try:
            from trials.results import JobConfig

            cfg = JobConfig.load(job / "config.json")
            total = len(cfg.task_names) * cfg.r
        except (OSError, ValueError):
            pass
        out.append({"job_dir": str(job.relative_to(exp.root)), "pid": pid, "done": done, "total": total,
                    "in_flight": sorted(d.name for d in trials if not (d / "result.json").is_file())})
    return sorted(out, key=lambda j: j["job_dir"])

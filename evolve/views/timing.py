"""The report's "Time and load" section: per evaluated grid, where its trials' time went (prefill, decode,
waiting for the model server, commands and harness, sandbox, verifier), the prompt cache's hit ratio, the
model's speeds and the machine's load while the grid ran (:mod:`trials.time_split`, :mod:`trials.load`).

A grid's pass rate depends on how many turns its trials got, and on a small CPU box that depends on prefill,
cache hits and the load; this section puts those figures beside each grid, so two grids are compared knowing
whether they ran under the same conditions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trials.time_split import PART_LABELS, PARTS, GridLoad, TimeSplit, grid_load, grid_split

LABELS = [PART_LABELS[p] for p in PARTS]  # the table's column heads, in the order of TimeSplit.parts()


@dataclass
class TimeRow:
    """One grid's time split and load."""

    label: str
    split: TimeSplit
    load: GridLoad


def grid_time(job_dir: Path | None, label: str) -> TimeRow | None:
    """The time row of a job folder (None when it has no readable results)."""
    if job_dir is None or not (job_dir / "config.json").is_file():
        return None
    from trials.job import load_job

    try:
        _, results, _ = load_job(job_dir)
    except (OSError, ValueError):
        return None
    return TimeRow(label, grid_split(results), grid_load(results)) if results else None


def time_rows(columns: list[Any]) -> list[TimeRow]:
    """A row per report column (a version's reference grid or a candidate's evaluation) that has results."""
    return [row for c in columns if (row := grid_time(c.job_dir, c.label)) is not None]

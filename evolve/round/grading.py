"""Grading a decided candidate's predictions against the paired per-task outcome.

The proposer predicts which tasks a mechanism fixes and which it puts at risk. Once the candidate is adopted or
rejected, each prediction is compared with the same task's pass rate in a baseline grid and in the candidate's
evaluation grid. The baseline must not be the runs the tasks were chosen from: a task picked because it failed
in the reference corpus looks worse there than it is (at r = 2 a flipping task is 1/2 there by construction, so
a candidate with no effect would be "fixed" whenever it passes 2/2: regression to the mean). The loop therefore
grades against fresh runs of the incumbent (``evolve.round.grading_runs``); the grade records its baseline's source.

- a predicted fix is *fixed* (the candidate passes every run where the baseline did not), *improved*,
  *unchanged* or *worse*; a task at risk *held* or *regressed*;
- any other task whose pass rate fell is an *unexplained regression* (nobody predicted it).

The grade: **incomplete** when the candidate's evaluation was curtailed (a task has fewer than r runs: sequential
stopping decided it early), since pass rates of a cut grid grade nothing; otherwise **harmful** when a task
regressed (at risk or unexplained) and the candidate's Pass@1 is not above the baseline's, **effective** when
every predicted fix improved and at least one is fixed, **partly effective** when some predicted fix improved,
**ineffective** otherwise. A task short of r runs on either side has the verdict *incomplete*. Grades are stored
in the ledger (``GradeEvent``), shown to the next proposer and in reports. ⊥ cells count as neither pass nor fail.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Grid = dict[str, list[bool | None]]
GradeName = Literal["effective", "partly effective", "ineffective", "harmful", "incomplete"]


class TaskDelta(BaseModel):
    task: str
    baseline: float | None = Field(description="pass rate over the baseline's decided runs")
    candidate: float | None
    verdict: str = Field(description="fixed | improved | unchanged | worse | held | regressed | unknown | "
                                     "incomplete")


class Grade(BaseModel):
    """A candidate's predictions, graded."""

    slug: str
    status: str = Field(description="adopted | rejected")
    grade: GradeName
    fixes: list[TaskDelta] = Field(default_factory=list)
    at_risk: list[TaskDelta] = Field(default_factory=list)
    unexplained_regressions: list[TaskDelta] = Field(default_factory=list)
    baseline_pass1: float | None = None
    candidate_pass1: float | None = None
    cells_run: int = Field(0, description="candidate cells run (curtailment may have cut the grid)")
    cells: int = Field(0, description="cells of the complete candidate grid")
    baseline_source: str = Field("", description="which runs the predictions were graded against")

    def line(self) -> str:
        """One line for the next proposer and for reports."""
        fx = ", ".join(f"{d.task} {d.verdict}" for d in self.fixes) or "none predicted"
        risk = ", ".join(f"{d.task} {d.verdict}" for d in self.at_risk) or "none named"
        unexp = ", ".join(d.task for d in self.unexplained_regressions) or "none"
        cut = (f" (evaluation curtailed: {self.cells_run} of {self.cells} runs; not graded)"
               if self.grade == "incomplete" else "")
        return (f"{self.slug} ({self.status}): {self.grade}{cut}; predicted fixes: {fx}; tasks at risk: {risk}; "
                f"unexplained regressions: {unexp}")


def pass_rate(cells: list[bool | None] | None) -> float | None:
    """The share of passes among the cells that ran and were not ⊥; None when there is none."""
    known = [c for c in (cells or []) if c is not None]
    return sum(known) / len(known) if known else None


def pooled_pass_rate(grid: Grid) -> float | None:
    """Pass@1 over every task's cells (⊥ cells left out); None when there is none."""
    known = [c for cells in grid.values() for c in cells if c is not None]
    return sum(known) / len(known) if known else None


def _delta(task: str, baseline: Grid, candidate: Grid, r: int, *, at_risk: bool) -> TaskDelta:
    b, c = pass_rate(baseline.get(task)), pass_rate(candidate.get(task))
    if task in baseline and task in candidate and len(candidate[task]) < r:
        # the candidate's cells not run (a curtailed grid): its pass rate says nothing yet; the baseline may hold
        # fewer runs by design ([adoption] grading_r)
        verdict = "incomplete"
    elif b is None or c is None:  # not a task of the grids, or every run ⊥
        verdict = "unknown"
    elif at_risk:
        verdict = "regressed" if c < b else "held"
    elif c > b:
        verdict = "fixed" if c == 1.0 else "improved"
    else:
        verdict = "worse" if c < b else "unchanged"
    return TaskDelta(task=task, baseline=b, candidate=c, verdict=verdict)


def grade(slug: str, status: str, predicted_fixes: list[str], tasks_at_risk: list[str], baseline: Grid,
          candidate: Grid, r: int | None = None, baseline_source: str = "") -> Grade:
    """Grade one candidate (``baseline`` and ``candidate`` are decision grids: task -> per-run pass or ⊥; a cell
    not run is absent). ``r``: runs per task of a complete grid (default: the most any task has);
    ``baseline``: runs that were not used to choose the predicted tasks (see the module docstring)."""
    r = r if r is not None else max((len(v) for v in (*baseline.values(), *candidate.values())), default=0)
    fixes = [_delta(t, baseline, candidate, r, at_risk=False) for t in predicted_fixes]
    risk = [_delta(t, baseline, candidate, r, at_risk=True) for t in tasks_at_risk]
    named = set(predicted_fixes) | set(tasks_at_risk)
    unexplained = [d for t in sorted(set(baseline) & set(candidate) - named)
                   if (d := _delta(t, baseline, candidate, r, at_risk=True)).verdict == "regressed"]
    b1, c1 = pooled_pass_rate(baseline), pooled_pass_rate(candidate)
    regressed = any(d.verdict == "regressed" for d in risk) or bool(unexplained)
    improved = [d for d in fixes if d.verdict in ("fixed", "improved")]
    run, cells = sum(min(len(v), r) for v in candidate.values()), r * len(candidate)
    name: GradeName
    if run < cells:
        name = "incomplete"
    elif regressed and (b1 is None or c1 is None or c1 <= b1):
        name = "harmful"
    elif fixes and len(improved) == len(fixes) and any(d.verdict == "fixed" for d in fixes):
        name = "effective"
    elif improved:
        name = "partly effective"
    else:
        name = "ineffective"
    return Grade(slug=slug, status=status, grade=name, fixes=fixes, at_risk=risk, unexplained_regressions=unexplained,
                 baseline_pass1=b1, candidate_pass1=c1, cells_run=run, cells=cells, baseline_source=baseline_source)

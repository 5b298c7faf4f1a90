"""Grading a decided candidate's predictions against the paired per-task outcome.

The proposer predicts which tasks a mechanism fixes and which it puts at risk. Once the candidate is adopted or
rejected, each prediction is compared with the same task's pass rate in the baseline grid (the incumbent's
reference runs) and in the candidate's evaluation grid:

- a predicted fix is *fixed* (the candidate passes every run where the baseline did not), *improved*,
  *unchanged* or *worse*; a task at risk *held* or *regressed*;
- any other task whose pass rate fell is an *unexplained regression* (nobody predicted it).

The grade: **harmful** when a task regressed (at risk or unexplained) and the candidate's Pass@1 is not above
the baseline's, **effective** when every predicted fix improved and at least one is fixed, **partly
effective** when some predicted fix improved, **ineffective** otherwise. Grades are stored in the ledger
(``GradeEvent``), shown to the next proposer and in reports. ⊥ cells count as neither pass nor fail.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Grid = dict[str, list[bool | None]]
GradeName = Literal["effective", "partly effective", "ineffective", "harmful"]


class TaskDelta(BaseModel):
    task: str
    baseline: float | None = Field(description="pass rate over the baseline's decided runs")
    candidate: float | None
    verdict: str = Field(description="fixed | improved | unchanged | worse | held | regressed | unknown")


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

    def line(self) -> str:
        """One line for the next proposer and for reports."""
        fx = ", ".join(f"{d.task} {d.verdict}" for d in self.fixes) or "none predicted"
        risk = ", ".join(f"{d.task} {d.verdict}" for d in self.at_risk) or "none named"
        unexp = ", ".join(d.task for d in self.unexplained_regressions) or "none"
        return (f"{self.slug} ({self.status}): {self.grade}; predicted fixes: {fx}; tasks at risk: {risk}; "
                f"unexplained regressions: {unexp}")


def _rate(cells: list[bool | None] | None) -> float | None:
    known = [c for c in (cells or []) if c is not None]
    return sum(known) / len(known) if known else None


def _pass1(grid: Grid) -> float | None:
    known = [c for cells in grid.values() for c in cells if c is not None]
    return sum(known) / len(known) if known else None


def _delta(task: str, baseline: Grid, candidate: Grid, *, at_risk: bool) -> TaskDelta:
    b, c = _rate(baseline.get(task)), _rate(candidate.get(task))
    if b is None or c is None:
        verdict = "unknown"
    elif at_risk:
        verdict = "regressed" if c < b else "held"
    elif c > b:
        verdict = "fixed" if c == 1.0 else "improved"
    else:
        verdict = "worse" if c < b else "unchanged"
    return TaskDelta(task=task, baseline=b, candidate=c, verdict=verdict)


def grade(slug: str, status: str, predicted_fixes: list[str], tasks_at_risk: list[str], baseline: Grid,
          candidate: Grid) -> Grade:
    """Grade one candidate (``baseline`` and ``candidate`` are decision grids: task -> per-run pass or ⊥)."""
    fixes = [_delta(t, baseline, candidate, at_risk=False) for t in predicted_fixes]
    risk = [_delta(t, baseline, candidate, at_risk=True) for t in tasks_at_risk]
    named = set(predicted_fixes) | set(tasks_at_risk)
    unexplained = [d for t in sorted(set(baseline) & set(candidate) - named)
                   if (d := _delta(t, baseline, candidate, at_risk=True)).verdict == "regressed"]
    b1, c1 = _pass1(baseline), _pass1(candidate)
    regressed = any(d.verdict == "regressed" for d in risk) or bool(unexplained)
    improved = [d for d in fixes if d.verdict in ("fixed", "improved")]
    name: GradeName
    if regressed and (b1 is None or c1 is None or c1 <= b1):
        name = "harmful"
    elif fixes and len(improved) == len(fixes) and any(d.verdict == "fixed" for d in fixes):
        name = "effective"
    elif improved:
        name = "partly effective"
    else:
        name = "ineffective"
    return Grade(slug=slug, status=status, grade=name, fixes=fixes, at_risk=risk, unexplained_regressions=unexplained,
                 baseline_pass1=b1, candidate_pass1=c1)

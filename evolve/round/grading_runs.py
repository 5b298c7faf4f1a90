"""The baseline a round's predictions are graded against: runs of the incumbent that did not choose the tasks.

The analysis picks the failing tasks (and the stable passes it names as at risk) from the incumbent's reference
corpus, so that corpus is biased on exactly those tasks (``evolve.round.grading``). The grading baseline is therefore:

- with ``[adoption] baseline = "control"``: the round's control grid, run after the tasks were chosen (fresh);
- with ``baseline = "reference"``: fresh runs of the incumbent on the tasks the round's candidates name (predicted
  fixes and tasks at risk) × ``[adoption] grading_r`` (default r), in ``rounds/rNN/grading-baseline``, each trial a keyed ``TrialDone``
  (``<incumbent commit>:grading:rNN:<task>:<rep>``, purpose ``control``), so a resume runs none twice; the other
  tasks (where unexplained regressions are looked for: nobody chose them) keep the reference corpus.

Only named tasks a candidate's evaluation ran r times get fresh runs (:func:`tasks_needing_fresh_runs`): one that
sequential stopping cut short grades "incomplete" anyway. These trials cost grading_r runs per such task per round; they are booked, counted by the trial budget, and decide
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from evolve.round.controller import Controller
from validate.evaluate import grid_of_job

Grid = dict[str, list[bool | None]]


def tasks_needing_fresh_runs(candidates: Iterable[tuple[Iterable[str], Grid]], r: int) -> set[str]:
    """Of each candidate's named tasks (with its evaluation grid), those worth fresh incumbent runs: the ones its
    evaluation ran r times. A task sequential stopping cut short grades "incomplete" whatever the baseline says,
    so its fresh runs would be spent for nothing (the night of 2026-12-07 spent 4 on a curtailed candidate)."""
    return {t for named, grid in candidates for t in named if len(grid.get(t, [])) >= r}


async def grading_baseline(ctl: Controller, round_no: int, incumbent: str, named: Iterable[str],
                           decision_baseline: Path) -> tuple[Grid, str]:
    """(grid, source): the baseline the round's predictions are graded against (see the module docstring)."""
    base, _ = grid_of_job(decision_baseline)
    if ctl.cfg.adoption.baseline == "control":
        return base, f"the round's control grid ({_rel(ctl, decision_baseline)}), run after the tasks were chosen"
    dev = set(ctl.dev_tasks())
    tasks = sorted(set(named) & dev)
    if not tasks:
        return base, (f"the reference corpus ({_rel(ctl, decision_baseline)}); no named task needed fresh runs "
                      "(none was named, or each one's evaluation was cut short by sequential stopping)")
    commit = ctl.exp.commit_of(incumbent)
    job = ctl.exp.root / "rounds" / f"r{round_no:02d}" / "grading-baseline"
    runs = ctl.cfg.adoption.grading_r or ctl.cfg.r
    out = await ctl.grid(ctl.plan("control", ctl.version_dir(incumbent), tasks, runs, job), commit,
                         f"{commit}:grading:r{round_no:02d}")
    source = (f"fresh runs of {incumbent} on the named tasks ({_rel(ctl, job)}: {', '.join(tasks)}); other "
              "tasks: the reference corpus")
    return {**base, **out.grid}, source


def _rel(ctl: Controller, path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ctl.exp.root.resolve()))
    except ValueError:
        return str(path)

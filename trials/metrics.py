"""Metrics over a tasks × r grid, and the paired per-task comparison of two grids.

A grid is ``{task: [cell per repetition]}`` with ``True`` (passed), ``False`` (failed) or ``None`` (⊥ or not
run), the same shape ``validate.adoption`` uses; a list shorter than r is padded with ``None``. ⊥ and missing
cells are never dropped silently: they make the grid incomplete (``complete=False``) and are listed. Over an
incomplete grid the numbers are still computed from the observed cells (Pass@1) or from the tasks whose r cells
are all observed (Pass^r, Pass@r, Flip), and are flagged.

Definitions (RiseHarness): Pass@1 = mean over tasks × r; Pass^r = share of tasks whose r runs all pass;
Pass@r = share with at least one pass; Flip = share with some passes and some fails (Pass@r − Pass^r).
``pass_at_k`` is the unbiased estimator 1 − C(n−c, k)/C(n, k) per task (n runs, c passes), averaged over tasks.
Confidence intervals: Wilson score interval for Pass@1 over cells (treats cells as independent, which
repetitions of one task are not) and a task-level percentile bootstrap (tasks resampled with replacement,
fixed seed) that respects that dependence.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

Cell = bool | None
Grid = dict[str, list[Cell]]
TaskOutcome = Literal["pass", "fail", "flip", "incomplete"]
PairClass = Literal["stable_pass", "stable_fail", "fixed", "regressed", "flipping", "incomplete", "unpaired"]

Z95 = 1.959963984540054
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 20240601


class MissingCell(BaseModel):
    task: str
    repetition: int = Field(description="1-based")
    reason: str = Field(description="infra:<cause> for ⊥, 'missing' for a cell that has not run")


class TaskRow(BaseModel):
    """One line of the per-task outcome table."""

    task: str
    passes: int
    fails: int
    unknown: int = Field(description="⊥ or missing cells")
    rate: float | None = Field(description="passes / observed cells")
    outcome: TaskOutcome


class Interval(BaseModel):
    low: float
    high: float


class GridMetrics(BaseModel):
    n_tasks: int
    r: int
    cells: int
    observed_cells: int
    complete: bool
    missing: list[MissingCell] = Field(default_factory=list)
    pass_at_1: float | None
    pass_hat_r: float | None
    pass_at_r: float | None
    flip: float | None
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict, description="tasks per outcome; cells passed/failed")
    wilson_pass_at_1: Interval | None = None
    bootstrap: dict[str, Interval] = Field(default_factory=dict, description="95% task-level intervals")
    tasks: list[TaskRow] = Field(default_factory=list)


def pad(grid: Grid, r: int) -> Grid:
    """Every task's list cut or padded with ``None`` to exactly r cells."""
    return {t: (list(cells) + [None] * r)[:r] for t, cells in grid.items()}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples passes) from n runs with c passes."""
    if k > n or k < 1:
        raise ValueError(f"pass@k needs 1 <= k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson(successes: int, n: int, z: float = Z95) -> Interval | None:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(low=max(0.0, centre - half), high=min(1.0, centre + half))


def task_outcome(cells: list[Cell]) -> TaskOutcome:
    if not cells or any(c is None for c in cells):
        return "incomplete"
    if all(cells):
        return "pass"
    if not any(cells):
        return "fail"
    return "flip"


def _rates(grid: Grid) -> tuple[float | None, float | None, float | None, float | None]:
    observed = [c for cells in grid.values() for c in cells if c is not None]
    p1 = sum(observed) / len(observed) if observed else None
    full = [cells for cells in grid.values() if cells and all(c is not None for c in cells)]
    if not full:
        return p1, None, None, None
    hat = sum(all(c) for c in full) / len(full)
    at = sum(any(c) for c in full) / len(full)
    return p1, hat, at, at - hat


def _bootstrap(grid: Grid, samples: int, seed: int) -> dict[str, Interval]:
    tasks = sorted(grid)
    if len(tasks) < 2:
        return {}
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {"pass_at_1": [], "pass_hat_r": [], "pass_at_r": []}
    for _ in range(samples):
        pick = {f"{i}": grid[rng.choice(tasks)] for i in range(len(tasks))}
        p1, hat, at, _flip = _rates(pick)
        for key, value in (("pass_at_1", p1), ("pass_hat_r", hat), ("pass_at_r", at)):
            if value is not None:
                draws[key].append(value)
    out = {}
    for key, values in draws.items():
        if values:
            values.sort()
            out[key] = Interval(low=values[int(0.025 * (len(values) - 1))],
                                high=values[math.ceil(0.975 * (len(values) - 1))])
    return out


def compute_metrics(grid: Grid, r: int, reasons: dict[tuple[str, int], str] | None = None,
                    bootstrap_samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> GridMetrics:
    """All grid metrics. ``reasons`` maps (task, repetition) of an unknown cell to why (``infra:<cause>``)."""
    grid = pad(grid, r)
    reasons = reasons or {}
    missing = [MissingCell(task=t, repetition=k + 1, reason=reasons.get((t, k + 1), "missing"))
               for t in sorted(grid) for k, c in enumerate(grid[t]) if c is None]
    rows = []
    for t in sorted(grid):
        cells = grid[t]
        obs = [c for c in cells if c is not None]
        rows.append(TaskRow(task=t, passes=sum(obs), fails=len(obs) - sum(obs), unknown=r - len(obs),
                            rate=sum(obs) / len(obs) if obs else None, outcome=task_outcome(cells)))
    p1, hat, at, flip = _rates(grid)
    pk: dict[int, float] = {}
    for k in range(1, r + 1):
        vals = [pass_at_k(len(obs), sum(obs), k) for obs in
                ([c for c in cells if c is not None] for cells in grid.values()) if len(obs) >= k]
        if vals:
            pk[k] = sum(vals) / len(vals)
    observed = sum(1 for cells in grid.values() for c in cells if c is not None)
    passed = sum(1 for cells in grid.values() for c in cells if c is True)
    counts = {o: sum(row.outcome == o for row in rows) for o in ("pass", "fail", "flip", "incomplete")}
    counts.update(cells_passed=passed, cells_failed=observed - passed, cells_unknown=len(missing))
    return GridMetrics(n_tasks=len(grid), r=r, cells=len(grid) * r, observed_cells=observed,
                       complete=not missing and len(grid) > 0, missing=missing, pass_at_1=p1, pass_hat_r=hat,
                       pass_at_r=at, flip=flip, pass_at_k=pk, counts=counts, wilson_pass_at_1=wilson(passed, observed),
                       bootstrap=_bootstrap(grid, bootstrap_samples, seed), tasks=rows)


def grid_from_results(results: Iterable[Any], tasks: Iterable[str], r: int
                      ) -> tuple[Grid, dict[tuple[str, int], str]]:
    """Build a grid (and the reasons of unknown cells) from TrialResult-like objects
    (``task_name``, ``repetition``, ``status``, ``infra_cause``)."""
    grid: Grid = {t: [None] * r for t in tasks}
    reasons: dict[tuple[str, int], str] = {}
    for res in results:
        if res.task_name not in grid or not 1 <= res.repetition <= r:
            continue
        if res.status == "infra":
            grid[res.task_name][res.repetition - 1] = None
            reasons[(res.task_name, res.repetition)] = f"infra:{res.infra_cause or 'unknown'}"
        else:
            grid[res.task_name][res.repetition - 1] = res.status == "passed"
    return grid, reasons


# -------------------------------------------------------------------------------------- paired comparison
class PairRow(BaseModel):
    task: str
    a: TaskOutcome | None
    b: TaskOutcome | None
    rate_a: float | None
    rate_b: float | None
    delta: float | None
    pair: PairClass


class Comparison(BaseModel):
    """Grid B against grid A (A = baseline). Classes partition the paired tasks:
    stable_pass (both all-pass), regressed (A all-pass, B not), fixed (B all-pass, A not), stable_fail (both
    all-fail), flipping (the rest: a flip on at least one side, no all-pass on either)."""

    complete: bool
    pass_at_1_a: float | None
    pass_at_1_b: float | None
    delta_pass_at_1: float | None
    counts: dict[str, int]
    improved_tasks: int = Field(description="tasks whose pass rate went up (for a sign test)")
    worsened_tasks: int
    sign_test_p: float = Field(description="two-sided exact sign test over per-task rate changes")
    tasks: list[PairRow]


def _pair_class(a: TaskOutcome, b: TaskOutcome) -> PairClass:
    if "incomplete" in (a, b):
        return "incomplete"
    if a == "pass":
        return "stable_pass" if b == "pass" else "regressed"
    if b == "pass":
        return "fixed"
    if a == b == "fail":
        return "stable_fail"
    return "flipping"


def _sign_test_two_sided(wins: int, losses: int) -> float:
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(max(wins, losses), n + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(grid_a: Grid, grid_b: Grid, r_a: int, r_b: int | None = None) -> Comparison:
    """Paired per-task comparison of two grids (they may have different r)."""
    r_b = r_b or r_a
    a, b = pad(grid_a, r_a), pad(grid_b, r_b)
    rows = []
    for t in sorted(set(a) | set(b)):
        ca, cb = a.get(t), b.get(t)
        oa = task_outcome(ca) if ca is not None else None
        ob = task_outcome(cb) if cb is not None else None
        ra = _rate(ca)
        rb = _rate(cb)
        pair: PairClass = "unpaired" if oa is None or ob is None else _pair_class(oa, ob)
        delta = rb - ra if ra is not None and rb is not None else None
        rows.append(PairRow(task=t, a=oa, b=ob, rate_a=ra, rate_b=rb, delta=delta, pair=pair))
    counts = {c: sum(row.pair == c for row in rows) for c in
              ("stable_pass", "stable_fail", "fixed", "regressed", "flipping", "incomplete", "unpaired")}
    paired = [row for row in rows if row.pair not in ("incomplete", "unpaired")]
    up = sum(1 for row in paired if row.delta and row.delta > 0)
    down = sum(1 for row in paired if row.delta and row.delta < 0)
    p1a = _rates({row.task: a[row.task] for row in paired})[0] if paired else None
    p1b = _rates({row.task: b[row.task] for row in paired})[0] if paired else None
    return Comparison(complete=counts["incomplete"] == 0 and counts["unpaired"] == 0, pass_at_1_a=p1a,
                      pass_at_1_b=p1b, delta_pass_at_1=(p1b - p1a) if p1a is not None and p1b is not None else None,
                      counts=counts, improved_tasks=up, worsened_tasks=down,
                      sign_test_p=_sign_test_two_sided(up, down), tasks=rows)


def _rate(cells: list[Cell] | None) -> float | None:
    if cells is None:
        return None
    obs = [c for c in cells if c is not None]
    return sum(obs) / len(obs) if obs else None

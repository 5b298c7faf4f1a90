"""Adoption decisions: does a candidate's evaluation beat the baseline?

Grids are ``{task: [outcome per repetition]}`` with outcome ``True`` (pass), ``False`` (fail) or ``None`` (⊥, an
infrastructure failure); a list shorter than r means the remaining repetitions have not run yet. A decision needs
a *complete* grid: a ⊥ cell always blocks adoption (rerun it), and the reason names the cells.

Policies
- ``paper``: adopt when the candidate's aggregate Pass@1 is strictly above the baseline's.
- ``paired``: a one-sided paired test over tasks (exact sign test on per-task pass-rate differences; ties are
  dropped) at level ``alpha``; adopt when p < alpha and the aggregate Pass@1 is above the baseline's.

Sequential early stopping (``curtail``): the evaluation may stop as soon as the remaining cells cannot change the
decision of the complete grid (deterministic curtailment). It therefore never changes the decision, so its
false-adoption rate equals the full grid's; it only saves trials. Regressions of tasks that were stable passes in
the baseline are always listed, whatever the decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Grid = dict[str, list[bool | None]]
Policy = Literal["paper", "paired"]


@dataclass
class Decision:
    adopt: bool
    decided: bool  # False while an evaluation is still open and the outcome can change
    reason: str
    candidate_pass1: float | None = None
    baseline_pass1: float | None = None
    p_value: float | None = None
    regressions: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _cells(grid: Grid) -> list[bool | None]:
    return [o for outs in grid.values() for o in outs]


def pass_at_1(grid: Grid) -> float:
    cells = [bool(o) for o in _cells(grid)]
    return sum(cells) / len(cells) if cells else 0.0


def missing_cells(grid: Grid, tasks: list[str], r: int, infra: bool | None = None) -> list[str]:
    """Cells (``task#k``, k counted from 1 like trial folders ``task__rk``) of a ``tasks`` × ``r`` grid that are
    ⊥ (``infra=True``), not run yet (``infra=False``), or either (``None``)."""
    out = []
    for t in tasks:
        outs = grid.get(t, [])
        for k in range(r):
            absent = k >= len(outs)
            if (absent and infra is not True) or (not absent and outs[k] is None and infra is not False):
                out.append(f"{t}#{k + 1}")
    return out


def stable_pass_regressions(candidate: Grid, baseline: Grid) -> list[str]:
    """Tasks that passed every baseline run but fail at least one candidate run."""
    return sorted(
        t for t, outs in baseline.items()
        if outs and all(o is True for o in outs) and any(o is False for o in candidate.get(t, []))
    )


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def _paired_counts(candidate: Grid, baseline: Grid) -> tuple[int, int]:
    wins = losses = 0
    for t, b in baseline.items():
        c = candidate.get(t, [])
        if not b or not c:
            continue
        d = sum(map(bool, c)) / len(c) - sum(map(bool, b)) / len(b)
        wins += d > 0
        losses += d < 0
    return wins, losses


def _decide_complete(candidate: Grid, baseline: Grid, policy: Policy, alpha: float) -> tuple[bool, float | None]:
    c1, b1 = pass_at_1(candidate), pass_at_1(baseline)
    if policy == "paper":
        return c1 > b1, None
    if policy == "paired":
        w, lo = _paired_counts(candidate, baseline)
        p = sign_test_p(w, lo)
        return (p < alpha and c1 > b1), p
    raise ValueError(f"unknown adoption policy {policy!r} (paper or paired)")


def decide(candidate: Grid, baseline: Grid, tasks: list[str], r: int, policy: Policy = "paper",
           alpha: float = 0.05, curtail: bool = False) -> Decision:
    """Decide adoption from a candidate grid against a complete baseline grid.

    With ``curtail=True`` an incomplete candidate grid may already be decided: both policies are monotone in
    each candidate cell (one more pass never turns adopt into reject), so when the all-pass and the all-fail
    completions of the cells not yet run give the same decision, every completion does. Otherwise an incomplete
    grid never adopts.
    """
    base_missing = missing_cells(baseline, tasks, r)
    if base_missing:
        return Decision(False, True, f"baseline grid incomplete: {len(base_missing)} cells ⊥/missing "
                        f"({', '.join(base_missing[:5])}{'…' if len(base_missing) > 5 else ''})",
                        missing=base_missing)
    regressions = stable_pass_regressions(candidate, baseline)
    b1 = pass_at_1(baseline)
    infra = missing_cells(candidate, tasks, r, infra=True)
    if infra:
        return Decision(False, False, f"cannot adopt: {len(infra)} ⊥ (infrastructure) cells in the candidate grid "
                        f"({', '.join(infra[:5])}{'…' if len(infra) > 5 else ''}); rerun them with --resume",
                        None, b1, None, regressions, infra)
    missing = missing_cells(candidate, tasks, r, infra=False)
    if not missing:
        adopt, p = _decide_complete(candidate, baseline, policy, alpha)
        c1 = pass_at_1(candidate)
        why = (f"{policy}: candidate Pass@1 {c1:.3f} vs baseline {b1:.3f}"
               + (f", sign-test p={p:.4f} (alpha {alpha})" if p is not None else ""))
        return Decision(adopt, True, ("adopt — " if adopt else "reject — ") + why, c1, b1, p, regressions)
    if curtail:
        outcomes = set()
        for fill in (True, False):
            filled = {t: [(o if o is not None else fill) for o in _pad(candidate.get(t, []), r)] for t in tasks}
            outcomes.add(_decide_complete(filled, baseline, policy, alpha)[0])
        if len(outcomes) == 1:
            adopt = outcomes.pop()
            return Decision(adopt, True, f"{'adopt' if adopt else 'reject'} — decided early by curtailment with "
                            f"{len(missing)} cells not run; no completion can change it", None, b1, None,
                            regressions, missing)
    return Decision(False, False, f"candidate grid incomplete: {len(missing)} cells not run yet "
                    f"({', '.join(missing[:5])}{'…' if len(missing) > 5 else ''}); cannot adopt",
                    None, b1, None, regressions, missing)


def _pad(outs: list[bool | None], r: int) -> list[bool | None]:
    return list(outs[:r]) + [None] * max(0, r - len(outs))

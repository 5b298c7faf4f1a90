"""Adoption decisions: does a candidate's evaluation beat the baseline?

Grids are ``{task: [outcome per repetition]}`` with outcome ``True`` (pass), ``False`` (fail) or ``None`` (⊥, an
infrastructure failure); a list shorter than r means the remaining repetitions have not run yet. A decision needs
a *complete* grid: a ⊥ cell always blocks adoption (rerun it), and the reason names the cells. An incomplete
*baseline* blocks the decision too (``decided`` False: complete it first): an infrastructure fault is evidence
about neither side, so it never decides.

Policies (``validate.adoption_stats`` has the statistics, ``validate.adoption_sim`` measures them):
- ``stratified`` (the default): an exact one-sided conditional test stratified by task, tasks weighted by the
  inverse variance of their pass rate; adopt when p <= alpha and the aggregate Pass@1 is above the baseline's.
- ``paper``: adopt when the candidate's aggregate Pass@1 is strictly above the baseline's (the method as
  published; it adopts a no-better candidate about half the time).
- ``paired``: a one-sided paired test over tasks (exact sign test on per-task pass-rate differences; ties are
  dropped) at level ``alpha``; adopt when p < alpha and the aggregate Pass@1 is above the baseline's.
- ``coupled``: the grids are two interleaved arms, cell (task, k) of each a pair; an exact one-sided conditional
  test on the discordant pairs stratified by task (``validate.coupled``); adopt when p <= alpha and the aggregate
  Pass@1 is above the baseline's.

Every decision states its policy and that policy's measured false-adoption rate at the grid's size
(:func:`validate.adoption_sim.false_adoption_rate`), in its fields and at the end of its reason. A comparison that
is one of a family (a round's M candidates, a night's rounds: ``validate.multiplicity``) is tested at the family's
per-candidate level and records the measured per-round and per-night rates as well.

Sequential early stopping (``curtail``): the evaluation may stop as soon as the remaining cells cannot change the
decision of the complete grid (deterministic curtailment: the two extreme completions for ``paper``, ``paired``
and ``coupled``, which are monotone in each cell against a complete baseline; p-value bounds over every completion
for ``stratified``). It therefore never changes the decision, so its false-adoption rate equals the full grid's; it
only saves trials.
Regressions of tasks that were stable passes in the baseline are always listed, whatever the decision.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .adoption_sim import false_adoption_rate, policy_note, rate_basis
from .adoption_stats import (
    DEFAULT_POLICY,
    POLICIES,
    Policy,
    check_policy,
    decide_counts,
    sign_test_p,
    stratified_p_range,
)
from .coupled import COUPLED, discordant
from .multiplicity import Family, family_note, family_rates, single
from .power import decision_power

Grid = dict[str, list[bool | None]]
__all__ = ["DEFAULT_POLICY", "POLICIES", "Decision", "Family", "Grid", "Policy", "decide", "missing_cells",
           "pass_at_1", "sign_test_p", "stable_pass_regressions"]


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
    policy: str = DEFAULT_POLICY
    alpha: float | None = None  # None for ``paper``, which has no level
    n_tasks: int = 0
    r: int = 0
    false_adoption: float | None = None  # measured rate of adopting a no-better candidate at this grid size
    false_adoption_basis: str = ""  # how it was measured
    # power at this grid against this baseline (validate.power), when asked for: None in older records
    power: float | None = None  # P(adopt) for a candidate better by power_gain on every task
    power_gain: float | None = None
    detectable_gain: float | None = None  # smallest gain adopted with power 0.8 (None: none, or not computed)
    power_basis: str = ""
    # the family this comparison belongs to (validate.multiplicity); a lone comparison is a family of one
    family_size: int = 1  # candidates of the round, each tested at alpha
    night_rounds: int = 1  # rounds sharing the night's budget
    night: int = 1
    alpha_round: float | None = None
    alpha_night: float | None = None
    false_adoption_round: float | None = None  # measured: a round of family_size no-better candidates adopts one
    false_adoption_night: float | None = None  # measured: a night of night_rounds such rounds adopts one


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


def _counts(grid: Grid, tasks: list[str]) -> tuple[list[int], list[int]]:
    """Per task of ``tasks``: passes and runs (⊥ counted as a run that did not pass, as Pass@1 does)."""
    outs = [grid.get(t, []) for t in tasks]
    return [sum(map(bool, o)) for o in outs], [len(o) for o in outs]


def _decide_complete(candidate: Grid, baseline: Grid, tasks: list[str], policy: str,
                     alpha: float) -> tuple[bool, float | None]:
    c, nc = _counts(candidate, tasks)
    b, nb = _counts(baseline, tasks)
    # every pair both arms ran: a cell k of one arm with the same k in the other
    pairs = discordant(candidate, baseline, tasks, max(nc, default=0)) if policy == COUPLED else None
    return decide_counts(c, nc, b, nb, policy, alpha, pairs)


def _curtailed(candidate: Grid, baseline: Grid, tasks: list[str], r: int, policy: str,
               alpha: float) -> bool | None:
    """The decision every completion of ``candidate`` to r runs per task reaches, or None when they differ."""
    if policy == "stratified":
        b, nb = _counts(baseline, tasks)
        ranges, most, least = [], 0, 0
        for t, bt, nbt in zip(tasks, b, nb):
            outs = _pad(candidate.get(t, []), r)
            known = sum(o is True for o in outs)
            unknown = sum(o is None for o in outs)
            ranges.append((known, known + unknown, r, bt, nbt))
            most, least = most + known + unknown, least + known
        b1 = sum(b) / sum(nb) if sum(nb) else 0.0
        p_low, p_high = stratified_p_range(ranges)
        total = r * len(tasks)
        if least / total > b1 and p_high <= alpha:
            return True
        if most / total <= b1 or p_low > alpha:
            return False
        return None
    # paper, paired and coupled are monotone in each cell: the two extreme completions bound the rest
    outcomes = set()
    for fill in (True, False):
        filled = {t: [(o if o is not None else fill) for o in _pad(candidate.get(t, []), r)] for t in tasks}
        outcomes.add(_decide_complete(filled, baseline, tasks, policy, alpha)[0])
    return outcomes.pop() if len(outcomes) == 1 else None


def decide(candidate: Grid, baseline: Grid, tasks: list[str], r: int, policy: Policy = DEFAULT_POLICY,
           alpha: float = 0.05, curtail: bool = False, family: Family | None = None,
           power_gain: float | None = None) -> Decision:
    """Decide adoption from a candidate grid against a complete baseline grid.

    With ``curtail=True`` an incomplete candidate grid may already be decided when every completion of the
    cells not yet run reaches the same decision (see the module docstring). Otherwise an incomplete grid never
    adopts. The decision carries its policy and the policy's measured false-adoption rate at this grid size.
    ``family``: the round and night this comparison belongs to; its per-candidate level replaces ``alpha`` and
    the measured per-round and per-night rates are recorded (``validate.multiplicity``).
    With ``power_gain`` a decided one also carries its power at that gain against this baseline, at the
    per-candidate level (:func:`validate.power.decision_power`).
    """
    check_policy(policy)
    if family is not None:
        alpha = family.alpha_candidate
    d = _decide(candidate, baseline, tasks, r, policy, alpha, curtail)
    d.policy, d.alpha, d.n_tasks, d.r = policy, (None if policy == "paper" else alpha), len(tasks), r
    d.false_adoption = false_adoption_rate(policy, len(tasks), r, alpha)
    d.false_adoption_basis = rate_basis(len(tasks), r, policy)
    if d.decided and power_gain is not None and not missing_cells(baseline, tasks, r):
        b, nb = _counts(baseline, tasks)
        d.power, d.detectable_gain, d.power_basis = decision_power(policy, alpha, r, tuple(b), tuple(nb), power_gain)
        d.power_gain = power_gain
    fam = family or single(alpha)
    for k, v in fam.record().items():
        setattr(d, k, v)
    if d.decided:
        d.false_adoption_round, d.false_adoption_night = family_rates(policy, len(tasks), r, alpha, fam.size,
                                                                      fam.night_rounds)
        d.reason += f" [{policy_note(asdict(d), policy, alpha, len(tasks), r)}{family_note(asdict(d), policy)}]"
    return d


def _decide(candidate: Grid, baseline: Grid, tasks: list[str], r: int, policy: str, alpha: float,
            curtail: bool) -> Decision:
    base_missing = missing_cells(baseline, tasks, r)
    if base_missing:  # not evidence against the candidate: blocked until the baseline is completed
        return Decision(False, False, f"cannot decide: the baseline grid is incomplete, {len(base_missing)} cells "
                        f"⊥/missing ({', '.join(base_missing[:5])}{'…' if len(base_missing) > 5 else ''}); "
                        "complete it (rerun its ⊥ cells) with --resume", missing=base_missing)
    regressions = stable_pass_regressions(candidate, baseline)
    b1 = pass_at_1(baseline)
    infra = missing_cells(candidate, tasks, r, infra=True)
    if infra:
        return Decision(False, False, f"cannot adopt: {len(infra)} ⊥ (infrastructure) cells in the candidate grid "
                        f"({', '.join(infra[:5])}{'…' if len(infra) > 5 else ''}); rerun them with --resume",
                        None, b1, None, regressions, infra)
    missing = missing_cells(candidate, tasks, r, infra=False)
    if not missing:
        adopt, p = _decide_complete(candidate, baseline, tasks, policy, alpha)
        c1 = pass_at_1(candidate)
        test = {"paired": "sign-test", COUPLED: "exact conditional (discordant pairs)"}.get(policy,
                                                                                         "exact stratified")
        if policy == COUPLED:
            n10, n01 = discordant(candidate, baseline, tasks, r)
            test += f" {sum(n10)} vs {sum(n01)}"
        why = (f"{policy}: candidate Pass@1 {c1:.3f} vs baseline {b1:.3f}"
               + (f", {test} p={p:.4f} (alpha {alpha})" if p is not None else ""))
        return Decision(adopt, True, ("adopt — " if adopt else "reject — ") + why, c1, b1, p, regressions)
    if curtail:
        adopt = _curtailed(candidate, baseline, tasks, r, policy, alpha)
        if adopt is not None:
            return Decision(adopt, True, f"{'adopt' if adopt else 'reject'} — decided early by curtailment with "
                            f"{len(missing)} cells not run; no completion can change it", None, b1, None,
                            regressions, missing)
    return Decision(False, False, f"candidate grid incomplete: {len(missing)} cells not run yet "
                    f"({', '.join(missing[:5])}{'…' if len(missing) > 5 else ''}); cannot adopt",
                    None, b1, None, regressions, missing)


def _pad(outs: list[bool | None], r: int) -> list[bool | None]:
    return list(outs[:r]) + [None] * max(0, r - len(outs))

"""Simulated operating characteristics of the coupled test (``validate.coupled``) beside the unpaired rule: per-night
false adoption as the arms' agreement grows and under a load shift, power, and the trials per arm it needs.

Every simulated grid is decided by :func:`validate.adoption_stats.decide_many`, the rule real decisions run. The
model (``validate.coupled``): task pass rates drawn as in ``validate.adoption_sim`` (Beta(0.7, 0.7), or all 0.5),
every arm's cell (t, k) run with the seed of repetition k and following it with probability √ρ.

**Load.** A night's trials run under a load that moves a trial's pass rate by ``shift`` for reasons not its own
(fewer turns before the wall-clock timeout). Where that shift lands is the design (:class:`Design`):

- against the **reference corpus** (run on another day) only the candidate's trials see tonight's load: the
  candidate's rate is p + shift, the corpus's p, and every candidate of the night is compared with that one corpus;
- **interleaved**, both trials of a block run at once, so both see it: each candidate's rate and its own incumbent
  arm's are p + shift, and the shift cancels in the comparison. That is the model's assumption, not a result;
  ``unshared`` is the part of the shift that, in a real interleave, one arm might still see alone (its trials
  overlap the other's only in part), to show what a leak would cost.

A night is one round of M candidates (``night_rounds = 1``, the demo's setting), each tested at α / M
(``validate.multiplicity``); the night adopts falsely when any no-better candidate passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .adoption_sim import TaskModel, draw_rates
from .adoption_stats import decide_many
from .coupled import COUPLED, agreement, coupling_of, draw_cells, pair_counts


@dataclass(frozen=True)
class Design:
    """Where the incumbent's trials come from and which rule decides."""

    name: str
    policy: str  # "stratified" (unpaired, today's default) or "coupled"
    shared_arm: bool  # True: the night's candidates share one incumbent grid (the corpus); False: one arm each
    unshared: float  # the share of the load shift only the candidate's arm sees (1: corpus; 0: an ideal interleave)


DESIGNS = (
    Design("reference corpus, stratified (today's default)", "stratified", True, 1.0),
    Design("reference corpus, coupled pairs (config refuses)", COUPLED, True, 1.0),
    Design("interleaved, stratified", "stratified", False, 0.0),
    Design("interleaved, coupled", COUPLED, False, 0.0),
    Design("interleaved, stratified, 20% of the shift unshared", "stratified", False, 0.2),
    Design("interleaved, coupled, 20% of the shift unshared", COUPLED, False, 0.2),
)


def _decide(policy: str, cand: np.ndarray, inc: np.ndarray, alpha: float) -> np.ndarray:
    c, b, n10, n01 = pair_counts(cand, inc)
    runs = [cand.shape[2]] * cand.shape[1]
    return decide_many(c, runs, b, runs, policy, alpha, (n10, n01) if policy == COUPLED else None)[0]


def night_false_adoption(design: Design, n_tasks: int, r: int, size: int, alpha: float, agree: float,
                         shift: float, sims: int, seed: int, model: TaskModel = "half") -> float:
    """The share of ``sims`` nights of one round of ``size`` no-better candidates (each at ``alpha / size``) that
    adopt one, the arms agreeing in ``agree`` of their pairs at pass rate 0.5, under a load ``shift``."""
    if min(n_tasks, r, size, sims) < 1:
        raise ValueError(f"night_false_adoption: need n_tasks, r, size and sims >= 1 (got {n_tasks}, {r}, {size}, "
                         f"{sims})")
    rng = np.random.default_rng(seed)
    p = draw_rates(n_tasks, sims, rng, model)
    cand_rate, inc_rate = p + shift, p + shift * (1 - design.unshared)
    arms = 1 if design.shared_arm else size
    cells = draw_cells([cand_rate] * size + [inc_rate] * arms, r, coupling_of(agree), rng)
    adopted = np.zeros(sims, dtype=bool)
    for i in range(size):
        inc = cells[size] if design.shared_arm else cells[size + i]
        adopted |= _decide(design.policy, cells[i], inc, alpha / size)
    return float(adopted.mean())


def measured_agreement(n_tasks: int, r: int, agree: float, sims: int, seed: int, model: TaskModel,
                       gain: float = 0.0) -> float:
    """The share of pairs that agree under ``model`` (not 0.5 everywhere: tasks near 0 or 1 agree more), for the
    coupling that gives ``agree`` at pass rate 0.5, the candidate better by ``gain``."""
    rng = np.random.default_rng(seed)
    p = draw_rates(n_tasks, sims, rng, model)
    cand, inc = draw_cells([p + gain, p], r, coupling_of(agree), rng)
    return agreement(cand, inc)


def power_by_r(policy: str, rates: Sequence[float], rs: Sequence[int], gain: float, agree: float, alpha: float,
               sims: int, seed: int) -> dict[int, float]:
    """Adoption rate of a candidate better by ``gain`` on every task (clipped at 1) beside its interleaved arm at
    the incumbent's ``rates``, for every r in ``rs``: the grids of smaller r are the first repetitions of the
    largest (common random numbers, so power rises with r but for chance)."""
    rng = np.random.default_rng(seed)
    p = np.tile(np.asarray(rates, dtype=float), (sims, 1))
    cand, inc = draw_cells([p + gain, p], max(rs), coupling_of(agree), rng)
    return {r: float(_decide(policy, cand[:, :, :r], inc[:, :, :r], alpha).mean()) for r in rs}


def trials_needed(rates: Sequence[float], target: float, gain: float, agree: float, alpha: float, sims: int,
                  seed: int, r_max: int) -> int | None:
    """Smallest r (trials per arm: r × tasks) at which the coupled test's power at ``gain`` reaches ``target``
    (None: not by ``r_max``)."""
    power = power_by_r(COUPLED, rates, range(1, r_max + 1), gain, agree, alpha, sims, seed)
    return next((r for r, pw in power.items() if pw >= target), None)

"""Power before the night: can a grid adopt anything, and how large a gain does it see?

From the policy, α, the development tasks, r and the incumbent's per-task pass rates this computes what
:func:`validate.adoption_stats.decide_many` (the rule every real decision runs) will do on that grid:

- the **false-adoption rate**: how often a candidate exactly as good as the incumbent is adopted;
- the **power** at a stated gain and the **smallest gain adoptable with power 0.8** (0.01 steps; ``None`` when
  not even a perfect candidate reaches it);
- whether a **perfect candidate** (every run passes) is adopted, and how often.

A gain is additive per task, clipped to [0, 1], as in ``validate.adoption_sim``: under gain g a task the
incumbent passes with rate p is passed by the candidate with rate min(1, p + g). A perfect candidate is g = 1.

Two ways the baseline enters (:class:`Baseline`):
- ``counts`` known (a reference corpus exists): the decision compares against exactly those counts, so only the
  candidate's grid is random, with the incumbent's rates taken as the observed ones; a perfect candidate is then
  adopted or not, with certainty;
- ``counts`` unknown (a prior: before the reference corpus runs, or a fresh control each round): both grids are
  drawn, the reference corpus at the prior's rates, and a perfect candidate is adopted with some probability.

Exact enumeration of every grid outcome where there are at most :data:`EXACT_LIMIT` of them, else a simulation of
:data:`SIMS` grids from a fixed seed with common random numbers, so that power rises with the gain. ``coupled``
(which decides on pairs) is always simulated, with the arms' cells independent: before the arms' agreement is
measured that is the figure to plan on (agreement only sharpens it, ``validate.coupled_sim``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ._lazy_scipy import binom
from .adoption_stats import check_policy, decide_counts, decide_many
from .coupled import COUPLED

POWER = 0.8  # the power a grid should have at its stated gain, and against a perfect candidate
DEFAULT_GAIN = 0.15
DEFAULT_PRIOR = 0.5  # a task's pass rate before anything is known: the rate at which a run says least
EXACT_LIMIT = 60_000  # grid outcomes enumerated exactly; above, simulated
SIMS, SEED = 4000, 20261
STEP = 0.01  # resolution of the smallest adoptable gain
MAX_RAISE = 64  # how far the suggestions look (r, or tasks)


@dataclass(frozen=True)
class Baseline:
    """The incumbent on the grid: its per-task pass rates and, when a reference corpus exists, its counts."""

    rates: tuple[float, ...]
    counts: tuple[int, ...] | None = None  # passes per task in the corpus (None: the corpus is drawn)
    runs: tuple[int, ...] | None = None  # runs per task in the corpus (default r)


class _Engine:
    """Adoption probabilities on one grid: one table of decisions over every outcome (exact), or common random
    numbers (simulated). With ``cand_fixed`` the candidate's counts are those in every grid (a perfect candidate);
    otherwise they are random and :meth:`prob` weighs them for any candidate rates."""

    def __init__(self, base: Baseline, r: int, policy: str, alpha: float, cand_fixed: tuple[int, ...] | None = None):
        self.base, self.r, self.policy, self.alpha, self.fixed = base, r, policy, alpha, cand_fixed
        self.n = n = len(base.rates)
        self.nb = list(base.runs or (r,) * n)
        # random components: the candidate's tasks (unless fixed), and the drawn baseline's tasks not at 0 or 1
        self.cdims = [] if cand_fixed is not None else list(range(n))
        self.bdims = [] if base.counts is not None else [t for t in range(n) if 0 < base.rates[t] < 1]
        size = (r + 1) ** len(self.cdims) * int(np.prod([self.nb[t] + 1 for t in self.bdims]))
        self.exact = size <= EXACT_LIMIT and policy != COUPLED  # coupled decides on pairs: simulated
        self.outcomes = size if self.exact else SIMS
        rows = size if self.exact else SIMS
        b = np.tile(np.asarray(base.counts if base.counts is not None  # a rate of 0 or 1 fixes a drawn count
                               else np.rint(np.asarray(base.rates) * self.nb), dtype=int), (rows, 1))
        if self.exact:
            axes = [range(r + 1)] * len(self.cdims) + [range(self.nb[t] + 1) for t in self.bdims]
            grid = np.array(list(itertools.product(*axes)), dtype=int).reshape(rows, len(axes))
            b[:, self.bdims] = grid[:, len(self.cdims):]
            self.c = grid[:, :len(self.cdims)] if cand_fixed is None else np.tile(cand_fixed, (rows, 1))
            self.base_w = np.ones(rows)
            for t in self.bdims:
                self.base_w *= binom.pmf(b[:, t], self.nb[t], base.rates[t])
            self.adopt = decide_many(self.c, [r] * n, b, self.nb, policy, alpha)[0]
        else:
            rng = np.random.default_rng(SEED)
            self.u_cand = rng.random((SIMS, n, r))
            # the baseline's cells, for the pairs: a known count passes its first runs (order is no evidence)
            self.b_cells = np.arange(r)[None, None, :] < b[:, :, None]
            for t in self.bdims:
                cells = rng.random((SIMS, self.nb[t])) < base.rates[t]
                b[:, t] = cells.sum(axis=1)
                self.b_cells[:, t, :] = np.pad(cells, ((0, 0), (0, max(0, r - self.nb[t]))))[:, :r]
            # pairs are the repetitions both grids have (validate.coupled.discordant)
            self.paired = np.arange(r)[None, :] < np.asarray(self.nb)[:, None]
        self.b = b

    def prob(self, cand: Sequence[float] | None = None) -> float:
        """Probability that the candidate is adopted: with per-task pass rates ``cand``, or the fixed one."""
        if self.exact:
            w = self.base_w * self.adopt
            for t in self.cdims:
                w = w * binom.pmf(self.c[:, t], self.r, cand[t])
            return float(min(1.0, w.sum()))
        if self.fixed is not None:
            cells = np.arange(self.r)[None, None, :] < np.asarray(self.fixed)[None, :, None]
        else:
            cells = self.u_cand < np.asarray(cand, dtype=float)[None, :, None]
        c = np.broadcast_to(cells, (SIMS, self.n, self.r)).sum(axis=2)
        pairs = None
        if self.policy == COUPLED:
            pairs = (cells & ~self.b_cells & self.paired).sum(axis=2), (~cells & self.b_cells).sum(axis=2)
        return float(decide_many(c, [self.r] * self.n, self.b, self.nb, self.policy, self.alpha, pairs)[0].mean())


def gained(rates: Sequence[float], gain: float) -> list[float]:
    """The candidate's per-task rates under an additive gain, clipped to [0, 1]."""
    return [min(1.0, max(0.0, p + gain)) for p in rates]


@dataclass
class Curve:
    """False adoption, power at a gain, the smallest gain with power :data:`POWER`, and how it was computed."""

    false_adoption: float
    power: float
    detectable_gain: float | None
    perfect: float
    method: str


def power_curve(base: Baseline, r: int, policy: str, alpha: float, gain: float = DEFAULT_GAIN) -> Curve:
    """The grid's operating characteristics against ``base`` (see the module docstring)."""
    check_policy(policy)
    if r < 1 or not base.rates:
        raise ValueError(f"power: need at least one task and r >= 1 (got {len(base.rates)} tasks, r={r})")
    eng = _Engine(base, r, policy, alpha)
    rates = base.rates

    def power(g: float) -> float:
        return eng.prob(gained(rates, g))

    steps = [round(k * STEP, 2) for k in range(1, round(1 / STEP) + 1)]
    perfect = perfect_probability(base, r, policy, alpha)
    if eng.exact:  # cheap: scan every step, no monotonicity assumed
        mde = next((g for g in steps if power(g) >= POWER), None)
    else:  # common random numbers make the simulated power rise with the gain: bisect
        lo, hi = 0, len(steps) - 1
        if power(steps[hi]) < POWER:
            mde = None
        else:
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if power(steps[mid]) >= POWER else (mid + 1, hi)
            mde = steps[lo]
    method = (f"exact over {eng.outcomes:,} grid outcomes" if eng.exact
              else f"simulated: {SIMS} grids, seed {SEED}, common random numbers")
    return Curve(power(0.0), power(gain), mde, perfect, method)


def perfect_probability(base: Baseline, r: int, policy: str, alpha: float) -> float:
    """Probability that a candidate passing every run is adopted (0 or 1 when the baseline's counts are known)."""
    return _Engine(base, r, policy, alpha, cand_fixed=(r,) * len(base.rates)).prob()


@lru_cache(maxsize=512)
def decision_power(policy: str, alpha: float, r: int, counts: tuple[int, ...], runs: tuple[int, ...],
                   gain: float) -> tuple[float, float | None, str]:
    """(power at ``gain``, smallest gain with power 0.8, method) of a decision against a known baseline grid, the
    incumbent's rates taken as its observed ones: what every decision records beside its false-adoption rate."""
    rates = tuple(c / n if n else 0.0 for c, n in zip(counts, runs))
    curve = power_curve(Baseline(rates, counts, runs), r, policy, alpha, gain)
    return curve.power, curve.detectable_gain, curve.method


def cycle_rates(rates: Sequence[float], n: int) -> tuple[float, ...]:
    """``n`` tasks "at the same rates": the given tasks' rates repeated in order."""
    return tuple(rates[i % len(rates)] for i in range(n))


def smallest_raise(rates: Sequence[float], r: int, policy: str, alpha: float) -> tuple[int | None, int | None]:
    """(smallest r' > r, smallest number of tasks > len(rates)) on which a perfect candidate is adopted with
    probability >= :data:`POWER`, against a reference corpus drawn anew at the same rates (None: not within
    :data:`MAX_RAISE`)."""
    def ok(rs: Sequence[float], rr: int) -> bool:
        return perfect_probability(Baseline(tuple(rs)), rr, policy, alpha) >= POWER

    r_up = next((rr for rr in range(r + 1, MAX_RAISE + 1) if ok(rates, rr)), None)
    n_up = next((n for n in range(len(rates) + 1, MAX_RAISE + 1) if ok(cycle_rates(rates, n), r)), None)
    return r_up, n_up


class GridPower(BaseModel):
    """What a grid can adopt, computed before any trial runs; :meth:`line` says it in one line."""

    model_config = ConfigDict(extra="forbid")
    policy: str
    alpha: float
    tasks: list[str]
    r: int
    rates: list[float] = Field(description="the incumbent's per-task pass rates assumed")
    counts: list[int] | None = Field(None, description="the reference corpus's passes per task, when known")
    source: str = Field(description="where the rates come from: a reference corpus or which prior")
    gain: float = Field(description="the additive per-task gain the power is stated at")
    false_adoption: float = Field(description="P(adopt) for a candidate exactly as good as the incumbent")
    power: float = Field(description="P(adopt) for a candidate better by `gain` on every task (clipped at 1)")
    detectable_gain: float | None = Field(description=f"smallest gain with power >= {POWER} (None: none)")
    perfect: float = Field(description="P(adopt) for a candidate that passes every run")
    perfect_p: float | None = Field(None, description="a perfect candidate's p-value, when the counts are known")
    method: str
    raise_r: int | None = Field(None, description="smallest r at which a perfect candidate is adoptable")
    raise_tasks: int | None = Field(None, description="smallest number of tasks (same rates) for the same")
    label: str = Field("", description="which figure this is (the prior's or the measured; M and rounds a night)")

    @property
    def adoptable(self) -> bool:
        """Whether a perfect candidate is adopted with probability at least :data:`POWER` (certainly, when the
        reference corpus is known)."""
        return self.perfect >= POWER

    def line(self) -> str:
        """The one line ``rise init`` and ``rise evolve`` print."""
        level = "" if self.policy == "paper" else f" at α {self.alpha:g}"
        mde = (f"power {POWER:.0%} needs a gain of +{self.detectable_gain:.2f}" if self.detectable_gain is not None
               else f"no gain reaches power {POWER:.0%}")
        if self.counts is not None:
            p = f" (p = {self.perfect_p:.4g})" if self.perfect_p is not None else ""
            perfect = ("a perfect candidate is adopted" if self.adoptable else "a perfect candidate CANNOT be adopted") + p
        else:
            perfect = (f"a perfect candidate is adopted {self.perfect:.0%} of the time"
                       + ("" if self.adoptable else f" (CANNOT be adopted reliably: needs {POWER:.0%})"))
        head = f"power, {self.label}" if self.label else "power"
        text = (f"{head}: {self.policy}{level} on {len(self.tasks)} tasks × r={self.r} ({self.source}): "
                f"false adoption {self.false_adoption:.1%}, power {self.power:.1%} at +{self.gain:.2f}, {mde}, "
                f"{perfect} [{self.method}]")
        if not self.adoptable:
            text += "; " + self.what_to_raise()
        return text

    def what_to_raise(self) -> str:
        """What would make a perfect candidate adoptable at the same rates."""
        ways = [f"r to {self.raise_r}" if self.raise_r else "",
                f"the development tasks to {self.raise_tasks}" if self.raise_tasks else ""]
        ways = [w for w in ways if w]
        if not ways:
            return f"raising r or the tasks up to {MAX_RAISE} does not help at these rates: choose tasks that flip"
        return "raise " + " or ".join(ways) + " (at the same rates)"


def grid_power(tasks: Sequence[str], r: int, policy: str, alpha: float, base: Baseline, source: str,
               gain: float = DEFAULT_GAIN) -> GridPower:
    """The full account of a grid (see :class:`GridPower`), with what to raise when a perfect candidate cannot be
    adopted."""
    if len(tasks) != len(base.rates):
        raise ValueError(f"power: {len(tasks)} tasks but {len(base.rates)} rates")
    curve = power_curve(base, r, policy, alpha, gain)
    out = GridPower(policy=policy, alpha=alpha, tasks=list(tasks), r=r, rates=[round(p, 4) for p in base.rates],
                    counts=list(base.counts) if base.counts is not None else None, source=source, gain=gain,
                    false_adoption=curve.false_adoption, power=curve.power, detectable_gain=curve.detectable_gain,
                    perfect=curve.perfect, method=curve.method)
    if base.counts is not None:
        n = len(base.counts)
        runs = list(base.runs or (r,) * n)  # a perfect candidate's pairs: every incumbent failure is one of its wins
        pairs = ([min(r, m) - k for k, m in zip(base.counts, runs)], [0] * n) if policy == COUPLED else None
        out.perfect_p = decide_counts([r] * n, [r] * n, list(base.counts), runs, policy, alpha, pairs)[1]
    if not out.adoptable:
        out.raise_r, out.raise_tasks = smallest_raise(base.rates, r, policy, alpha)
    return out

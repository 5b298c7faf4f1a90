"""The statistics behind adoption decisions, on per-task pass counts (no grids, no ledger).

Each task contributes ``(c, nc, b, nb)``: the candidate passed ``c`` of its ``nc`` runs and the baseline ``b`` of
``nb``. Three policies decide from those counts, a fourth from the pairs as well (``validate.adoption`` turns
grids into counts and explains them):

- ``paper``: adopt when the candidate's aggregate Pass@1 is strictly above the baseline's (the method as published).
- ``paired``: a one-sided exact sign test on the per-task pass-rate differences (ties dropped), p < alpha.
- ``stratified`` (the default): an exact one-sided conditional test stratified by task. Under "the candidate is no
  better", a task's ``nc + nb`` runs are exchangeable, so given the task's total passes ``k`` the candidate's share
  is hypergeometric whatever the task's true pass rate; tasks are independent, so the null distribution of the
  statistic is the convolution of the tasks' distributions, computed exactly. The statistic weights each task by
  the inverse variance of its pooled pass rate, ``round(1 / (k/M · (1 - k/M)))`` for ``M = nc + nb`` runs (the
  score test for a common additive gain), which also makes the null distribution much less lumpy than the plain
  count's. Adopt when p <= alpha and the aggregate Pass@1 is above the baseline's. Its size is at most alpha for
  any task pass rates; ``benchmarks/sequential_stopping.py`` measures size and power next to the others.
- ``coupled``: interleaved arms form pairs (task, repetition); an exact one-sided conditional test on the
  discordant pairs stratified by task (``validate.coupled``), p <= alpha and the aggregate Pass@1 above the
  baseline's. It needs the per-task discordant counts (``pairs``) besides the pass counts.

Curtailment (deciding before the grid is complete) needs, for each task, the range of final candidate counts.
The weighted statistic is not monotone in a single cell (a pass moves the task's weight too), so instead of the two
extreme completions :func:`stratified_p_range` bounds the p-value over every completion: per task it takes the
pointwise largest and smallest survival function over the task's possible final counts, which stochastically
bound that task's term whatever its completion; tasks are independent, so the convolutions bound the sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

from ._lazy_scipy import binom, hypergeom
from .coupled import COUPLED, coupled_p_many

Policy = Literal["paper", "paired", "stratified", "coupled"]
POLICIES: tuple[str, ...] = ("paper", "paired", "stratified", COUPLED)
DEFAULT_POLICY: Policy = "stratified"

# one task: candidate passes (lowest and highest still possible), candidate runs, baseline passes, baseline runs
TaskRange = tuple[int, int, int, int, int]


def check_policy(policy: str) -> None:
    """Raise a clear error for an unknown policy name."""
    if policy not in POLICIES:
        raise ValueError(f"unknown adoption policy {policy!r} ({', '.join(POLICIES)})")


@lru_cache(maxsize=4096)
def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2)."""
    n = wins + losses
    return 1.0 if n == 0 else float(binom.sf(wins - 1, n, 0.5))


def task_weight(k: int, m: int) -> int:
    """The stratified statistic's integer weight of a task with ``k`` passes among its ``m`` runs (0: the task
    cannot tell the two apart, every split of its passes is the same)."""
    if k <= 0 or k >= m:
        return 0
    q = k / m
    return max(1, round(1 / (q * (1 - q))))


@lru_cache(maxsize=4096)
def _excess(c: int, nc: int, b: int, nb: int) -> tuple[int, np.ndarray]:
    """One task's term of the null distribution: ``w * (X - c)`` with X hypergeometric given ``k = b + c``, as
    (lowest value, probabilities of every integer from it)."""
    k, m = b + c, nc + nb
    w = task_weight(k, m)
    if w == 0:
        return 0, np.ones(1)
    xs = np.arange(max(0, k - nb), min(nc, k) + 1)
    probs = hypergeom.pmf(xs, m, k, nc)
    low = w * (int(xs[0]) - c)
    pmf = np.zeros(w * (int(xs[-1]) - int(xs[0])) + 1)
    pmf[w * (xs - xs[0])] = probs
    return low, pmf


def _bound(options: list[tuple[int, np.ndarray]], upper: bool) -> tuple[int, np.ndarray]:
    """The distribution whose survival function is the pointwise max (``upper``) or min of the options'."""
    if len(options) == 1:
        return options[0]
    low = min(o[0] for o in options)
    high = max(o[0] + len(o[1]) - 1 for o in options)
    surv = []
    for lo, pmf in options:
        full = np.zeros(high - low + 1)
        full[lo - low: lo - low + len(pmf)] = pmf
        surv.append(np.cumsum(full[::-1])[::-1])  # P(term >= value)
    s = np.max(surv, axis=0) if upper else np.min(surv, axis=0)
    s = np.append(s, 0.0)
    return low, np.clip(s[:-1] - s[1:], 0.0, None)


def stratified_p_range(tasks: Sequence[TaskRange]) -> tuple[float, float]:
    """Lowest and highest exact stratified p-value over every completion of the candidate's counts (equal when
    every task's count is known). See the module docstring."""
    def total(upper: bool) -> tuple[int, np.ndarray]:
        low, pmf = 0, np.ones(1)
        for c_lo, c_hi, nc, b, nb in tasks:
            t_low, t_pmf = _bound([_excess(c, nc, b, nb) for c in range(c_lo, c_hi + 1)], upper)
            if len(t_pmf) > 1:  # a task whose term is always 0 changes nothing
                low, pmf = low + t_low, np.convolve(pmf, t_pmf)
        return low, pmf

    def p_of(dist: tuple[int, np.ndarray]) -> float:
        low, pmf = dist  # P(sum of terms >= 0): the candidate did at least as well as observed
        start = max(0, -low)
        return float(min(1.0, pmf[start:].sum())) if start < len(pmf) else 0.0

    high = p_of(total(upper=True))
    if all(t[0] == t[1] for t in tasks):
        return high, high  # every count known: one distribution
    return p_of(total(upper=False)), high


@lru_cache(maxsize=256)
def _spectra(nc: int, nb: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Fourier transforms (length ``size``) and lowest values of every count pair's term, indexed by
    ``c * (nb + 1) + b``."""
    pairs = [_excess(c, nc, b, nb) for c in range(nc + 1) for b in range(nb + 1)]
    table = np.zeros((len(pairs), size))
    for i, (_, pmf) in enumerate(pairs):
        table[i, :len(pmf)] = pmf
    return np.fft.rfft(table, axis=1), np.array([lo for lo, _ in pairs])


def _widest(nc: int, nb: int) -> int:
    return max(len(_excess(c, nc, b, nb)[1]) - 1 for c in range(nc + 1) for b in range(nb + 1))


def stratified_p_many(c: np.ndarray, nc: Sequence[int], b: np.ndarray, nb: Sequence[int]) -> np.ndarray:
    """The exact one-sided stratified p-values of many complete grids at once: ``c`` and ``b`` are
    (grids × tasks) pass counts, ``nc`` and ``nb`` the runs per task. The convolution over tasks is a product of
    the terms' Fourier transforms (long enough that nothing wraps around), one per distinct count pair."""
    sims, n_tasks = c.shape
    width = 1 + sum(_widest(int(nc[t]), int(nb[t])) for t in range(n_tasks))
    size = 1 << (width - 1).bit_length()
    chunk = max(1, (1 << 22) // size)  # bounds memory on large grids: about 64 MiB of spectra at a time
    if sims > chunk:
        return np.concatenate([stratified_p_many(c[i:i + chunk], nc, b[i:i + chunk], nb)
                               for i in range(0, sims, chunk)])
    spectrum = np.ones((sims, size // 2 + 1), dtype=complex)
    low = np.zeros(sims, dtype=int)
    for t in range(n_tasks):
        table, lows = _spectra(int(nc[t]), int(nb[t]), size)
        keys = c[:, t] * (nb[t] + 1) + b[:, t]
        spectrum *= table[keys]
        low += lows[keys]
    dist = np.clip(np.fft.irfft(spectrum, size, axis=1)[:, :width], 0.0, None)
    tail = np.cumsum(dist[:, ::-1], axis=1)[:, ::-1]  # tail[s, i] = P(sum of terms >= low[s] + i)
    start = np.maximum(0, -low)
    p = np.where(start < width, tail[np.arange(sims), np.minimum(start, width - 1)], 0.0)
    return np.minimum(p, 1.0)


# per grid and task: the pairs only the candidate passed (n10), and only the baseline (n01)
Pairs = tuple[np.ndarray, np.ndarray]


def decide_many(c: np.ndarray, nc: Sequence[int], b: np.ndarray, nb: Sequence[int], policy: str,
                alpha: float, pairs: Pairs | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(adopt, p-values or None) of many complete grids of per-task counts, (grids × tasks) arrays, under
    ``policy``: the one decision rule that both :func:`validate.adoption.decide` and the simulations of
    ``validate.adoption_sim`` run. ``pairs`` (n10, n01), same shape: the discordant pairs ``coupled`` decides on."""
    check_policy(policy)
    c, b = np.asarray(c, dtype=int), np.asarray(b, dtype=int)
    nc_a, nb_a = np.asarray(nc, dtype=int), np.asarray(nb, dtype=int)
    c1 = c.sum(axis=1) / max(1, int(nc_a.sum()))
    b1 = b.sum(axis=1) / max(1, int(nb_a.sum()))
    above = c1 > b1
    if policy == "paper":
        return above, None
    if policy == "paired":
        ok = (nc_a > 0) & (nb_a > 0)
        diff = c[:, ok] / nc_a[ok] - b[:, ok] / nb_a[ok]
        p = np.array([sign_test_p(int(w), int(lo)) for w, lo in zip((diff > 0).sum(axis=1), (diff < 0).sum(axis=1))])
        return above & (p < alpha), p
    if policy == COUPLED:
        if pairs is None:
            raise ValueError("the coupled policy decides on pairs: give the discordant counts (n10, n01)")
        p = coupled_p_many(*pairs)
        return above & (p <= alpha), p
    p = stratified_p_many(c, list(nc_a), b, list(nb_a))
    return above & (p <= alpha), p


def decide_counts(c: Sequence[int], nc: Sequence[int], b: Sequence[int], nb: Sequence[int], policy: str,
                  alpha: float, pairs: tuple[Sequence[int], Sequence[int]] | None = None) -> tuple[bool, float | None]:
    """(adopt, p-value or None) of one complete grid's per-task counts (and discordant pairs, for ``coupled``):
    :func:`decide_many` on one grid."""
    many = None if pairs is None else (np.asarray([pairs[0]]), np.asarray([pairs[1]]))
    adopt, p = decide_many(np.asarray([c]), nc, np.asarray([b]), nb, policy, alpha, many)
    return bool(adopt[0]), (None if p is None else float(p[0]))

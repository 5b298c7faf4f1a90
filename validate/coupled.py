"""The paired test on coupled pairs (``[adoption] policy = "coupled"``) and the model its simulations draw from.

With interleaved arms (``[adoption] baseline = "interleaved"``) repetition k of task t runs in both arms at once
(and, once seeds are coupled, with the same seed), so cell (t, k) of the candidate and cell (t, k) of the incumbent
form a **pair**. A pair either agrees (both pass, both fail) or is discordant: ``n10`` pairs where only the
candidate passed, ``n01`` where only the incumbent did.

The test: an exact one-sided conditional test on the discordant pairs, stratified by task (McNemar's exact test
summed over strata). Within a pair, P(10) − P(01) = P(candidate passes) − P(incumbent passes), whatever the
dependence between the two outcomes; so "the candidate is no better" in pair j means π_j = P(10 | discordant) ≤ 1/2.
Given which pairs are discordant, their directions are independent Bernoulli(π_j), so the total ``N10`` over every
task is stochastically at most Binomial(D, 1/2), D the discordant pairs over every task:

    p = P(Binomial(D, 1/2) >= N10).

Conditioning per pair (hence per task) makes the size at most α for any task pass rates, any agreement between the
arms, and pass rates that drift from block to block (the load of the hour), provided both trials of a block share
it. Every discordant pair carries the same information under the null (variance 1/4), so the strata need no
weights: the stratified sum is the plain count. Adopt when p <= α and the candidate's Pass@1 is above the
incumbent's (as the other policies). The more the arms agree, the fewer the discordant pairs and the sharper
the test: agreement that comes from a shared cause (the same seed, the same load) is noise removed.

The simulation model (:func:`draw_cells`): a trial **follows its seed** with probability ``q = √ρ``, else it
draws its own randomness; its outcome is ``u < p`` with ``u`` the seed's uniform when it follows, its own when not.
Two trials of a block agree for sure when both follow (probability ρ) and are independent otherwise, so at pass
rate 0.5 the agreement of two no-better arms is ``(1 + ρ) / 2``: :func:`coupling_of` turns an agreement into ρ.
Several candidates of one night share the seeds too (correlated with each other as with the incumbent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._lazy_scipy import binom

COUPLED = "coupled"


def discordant(candidate: Mapping[str, Sequence[bool | None]], baseline: Mapping[str, Sequence[bool | None]],
               tasks: Sequence[str], r: int) -> tuple[list[int], list[int]]:
    """Per task, (``n10``, ``n01``) over the pairs (t, k), k < r, both arms ran: only the candidate passed, only
    the incumbent passed (⊥ counts as not passed, as Pass@1 does)."""
    n10, n01 = [], []
    for t in tasks:
        pairs = list(zip(list(candidate.get(t, []))[:r], list(baseline.get(t, []))[:r]))
        n10.append(sum(bool(c) and not b for c, b in pairs))
        n01.append(sum(bool(b) and not c for c, b in pairs))
    return n10, n01


def coupled_p_many(n10: np.ndarray, n01: np.ndarray) -> np.ndarray:
    """Exact one-sided stratified p-values of many grids, (grids × tasks) discordant counts: P(Bin(D, 1/2) >= N10)
    with N10 and D summed over the tasks (1 when no pair is discordant)."""
    wins = np.asarray(n10, dtype=int).sum(axis=1)
    d = wins + np.asarray(n01, dtype=int).sum(axis=1)
    return np.minimum(1.0, binom.sf(wins - 1, d, 0.5))


def coupling_of(agreement: float) -> float:
    """ρ of the seed model at which two no-better arms at pass rate 0.5 agree in ``agreement`` of their pairs."""
    if not 0.5 <= agreement <= 1:
        raise ValueError(f"agreement at pass rate 0.5 is in [0.5, 1] (got {agreement})")
    return 2 * agreement - 1


def pair_rows(candidate: Mapping[str, Sequence[bool | None]], incumbent: Mapping[str, Sequence[bool | None]],
              tasks: Sequence[str], r: int) -> list[dict]:
    """Per task, over the pairs (t, k) of two complete interleaved grids (index k is repetition k + 1, as
    ``validate.evaluate.decision_grid`` lists them) that both arms finished (no ⊥): pairs, agreements (both passed
    or both failed), both passed, only the candidate passed (n10), only the incumbent (n01)."""
    rows = []
    for t in tasks:
        row = {"task": t, "pairs": 0, "agree": 0, "both_pass": 0, "n10": 0, "n01": 0}
        for c, b in zip(list(candidate.get(t, []))[:r], list(incumbent.get(t, []))[:r]):
            if c is None or b is None:
                continue
            row["pairs"] += 1
            row["agree"] += c == b
            row["both_pass"] += bool(c and b)
            row["n10"] += bool(c and not b)
            row["n01"] += bool(b and not c)
        rows.append(row)
    return rows


def pair_totals(rows: Sequence[Mapping]) -> dict:
    """The pairs over every task: counts, the agreement and the coupling ρ̂ (:func:`coupling_estimate`)."""
    keys = ("pairs", "agree", "both_pass", "n10", "n01")
    out: dict = {k: sum(int(r[k]) for r in rows) for k in keys}
    out["agreement"] = round(out["agree"] / out["pairs"], 3) if out["pairs"] else None
    tasks = [(r["pairs"], r["agree"], 2 * r["both_pass"] + r["n10"] + r["n01"]) for r in rows]
    rho, raw = coupling_estimate(tasks), coupling_estimate(tasks, clip=False)
    out["coupling"] = None if rho is None else round(rho, 3)
    out["coupling_unclipped"] = None if raw is None else round(raw, 3)
    return out


def unclipped_note(tot: Mapping) -> str:
    """" (unclipped −0.22)" where the measured ρ̂ fell below 0 and was clipped; "" otherwise."""
    raw = tot.get("coupling_unclipped")
    return f" (unclipped {raw:.2f})" if raw is not None and raw < 0 else ""


def agreement_lines(agreement: Mapping | None) -> list[str]:
    """``decision["agreement"]`` (a candidate and its interleaved incumbent arm) as lines for ``rise show`` and
    the report."""
    if not agreement or not agreement.get("all", {}).get("pairs"):
        return []
    tot = agreement["all"]
    per_task = ", ".join(f"{r['task']} {r['agree']}/{r['pairs']}" for r in agreement.get("tasks", []))
    rho = "—" if tot.get("coupling") is None else f"{tot['coupling']:.2f}" + unclipped_note(tot)
    return [(f"pairs with the incumbent arm: agreement {tot['agree']}/{tot['pairs']} = {tot['agreement']:.3f} "
             f"({per_task}); coupling ρ̂ {rho}; discordant: candidate only {tot['n10']}, incumbent only {tot['n01']}")]


def coupling_estimate(tasks: Sequence[tuple[int, int, int]], clip: bool = True) -> float | None:
    """ρ of the seed model estimated from measured pairs: per task (pairs, agreements, passes of both arms
    together). Under the model a pair agrees with probability ρ + (1 − ρ)·c, c = p² + (1 − p)² the agreement of
    two independent trials at the task's pass rate p (both arms pooled, as under the null); pooled over tasks,
    ρ̂ = Σ (agreements − pairs·c) / Σ pairs·(1 − c), clipped to [0, 1]: the agreement beyond chance, as Cohen's
    kappa measures it. None when no task has room (every pair at p 0 or 1). Its agreement at pass rate 0.5 is
    (1 + ρ̂) / 2, the simulations' column. ``clip=False``: the estimate as measured, below 0 where the pairs agreed
    less often than chance (with a few pairs, noise around 0)."""
    num = den = 0.0
    for pairs, agree, passes in tasks:
        if pairs <= 0:
            continue
        p = passes / (2 * pairs)
        c = p * p + (1 - p) * (1 - p)
        num += agree - pairs * c
        den += pairs * (1 - c)
    if den <= 0:
        return None
    return min(1.0, max(0.0, num / den)) if clip else num / den


def draw_cells(rates: Sequence[np.ndarray], r: int, coupling: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Cells of several arms that share the seeds: ``rates[i]`` (sims × tasks) is arm i's pass rates; returns one
    (sims × tasks × r) boolean array per arm (module docstring)."""
    if not 0 <= coupling <= 1:
        raise ValueError(f"coupling is in [0, 1] (got {coupling})")
    shape = (*np.shape(rates[0]), r)
    seed_u = rng.random(shape)
    q = np.sqrt(coupling)
    out = []
    for p in rates:
        u = np.where(rng.random(shape) < q, seed_u, rng.random(shape))
        out.append(u < np.clip(np.asarray(p, dtype=float), 0.0, 1.0)[..., None])
    return out


def pair_counts(cand: np.ndarray, inc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(candidate passes, incumbent passes, n10, n01) per grid and task of two arms' cells (sims × tasks × r)."""
    return (cand.sum(axis=2), inc.sum(axis=2), (cand & ~inc).sum(axis=2), (inc & ~cand).sum(axis=2))


def agreement(cand: np.ndarray, inc: np.ndarray) -> float:
    """The share of pairs whose two outcomes agree."""
    return float((cand == inc).mean())

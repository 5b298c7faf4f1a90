"""Measured operating characteristics of the adoption policies: how often each adopts by chance, and how often it
finds a real gain, at a given grid size.

The model is the one ``benchmarks/sequential_stopping.py`` has always used: each task has a true baseline pass
rate (drawn from Beta(0.7, 0.7), so most tasks are nearly always or nearly never solved, or all set to 0.5), the
candidate's is that plus ``delta`` (clipped to [0, 1]), and both grids are r independent runs per task. Every
simulated grid is decided by :func:`validate.adoption_stats.decide_many`, the very rule real decisions run, so
the rates are measured, not asserted.

:func:`false_adoption_rate` is what every decision records and every report prints next to its policy: the
adoption rate when the candidate is no better (delta = 0), the worse of the two task-rate models, from a fixed
seed so that the same grid size always reports the same figure.

``coupled`` decides on pairs, so its grids are drawn cell by cell (:func:`draw_pairs`) with the two arms
independent: the recorded figure does not know the arms' agreement (``validate.coupled_sim`` sweeps it). A night's
candidates each get their own incumbent arm, as interleaved arms are not shared.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import numpy as np

from .adoption_stats import Pairs, check_policy, decide_many
from .coupled import COUPLED, pair_counts

TaskModel = Literal["beta", "half"]
NULL_MODELS: tuple[TaskModel, ...] = ("beta", "half")
RATE_SIMS = 4000
RATE_SEED = 20260
MODEL_TEXT = {"beta": "task pass rates ~ Beta(0.7, 0.7)", "half": "every task's pass rate 0.5"}


def draw_rates(n_tasks: int, sims: int, rng: np.random.Generator, model: TaskModel = "beta") -> np.ndarray:
    """``sims`` × ``n_tasks`` true baseline pass rates under the task model."""
    if model == "beta":
        return rng.beta(0.7, 0.7, size=(sims, n_tasks))
    if model == "half":
        return np.full((sims, n_tasks), 0.5)
    raise ValueError(f"unknown task model {model!r} ({', '.join(NULL_MODELS)})")


def draw_counts(n_tasks: int, r: int, delta: float, sims: int, rng: np.random.Generator,
                model: TaskModel = "beta") -> tuple[np.ndarray, np.ndarray]:
    """``sims`` × ``n_tasks`` candidate and baseline pass counts out of r runs each."""
    p_base = draw_rates(n_tasks, sims, rng, model)
    p_cand = np.clip(p_base + delta, 0.0, 1.0)
    return rng.binomial(r, p_cand), rng.binomial(r, p_base)


def draw_pairs(p_cand: np.ndarray, p_base: np.ndarray, r: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, Pairs]:
    """Candidate and baseline counts at the given (sims × tasks) rates and their discordant pairs, the two arms'
    cells independent (the other policies draw counts, as they always have)."""
    cand = rng.random((*p_cand.shape, r)) < p_cand[..., None]
    c, b, n10, n01 = pair_counts(cand, rng.random((*p_base.shape, r)) < p_base[..., None])
    return c, b, (n10, n01)


def adoption_rate(policy: str, n_tasks: int, r: int, alpha: float, delta: float, sims: int, seed: int,
                  model: TaskModel = "beta") -> float:
    """The share of ``sims`` simulated complete grids that ``policy`` adopts."""
    check_policy(policy)
    if n_tasks < 1 or r < 1 or sims < 1:
        raise ValueError(f"adoption_rate: need n_tasks, r and sims >= 1 (got {n_tasks}, {r}, {sims})")
    rng = np.random.default_rng(seed)
    if policy == COUPLED:
        p_base = draw_rates(n_tasks, sims, rng, model)
        cand, base, pairs = draw_pairs(np.clip(p_base + delta, 0.0, 1.0), p_base, r, rng)
    else:
        (cand, base), pairs = draw_counts(n_tasks, r, delta, sims, rng, model), None  # the stream as before
    adopted, _p = decide_many(cand, [r] * n_tasks, base, [r] * n_tasks, policy, alpha, pairs)
    return float(adopted.mean())


def family_adoption_rate(policy: str, n_tasks: int, r: int, alpha: float, size: int, rounds: int, sims: int,
                         seed: int, model: TaskModel = "beta") -> float:
    """The share of ``sims`` simulated nights of ``rounds`` rounds in which some candidate is adopted, when every
    round tests ``size`` no-better candidates at ``alpha`` against one baseline grid (as a round does: they share
    the incumbent's grid). Each round draws its own tasks and baseline (independent rounds: the union bound is
    tightest there; rounds sharing a reference corpus are positively correlated and adopt less often)."""
    check_policy(policy)
    if n_tasks < 1 or r < 1 or sims < 1 or size < 1 or rounds < 1:
        raise ValueError(f"family_adoption_rate: need n_tasks, r, sims, size and rounds >= 1 (got {n_tasks}, {r}, "
                         f"{sims}, {size}, {rounds})")
    rng = np.random.default_rng(seed)
    runs = [r] * n_tasks
    adopted = np.zeros(sims, dtype=bool)
    for _ in range(rounds):
        p_base = draw_rates(n_tasks, sims, rng, model)
        if policy == COUPLED:  # each candidate beside its own incumbent arm
            for _ in range(size):
                c, b, pairs = draw_pairs(p_base, p_base, r, rng)
                adopted |= decide_many(c, runs, b, runs, policy, alpha, pairs)[0]
            continue
        base = rng.binomial(r, p_base)
        for _ in range(size):
            adopted |= decide_many(rng.binomial(r, p_base), runs, base, runs, policy, alpha)[0]
    return float(adopted.mean())


@lru_cache(maxsize=256)
def false_adoption_rate(policy: str, n_tasks: int, r: int, alpha: float = 0.05) -> float:
    """Measured share of no-better candidates that ``policy`` adopts on an ``n_tasks`` × ``r`` grid: the higher of
    the null simulations under both task models, ``RATE_SIMS`` grids each from ``RATE_SEED``."""
    return max(adoption_rate(policy, n_tasks, r, alpha, 0.0, RATE_SIMS, RATE_SEED, m) for m in NULL_MODELS)


def rate_basis(n_tasks: int, r: int, policy: str = "") -> str:
    """How :func:`false_adoption_rate` was measured, for the record."""
    return (f"simulated: {RATE_SIMS} null grids of {n_tasks} tasks × r={r} per task model "
            f"({'; '.join(MODEL_TEXT.values())}), seed {RATE_SEED}, the higher rate"
            + ("; coupled: the arms' cells independent" if policy == COUPLED else ""))


def policy_note(decision: dict[str, Any], policy: str, alpha: float, n_tasks: int, r: int) -> str:
    """One line stating a decision's policy and its measured false-adoption rate at the grid size: the figures
    recorded with the decision, else (a decision recorded before they were) measured now for the experiment's
    policy, and said so."""
    pol = decision.get("policy") or policy
    a = decision.get("alpha") if decision.get("alpha") is not None else alpha
    rate = decision.get("false_adoption")
    n, rr = decision.get("n_tasks") or n_tasks, decision.get("r") or r
    level = f" at α {a:g}" if pol != "paper" else ""
    if rate is None and (n < 1 or rr < 1):
        return f"policy {pol}{level}: false-adoption rate unknown (the grid's size is unknown)"
    later = rate is None
    if later:
        rate = false_adoption_rate(pol, n, rr, a)
    return (f"policy {pol}{level}: measured false adoption {rate:.1%} at {n} tasks × r={rr}"
            + (" (measured now; the record predates the figure)" if later else "") + power_note(decision))


def power_note(decision: dict[str, Any]) -> str:
    """``; power ...`` of a decision that recorded its power against its baseline (validate.power), else ''."""
    power, gain = decision.get("power"), decision.get("power_gain")
    if power is None or gain is None:
        return ""
    mde = decision.get("detectable_gain")
    return (f"; power {power:.1%} at +{gain:.2f} against this baseline, "
            + (f"80% at +{mde:.2f}" if mde is not None else "no gain reaches 80%"))

"""Family-wise false adoption: the level each candidate is tested at, so that a round of M candidates and a night
of several rounds adopt a no-better candidate at most ``alpha`` of the time (docs/statistics.md).

The rule (Bonferroni, twice):

- a **night** is ``night_rounds`` consecutive rounds of the experiment (rounds 1..N are night 1, N+1..2N night 2,
  ...); its false-adoption budget ``alpha`` (experiment.toml ``[adoption] alpha``) is split evenly over its
  rounds: each round gets ``alpha_round = alpha / night_rounds``;
- a **round** tests each of its M candidates at ``alpha_candidate = alpha_round / M`` against the same baseline,
  and adopts the best (highest Pass@1 on its complete grid) of those that pass.

A round adopts a no-better candidate only if one of its no-better candidates passes its test, which has
probability at most M · alpha_candidate = alpha_round whatever the dependence between the tests (they share the
baseline); a night adopts one only if one of its rounds does: at most night_rounds · alpha_round = alpha. The
per-candidate level is fixed before any evaluation runs (it depends on the round's number and on how many
candidates entered it), so sequential stopping (curtailment) decides each candidate at that level and never
changes a decision. The rates measured by simulation (:func:`family_rates`) are recorded with every decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .adoption_sim import NULL_MODELS, RATE_SEED, RATE_SIMS, false_adoption_rate, family_adoption_rate


@dataclass(frozen=True)
class Family:
    """Where one comparison sits: the night's budget, how many rounds share it, the round, its candidates."""

    alpha_night: float
    night_rounds: int
    round_no: int
    size: int  # candidates that entered the round (M)

    def __post_init__(self) -> None:
        if not 0 < self.alpha_night < 1:
            raise ValueError(f"family: alpha must be in (0, 1) (got {self.alpha_night})")
        if self.night_rounds < 1 or self.size < 1 or self.round_no < 1:
            raise ValueError(f"family: night_rounds, size and round_no must be >= 1 (got {self.night_rounds}, "
                             f"{self.size}, {self.round_no})")

    @property
    def night(self) -> int:
        """The night this round belongs to (1-based)."""
        return (self.round_no - 1) // self.night_rounds + 1

    @property
    def alpha_round(self) -> float:
        return self.alpha_night / self.night_rounds

    @property
    def alpha_candidate(self) -> float:
        return self.alpha_round / self.size

    def record(self) -> dict[str, float | int]:
        """The fields every decision records about its family."""
        return {"family_size": self.size, "night_rounds": self.night_rounds, "night": self.night,
                "alpha_round": self.alpha_round, "alpha_night": self.alpha_night}


def single(alpha: float) -> Family:
    """The family of a lone comparison (one candidate, a night of one round): no adjustment."""
    return Family(alpha, 1, 1, 1)


@lru_cache(maxsize=256)
def family_rates(policy: str, n_tasks: int, r: int, alpha_candidate: float, size: int,
                 night_rounds: int) -> tuple[float, float]:
    """Measured (per round, per night) false-adoption rates of ``policy`` when every candidate is no better and
    each is tested at ``alpha_candidate``: the share of simulated rounds of ``size`` candidates (and of nights of
    ``night_rounds`` such rounds) that adopt one, the higher of the two task models, ``RATE_SIMS`` each."""
    per_round = (false_adoption_rate(policy, n_tasks, r, alpha_candidate) if size == 1 else
                 max(family_adoption_rate(policy, n_tasks, r, alpha_candidate, size, 1, RATE_SIMS, RATE_SEED, m)
                     for m in NULL_MODELS))
    per_night = per_round if night_rounds == 1 else max(
        family_adoption_rate(policy, n_tasks, r, alpha_candidate, size, night_rounds, RATE_SIMS, RATE_SEED, m)
        for m in NULL_MODELS)
    return per_round, per_night


def family_note(decision: dict, policy: str) -> str:
    """The family part of a decision's policy line (empty for a lone comparison or a record without it)."""
    size, rounds = decision.get("family_size") or 1, decision.get("night_rounds") or 1
    fr, fn = decision.get("false_adoption_round"), decision.get("false_adoption_night")
    if (size == 1 and rounds == 1) or fr is None or fn is None:
        return ""
    level = (f" (α {decision['alpha_round']:.3g} per round, {decision['alpha_night']:g} per night)"
             if policy != "paper" and decision.get("alpha_round") is not None else "")
    return (f"; family-wise{level}: measured {fr:.1%} per round of {size} candidate(s), {fn:.1%} per night of "
            f"{rounds} round(s)")

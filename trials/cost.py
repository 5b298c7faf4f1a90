"""What a set of trials spent: the per-trial :class:`~trials.harness_api.CostLedger` summed, in the platform's one
cost record (:class:`~trials.harness_api.Cost`) per model role. Read by ``rise show``, ``rise report``,
``rise status`` and the experiment's budgets."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from trials.harness_api import Cost, CostLedger
from trials.results import TrialResult

__all__ = ["Cost", "CostSummary", "cost_of"]


class CostSummary(BaseModel):
    """Tokens and dollars of a set of trials: generator and verifier calls, parallel output tokens, dollars."""

    trials: int = 0
    generator: Cost = Field(default_factory=Cost)
    verifier: Cost = Field(default_factory=Cost)
    parallel_output_tokens: int = 0
    usd: float = 0.0

    def add(self, cost: CostLedger) -> None:
        """Count one trial's ledger."""
        self.trials += 1
        self.generator.merge(cost.generator)
        self.verifier.merge(cost.verifier)
        self.parallel_output_tokens += cost.parallel_output_tokens
        self.usd += cost.cost_usd

    def merge(self, other: CostSummary) -> None:
        self.trials += other.trials
        self.generator.merge(other.generator)
        self.verifier.merge(other.verifier)
        self.parallel_output_tokens += other.parallel_output_tokens
        self.usd += other.usd

    @property
    def tokens(self) -> int:
        return self.generator.tokens + self.verifier.tokens

    @classmethod
    def total(cls, parts: Iterable[CostSummary]) -> CostSummary:
        """The parts summed (the grids of an experiment, say) into a new summary."""
        out = cls()
        for part in parts:
            out.merge(part)
        return out


def cost_of(results: list[TrialResult]) -> CostSummary:
    out = CostSummary()
    for res in results:
        out.add(res.cost)
    return out

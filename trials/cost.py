"""What a set of trials spent: the per-trial :class:`~trials.harness_api.CostLedger` summed (tokens by role, parallel
output tokens, dollars). One record for every reader of trial spend: ``rise show``, ``rise report``, ``rise status``
and the experiment's budgets."""

from __future__ import annotations

from dataclasses import dataclass

from trials.harness_api import CostLedger
from trials.results import TrialResult


@dataclass
class CostSummary:
    """Tokens and dollars of a set of trials (``TrialResult.cost`` summed)."""

    trials: int = 0
    generator_calls: int = 0
    generator_in: int = 0
    generator_out: int = 0
    verifier_calls: int = 0
    verifier_in: int = 0
    verifier_out: int = 0
    parallel_output_tokens: int = 0
    usd: float = 0.0

    def add(self, cost: CostLedger) -> None:
        self.trials += 1
        self.generator_calls += cost.generator.calls
        self.generator_in += cost.generator.input_tokens
        self.generator_out += cost.generator.output_tokens
        self.verifier_calls += cost.verifier.calls
        self.verifier_in += cost.verifier.input_tokens
        self.verifier_out += cost.verifier.output_tokens
        self.parallel_output_tokens += cost.parallel_output_tokens
        self.usd += cost.cost_usd

    def merge(self, other: CostSummary) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def tokens(self) -> int:
        return self.generator_in + self.generator_out + self.verifier_in + self.verifier_out


def cost_of(results: list[TrialResult]) -> CostSummary:
    out = CostSummary()
    for res in results:
        out.add(res.cost)
    return out


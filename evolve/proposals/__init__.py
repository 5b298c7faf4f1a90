"""Proposals: the proposer role turns one ranked group of findings (with the research references, the Handbook,
the code and the history of earlier proposals and their grades) into one mechanism for one candidate.

- :mod:`evolve.proposals.models`: :class:`ProposerAnswer` (what the model answers) and :class:`ProposalSpec`
  (the round's ``Proposal`` extended with sites, setting, predictions and references; screening reads it);
- :mod:`evolve.proposals.guard`: the overfitting guard (a proposal or patch quoting a development task's
  instruction or test content is refused, and the refusal is recorded);
- :mod:`evolve.proposals.proposer`: the role and :func:`propose`.
"""

from evolve.proposals.guard import GuardReport, OverfitGuard
from evolve.proposals.models import ProposalSpec, ProposerAnswer
from evolve.proposals.proposer import PROPOSER, ProposerInputs, propose

__all__ = ["PROPOSER", "GuardReport", "OverfitGuard", "ProposalSpec", "ProposerAnswer", "ProposerInputs",
           "propose"]

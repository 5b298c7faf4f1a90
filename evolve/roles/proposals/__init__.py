"""Proposals: the proposer role turns one ranked group of findings (with the research references, the Handbook,
the code and the history of earlier proposals and their grades) into one mechanism for one candidate.

- :mod:`evolve.roles.proposals.models`: :class:`ProposerAnswer` (what the model answers) and :class:`ProposalSpec`
  (the round's ``Proposal`` extended with sites, setting, predictions and references; screening reads it);
- :mod:`evolve.round.guard`: the overfitting guard (a proposal or patch quoting a development task's
  instruction or test content is refused, and the refusal is recorded);
- :mod:`evolve.roles.proposals.proposer`: the role and :func:`propose`.
"""

from evolve.roles.proposals.models import ProposalSpec, ProposerAnswer
from evolve.roles.proposals.proposer import PROPOSER, ProposerInputs, propose
from evolve.round.guard import GuardReport, OverfitGuard

__all__ = ["PROPOSER", "GuardReport", "OverfitGuard", "ProposalSpec", "ProposerAnswer", "ProposerInputs",
           "propose"]

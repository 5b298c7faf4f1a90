"""The implementation unit of the cheaper tiers, for ``rise evolve``'s loop.

- settings: :func:`settings_unit` makes the candidate from the proposal (:mod:`evolve.roles.implement.settings_tier`),
  no coding agent and no model call, and books it as the implementation event the code tier books (a candidate
  the tier refuses is booked ``refused`` with the key named); the overfitting guard reads its diff like any other;
- prompt: the implementer edits text as it edits code; :func:`prompt_refusal` then says why its commit is refused
  (a file that is not a template, a template that no longer renders with the harness's variables).
"""

from __future__ import annotations

from pathlib import Path

from evolve.experiment.ledger import ImplementationEvent
from evolve.experiment.store import Experiment
from evolve.roles.implement.implementer import diff_of
from evolve.roles.implement.settings_tier import TierError, make_settings_candidate
from evolve.roles.proposals.models import ProposalSpec
from evolve.roles.proposals.prompt_tier import check_prompt_candidate
from evolve.round.guard import OverfitGuard


def settings_unit(exp: Experiment, round_no: int, slug: str, spec: ProposalSpec, guard: OverfitGuard,
                  incumbent: str, incumbent_dir: Path, key: str) -> ImplementationEvent:
    """The settings-tier candidate of ``spec`` as the ledger event of its implementation unit ``key``."""
    try:
        branch, commit, report = make_settings_candidate(exp, round_no, spec, slug=slug,
                                                         incumbent_dir=incumbent_dir)
    except TierError as exc:
        return ImplementationEvent(key=key, round=round_no, slug=slug, status="refused", reason=str(exc),
                                   report={"tier": "settings"})
    verdict = guard.check_patch(diff_of(exp, exp.commit_of(incumbent), commit))
    return ImplementationEvent(key=key, round=round_no, slug=slug, status="refused" if verdict.refused else "done",
                               branch=branch, commit=commit, reason=verdict.reason(), report=report)


def prompt_refusal(exp: Experiment, incumbent: str, commit: str, wt: Path, incumbent_dir: Path) -> str:
    """Why a prompt-tier candidate (``commit``, checked out in ``wt``) is refused ("" when it is not), every
    problem named."""
    changed = exp.repo.git.diff("--name-only", exp.commit_of(incumbent), commit).split()
    problems, _notes = check_prompt_candidate(incumbent_dir, wt, changed)
    return "; ".join(f"prompt tier: {p}" for p in problems)

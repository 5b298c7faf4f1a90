"""The morning page: one section per round of ``rise report`` (``templates/morning.html.j2``), for the person who
reads an overnight run. Per round: what it adopted (or why nothing), each candidate's tier, its decision with the
policy's false-adoption rate and its power at the grid (``evolve.views.show.decision_policy``), its graded predictions,
what each rejected candidate would have needed (``validate.needed``; the best first), the adopted version's
code and Handbook diff, and the transfer table (``evolve.round.transfer``); the round's
measured power beside the prior's, and the trials early stopping saved per decision (``evolve.views.power``).

It reads what :func:`evolve.views.report.build_report` gathered plus the ledger; records written before a field
existed (a proposal without a tier, a decision without power) are shown as such, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evolve.experiment.store import Experiment
from evolve.round.transfer import transfer_of_round
from evolve.views.power import round_power, trials_saved

NO_TIER = "code (no tier recorded)"  # proposals before tiers were all new code, built by the coding agent


@dataclass
class MorningCandidate:
    slug: str
    status: str
    tier: str
    version: str | None
    decision: str  # the decision's reason
    policy: str  # the policy's false-adoption rate and the power at the grid
    pass_at_1: float | None
    baseline_pass_at_1: float | None
    grade: str = ""
    saved: str = ""  # trials saved by early stopping, measured (evolve.views.power)
    needed: str = ""  # a rejected candidate: what adoption would have needed (validate.needed)


@dataclass
class MorningRound:
    round: int
    incumbent: str
    outcome: str  # adopted vN | nothing adopted | in progress
    reason: str = ""
    adopted: str | None = None
    candidates: list[MorningCandidate] = field(default_factory=list)
    view: Any = None  # evolve.views.show.VersionView of the adopted version (its diffs)
    transfer: dict[str, Any] | None = None
    transfer_note: str = ""
    power: Any = None  # evolve.views.power.RoundPower: the measured power beside the prior's
    saved: str = ""  # the round's evaluation trials saved by early stopping, over its decided candidates

    @property
    def rejected(self) -> list[MorningCandidate]:
        """The rejected candidates with what they would have needed, the best (highest Pass@1) first."""
        out = [c for c in self.candidates if c.status == "rejected" and c.needed]
        return sorted(out, key=lambda c: -1.0 if c.pass_at_1 is None else -c.pass_at_1)


def tier_of(proposal: dict[str, Any]) -> str:
    """A proposal's tier (``settings``, ``prompt``, ``code``) wherever the record keeps it, or :data:`NO_TIER`."""
    for where in (proposal, proposal.get("proposal") or {}):
        if isinstance(where, dict) and where.get("tier"):
            return str(where["tier"])
    return NO_TIER


def _tiers(exp: Experiment, round_no: int) -> dict[str, str]:
    """slug -> tier, from the candidates created in the round and the proposer's events."""
    out = {e.slug: tier_of(e.proposal) for e in exp.ledger.find("proposal", round=round_no) if e.slug}
    for e in exp.ledger.find("candidate_created", round=round_no):
        slug = e.key.split(":")[1]
        if (t := tier_of(e.proposal)) != NO_TIER or slug not in out:
            out[slug] = t
    return out


def morning_rounds(exp: Experiment, report: Any) -> list[MorningRound]:
    """One :class:`MorningRound` per started round, from a built :class:`evolve.views.report.Report`."""
    led = exp.ledger
    views = {v.label: v for v in report.views}
    grades = {e.commit: e.grade.get("line", "") for e in led.find("grade")}
    out = []
    for start in led.find("round_start"):
        n = start.round
        end = led.find("round_end", key=f"r{n:02d}:end")
        mine = [c for c in report.candidates if c.round == n]
        adopted = (end[0].adopted if end else None) or next((c.version for c in mine if c.status == "adopted"), None)
        outcome = f"adopted {adopted}" if adopted else "nothing adopted" if end else "in progress"
        rnd = MorningRound(n, start.incumbent, outcome, reason=end[0].reason if end else "", adopted=adopted,
                           view=views.get(adopted) if adopted else None, transfer=transfer_of_round(exp, n))
        tiers = _tiers(exp, n)
        rnd.power = round_power(exp, n)
        savings = []
        for c in mine:
            saved = trials_saved(exp, c.commit)
            savings += [saved] if saved else []
            rnd.candidates.append(MorningCandidate(c.slug, c.status, tiers.get(c.slug, NO_TIER), c.version, c.reason,
                                                   c.policy_note, c.pass_at_1, c.baseline_pass_at_1,
                                                   grades.get(c.commit, ""), saved.line() if saved else "",
                                                   c.needed))
        if savings:
            cells, saved_n = sum(x.cells for x in savings), sum(x.saved for x in savings)
            rnd.saved = (f"early stopping saved {saved_n} of {cells} evaluation trials over {len(savings)} "
                         f"decision(s) ({saved_n / cells:.0%}; {saved_n / len(savings):.1f} per decision)")
        if adopted and rnd.transfer is None:
            rnd.transfer_note = ("not run: [transfer] enabled = false" if not exp.config.transfer.enabled else
                                 "not run yet (rise evolve runs it after the adoption; --resume finishes it)")
        out.append(rnd)
    return out
